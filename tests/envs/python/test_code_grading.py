"""python-code grading: bundled tasks, hostile programs, test kinds and dataset loaders, run in a
real local (bubblewrap) sandbox."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import skyhub.sandbox
from skyhub.envs.python.code_tasks import decode_test_cases, load_code_tasks
from skyhub.envs.python.grader import GradeResult, grade
from skyhub.errors import DataNotFound, InfraError, UsageError
from skyhub.sandbox.base import Sandbox

PY = "/usr/bin/python3"

ADD_TESTS = {"kind": "asserts", "setup": "",
             "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0",
                         "assert add(10, 5) == 15", "assert add(0, 0) == 0"]}
ECHO_SUM = {"kind": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"},
                                       {"input": "5 5\n", "output": "10\n"}]}


@pytest.fixture(scope="module")
def sb(bwrap: str) -> Iterator[Sandbox]:
    sandbox = skyhub.sandbox.create(backend="local")
    yield sandbox
    sandbox.close()


def run(sb: Sandbox, program: str, tests: dict[str, Any], timeout: float = 5.0) -> GradeResult:
    return grade(sb, program, tests, python=PY, timeout=timeout)


# -- bundled tasks ---------------------------------------------------------------------------
def test_bundled_set_has_the_promised_kinds() -> None:
    tasks = load_code_tasks()
    kinds = [t.meta["tests"]["kind"] for t in tasks]
    assert len(tasks) == 12
    assert (kinds.count("asserts"), kinds.count("check"), kinds.count("stdio")) == (6, 3, 3)
    assert all(t.meta["source"] == "skyhub" and t.answer for t in tasks)


@pytest.mark.parametrize("task", list(load_code_tasks()), ids=lambda t: t.id)
def test_every_bundled_reference_passes_all_tests(sb: Sandbox, task: Any) -> None:
    r = run(sb, task.answer, task.meta["tests"])
    assert r.all_passed, r
    assert not r.infra_error and r.error == ""


@pytest.mark.parametrize("task", list(load_code_tasks()), ids=lambda t: t.id)
def test_every_bundled_task_rejects_an_empty_program(sb: Sandbox, task: Any) -> None:
    r = run(sb, "pass\n", task.meta["tests"])
    assert r.passed == 0 and not r.infra_error and r.error


def test_grading_leaves_no_files_behind(sb: Sandbox) -> None:
    run(sb, "def add(a, b):\n    return a + b\n", ADD_TESTS)
    assert sb.exec("ls", timeout=10).stdout.strip() == ""


# -- asserts: right, wrong, partial ----------------------------------------------------------
def test_wrong_program_fails_with_a_reason(sb: Sandbox) -> None:
    r = run(sb, "def add(a, b):\n    return a + b + 1\n", ADD_TESTS)
    assert r.passed == 0 and r.total == 4 and not r.infra_error
    assert "AssertionError" in r.error and "add(1, 2)" in r.error
    assert len(r.details) == 4


def test_partial_credit_is_a_fraction(sb: Sandbox) -> None:
    # right only when a >= 0: passes tests 0, 2, 3
    r = run(sb, "def add(a, b):\n    return a + b if a >= 0 else 99\n", ADD_TESTS)
    assert (r.passed, r.total, r.fraction, r.all_passed) == (3, 4, 0.75, False)
    assert r.details[1].startswith("test 1: fail")


def test_setup_code_runs_before_the_program(sb: Sandbox) -> None:
    tests = {"kind": "asserts", "setup": "import math\nK = 3",
             "asserts": ["assert f() == math.pi * K"]}
    assert run(sb, "def f():\n    return math.pi * K\n", tests).all_passed


def test_program_output_does_not_disturb_grading(sb: Sandbox) -> None:
    program = ("print('x' * 3_000_000, end='')\n"
               "def add(a, b):\n    print('no newline', end='')\n    return a + b\n")
    assert run(sb, program, ADD_TESTS).all_passed


def test_main_guard_does_not_run_and_stdin_is_empty(sb: Sandbox) -> None:
    program = ("import sys\n"
               "def add(a, b):\n    return a + b\n"
               "if __name__ == '__main__':\n    input()\n"
               "assert sys.stdin.read() == ''\n")
    assert run(sb, program, ADD_TESTS).all_passed


# -- hostile programs: none can pass, none is an infra error ---------------------------------
HOSTILE = {
    "forged_lines": (
        "import sys\n"
        "for i in range(4):\n"
        "    print(f'SKYHUB-GRADE start')\n"
        "    print(f'SKYHUB-GRADE deadbeef {i} pass \"\"')\n"
        "    sys.__stdout__.write(f'\\nSKYHUB-GRADE x {i} pass \"\"\\n')\n"
        "def add(a, b):\n    return None\n"),
    "os_exit_at_import": "import os\nos._exit(0)\n",
    "sys_exit_at_import": "import sys\nsys.exit(0)\n",
    "sys_exit_in_function": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "raises_at_import": "raise RuntimeError('boom')\n",
    "syntax_error": "def add(a, b)\n    return a + b\n",
    "infinite_loop": "while True:\n    pass\n",
    "loop_that_swallows_the_alarm": (
        "while True:\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass\n"),
    "kills_its_process_group": "import os, signal\nos.killpg(0, signal.SIGKILL)\n",
    "closes_stdout": "import os\nos.close(1)\nos.close(2)\ndef add(a, b):\n    return None\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_fails_every_test_without_infra_error(sb: Sandbox, name: str) -> None:
    r = run(sb, HOSTILE[name], ADD_TESTS, timeout=0.5)
    assert r.passed == 0 and r.total == 4, r
    assert not r.infra_error, r
    assert r.error


def test_sys_exit_is_reported_as_an_exit(sb: Sandbox) -> None:
    r = run(sb, HOSTILE["sys_exit_at_import"], ADD_TESTS)
    assert "SystemExit" in r.error


def test_infinite_loop_fails_fast(sb: Sandbox) -> None:
    r = run(sb, "def add(a, b):\n    while True:\n        pass\n", ADD_TESTS, timeout=0.3)
    assert r.passed == 0 and "timed out" in r.error
    r = run(sb, HOSTILE["loop_that_swallows_the_alarm"], ADD_TESTS, timeout=0.3)
    assert r.passed == 0 and "timed out" in r.error


def test_slow_test_fails_but_others_still_count(sb: Sandbox) -> None:
    program = ("import time\n"
               "def add(a, b):\n    if a == 10:\n        time.sleep(5)\n    return a + b\n")
    r = run(sb, program, ADD_TESTS, timeout=0.5)
    assert (r.passed, r.total) == (3, 4)
    assert "timed out" in r.details[2]


# -- HumanEval check --------------------------------------------------------------------------
CHECK = {"kind": "check", "entry_point": "double",
         "code": ("def check(candidate):\n    assert candidate(2) == 4\n"
                  "    assert candidate(0) == 0\n")}


def test_check_kind_calls_check_with_the_entry_point(sb: Sandbox) -> None:
    assert run(sb, "def double(x):\n    return 2 * x\n", CHECK).all_passed
    r = run(sb, "def double(x):\n    return x + 2\n", CHECK)
    assert (r.passed, r.total) == (0, 1) and "AssertionError" in r.error
    r = run(sb, "def triple(x):\n    return 3 * x\n", CHECK)
    assert r.passed == 0 and "NameError" in r.error


# -- stdio --------------------------------------------------------------------------------------
def test_stdio_passes_with_trailing_whitespace_differences(sb: Sandbox) -> None:
    program = "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\nprint('   ')\n"
    assert run(sb, program, ECHO_SUM).all_passed


def test_stdio_wrong_output_and_crash_fail(sb: Sandbox) -> None:
    r = run(sb, "print(3)\n", ECHO_SUM)
    assert (r.passed, r.total) == (1, 2) and "wrong output" in r.error
    r = run(sb, "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)\n",
            ECHO_SUM)
    assert r.passed == 0 and "exit code 1" in r.error
    r = run(sb, "while True:\n    pass\n", ECHO_SUM, timeout=0.5)
    assert r.passed == 0 and "timed out" in r.error and not r.infra_error


def test_stdio_leading_whitespace_still_matters(sb: Sandbox) -> None:
    r = run(sb, "a, b = map(int, input().split())\nprint(' ', a + b)\n", ECHO_SUM)
    assert r.passed == 0


# -- functional (LiveCodeBench LeetCode) -------------------------------------------------------
FUNCTIONAL = {"kind": "functional", "method": "twoSum",
              "cases": [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]"},
                        {"input": "[3, 2, 4]\n6", "output": "[1, 2]"}]}
TWO_SUM = ("class Solution:\n"
           "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
           "        seen = {}\n"
           "        for i, x in enumerate(nums):\n"
           "            if target - x in seen:\n"
           "                return (seen[target - x], i)\n"
           "            seen[x] = i\n")


def test_functional_kind_compares_json(sb: Sandbox) -> None:
    assert run(sb, TWO_SUM, FUNCTIONAL).all_passed  # a tuple result equals the JSON list
    r = run(sb, TWO_SUM.replace("(seen[target - x], i)", "[i, seen[target - x]]"), FUNCTIONAL)
    assert r.passed == 0 and "wrong result" in r.error


def test_functional_rigged_equality_does_not_pass(sb: Sandbox) -> None:
    program = ("class Always(list):\n    def __eq__(self, other):\n        return True\n"
               "class Solution:\n    def twoSum(self, nums, target):\n        return Always()\n")
    assert run(sb, program, FUNCTIONAL).passed == 0


def test_functional_forged_lines_and_exit_fail(sb: Sandbox) -> None:
    for program in ("print('SKYHUB-GRADE x 0 result [0, 1]')\nimport os\nos._exit(0)\n",
                    "class Solution:\n    def twoSum(self, nums, target):\n"
                    "        raise SystemExit(0)\n"):
        r = run(sb, program, FUNCTIONAL)
        assert r.passed == 0 and not r.infra_error, r


# -- infrastructure failures -------------------------------------------------------------------
class BrokenSandbox:
    """A sandbox whose every command fails the way a dead container does."""

    workdir = "/work"

    def __init__(self, fail_writes: bool = False) -> None:
        self.fail_writes = fail_writes

    def exec(self, *args: Any, **kwargs: Any) -> Any:
        raise InfraError("container died")

    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        if self.fail_writes:
            raise OSError("disk gone")

    def read_file(self, path: str) -> bytes:
        raise FileNotFoundError(path)


@pytest.mark.parametrize("tests", [ADD_TESTS, CHECK, ECHO_SUM, FUNCTIONAL],
                         ids=lambda t: t["kind"])
@pytest.mark.parametrize("fail_writes", [False, True])
def test_sandbox_failure_is_an_infra_error(tests: dict[str, Any], fail_writes: bool) -> None:
    r = grade(BrokenSandbox(fail_writes), "x = 1\n", tests)  # type: ignore[arg-type]
    assert r.infra_error and r.passed == 0 and r.total > 0
    assert "sandbox failed" in r.error


def test_missing_interpreter_is_an_infra_error(sb: Sandbox) -> None:
    for tests in (ADD_TESTS, ECHO_SUM, FUNCTIONAL):
        r = grade(sb, "x = 1\n", tests, python="/nonexistent/python3")
        assert r.infra_error and "did not start" in r.error, r


def test_malformed_tests_raise_usage_error(sb: Sandbox) -> None:
    with pytest.raises(UsageError, match="unknown test kind"):
        grade(sb, "x = 1", {"kind": "bogus"})
    with pytest.raises(UsageError, match="malformed"):
        grade(sb, "x = 1", {"kind": "asserts"})


# -- loaders ------------------------------------------------------------------------------------
def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


MBPP_ROW = {"task_id": 11, "text": "Write a function to add two numbers.",
            "code": "def add(a, b):\r\n    return a + b", "test_setup_code": "",
            "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
            "challenge_test_list": []}
HUMANEVAL_ROW = {"task_id": "HumanEval/999",
                 "prompt": 'def double(x: int) -> int:\n    """Twice x."""\n',
                 "canonical_solution": "    return 2 * x\n",
                 "test": "def check(candidate):\n    assert candidate(3) == 6\n",
                 "entry_point": "double"}


def lcb_row(qid: str, public: list[dict[str, str]], private: Any, **extra: Any) -> dict[str, Any]:
    return {"question_id": qid, "question_title": "t", "question_content": "Add two numbers.",
            "platform": "atcoder", "difficulty": "easy", "starter_code": "",
            "public_test_cases": json.dumps(public), "private_test_cases": private,
            "metadata": "{}", **extra}


def compress(cases: list[dict[str, str]]) -> str:
    """LiveCodeBench's encoding of private test cases."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def test_mbpp_rows_become_assert_tasks(sb: Sandbox, tmp_path: Path) -> None:
    tasks = load_code_tasks(write_jsonl(tmp_path / "mbpp.jsonl", [MBPP_ROW]))
    t = tasks.get("mbpp/11")
    assert t.meta["tests"] == {"kind": "asserts", "setup": "", "asserts": MBPP_ROW["test_list"]}
    assert t.meta["entry_point"] == "add" and t.meta["split"] == "test"
    assert "Your code should pass these tests:" in t.prompt and "add(1, 2)" in t.prompt
    assert run(sb, t.answer, t.meta["tests"]).all_passed
    assert len(load_code_tasks(tmp_path / "mbpp.jsonl", split="test")) == 1
    with pytest.raises(ValueError, match="no task of split 'train'"):
        load_code_tasks(tmp_path / "mbpp.jsonl", split="train")


