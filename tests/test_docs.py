"""The documentation runs as written: every code block of README.md and docs/*.md.

Python blocks run as they are; TOML and JSON blocks must parse; each command block is run
by the test named for it in CLAIMED; a block that cannot run as written is listed in NOT_RUN
with the reason. `test_every_block_is_run_or_listed` fails on a block that is in neither, so
a page that gains a block gains a test (or a reason). Links and images must exist too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "support"))
from polling import eventually

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKYHUB = Path(sys.executable).parent / "skyhub"
CLI_ENV = {**os.environ, "COLUMNS": "120", "NO_PROXY": "127.0.0.1,localhost"}


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the heading it sits under, its language and text."""

    page: str      #: relative to the repository: "README.md", "docs/eval.md"
    heading: str   #: the nearest heading above it, as written ("## A tour")
    lang: str
    n: int         #: its place among the blocks of this language under this heading, from 1
    code: str

    @property
    def key(self) -> str:
        return f"{self.page} {self.heading} [{self.lang} {self.n}]"


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with the heading each sits under."""
    page = path.relative_to(ROOT).as_posix()
    out: list[Block] = []
    heading, lang, code, seen = "", None, [], {}
    for line in path.read_text().splitlines():
        if lang is None:
            if line.startswith("```"):
                lang, code = line[3:].strip(), []
            elif line.startswith("#"):
                heading = line
        elif line.startswith("```"):
            n = seen[(heading, lang)] = seen.get((heading, lang), 0) + 1
            out.append(Block(page, heading, lang, n, "\n".join(code) + "\n"))
            lang = None
        else:
            code.append(line)
    assert lang is None, f"{page}: a code block is not closed"
    return out


BLOCKS = [b for p in PAGES for b in parse(p)]


def block(key: str) -> Block:
    found = [b for b in BLOCKS if b.key == key]
    assert len(found) == 1, f"no block {key!r}: was its section renamed? {[b.key for b in BLOCKS]}"
    return found[0]


def text(page: str) -> str:
    return (ROOT / page).read_text()


# The command blocks (and the Python blocks that need a server or a framework), each with
# the test that runs or checks it.
CLAIMED = {
    "README.md ## Quickstart [bash 1]": "test_quickstart_has_exactly_two_commands",
    "README.md ## A tour [bash 1]": "test_readme_tour_runs",
    "docs/cli.md # The command line [bash 1]": "test_command_line_tour_runs",
    "docs/eval.md ## Evaluating agents [bash 1]": "test_eval_commands_run",
    "docs/eval.md ## Browsing runs: `skyhub view` [bash 1]": "test_eval_commands_run",
    "docs/eval.md ## Best of N from a mid-episode state: `--best-of N --branch-at T` [bash 1]":
        "test_best_of_command_runs",
    "docs/training.md # Training [bash 1]": "test_training_commands_run",
    "docs/training.md ## Precision, scale and the dry run [text 1]":
        "test_dry_run_block_is_what_the_command_prints",
    "docs/sharing.md # Sharing and serving environments [bash 1]": "test_sharing_commands_run",
    "docs/tinker.md # The Tinker API [bash 1]": "test_tinker_page_runs",
    "docs/harnesses.md ## Training with a harness [bash 1]": "test_harness_training_runs",
    "docs/tinker.md # The Tinker API [python 1]": "test_tinker_page_runs",
    "docs/openrlhf.md ## 2. Export the prompts [bash 1]": "test_openrlhf_export_runs",
    "docs/openrlhf.md ## 2. Export the prompts [python 1]": "test_openrlhf_export_runs",
    **{f"docs/adapters.md # Using skyhub envs in other frameworks [python {i}]":
       "test_adapter_snippets_are_the_files_their_tests_run" for i in range(1, 6)},
}
# Blocks that cannot run as written here, and why.
NOT_RUN = {
    "docs/envs.md ### Harbor tasks [bash 1]":
        "MY_TASKS stands for the reader's own tasks; the same commands on bundled tasks are "
        "tests/envs/harbor/test_harbor_fidelity.py's",
    "docs/development.md # Development [bash 1]": "runs the test suite itself",
    "docs/envs.md ## Software engineering [python 1]":
        "instances.jsonl and repos/ stand for the reader's data, and swe-synth's for a "
        "download; the same calls on a repository the test builds, and on swe-synth's tasks, "
        "are tests/envs/swe/test_env.py's and test_synth_data.py's",
    "docs/harnesses.md ## Evaluating with a harness [bash 1]":
        "./my-model stands for the reader's model, and a gateway left serving in the "
        "background; the same eval with a scripted model behind a gateway is "
        "tests/harness/test_mini_swe_agent.py's and tests/harness/test_eval_harness.py's",
    "docs/openrlhf.md ## 1. Install [bash 1]": "needs CUDA (flash-attn, deepspeed)",
    "docs/openrlhf.md ## 4. Launch: GRPO, mirroring SkyRL-SQL [bash 1]": "needs GPUs",
    "docs/openrlhf.md ## 4. Launch: GRPO, mirroring SkyRL-SQL [bash 2]": "needs a Ray cluster",
    "docs/openrlhf.md ## 5. Check it before you spend GPU hours [bash 1]":
        "runs a test file of this suite",
}
PARSED = {"toml": tomllib.loads, "json": json.loads}
PYTHON_BLOCKS = [b for b in BLOCKS
                 if b.lang == "python" and b.key not in CLAIMED and b.key not in NOT_RUN]


def test_every_block_is_run_or_listed() -> None:
    unaccounted = [b.key for b in BLOCKS if b.lang not in ("python", *PARSED)
                   and b.key not in CLAIMED and b.key not in NOT_RUN]
    assert not unaccounted, ("blocks no test runs: run them in a test named in CLAIMED, or "
                             f"say in NOT_RUN why they cannot run: {unaccounted}")
    keys = {b.key for b in BLOCKS}
    stale = [k for k in (*CLAIMED, *NOT_RUN) if k not in keys]
    assert not stale, f"CLAIMED/NOT_RUN name blocks that are gone: {stale}"
    here = globals()
    assert all(name in here for name in CLAIMED.values())
    assert len(PYTHON_BLOCKS) >= 10 and {b.page for b in PYTHON_BLOCKS} >= {
        "README.md", "docs/envs.md", "docs/sandboxes.md"}


@pytest.mark.parametrize("code", PYTHON_BLOCKS, ids=[b.key for b in PYTHON_BLOCKS])
def test_python_block_runs(code: Block, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", code.code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_toml_and_json_blocks_parse() -> None:
    parsed = [b for b in BLOCKS if b.lang in PARSED]
    assert len(parsed) >= 3
    for b in parsed:
        PARSED[b.lang](b.code)


def test_quickstart_has_exactly_two_commands() -> None:
    """The Quickstart's first block is the two commands (quickstart-check runs them)."""
    quickstart = text("README.md").split("## Quickstart", 1)[1]
    first = re.search(r"```(\w*)\n(.*?)```", quickstart, re.S)
    assert first is not None and first.group(1) == "bash"
    assert first.group(2) == block("README.md ## Quickstart [bash 1]").code
    commands = [c for c in first.group(2).splitlines() if c.strip() and not c.startswith("#")]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for c in commands:
        assert (ROOT / c.split()[1]).is_file()


