"""swe-synth's generator on a small real project: every task's FAIL_TO_PASS fails with the
bug and passes with the gold patch (graded by the swebench package), and the same seed gives
the same tasks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from skyhub.envs.swe.grading import eval_log, grade
from skyhub.envs.swe.synth import Project, generate, problem_statement, pytest_statuses
from skyhub.errors import UsageError

CORE = '''\
def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    if not xs:
        return 0.0
    return sum(xs) / len(xs)


def chunks(xs, n):
    return [xs[i:i + n] for i in range(0, len(xs), n)]
'''

TESTS = '''\
from mini.core import chunks, clamp, mean


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_edges():
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10
    assert clamp(0, 0, 10) == 0


def test_mean():
    assert mean([1, 2, 3]) == 2
    assert mean([]) == 0.0


def test_chunks():
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
'''


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mini")
    (root / "mini").mkdir()
    (root / "mini/__init__.py").write_text("")
    (root / "mini/core.py").write_text(CORE)
    (root / "tests").mkdir()
    (root / "tests/test_core.py").write_text(TESTS)
    return root


def runner(root: Path, work: Path) -> Callable[[dict[str, str]], tuple[str, int]]:
    """The project's tests in a copy of it with some files replaced (host processes: the
    project is this test's own code)."""
    def run(files: dict[str, str]) -> tuple[str, int]:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(root, work)
        for path, text in files.items():
            (work / path).write_text(text)
        p = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                            "tests"], cwd=work, capture_output=True, text=True,
                           env={"PYTHONPATH": str(work), "PATH": "/usr/bin:/bin"})
        return p.stdout + p.stderr, p.returncode
    return run


def test_tasks_fail_before_the_gold_patch_and_pass_after(project_dir: Path,
                                                         tmp_path: Path) -> None:
    project = Project("mini", "1.0", {"mini/core.py": CORE})
    run = runner(project_dir, tmp_path / "work")
    tried: list[bool] = []
    tasks = list(generate(project, run, n=4, seed=0,
                          on_try=lambda m, kept: tried.append(kept)))
    assert len(tasks) == 4 and sum(tried) == 4
    assert len({t.instance_id for t in tasks}) == 4
    for t in tasks:
        mutated = t.extra["mutation"]
        assert t.fail_to_pass and set(t.fail_to_pass).isdisjoint(t.pass_to_pass)
        assert len(t.fail_to_pass) + len(t.pass_to_pass) == 4
        assert "mini/core.py" not in t.problem_statement
        # the bug, through git: the F2P tests fail; the gold patch on top: all pass
        repo = tmp_path / "repo"
        shutil.rmtree(repo, ignore_errors=True)
        shutil.copytree(project_dir, repo)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        (repo / "bug.diff").write_text(t.extra["bug_patch"])
        subprocess.run(["git", "apply", "bug.diff"], cwd=repo, check=True)
        buggy = (repo / "mini/core.py").read_text()
        assert buggy != CORE and mutated["after"] in buggy
        broken = grade(t, eval_log(*runner(repo, tmp_path / "w2")({})))
        assert broken.valid and not broken.resolved and broken.fail_to_pass == 0.0
        (repo / "fix.diff").write_text(t.patch)
        subprocess.run(["git", "apply", "fix.diff"], cwd=repo, check=True)
        assert (repo / "mini/core.py").read_text() == CORE
        fixed = grade(t, eval_log(*runner(repo, tmp_path / "w2")({})))
        assert fixed.resolved and fixed.status == "RESOLVED_FULL"

    again = list(generate(project, run, n=4, seed=0))
    assert [(t.instance_id, t.patch) for t in again] == [(t.instance_id, t.patch)
                                                         for t in tasks]
    other = list(generate(project, run, n=4, seed=1))
    assert [t.patch for t in other] != [t.patch for t in tasks]


def test_the_sandbox_runner(project_dir: Path, local_backend: str) -> None:
    """The same tasks from the project's tests run in a local sandbox, each run on a clean
    copy (a mutation that hangs the tests is not kept)."""
    import skyhub
    from skyhub.envs.swe.synth import sandbox_runner

    with skyhub.sandbox.create(backend=local_backend, workdir="/testbed") as sb:
        sb.upload(project_dir / "mini", "/testbed/mini")
        sb.upload(project_dir / "tests", "/testbed/tests")
        hang = CORE.replace("    return x\n", "    while True:\n        pass\n")
        output, code = sandbox_runner(sb, timeout=5)({"mini/core.py": hang})
        assert code != 0 and "test_clamp_inside" not in pytest_statuses(output)
        assert sb.read_file("/testbed/mini/core.py").decode() == CORE  # restored
        run = sandbox_runner(sb, timeout=300)
        tasks = list(generate(Project("mini", "1.0", {"mini/core.py": CORE}), run, n=2))
        assert len(tasks) == 2 and all(t.fail_to_pass for t in tasks)
        assert sb.read_file("/testbed/mini/core.py").decode() == CORE


def test_a_project_whose_tests_fail_is_refused(project_dir: Path, tmp_path: Path) -> None:
    run = runner(project_dir, tmp_path / "work")
    broken = {"mini/core.py": CORE.replace("return x\n", "return -x\n")}
    with pytest.raises(UsageError, match="do not all pass unchanged"):
        list(generate(Project("mini", "1.0", broken), lambda f: run({**broken, **f}), n=1))


def test_statuses_and_statement() -> None:
    out = ("PASSED tests/t.py::test_a\nFAILED tests/t.py::test_b - assert 1 == 2 in "
           "mini/core.py\n")
    assert pytest_statuses(out) == {"tests/t.py::test_a": "PASSED",
                                  "tests/t.py::test_b": "FAILED"}
    text = problem_statement(["tests/t.py::test_b"], {"tests/t.py::test_b": "assert 1 == 2 in "
                                                      "mini/core.py"}, {"mini/core.py": ""})
    assert "`test_b`: assert 1 == 2 in the code" in text and "This test fails" in text