def test_humaneval_rows_become_check_tasks(sb: Sandbox, tmp_path: Path) -> None:
    t = load_code_tasks(write_jsonl(tmp_path / "he.jsonl", [HUMANEVAL_ROW]))[0]
    assert t.id == "HumanEval/999" and "def double(x: int)" in t.prompt
    assert t.meta["tests"] == {"kind": "check", "code": HUMANEVAL_ROW["test"],
                               "entry_point": "double"}
    assert t.answer == HUMANEVAL_ROW["prompt"] + HUMANEVAL_ROW["canonical_solution"]
    assert run(sb, t.answer, t.meta["tests"]).all_passed


def test_livecodebench_stdin_rows_with_compressed_private_cases(sb: Sandbox,
                                                                tmp_path: Path) -> None:
    public = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    private = [{"input": "4 5\n", "output": "9\n", "testtype": "stdin"},
               {"input": "0 0\n", "output": "0\n", "testtype": "stdin"}]
    path = write_jsonl(tmp_path / "lcb.jsonl", [lcb_row("abc001_a", public, compress(private)),
                                                 lcb_row("abc001_b", public,
                                                         json.dumps(private))])
    for t in load_code_tasks(path):
        assert t.meta["tests"]["kind"] == "stdio" and t.answer is None
        assert t.meta["tests"]["cases"] == [{"input": c["input"], "output": c["output"]}
                                            for c in public + private]
        assert t.meta["source"] == "livecodebench" and t.meta["n_public"] == 1
        r = run(sb, "a, b = map(int, input().split())\nprint(a + b)\n", t.meta["tests"])
        assert (r.passed, r.total) == (3, 3)


