"""`swe-synth` tasks from a real project: plant a bug, keep it if the project's own tests
catch it, and write the task from what they report.

For each drawn mutation (`skyhub.envs.swe.mutations`) of one of the project's source files,
the project's tests run with that one file changed (`Runner`: a callable the caller backs
with a sandbox of the project's image). The mutation becomes a task only if at least one test
that passed before now fails, and every test ran: FAIL_TO_PASS are the tests it breaks,
PASS_TO_PASS those that pass both times, read from the pytest log by the swebench package's
own parser (as the grader will read it). The gold patch is the mutation's reverse; the bug
patch (`extra["bug_patch"]`) is what the env applies to the pristine project at reset. The
problem statement quotes the failing tests and their assertion messages, never the file or
function changed.

Everything is seeded: the same project, seed and count give the same tasks.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from skyhub.errors import UsageError

from .grading import DEFAULT_LOG_PARSER
from .instances import Instance
from .mutations import KINDS, Mutation, mutations

#: runs the project's tests with some files replaced ({path: text}); returns the output of
#: `pytest -rA` and its exit status
Runner = Callable[[dict[str, str]], tuple[str, int]]

PASSED = ("PASSED", "XFAIL")
#: how the family runs pytest: every outcome listed (-rA, what the swebench parser reads), no cache
PYTEST = "python3 -m pytest -rA -p no:cacheprovider"


@dataclass(frozen=True)
class Project:
    """A project to break: its name and version (task ids, `repo`), the source files that
    may be mutated (paths relative to the repository root) and their text."""

    name: str
    version: str
    sources: dict[str, str]


def pytest_statuses(output: str) -> dict[str, str]:
    """Test id -> status (PASSED, FAILED, ERROR, SKIPPED, XFAIL) from `pytest -rA` output,
    by the swebench package's pytest parser."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    return PARSER_REGISTRY[DEFAULT_LOG_PARSER](output, None)


def failure_messages(output: str) -> dict[str, str]:
    """Test id -> the message pytest's short summary gives for it (`FAILED id - message`)."""
    out: dict[str, str] = {}
    for line in output.splitlines():
        m = re.match(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$", line)
        if m:
            out[m.group(1)] = (m.group(2) or "").strip()
    return out


def problem_statement(failing: list[str], messages: dict[str, str],
                      sources: dict[str, str]) -> str:
    """The task's text: which tests fail and how, with any path of a source file removed
    from the messages (the location is for the agent to find)."""
    lines = []
    for test in failing:
        name = test.split("::", 1)[-1]
        message = messages.get(test, "")
        for path in sources:
            message = message.replace(path, "the code")
        lines.append(f"- `{name}`" + (f": {message}" if message else ""))
    n = len(failing)
    return ("Something in this project no longer works as its tests expect. "
            f"{'This test fails' if n == 1 else f'These {n} tests fail'}:\n\n"
            + "\n".join(lines)
            + "\n\nThe tests are right: change the project's code (not the tests) so that "
              "they pass, without breaking any other test.")


def generate(project: Project, run: Runner, *, n: int, seed: int = 0,
             kinds: tuple[str, ...] = KINDS, max_tries: int | None = None,
             on_try: Callable[[Mutation, bool], None] | None = None) -> Iterator[Instance]:
    """Up to `n` tasks from `project` (see the module doc), trying mutations in a seeded
    order, at most `max_tries` of them (default 20 x n). `on_try(mutation, kept)` is told
    of every try (progress bars, statistics)."""
    output, code = run({})
    before = pytest_statuses(output)
    bad = sorted(t for t, s in before.items() if s not in (*PASSED, "SKIPPED"))
    if code != 0 or not before or bad:
        raise UsageError(f"{project.name} {project.version}: its tests do not all pass "
                         f"unchanged (exit {code}; failing: {bad[:5]}), so no mutation can "
                         "be judged against them; pick a project whose suite passes offline")
    passing = {t for t, s in before.items() if s in PASSED}
    candidates = [m for path in sorted(project.sources)
                  for m in mutations(project.sources[path], path, kinds)]
    random.Random(f"swe-synth:{project.name}:{project.version}:{seed}").shuffle(candidates)
    made, tries = 0, 0
    for m in candidates[: max_tries if max_tries is not None else 20 * n]:
        if made >= n:
            break
        tries += 1
        output, code = run({m.path: m.source})
        after = pytest_statuses(output)
        fail_to_pass = sorted(t for t in passing if after.get(t) not in PASSED)
        pass_to_pass = sorted(t for t in passing if after.get(t) in PASSED)
        kept = bool(fail_to_pass) and set(after) >= passing  # every test ran
        if on_try is not None:
            on_try(m, kept)
        if not kept:
            continue
        original = project.sources[m.path]
        made += 1
        yield Instance(
            instance_id=f"{project.name}-{project.version}.{seed}.{made - 1}",
            repo=f"swe-synth/{project.name}", base_commit=f"{project.name}-{project.version}",
            patch=m.fix_patch(original),
            problem_statement=problem_statement(fail_to_pass, failure_messages(output),
                                                project.sources),
            fail_to_pass=tuple(fail_to_pass), pass_to_pass=tuple(pass_to_pass),
            version=project.version, log_parser=DEFAULT_LOG_PARSER,
            extra={"bug_patch": m.bug_patch(original), "mutation": {
                "kind": m.kind, "path": m.path, "function": m.function, "line": m.line,
                "before": m.before, "after": m.after}})


def sandbox_runner(sandbox: Any, *, root: str = "/testbed",
                   command: str = PYTEST,
                   timeout: float = 600.0) -> Runner:
    """A `Runner` over a sandbox whose workdir `root` holds the project: each run writes the
    replaced files, runs `command` there and restores the snapshot taken when the runner was
    made (so no run sees another's files or leftovers). A run past `timeout` seconds counts
    as one where the tests did not all run (its mutation is not kept)."""
    snap = sandbox.snapshot()

    def run(files: dict[str, str]) -> tuple[str, int]:
        try:
            for path, text in files.items():
                sandbox.write_file(f"{root.rstrip('/')}/{path}", text)
            # a wide "terminal", so the short summary keeps the failures' messages whole
            r = sandbox.exec(command, timeout=timeout, cwd=root, env={"COLUMNS": "240"})
        finally:
            sandbox.restore(snap)
        return r.stdout + r.stderr, r.exit_code

    return run


__all__ = ["PYTEST", "Project", "Runner", "failure_messages", "generate", "problem_statement",
           "pytest_statuses", "sandbox_runner"]
