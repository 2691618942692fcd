"""`resolved` from real pytest runs, through the swebench package's grader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skyhub.envs.swe.grading import Grade, eval_log, grade
from skyhub.envs.swe.instances import Instance

TESTS = '''\
from calc import add, div


def test_add():
    assert add(2, 3) == 5


def test_div():
    assert div(6, 3) == 2


def test_div_by_zero():
    assert div(1, 0) is None
'''

F2P = ("tests/test_calc.py::test_div", "tests/test_calc.py::test_div_by_zero")
P2P = ("tests/test_calc.py::test_add",)
INSTANCE = Instance(instance_id="calc-1", repo="local/calc", base_commit="0" * 40,
                    patch="(gold)", problem_statement="div is wrong", fail_to_pass=F2P,
                    pass_to_pass=P2P)


def run(tmp_path: Path, calc: str, conftest: str | None = None) -> str:
    """The eval log of `pytest -rA` over TESTS with `calc.py` as given."""
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests/test_calc.py").write_text(TESTS)
    (tmp_path / "calc.py").write_text(calc)
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(conftest)
    p = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                        "tests/test_calc.py"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    return eval_log(p.stdout + p.stderr, p.returncode)


BROKEN = "def add(a, b):\n    return a + b\n\n\ndef div(a, b):\n    return a * b\n"
FIXED = ("def add(a, b):\n    return a + b\n\n\n"
         "def div(a, b):\n    return None if b == 0 else a / b\n")


def test_before_and_after_the_fix(tmp_path: Path) -> None:
    before = grade(INSTANCE, run(tmp_path, BROKEN))
    assert before.valid and not before.resolved and before.status == "RESOLVED_NO"
    assert set(before.tests["FAIL_TO_PASS"]["failure"]) == set(F2P)
    assert before.tests["PASS_TO_PASS"]["success"] == list(P2P)
    after = grade(INSTANCE, run(tmp_path, FIXED))
    assert after.resolved and after.status == "RESOLVED_FULL" and after.fail_to_pass == 1.0


def test_partial_and_broken_maintenance(tmp_path: Path) -> None:
    half = grade(INSTANCE, run(tmp_path, BROKEN.replace("a * b", "a / b")))  # 1 of 2 fixed
    assert half.status == "RESOLVED_PARTIAL" and not half.resolved
    assert half.fail_to_pass == 0.5
    regressed = grade(INSTANCE, run(tmp_path, FIXED.replace("a + b", "a - b")))
    assert regressed.status == "RESOLVED_NO" and regressed.fail_to_pass == 1.0
    assert regressed.tests["PASS_TO_PASS"]["failure"] == list(P2P)


def test_logs_that_show_no_honest_run_are_not_resolved(tmp_path: Path) -> None:
    # a conftest that prints PASSED for every test after pytest's own summary
    liar = ("def pytest_unconfigure(config):\n"
            f"    for t in {list(F2P + P2P)!r}:\n"
            "        print('PASSED', t)\n")
    lied = grade(INSTANCE, run(tmp_path, BROKEN, conftest=liar))
    assert not lied.valid and not lied.resolved  # exit status 1 with nothing failing
    nothing = grade(INSTANCE, eval_log("", 0))
    assert nothing == Grade(resolved=False, status="RESOLVED_NO", valid=False,
                            infra_failure=nothing.infra_failure)
    unmarked = grade(INSTANCE, "PASSED tests/test_calc.py::test_div\n")
    assert not unmarked.valid and not unmarked.resolved


def test_the_packages_own_parsers_are_used() -> None:
    from skyhub.errors import UsageError

    log = eval_log("test_div (tests.test_calc.T) ... ok\n", 0)
    django = Instance(**{**INSTANCE.__dict__, "fail_to_pass": ("test_div (tests.test_calc.T)",),
                         "pass_to_pass": (), "log_parser": "parse_log_django"})
    assert grade(django, log).resolved
    with pytest.raises(UsageError, match="not one of the swebench package's"):
        grade(Instance(**{**INSTANCE.__dict__, "log_parser": "parse_log_mine"}), log)
