"""The swe family on swe-synth: does every task hold (oracle 1, nop 0, the swebench package's
verdict), and what do a reset, a verdict and a generated task cost, each against its
baseline in the same run.

    python -m benchmarks.swe_env [--data DIR] [--n 15] [--check-all]

`--data` is a swe-synth folder (`skyhub swe data get swe-synth`; default
`$SKYHUB_DATA/swe-synth`). With `--check-all` every task is played twice, by the oracle (the
gold patch) and by nop (`<done/>` at once), and each verdict is compared with the `swebench`
package's `get_eval_report` on the same test log, read here on its own (counts in the
result file's `check`; without it, the last run's counts are kept, dated `check_when`).

Timings (p50 over `--n` episodes, Docker, the `swe` image):
- reset: `env.reset()` (the snapshot of /testbed restored, the bug written, one fresh
  commit, a new shell) against a fresh container of the same image with the repository
  uploaded and committed and a shell started. Goal >= 10x faster.
- verdict: the `<done/>` step of a nop episode (processes killed, /testbed copied out and
  compared, the start restored, the tests run in a fresh process, the log graded) against
  running the same test command by hand in a warm container. Goal within 1.2x.
- generation: swe-synth tasks made per minute (inflection, 10 tasks) against the project's
  test-suite runs per minute by hand (each try is one run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import result, write

NEEDS = ("docker",)
PREVIOUS = Path(__file__).parent / "results" / "swe_env.json"


def p50_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def swebench_verdict(inst: Any, log: str) -> bool:
    """The swebench package's own verdict on `log`, asked directly (not through skyhub)."""
    from swebench.harness.grading import get_eval_report
    from swebench.types import TestSpec

    spec = TestSpec(instance_id=inst.instance_id, image="", eval_script_list=[],
                    repo=inst.repo, version=inst.version or "",
                    FAIL_TO_PASS=list(inst.fail_to_pass),
                    PASS_TO_PASS=list(inst.pass_to_pass),
                    log_parser="parse_log_pytest", eval_type="pass_and_fail")
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(log)
    report = get_eval_report(spec, {"instance_id": spec.instance_id, "model_patch": "x"},
                             f.name, include_tests_status=False)
    Path(f.name).unlink()
    return bool(report[spec.instance_id]["resolved"])


def check_all(env: Any) -> dict[str, object]:
    """Oracle and nop on every task; each verdict against the swebench package's."""
    from rich.progress import track

    counts = {"tasks": 0, "oracle_resolved": 0, "nop_resolved": 0, "infra_errors": 0,
              "agree_with_swebench": 0, "verdicts": 0}
    projects: set[str] = set()
    failures: list[str] = []
    for task in track(list(env.tasks), description="oracle + nop"):
        counts["tasks"] += 1
        for agent in ("oracle", "nop"):
            env.reset(options={"task_id": task.id})
            projects.add(env.instance.repo)
            info: dict = {}
            reward = 0.0
            for _ in range(3):
                action = env.reference_action() if agent == "oracle" else "<done/>"
                _, reward, term, trunc, info = env.step(action)
                if term or trunc:
                    break
            counts["infra_errors"] += bool(info.get("infra_error"))
            resolved = info.get("reward_breakdown", {}).get("resolved") == 1.0
            counts[f"{agent}_resolved"] += reward == 1.0
            counts["verdicts"] += 1
            if swebench_verdict(env.instance, env.last_test_log) == resolved:
                counts["agree_with_swebench"] += 1
            elif len(failures) < 10:
                failures.append(f"{task.id} ({agent})")
    return {**counts, "projects": sorted(projects), "disagreements": failures}


