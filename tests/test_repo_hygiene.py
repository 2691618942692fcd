"""The test suite keeps its own house: test text says what it tests (no numbers of an issue
tracker that is not in the repository), and the helpers shared by several test files
(tests/support/, the conftest.py files) are used, not written again in a test module."""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: "issue 12", "Issue #14", "issues 23", "finding 9", "the issue's repro": a reader of the
#: repository cannot look any of them up
TRACKER_CITATION = re.compile(r"\b[Ii]ssues?\s?#?\d+|\b[Ff]indings?\s\d+|\bthe issue's\b")

#: a "say N" env: tasks whose prompt asks to say a number (tests/support's SayEnv is that env)
SAY_N_TASKS = re.compile(r"\bTask\([^)]*\bf[\"'][Ss]ay:? \{")


def python_files() -> Iterator[Path]:
    """Every Python file of the suite but this one (whose examples cite on purpose)."""
    yield from (p for p in sorted(TESTS.rglob("*.py")) if p != Path(__file__).resolve())


def is_shared(path: Path) -> bool:
    """tests/support/ and conftest.py files hold what several test files use."""
    return path.name == "conftest.py" or "support" in path.relative_to(TESTS).parts


def is_fixture(node: ast.AST) -> bool:
    if not isinstance(node, ast.FunctionDef):
        return False
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
        if isinstance(target, ast.Name) and target.id == "fixture":
            return True
    return False


def top_level(path: Path) -> list[ast.stmt]:
    return ast.parse(path.read_text(), str(path)).body


def body_key(node: ast.FunctionDef | ast.ClassDef) -> str:
    """The definition without its name, docstrings, annotations and imports: two keys are
    equal when one definition is a copy of the other, renamed or retyped."""
    node = copy.deepcopy(node)
    node.name = ""
    for sub in ast.walk(node):
        body = getattr(sub, "body", None)
        if isinstance(body, list):
            sub.body = [s for s in body if not isinstance(s, ast.Import | ast.ImportFrom)
                        and not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                 and isinstance(s.value.value, str))] or [ast.Pass()]
        if isinstance(sub, ast.arg):
            sub.annotation = None
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
            sub.returns = None
        if isinstance(sub, ast.AnnAssign):
            sub.annotation = ast.Constant(None)
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def test_no_test_file_cites_an_issue_tracker() -> None:
    found = [f"{path.relative_to(TESTS)}:{n}: {line.strip()}"
             for path in python_files()
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if TRACKER_CITATION.search(line)]
    assert not found, ("say what the test checks instead of citing an issue of a tracker that is "
                       "not in the repository:\n" + "\n".join(found))


def test_the_citation_pattern_catches_what_it_is_for() -> None:
    cited = ["(issue 28, finding 3)", "Issue #14: a hang", "issues 23 item 6", "finding 9 of it",
             "the issue's repro"]
    clean = ["an issuer of tokens", "the verifier's findings", "PR notes", "tissue 3",
             "# 12 files of 127 MiB"]
    assert all(TRACKER_CITATION.search(s) for s in cited)
    assert not any(TRACKER_CITATION.search(s) for s in clean)


def test_the_shared_fixtures_are_not_redefined_in_test_modules() -> None:
    """A fixture of tests/conftest.py (the sandbox `backend` above all) defined again in a test
    module shadows the shared one and drifts from it; `backend` itself is defined once, and a
    family's conftest.py says what its backends need by overriding `local_backend` or
    `docker_backend`."""
    shared = {node.name for node in top_level(TESTS / "conftest.py") if is_fixture(node)}
    assert {"backend", "local_backend", "docker_backend", "docker_daemon"} <= shared
    again = [f"{path.relative_to(TESTS)}: {node.name}"
             for path in python_files() if not is_shared(path)
             for node in top_level(path) if is_fixture(node) and node.name in shared]
    backends = [str(path.relative_to(TESTS)) for path in python_files()
                if path != TESTS / "conftest.py"
                for node in top_level(path) if is_fixture(node) and node.name == "backend"]
    assert not again, f"use the fixtures of tests/conftest.py instead: {again}"
    assert not backends, f"`backend` is tests/conftest.py's; override local_backend/" \
                         f"docker_backend in a conftest.py instead: {backends}"


def test_shared_helpers_are_not_copied_into_test_modules() -> None:
    """No function or class of a test module is a copy (under any name) of one in
    tests/support/ or a conftest.py: the "say N" env, the random episodes, the fixtures."""
    shared: dict[str, str] = {}
    for path in python_files():
        if is_shared(path):
            for node in top_level(path):
                if isinstance(node, ast.FunctionDef | ast.ClassDef) \
                        and (node.end_lineno or 0) - node.lineno >= 4:
                    shared[body_key(node)] = f"{path.relative_to(TESTS)}:{node.name}"
    assert any(name.endswith(":SayEnv") for name in shared.values())
    copies = [f"{path.relative_to(TESTS)}:{node.name} is {shared[body_key(node)]}"
              for path in python_files() if not is_shared(path)
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.FunctionDef | ast.ClassDef) and body_key(node) in shared]
    assert not copies, f"import the shared helper instead: {copies}"


def test_say_n_envs_come_from_support() -> None:
    """The one-turn "say N" env is tests/support/skyhub_testenvs.py's SayEnv (subclass it to
    break one rule), not written again with other task names."""
    again = [f"{path.relative_to(TESTS)}:{n}" for path in python_files() if not is_shared(path)
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if SAY_N_TASKS.search(line)]
    assert SAY_N_TASKS.search((TESTS / "support" / "skyhub_testenvs.py").read_text())
    assert not again, f"use SayEnv from tests/support/skyhub_testenvs.py: {again}"


def test_the_copy_check_sees_a_renamed_copy() -> None:
    """The check above is not vacuous: a copy of SayEnv under another name has its key."""
    source = (TESTS / "support" / "skyhub_testenvs.py").read_text()
    original = next(n for n in ast.parse(source).body
                    if isinstance(n, ast.ClassDef) and n.name == "SayEnv")
    renamed = ast.parse(source.replace("class SayEnv(", "class QuizEnv(")).body
    copy = next(n for n in renamed if isinstance(n, ast.ClassDef) and n.name == "QuizEnv")
    assert body_key(copy) == body_key(original)