def commands(b: Block) -> list[tuple[str, list[str]]]:
    """(line, argv) for each command line of a block, comments dropped."""
    out = []
    for line in b.code.splitlines():
        argv = shlex.split(line.split("#")[0])
        if argv:
            out.append((line, argv))
    return out


def run_skyhub(line: str, args: list[str], cwd: Path, timeout: int = 300) -> str:
    r = subprocess.run([str(SKYHUB), *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=CLI_ENV)
    assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


def serve_view(line: str, args: list[str], cwd: Path) -> list[dict]:
    """Run a `skyhub view ...` line on a free port until its page and run list answer;
    returns the runs it lists."""
    proc = subprocess.Popen([str(SKYHUB), *args, "--port", "0"], cwd=cwd, env=CLI_ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()  # "skyhub view: http://127.0.0.1:PORT/ (...)"
        url = re.search(r"(http://\S+/)", first)
        assert url is not None, f"{line}: {first}{proc.stderr.read() if proc.poll() else ''}"

        def answers() -> bool:
            try:
                with urllib.request.urlopen(url.group(1), timeout=5) as page:
                    return page.status == 200
            except OSError:
                assert proc.poll() is None, f"{line} exited"
                return False

        assert eventually(answers), f"{line}: the page does not answer"
        with urllib.request.urlopen(url.group(1) + "api/runs", timeout=30) as r:
            return json.load(r)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_readme_tour_runs(tmp_path: Path) -> None:
    """The README tour's commands, as written; `skyhub view` until its page answers."""
    lines = commands(block("README.md ## A tour [bash 1]"))
    assert [argv[1] for _, argv in lines][-1] == "view"
    for line, argv in lines[:-1]:
        run_skyhub(line, argv[1:], tmp_path)
    summary = json.loads((tmp_path / "runs/eval/spider-oracle/summary.json").read_text())
    assert summary["accuracy"] == 1.0
    runs = serve_view(lines[-1][0], lines[-1][1][1:], tmp_path)
    assert "spider-oracle" in json.dumps(runs)


def test_capitals_example_prints_what_its_comments_say(tmp_path: Path) -> None:
    code = next(b.code for b in PYTHON_BLOCKS if "demo-capitals" in b.code)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.stdout.split() == ["1.0", "True"]


def test_command_line_tour_runs(tmp_path: Path) -> None:
    for line, argv in commands(block("docs/cli.md # The command line [bash 1]")):
        if argv[1] == "play":  # play is interactive; tests/core/test_cli.py drives it
            continue
        run_skyhub(line, argv[1:], tmp_path, timeout=120)
    assert (tmp_path / "runs" / "oracle" / "summary.json").is_file()


def test_training_commands_run(tmp_path: Path) -> None:
    """docs/training.md's commands, each cut to one small step."""
    pytest.importorskip("torch")
    small = ["loop.max_steps=1", "loop.eval_every=0", "rollout.samples_per_prompt=2",
             "optim.train_batch_size=2", "optim.mini_batch_size=2", "env.num_envs=2",
             "loop.tensorboard=false"]
    for line, argv in commands(block("docs/training.md # Training [bash 1]")):
        if "--resume" in argv:  # resuming a finished run: one more step
            small = [s if s != "loop.max_steps=1" else "loop.max_steps=2" for s in small]
        run_skyhub(line, [*argv[1:], *small], tmp_path)
    assert (tmp_path / "runs/tiny-cpu/metrics.jsonl").is_file()
    steps = (tmp_path / "runs/try2/metrics.jsonl").read_text().splitlines()
    assert len(steps) == 2  # the resumed run added its step after the first run's


def test_harness_training_runs(tmp_path: Path) -> None:
    """docs/harnesses.md's training command, cut to one small step."""
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    small = ["loop.max_steps=1", "loop.eval_every=0", "rollout.samples_per_prompt=2",
             "optim.train_batch_size=2", "optim.mini_batch_size=2", "env.num_envs=2",
             "loop.tensorboard=false"]
    for line, argv in commands(block("docs/harnesses.md ## Training with a harness [bash 1]")):
        run_skyhub(line, [*argv[1:], *small], tmp_path)
    assert len((tmp_path / "runs/tiny-cpu/metrics.jsonl").read_text().splitlines()) == 1


def test_eval_commands_run(tmp_path: Path) -> None:
    """docs/eval.md's commands, against a scripted OpenAI-compatible server (for `openai:`)
    and a random tiny model saved as a training run (for `hf:`); then its `skyhub view`
    line over what they wrote."""
    pytest.importorskip("torch")
    from openai_server import ScriptedOpenAIServer

    from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer

    tok = train_tokenizer(env_corpus("toy-recall", {"n_words": 6}, episodes=16))
    tok.save_pretrained(tmp_path / "runs/tiny-cpu/tokenizer")
    for step in (50, 120):
        tiny_model(len(tok), seed=step).save_pretrained(
            tmp_path / f"runs/tiny-cpu/checkpoints/step_{step:06d}/model")
    with ScriptedOpenAIServer(lambda messages: "<answer>0</answer>", fail_first=1) as server:
        for line, argv in commands(block("docs/eval.md ## Evaluating agents [bash 1]")):
            argv = [a.replace("http://localhost:8000/v1", server.base_url) for a in argv]
            extra = ["--n", "12"] if "openai:" in line else []
            run_skyhub(line, [*argv[1:], *extra], tmp_path)
    runs = tmp_path / "runs/eval"
    assert (runs / "qwen/report.html").is_file() and (runs / "tiny-vs-50.md").is_file()
    assert json.loads((runs / "spider-oracle/summary.json").read_text())["accuracy"] >= 0.99
    assert "SkyRL-SQL-7B" in (runs / "skyrl-sql/report.md").read_text()
    [view] = commands(block("docs/eval.md ## Browsing runs: `skyhub view` [bash 1]"))
    listed = json.dumps(serve_view(view[0], view[1][1:], tmp_path))
    assert all(name in listed for name in ("qwen", "tiny-50", "spider-oracle"))


def test_best_of_command_runs(tmp_path: Path) -> None:
    [(line, argv)] = commands(block("docs/eval.md ## Best of N from a mid-episode state: "
                                    "`--best-of N --branch-at T` [bash 1]"))
    run_skyhub(line, argv[1:], tmp_path)
    summary = json.loads((tmp_path / "runs/best/best_of.json").read_text())
    assert summary["tasks"] == 20 and summary["best_of"] == 4 and summary["branch_at"] == 1
    assert summary["best_success"] >= summary["single_success"]


def test_sharing_commands_run(tmp_path: Path) -> None:
    """docs/sharing.md's commands: scaffold, check, publish to a directory hub, and the
    upload plan (a dry run: nothing leaves this machine)."""
    for line, argv in commands(block("docs/sharing.md # Sharing and serving environments "
                                     "[bash 1]")):
        run_skyhub(line, argv[1:], tmp_path)
    wheels = list((tmp_path / "hub").glob("skyhub_demo_env-*.whl"))
    assert wheels and (tmp_path / "hub" / "index.html").is_file()


def test_tinker_page_runs(tmp_path: Path) -> None:
    """docs/tinker.md: its `skyhub tinker serve` line starts the server (on a free port),
    and the Tinker SDK script runs against it and prints what the page says."""
    pytest.importorskip("tinker")
    pytest.importorskip("peft")
    import socket

    serve_line = block("docs/tinker.md # The Tinker API [bash 1]").code.splitlines()[0]
    script = block("docs/tinker.md # The Tinker API [python 1]").code
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = shlex.split(serve_line.split("#")[0].replace("&", ""))
    assert cmd[:3] == ["skyhub", "tinker", "serve"]
    cmd = [a if a != "8000" else str(port) for a in cmd]
    server = subprocess.Popen([str(SKYHUB), *cmd[1:], "--state-dir", str(tmp_path / "state"),
                               "--threads", "1", "--log-level", "warning"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            try:
                urllib.request.urlopen(url + "/api/v1/healthz", timeout=2)
                return True
            except OSError:
                assert server.poll() is None, server.stdout.read()
                return False

        assert eventually(healthy, within_s=120), "skyhub tinker serve did not start"
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
    """Each `$ skyhub train ... --dry-run` in docs/training.md prints what is shown under it.

    A line `...` stands for output left out: what follows it must end the output. A following
    `$ echo $?` gives the exit code the command must end with (0 when absent)."""
    shown_block = block("docs/training.md ## Precision, scale and the dry run [text 1]").code
    runs = re.split(r"^\$ (skyhub train [^\n]*)\n", shown_block, flags=re.M)[1:]
    assert len(runs) >= 4, "the block shows a config that fits and one that does not"
    for command, shown in zip(runs[::2], runs[1::2], strict=True):
        assert "--dry-run" in command
        code = 0
        status = re.search(r"^\$ echo \$\?\n(\d+)\n\Z", shown, re.M)
        if status:
            code, shown = int(status.group(1)), shown[: status.start()]
        shown = shown.rstrip("\n") + "\n"
        r = subprocess.run([str(SKYHUB), *command.split()[1:]], capture_output=True, text=True,
                           timeout=120, env=CLI_ENV)
        assert r.returncode == code, (command, r.stderr)
        printed = r.stdout + r.stderr
        if shown.startswith("...\n"):
            assert printed.endswith(shown[4:]), (command, printed)
        else:
            assert printed == shown, command


def test_openrlhf_export_runs(tmp_path: Path) -> None:
    """docs/openrlhf.md's export commands and snippet: each writes its prompts, or (for a
    dataset not downloaded here) fails saying which command fetches it."""
    def check(what: str, r: subprocess.CompletedProcess, out: Path) -> None:
        if r.returncode == 0:
            first = json.loads(out.read_text().splitlines()[0])
            assert first["prompt"][0]["role"] == "system" and json.loads(first["label"])
        else:
            assert "DataNotFound" in r.stderr and "skyhub sql data get" in r.stderr, (
                what, r.stderr[-2000:])

    env = {k: v for k, v in os.environ.items() if k != "SKYHUB_DATA"}
    ran = 0
    for line, argv in commands(block("docs/openrlhf.md ## 2. Export the prompts [bash 1]")):
        assert argv[:3] == ["python", "-m", "skyhub.trainer.openrlhf"]
        r = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env=env)
        check(line, r, tmp_path / argv[5])
        ran += r.returncode == 0
    assert ran >= 2  # the bundled envs' exports ran
    code = block("docs/openrlhf.md ## 2. Export the prompts [python 1]").code
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env=env)
    check(code, r, tmp_path / "data/skyrl653.jsonl")


def test_adapter_snippets_are_the_files_their_tests_run() -> None:
    """docs/adapters.md's snippets are docs/snippets/*.py verbatim, each linked, and each file
    is run by a test under tests/adapters/ (so every row's snippet is known to run)."""
    page = text("docs/adapters.md")
    snippets = sorted((ROOT / "docs/snippets").glob("adapter_*.py"))
    assert len(snippets) == 5
    tests = " ".join(p.read_text() for p in (ROOT / "tests/adapters").glob("test_*.py"))
    shown = {b.code for b in BLOCKS if b.page == "docs/adapters.md" and b.lang == "python"}
    for f in snippets:
        assert f.read_text().rstrip() + "\n" in shown, f"docs/adapters.md lacks {f.name}"
        assert f.name in tests, f"no test under tests/adapters runs {f.name}"
        assert f"](snippets/{f.name})" in page


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def test_every_link_and_image_exists() -> None:
    """Every relative link and image of the README and docs/ points at a file that exists
    (and an anchor at a heading of that page): moved sections leave no dead link."""
    broken = []
    for page in PAGES:
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md":
                headings = re.findall(r"^#+ .*$", re.sub(r"```.*?```", "", dest.read_text(),
                                                         flags=re.S), re.M)
                if anchor not in {slug(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_readme_performance_figures_are_the_tables() -> None:
    """The README's performance summary quotes docs/performance.md's generated table."""
    summary = text("README.md").split("## Performance", 1)[1].split("\n## ", 1)[0]
    figures = re.findall(r"\b\d+\.\d+x", summary)
    assert len(figures) >= 3
    table = text("docs/performance.md")
    for f in figures:
        assert f"| {f} |" in table, f"README quotes {f}, which docs/performance.md lacks"


def test_performance_table_is_generated_from_the_results() -> None:
    """docs/performance.md holds the table `python -m benchmarks --table-only` generates."""
    r = subprocess.run([sys.executable, "-c", "from benchmarks._table import table; "
                        "print(table())"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    page = text("docs/performance.md")
    assert f"<!-- bench:start -->\n{r.stdout.rstrip()}\n<!-- bench:end -->" in page
    assert "bench:start" not in text("README.md")