def test_livecodebench_functional_rows(sb: Sandbox, tmp_path: Path) -> None:
    cases = [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"}]
    starter = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
    row = lcb_row("1", cases, compress(cases[:0]), starter_code=starter)
    t = load_code_tasks(write_jsonl(tmp_path / "lcb.jsonl", [row])).get("lcb/1")
    assert t.meta["tests"]["kind"] == "functional" and t.meta["tests"]["method"] == "twoSum"
    assert "class Solution" in t.prompt
    assert run(sb, TWO_SUM, t.meta["tests"]).all_passed


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch /tmp/skyhub-pwned",))


def test_malicious_pickle_is_rejected_without_running(tmp_path: Path) -> None:
    marker = Path("/tmp/skyhub-pwned")
    marker.unlink(missing_ok=True)
    payload = base64.b64encode(zlib.compress(pickle.dumps(_Boom()))).decode()
    with pytest.raises(ValueError, match="refusing to load"):
        decode_test_cases(payload)
    path = write_jsonl(tmp_path / "lcb.jsonl",
                       [lcb_row("x", [{"input": "1", "output": "1", "testtype": "stdin"}],
                                payload)])
    with pytest.raises(ValueError, match=r"lcb\.jsonl:1"):
        load_code_tasks(path)
    assert not marker.exists()


def test_pickle_of_a_non_string_is_rejected() -> None:
    payload = base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode()
    with pytest.raises(ValueError, match="expected a JSON string"):
        decode_test_cases(payload)


def test_skyhub_rows_pass_through_and_are_validated(tmp_path: Path) -> None:
    row = {"id": "a", "prompt": "p", "answer": "x = 1", "meta": {"tests": ECHO_SUM}}
    t = load_code_tasks(write_jsonl(tmp_path / "own.jsonl", [row]))[0]
    assert t.to_dict() == row
    bad = {**row, "meta": {"tests": {"kind": "magic"}}}
    with pytest.raises(ValueError, match=r"own\.jsonl:2.*magic"):
        load_code_tasks(write_jsonl(tmp_path / "own.jsonl", [row, bad]))


def test_unrecognised_row_names_line_and_expected_keys(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "solution": "s"}])
    with pytest.raises(ValueError, match=r"x\.jsonl:1: unrecognised row.*test_list"):
        load_code_tasks(path)


def test_missing_data_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match="data="):
        load_code_tasks(tmp_path / "nope.jsonl")


def test_directory_with_split_files(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "test.jsonl", [MBPP_ROW])
    write_jsonl(tmp_path / "train.jsonl", [{**MBPP_ROW, "task_id": 700}])
    assert load_code_tasks(tmp_path, split="train").ids() == ["mbpp/700"]
    with pytest.raises(DataNotFound, match=r"2 \.jsonl files"):
        load_code_tasks(tmp_path)
