"""Grade a program by running unit tests in a sandbox that the agent never touched.

The program and a small harness are written to a fresh `grade-<uuid>/` directory of the
sandbox's workdir, run with `sandbox.exec`, and the directory is removed afterwards. Test kinds
(the `tests` dict of a task's meta, see `skyhub.envs.python.code_tasks`):

- `asserts` (MBPP) and `check` (HumanEval): `skyhub.envs.python.sandbox_runner` runs the tests
  in a verifier process and the program in a program server it starts, and only plain data
  crosses between them: the program cannot rewrite the test list, patch the tests' builtins,
  jump over an assert, hand back an object with a rigged `__eq__`, read the hidden tests or
  forge a verdict line (the nonce that tags them, and the tests, reach the verifier on
  stdin and live only in its undumpable memory). A test without its line (killed process,
  timeout) is a failure.
- `stdio` (LiveCodeBench stdin tasks): one `python -I program.py` per case, stdin = the case
  input; a pass needs exit code 0 and the same stdout up to trailing whitespace per line and
  trailing empty lines.
- `functional` (LiveCodeBench LeetCode tasks): one harness per case calls
  `Solution().<method>(*args)` and prints the result as JSON; the comparison with the expected
  JSON happens here, on the host, so a return value with a rigged `__eq__` gains nothing.

Anything the program does is a failed test, never an exception. Who is to blame when the
run breaks (hub/env.py's infra-error rule): a sandbox call that raises (the container or its
daemon gone) or a sandbox that cannot start Python is `infra_error=True`, so a trainer masks
the sample; a harness killed from inside (by the program: its parents, the in-sandbox guest,
`kill -9 -1`) is scored as it stands, every test without a verdict failed, with
`sandbox_broken=True`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from skyhub.errors import SkyhubError, UsageError
from skyhub.sandbox.base import ExecResult, Sandbox

TAG = "SKYHUB-GRADE"
MAX_TOTAL_TIMEOUT = 300.0  # seconds: cap on one asserts/check harness run, whatever the count
_REASON_CHARS = 200

# Proves that the interpreter started (its line is the first thing on stderr), then becomes
# the program itself, so the program runs exactly as `python -I program.py` would.
_STDIO_RUNNER = r'''
import os, sys
os.write(2, b"SKYHUB-GRADE start\n")
os.execv(sys.executable, [sys.executable, "-I", "program.py"])
'''

# The names LeetCode solutions take for granted (LiveCodeBench's harness provides them too).
_FUNCTIONAL_PRELUDE = """\
from typing import *
import bisect, collections, functools, heapq, itertools, math, re, string
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, lru_cache, reduce
from heapq import heapify, heappop, heappush, heappushpop, heapreplace, nlargest, nsmallest
from itertools import accumulate, combinations, permutations, product
from math import ceil, comb, floor, gcd, inf, isqrt, lcm, log, log2, sqrt
"""

_FUNCTIONAL_HARNESS = r'''
import json, os, sys

METHOD = json.loads(__METHOD__)
PRELUDE = json.loads(__PRELUDE__)


def _skyhub_call():
    nonce = sys.stdin.readline().strip()
    raw = sys.stdin.read()
    write, dumps, loads, exit_now = os.write, json.dumps, json.loads, os._exit
    with open("program.py", "rb") as f:
        program = f.read()
    out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)

    def emit(text):
        write(out, ("\n" + "SKYHUB-GRADE " + nonce + " " + text + "\n").encode("utf-8", "replace"))

    emit("start")
    args = [loads(line) for line in raw.split("\n") if line.strip()]
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(PRELUDE, ns)
        exec(compile(program, "program.py", "exec"), ns)
        text = dumps(getattr(ns["Solution"](), METHOD)(*args))
    except BaseException as e:
        try:
            why = (type(e).__name__ + (": " + str(e) if str(e) else ""))[:200]
        except BaseException:
            why = "unprintable exception"
        emit("0 fail " + dumps(why))
    else:
        emit("0 result " + text)
    exit_now(0)


_skyhub_call()
'''


@dataclass(frozen=True)
class GradeResult:
    """How many tests passed. `error` is the first failure's short reason (for the env's
    info); `infra_error` means the sandbox failed, so the score says nothing about the
    program; `sandbox_broken` that the program broke the grading's machinery from inside
    (the score stands: tests without a verdict failed); `details` has one line per test."""

    passed: int
    total: int
    error: str = ""
    infra_error: bool = False
    details: list[str] = field(default_factory=list)
    sandbox_broken: bool = False

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class _SandboxFailed(SkyhubError):
    """A sandbox call raised: the grade is an infra error, whatever the program did."""


def _count(tests: dict[str, Any]) -> int:
    kind = tests.get("kind")
    if kind == "asserts":
        return len(tests["asserts"])
    if kind == "check":
        return 1
    if kind in ("stdio", "functional"):
        return len(tests["cases"])
    raise UsageError(f"unknown test kind {kind!r}; expected 'asserts', 'check', 'stdio' or "
                     "'functional' (see skyhub.envs.python.code_tasks)")


def grade(sandbox: Sandbox, program: str, tests: dict[str, Any], *, python: str = "python3",
          timeout: float = 10.0) -> GradeResult:
    """Run `tests` (a task's `meta["tests"]`) against `program` in `sandbox`.

    `timeout` is per test (per case for stdio/functional); `python` is the interpreter's
    name or path inside the sandbox. Never raises for what the program does; raises
    `UsageError` for a malformed `tests` dict and `TypeError` when `program` is not a str.
    """
    if not isinstance(program, str):
        raise TypeError(f"program must be a str, got {type(program).__name__}")
    try:
        total = _count(tests)
    except (KeyError, TypeError) as e:
        raise UsageError(f"malformed tests dict ({type(e).__name__}: {e}); see "
                         "skyhub.envs.python.code_tasks for the shapes") from None
    if total == 0:
        return GradeResult(0, 0, error="the task has no tests")
    subdir = f"grade-{uuid.uuid4().hex[:12]}"
    try:
        # surrogatepass: a program with lone surrogates fails to compile in the sandbox (its
        # failure) instead of failing to encode here (which would look like an infra error).
        _call(sandbox.write_file, f"{subdir}/program.py",
              program.encode("utf-8", "surrogatepass"))
        if tests["kind"] in ("asserts", "check"):
            return _grade_in_process(sandbox, subdir, tests, python, timeout, total)
        if tests["kind"] == "stdio":
            return _grade_stdio(sandbox, subdir, tests["cases"], python, timeout)
        return _grade_functional(sandbox, subdir, tests, python, timeout)
    except _SandboxFailed as e:
        return GradeResult(0, total, error=f"sandbox failed: {e}", infra_error=True)
    finally:
        with contextlib.suppress(Exception):
            sandbox.exec(["rm", "-rf", subdir], timeout=30)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise _SandboxFailed(f"{type(e).__name__}: {e}") from e


def _exec(sandbox: Sandbox, argv: list[str], subdir: str, stdin: str,
          timeout: float) -> ExecResult:
    return _call(sandbox.exec, argv, timeout=timeout, cwd=subdir, stdin=stdin)


def _short(text: str, n: int = _REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _not_started(r: ExecResult) -> NoReturn:
    raise _SandboxFailed(f"the grading harness did not start (exit code {r.exit_code}"
                         f"{', timed out' if r.timed_out else ''}): "
                         f"{_short(r.stderr.strip()[-400:]) or 'no output'}")


def _grade_in_process(sandbox: Sandbox, subdir: str, tests: dict[str, Any], python: str,
                      timeout: float, total: int) -> GradeResult:
    if tests["kind"] == "asserts":
        names = [str(a) for a in tests["asserts"]]
        spec = {"setup": str(tests.get("setup") or ""), "post": "", "tests": names}
    else:
        entry = str(tests["entry_point"])
        names = [f"check({entry})"]
        spec = {"setup": "", "post": str(tests["code"]), "tests": names}
    # a test may cost its limit twice (a timed-out program is restarted, its load timed too)
    budget = min(timeout * 2 * (total + 1), max(2 * timeout, MAX_TOTAL_TIMEOUT))
    spec.update(limit=timeout, budget=budget)
    for name, text in _runner_sources().items():
        _call(sandbox.write_file, f"{subdir}/{name}", text)
    nonce = secrets.token_hex(16)
    overall = budget + timeout + 30.0  # the verifier stops itself at `budget`
    # the tests travel on stdin, read by the verifier before the program starts: they are
    # never in a file or a process the program can read
    r = _exec(sandbox, [python, "-I", "sandbox_runner.py"], subdir,
              nonce + "\n" + json.dumps(spec), overall)
    started, verdicts = _parse(r.stdout, nonce)
    if not started:
        return _broken_or_infra(sandbox, python, r, total)
    if f"{TAG} {nonce} insecure" in r.stdout.splitlines():
        raise _SandboxFailed("the sandbox's Python cannot make the grading harness "
                             "undumpable (prctl PR_SET_DUMPABLE), so the program could read "
                             "its verdicts' nonce: not grading there")
    ended = _ended(r.stdout, nonce)
    passed, error, details = 0, "", []
    for i, name in enumerate(names):
        verdict, why = verdicts.get(i, ("fail", ""))
        if verdict == "pass":
            passed += 1
            details.append(f"test {i}: pass")
            continue
        if not why:  # no line for this test: the process died or ran out of time
            why = (f"timed out (the whole run took over {overall:g}s)" if r.timed_out
                   else f"no result: the process ended with exit code {r.exit_code}")
        details.append(f"test {i}: fail: {why}")
        error = error or f"{_short(name, 80)}: {why}"
    if not ended:  # the verifier was killed or stopped: by the program, from inside
        error = error or "the grading harness was killed before it finished"
    return GradeResult(passed, total, error=error, details=details, sandbox_broken=not ended)


@functools.cache
def _runner_sources() -> dict[str, str]:
    """The in-sandbox test runner's files: the verifier and the program side it loads."""
    here = Path(__file__).resolve().parent
    return {name: (here / name).read_text(encoding="utf-8")
            for name in ("sandbox_runner.py", "sandbox_program.py")}


def _ended(stdout: str, nonce: str) -> bool:
    return f"{TAG} {nonce} end" in stdout.splitlines()


_BROKE = "the program broke its sandbox (killed its harness or the in-sandbox guest)"


def _blame_program(sandbox: Sandbox, python: str, r: ExecResult) -> None:
    """For a harness run without its start line: return when the program broke the sandbox's
    machinery from inside (killed the in-sandbox guest or the harness's parents, `kill -9
    -1`...), which is the program's failure; `_SandboxFailed` (infra) when the sandbox cannot
    run Python at all. A fresh interpreter answering now tells them apart."""
    probe = _call(sandbox.exec, [python, "-I", "-c", "print('skyhub-probe')"], timeout=60)
    if probe.exit_code != 0 or probe.stdout.strip() != "skyhub-probe":
        _not_started(r)


def _broken_or_infra(sandbox: Sandbox, python: str, r: ExecResult, total: int) -> GradeResult:
    _blame_program(sandbox, python, r)
    return GradeResult(0, total, error=f"no verdict (exit code {r.exit_code}): {_BROKE}",
                       details=[f"test {i}: fail: no result" for i in range(total)],
                       sandbox_broken=True)


def _parse(stdout: str, nonce: str) -> tuple[bool, dict[int, tuple[str, str]]]:
    """Whether the start line came, and {test index: (verdict, reason or JSON result)}."""
    prefix = f"{TAG} {nonce} "
    started, verdicts = False, {}
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        rest = line[len(prefix):]
        if rest == "start":
            started = True
            continue
        parts = rest.split(" ", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        i, verdict, payload = int(parts[0]), parts[1], parts[2]
        if verdict in ("pass", "fail"):
            try:
                payload = str(json.loads(payload))
            except ValueError:
                payload = _short(payload)
        verdicts.setdefault(i, (verdict, payload))
    return started, verdicts


def normalize_output(text: str) -> str:
    """Stdout as compared: trailing whitespace of each line and trailing empty lines dropped."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


def _grade_stdio(sandbox: Sandbox, subdir: str, cases: list[dict[str, str]], python: str,
                 timeout: float) -> GradeResult:
    _call(sandbox.write_file, f"{subdir}/runner.py", _STDIO_RUNNER)
    marker = f"{TAG} start\n"
    passed, error, details, broken = 0, "", [], False
    for i, case in enumerate(cases):
        r = _exec(sandbox, [python, "-I", "runner.py"], subdir, str(case["input"]), timeout)
        started = r.stderr.startswith(marker)
        if not started:
            _blame_program(sandbox, python, r)
            broken = True
        stderr = r.stderr[len(marker):]
        got, want = normalize_output(r.stdout), normalize_output(str(case["output"]))
        if not started:
            why = f"no result (exit code {r.exit_code}): {_BROKE}"
        elif r.timed_out:
            why = f"timed out after {timeout:g}s"
        elif r.exit_code != 0:
            last = stderr.strip().splitlines()[-1:] or [""]
            why = f"exit code {r.exit_code}" + (f": {_short(last[0])}" if last[0] else "")
        elif got != want:
            why = f"wrong output: got {_short(got, 80)!r}, expected {_short(want, 80)!r}"
        else:
            passed += 1
            details.append(f"case {i}: pass")
            continue
        details.append(f"case {i}: fail: {why}")
        error = error or f"case {i}: {why}"
    return GradeResult(passed, len(cases), error=error, details=details, sandbox_broken=broken)


def _grade_functional(sandbox: Sandbox, subdir: str, tests: dict[str, Any], python: str,
                      timeout: float) -> GradeResult:
    harness = (_FUNCTIONAL_HARNESS.replace("__METHOD__", repr(json.dumps(str(tests["method"]))))
               .replace("__PRELUDE__", repr(json.dumps(_FUNCTIONAL_PRELUDE))))
    _call(sandbox.write_file, f"{subdir}/harness.py", harness)
    passed, error, details, broken = 0, "", [], False
    for i, case in enumerate(tests["cases"]):
        nonce = secrets.token_hex(16)
        r = _exec(sandbox, [python, "-I", "harness.py"], subdir,
                  f"{nonce}\n{case['input']}", timeout)
        started, verdicts = _parse(r.stdout, nonce)
        if not started:
            _blame_program(sandbox, python, r)
            broken = True
        verdict, payload = verdicts.get(0, ("", ""))
        if not started:
            why = f"no result (exit code {r.exit_code}): {_BROKE}"
        elif verdict == "result":
            try:
                got: Any = json.loads(payload)
            except ValueError:
                got = _Unparsable()
            if got == json.loads(case["output"]):
                passed += 1
                details.append(f"case {i}: pass")
                continue
            why = f"wrong result: got {_short(payload, 80)}, expected {_short(case['output'], 80)}"
        elif verdict == "fail":
            why = payload
        elif r.timed_out:
            why = f"timed out after {timeout:g}s"
        else:
            why = f"no result: the process ended with exit code {r.exit_code}"
        details.append(f"case {i}: fail: {why}")
        error = error or f"case {i}: {why}"
    return GradeResult(passed, len(tests["cases"]), error=error, details=details,
                       sandbox_broken=broken)


class _Unparsable:
    """Stands for a result line that is not JSON (cut by the output cap): equal to nothing."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


__all__ = ["GradeResult", "grade", "normalize_output"]
