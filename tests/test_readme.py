"""The README's code runs as written: every Python block, and the command-line tour."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
TEXT = README.read_text()
ALL_PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)
# the Tinker script needs a running `skyhub tinker serve`: test_tinker_section_runs runs it;
# the adapters' snippets need a model, a server or a framework's loop: tests/adapters run
# them (test_adapter_snippets_are_the_files_their_tests_run checks they are those files)
PYTHON_BLOCKS = [b for b in ALL_PYTHON_BLOCKS
                 if "import tinker" not in b and "skyhub.adapters" not in b]
CLI_BLOCK = re.search(r"## Command line\s+```bash\n(.*?)```", TEXT, re.S)


def test_quickstart_has_exactly_two_commands() -> None:
    block = re.search(r"## Quickstart.*?```bash\n(.*?)```", TEXT, re.S)
    assert block is not None
    commands = [c for c in block.group(1).splitlines() if c.strip() and not c.startswith("#")]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for c in commands:
        assert (README.parent / c.split()[1]).is_file()


@pytest.mark.parametrize("code", PYTHON_BLOCKS,
                         ids=[f"block{i}" for i in range(len(PYTHON_BLOCKS))])
def test_python_block_runs(code: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_capitals_example_prints_what_its_comments_say(tmp_path: Path) -> None:
    code = next(c for c in PYTHON_BLOCKS if "demo-capitals" in c)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.stdout.split() == ["1.0", "True"]


def test_command_line_tour_runs(tmp_path: Path) -> None:
    assert CLI_BLOCK is not None
    skyhub = Path(sys.executable).parent / "skyhub"
    for line in CLI_BLOCK.group(1).splitlines():
        cmd = shlex.split(line.split("#")[0])
        if not cmd or cmd[1] == "play":  # play is interactive; tests/core/test_cli.py drives it
            continue
        r = subprocess.run([str(skyhub), *cmd[1:]], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"
    assert (tmp_path / "runs" / "oracle" / "summary.json").is_file()


def test_training_commands_run(tmp_path: Path) -> None:
    """The Training section's commands, each cut to one small step."""
    pytest.importorskip("torch")
    block = re.search(r"## Training.*?```bash\n(.*?)```", TEXT, re.S)
    assert block is not None
    skyhub = Path(sys.executable).parent / "skyhub"
    small = ["loop.max_steps=1", "loop.eval_every=0", "rollout.samples_per_prompt=2",
             "optim.train_batch_size=2", "optim.mini_batch_size=2", "env.num_envs=2",
             "loop.tensorboard=false"]
    for line in block.group(1).splitlines():
        cmd = shlex.split(line.split("#")[0])
        if not cmd:
            continue
        if "--resume" in cmd:  # resuming a finished run: one more step
            small = [s if s != "loop.max_steps=1" else "loop.max_steps=2" for s in small]
        r = subprocess.run([str(skyhub), *cmd[1:], *small], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert (tmp_path / "runs/tiny-cpu/metrics.jsonl").is_file()
    steps = (tmp_path / "runs/try2/metrics.jsonl").read_text().splitlines()
    assert len(steps) == 2  # the resumed run added its step after the first run's


def test_eval_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Evaluating section's commands, against a scripted OpenAI-compatible server (for
    `openai:`) and a random tiny model saved as a training run (for `hf:`)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent / "support"))
    from openai_server import ScriptedOpenAIServer

    from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer

    tok = train_tokenizer(env_corpus("toy-recall", {"n_words": 6}, episodes=16))
    tok.save_pretrained(tmp_path / "runs/tiny-cpu/tokenizer")
    for step in (50, 120):
        tiny_model(len(tok), seed=step).save_pretrained(
            tmp_path / f"runs/tiny-cpu/checkpoints/step_{step:06d}/model")
    block = re.search(r"## Evaluating agents.*?```bash\n(.*?)```", TEXT, re.S)
    assert block is not None
    skyhub = Path(sys.executable).parent / "skyhub"
    with ScriptedOpenAIServer(lambda messages: "<answer>0</answer>", fail_first=1) as server:
        for line in block.group(1).splitlines():
            cmd = shlex.split(line.split("#")[0].replace("http://localhost:8000/v1",
                                                         server.base_url))
            if not cmd:
                continue
            extra = ["--n", "12"] if "openai:" in line else []
            r = subprocess.run([str(skyhub), *cmd[1:], *extra], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300,
                               env={**os.environ, "COLUMNS": "120",
                                    "NO_PROXY": "127.0.0.1,localhost"})
            assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr[-3000:]}"
    runs = tmp_path / "runs/eval"
    assert (runs / "qwen/report.html").is_file() and (runs / "tiny-vs-50.md").is_file()
    assert json.loads((runs / "spider-oracle/summary.json").read_text())["accuracy"] >= 0.99
    assert "SkyRL-SQL-7B" in (runs / "skyrl-sql/report.md").read_text()


