"""Real runs for the `skyhub view` tests: eval runs made with `skyhub eval run` and a training
run made with `skyhub train`, each a subprocess as a user would run it.

`lookup_agent` is the scripted agent (`--agent script:view_runs:lookup_agent`, with this folder
on PYTHONPATH): on toy-lookup it reads the key, looks it up and answers, except that it
answers wrong for keys divisible by 3 and its "model server" fails (an `InfraError`) for keys
divisible by 7, so its run holds successes, failures and infra errors; it reports token counts
as a model server would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from skyhub.errors import InfraError
from skyhub.eval.agents import Reply

SUPPORT = Path(__file__).resolve().parent
SKYHUB = [sys.executable, "-m", "skyhub.cli.main"]
N_EPISODES = 12
# the training run: toy-recall, 2 steps of a tiny model (tests/trainer/test_loop.py's sizes);
# two mini-batches a step, so the policy moves between sampling and training and the run logs
# its clip fraction and ratio (a one-update on-policy step leaves them out: they are inert)
TRAIN_OVERRIDES = ["loop.max_steps=2", "rollout.samples_per_prompt=4",
                   "optim.train_batch_size=4", "optim.mini_batch_size=2", "env.num_envs=4",
                   "loop.eval_every=2", "loop.eval_tasks=4", "loop.tensorboard=false",
                   "loop.save_episodes=true"]
# for the README's screenshots (SKYHUB_WRITE_SCREENSHOTS=1): curves worth looking at, ~1 min
SCREENSHOT_TRAIN_OVERRIDES = ["loop.max_steps=40", "loop.eval_every=5", "loop.eval_tasks=32",
                              "loop.tensorboard=false", "loop.save_episodes=true"]


def lookup_agent(messages: list[dict[str, str]]) -> Reply:
    key = re.search(r"key (k\d+)", messages[1]["content"])
    number = int(key.group(1)[1:]) if key else 0
    if number % 7 == 0:
        raise InfraError("model server: 503 Service Unavailable (scripted)")
    last = messages[-1]["content"]
    found = re.search(r"<result>(.*?)</result>", last) if len(messages) > 2 else None
    if found is None:
        text = f"<lookup>{key.group(1) if key else 'k0'}</lookup>"
    elif number % 3 == 0:
        text = "<answer>not-the-value</answer>"
    else:
        text = f"<answer>{found.group(1)}</answer>"
    prompt = sum(len(m["content"].split()) for m in messages)
    return Reply(text, prompt_tokens=prompt, completion_tokens=len(text.split()) + 2)


def _start(args: list[str], cwd: Path) -> tuple[list[str], subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SUPPORT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return args, subprocess.Popen([*SKYHUB, *args], cwd=cwd, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait(*started: tuple[list[str], subprocess.Popen[str]]) -> None:
    for args, proc in started:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"skyhub {' '.join(args)} failed:\n{out}"


def make_runs(base: Path) -> dict[str, Path]:
    """{"scripted", "random", "train"} -> run directories under `base`, made once (a marker
    file says they are complete, so several test files of one session share them). The four
    commands run at once: most of their time is starting Python."""
    base = base.resolve()
    runs = {"scripted": base / "scripted", "random": base / "random", "train": base / "train"}
    sample = base / "recall-sample"  # an eval run of another env (comparing across envs)
    marker = base / "made.json"
    if marker.is_file():
        return runs
    base.mkdir(parents=True, exist_ok=True)
    common = ["--n", str(N_EPISODES), "--seed", "0", "--no-report"]
    overrides = (SCREENSHOT_TRAIN_OVERRIDES if os.environ.get("SKYHUB_WRITE_SCREENSHOTS") == "1"
                 else TRAIN_OVERRIDES)
    _wait(_start(["train", "--recipe", "tiny-cpu", "--out", str(runs["train"]), *overrides],
                 base),
          _start(["eval", "run", "toy-lookup", "--agent", "script:view_runs:lookup_agent",
                  "--out", str(runs["scripted"]), *common], base),
          _start(["eval", "run", "toy-lookup", "--agent", "random", "--out",
                  str(runs["random"]), *common], base),
          _start(["eval", "run", "toy-recall", "--agent", "random", "--n", "6", "--out",
                  str(sample), "--no-report"], base))
    kinds = Counter("infra" if r["infra_error"] else r["outcome"] for r in map(
        json.loads, (runs["scripted"] / "episodes.jsonl").read_text().splitlines()))
    # the tests page through two failures and filter the infra errors
    assert kinds["success"] and kinds["failure"] >= 2 and kinds["infra"], (
        f"the scripted run lacks a kind of episode: {dict(kinds)}")
    marker.write_text(json.dumps({k: str(v) for k, v in runs.items()}))
    return runs