def spread(env: Any, n: int) -> list[str]:
    """`n` task ids spread over the task list (so over the projects)."""
    ids = [t.id for t in env.tasks]
    return ids[::max(1, len(ids) // n)][:n]


def resets(env: Any, n: int) -> list[float]:
    ids = spread(env, n)
    for task_id in ids:  # each repository's snapshot made once, untimed
        env.reset(options={"task_id": task_id})
    out = []
    for task_id in ids:
        t = time.perf_counter()
        env.reset(options={"task_id": task_id})
        out.append(time.perf_counter() - t)
    return out


def fresh_containers(repo: Path, n: int) -> list[float]:
    from skyhub.envs.swe.env import GIT_COMMIT
    from skyhub.envs.swe.workspace import testbed_sandbox
    from skyhub.shell.session import ShellSession

    out = []
    for _ in range(n):
        t = time.perf_counter()
        with testbed_sandbox("docker") as sb:
            sb.upload(repo, "/testbed")
            assert sb.exec(GIT_COMMIT, timeout=120, cwd="/testbed").ok
            ShellSession(sb).close()  # the env's reset ends with a shell ready, too
            out.append(time.perf_counter() - t)
    return out


def verdicts(env: Any, task_id: str, n: int) -> tuple[list[float], list[float]]:
    """The verdict step of `n` nop episodes of one task, and its test command run by hand in
    a warm container holding the same files, interleaved (one of each per round), so a
    change in the machine's load falls on both alike."""
    from skyhub.envs.swe.workspace import testbed_sandbox

    env.reset(options={"task_id": task_id})
    command = env.instance.extra["test_cmd"]
    ours: list[float] = []
    by_hand: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, testbed_sandbox("docker") as sb:
        env._workspace.write(Path(tmp))
        sb.upload(tmp, "/testbed")
        sb.exec(command, timeout=600, cwd="/testbed")
        for _ in range(n):
            env.reset(options={"task_id": task_id})
            t = time.perf_counter()
            env.step("<done/>")
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            sb.exec(command, timeout=600, cwd="/testbed")
            by_hand.append(time.perf_counter() - t)
    return ours, by_hand


def generation(repos: Path) -> tuple[float, float]:
    """(tasks per minute, test-suite runs per minute by hand) on inflection."""
    from skyhub.envs.swe.synth_data import PROJECTS, make_tasks
    from skyhub.envs.swe.workspace import testbed_sandbox

    project, tree = PROJECTS["inflection"], repos / "inflection"
    t = time.perf_counter()
    made = list(make_tasks(project, tree, n=10, seed=99, backend="docker"))
    per_min = len(made) / (time.perf_counter() - t) * 60
    with testbed_sandbox("docker") as sb:
        sb.upload(tree, "/testbed")
        sb.exec(project.test_command, timeout=300, cwd="/testbed")
        t = time.perf_counter()
        for _ in range(5):
            sb.exec(project.test_command, timeout=300, cwd="/testbed")
        runs_per_min = 5 / (time.perf_counter() - t) * 60
    return per_min, runs_per_min


def main(argv: list[str] | None = None) -> None:
    import skyhub
    from skyhub.envs.swe.synth_data import dataset_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="a swe-synth folder")
    ap.add_argument("--n", type=int, default=15, help="episodes timed per variant")
    ap.add_argument("--check-all", action="store_true",
                    help="play the oracle and nop on every task (slow)")
    args = ap.parse_args(argv)
    data = args.data or dataset_dir()
    extra: dict[str, object] = {"n": args.n, "tasks_file": str(data / "instances.jsonl")}
    with skyhub.make("swe", data_dir=data / "instances.jsonl", backend="docker") as env:
        if args.check_all:
            extra["check"] = check_all(env)
            extra["check_when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            print(json.dumps(extra["check"], indent=1))
        elif PREVIOUS.is_file() and "check" in json.loads(PREVIOUS.read_text()):
            # the slow check is kept from the run that made it, with its date
            last = json.loads(PREVIOUS.read_text())
            extra["check"] = last["check"]
            extra["check_when"] = last.get("check_when", last["when"])
        reset_ours = p50_ms(resets(env, args.n))
        first_toolz = next(t.id for t in env.tasks if t.meta["repo"].endswith("/toolz"))
        verdict_ours, by_hand = (p50_ms(x) for x in verdicts(env, first_toolz, args.n))
    repo = data / "repos" / "toolz"
    fresh = p50_ms(fresh_containers(repo, args.n))
    made_per_min, runs_per_min = generation(data / "repos")
    rows = [
        result("episode reset p50 (snapshot restore of /testbed)", reset_ours,
               "a fresh container with the repository", fresh, ">= 10x faster",
               ratio=fresh / reset_ours, met=fresh / reset_ours >= 10, unit="ms",
               note="a mix of toolz, inflection and boltons tasks; the baseline uploads toolz"),
        result("verdict p50 (a toolz task, nop's <done/>)", verdict_ours,
               "the same tests run by hand in a warm container", by_hand, "<= 1.2x",
               met=verdict_ours <= 1.2 * by_hand, unit="ms"),
        result("swe-synth tasks made per minute (inflection)", made_per_min,
               "test-suite runs per minute by hand", runs_per_min, "reported", unit="/min",
               note="each try is one test run; a try is kept when the tests catch the bug"),
    ]
    write("swe_env", rows, **extra)


if __name__ == "__main__":
    main()