def test_sharing_commands_run(tmp_path: Path) -> None:
    """The Sharing section's commands: scaffold, check, publish to a directory hub, and the
    upload plan (a dry run: nothing leaves this machine)."""
    block = re.search(r"## Sharing environments.*?```bash\n(.*?)```", TEXT, re.S)
    assert block is not None
    skyhub = Path(sys.executable).parent / "skyhub"
    for line in block.group(1).splitlines():
        cmd = shlex.split(line.split("#")[0])
        r = subprocess.run([str(skyhub), *cmd[1:]], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr[-3000:]}"
    wheels = list((tmp_path / "hub").glob("skyhub_demo_env-*.whl"))
    assert wheels and (tmp_path / "hub" / "index.html").is_file()


def test_tinker_section_runs(tmp_path: Path) -> None:
    """The Tinker section: its `skyhub tinker serve` line starts the server (on a free port),
    and the Tinker SDK script runs against it and prints what the text says."""
    pytest.importorskip("tinker")
    pytest.importorskip("peft")
    import socket
    import time
    import urllib.request

    section = TEXT[TEXT.index("## Tinker API"):]
    serve_line = re.search(r"```bash\n(.*?)\n", section).group(1)
    script = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = shlex.split(serve_line.split("#")[0].replace("&", ""))
    cmd = [a if a != "8000" else str(port) for a in cmd]
    skyhub = Path(sys.executable).parent / "skyhub"
    server = subprocess.Popen([str(skyhub), *cmd[1:], "--state-dir", str(tmp_path / "state"),
                               "--threads", "1", "--log-level", "warning"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/api/v1/healthz", timeout=2)
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "skyhub tinker serve did not start"
                time.sleep(0.5)
        (tmp_path / "sft.py").write_text(script)
        r = subprocess.run([sys.executable, "sft.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300,
                           env={**os.environ, "TINKER_BASE_URL": url,
                                "TINKER_API_KEY": "tml-local", "NO_PROXY": "127.0.0.1"})
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        server.terminate()
        server.wait(timeout=30)
    losses = [float(x) for x in re.findall(r"loss per token ([0-9.]+)", r.stdout)]
    assert losses[0] > 4 and losses[-1] < 1, r.stdout
    assert "The quick brown fox -> jumps over the lazy dog." in r.stdout, r.stdout
    assert "Tinker scripts -> train models." in r.stdout, r.stdout
    saved = re.search(r"saved (tinker://\S+/weights/sft-step-20)", r.stdout)
    assert saved is not None and (tmp_path / "state" / "checkpoints").is_dir()


def test_dry_run_block_is_what_the_command_prints() -> None:
    """Each `$ skyhub train ... --dry-run` in the README's block prints what is shown under it.

    A line `...` stands for output left out: what follows it must end the output. A following
    `$ echo $?` gives the exit code the command must end with (0 when absent)."""
    block = re.search(r"```text\n(\$ skyhub train [^\n]*--dry-run.*?)```", TEXT, re.S)
    assert block is not None, "the README's Training section shows a --dry-run"
    runs = re.split(r"^\$ (skyhub train [^\n]*)\n", block.group(1), flags=re.M)[1:]
    assert len(runs) >= 4, "the block shows a config that fits and one that does not"
    exe = Path(sys.executable).parent / "skyhub"
    for command, shown in zip(runs[::2], runs[1::2], strict=True):
        code = 0
        status = re.search(r"^\$ echo \$\?\n(\d+)\n\Z", shown, re.M)
        if status:
            code, shown = int(status.group(1)), shown[: status.start()]
        shown = shown.rstrip("\n") + "\n"
        r = subprocess.run([str(exe), *command.split()[1:]], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "COLUMNS": "120"})
        assert r.returncode == code, (command, r.stderr)
        printed = r.stdout + r.stderr
        if shown.startswith("...\n"):
            assert printed.endswith(shown[4:]), (command, printed)
        else:
            assert printed == shown, command


def test_adapter_snippets_are_the_files_their_tests_run() -> None:
    """The README's adapter snippets are docs/snippets/*.py verbatim, and each file is run by
    a test under tests/adapters/ (so every row's snippet is known to run)."""
    root = Path(__file__).parent.parent
    snippets = sorted((root / "docs/snippets").glob("adapter_*.py"))
    assert len(snippets) == 5
    tests = " ".join(p.read_text() for p in (root / "tests/adapters").glob("test_*.py"))
    for f in snippets:
        assert f"```python\n{f.read_text().rstrip()}\n```" in TEXT, f"README lacks {f.name}"
        assert f.name in tests, f"no test under tests/adapters runs {f.name}"
        assert f"](docs/snippets/{f.name})" in TEXT
