"""Grade a program by running unit tests in a sandbox that the agent never touched.

The program and a small harness are written to a fresh `grade-<uuid>/` directory of the
sandbox's workdir, run with `sandbox.exec`, and the directory is removed afterwards. Test kinds
(the `tests` dict of a task's meta, see `skyhub.envs.python.code_tasks`):

- `asserts` (MBPP) and `check` (HumanEval): ONE harness process executes setup + program in a
  namespace, then each test on its own, catching `BaseException` (so `sys.exit()` in the
  program is a failure, not an early "exit 0"). It reports one line per test tagged with a
  random nonce that reaches it only through stdin, read before the program runs: printing
  fake result lines, `os._exit(0)` or exiting early cannot forge a pass, and a test without
  its line (killed process, timeout) is a failure. The program's own stdout is sent to
  stderr so it cannot push the result lines out of the capped output.
- `stdio` (LiveCodeBench stdin tasks): one `python -I program.py` per case, stdin = the case
  input; a pass needs exit code 0 and the same stdout up to trailing whitespace per line and
  trailing empty lines.
- `functional` (LiveCodeBench LeetCode tasks): one harness per case calls
  `Solution().<method>(*args)` and prints the result as JSON; the comparison with the expected
  JSON happens here, on the host, so a return value with a rigged `__eq__` gains nothing.

Anything the program does is a failed test, never an exception. A sandbox that fails (an
exception from `exec`/`write_file`, or a harness that never printed its start line) gives
`infra_error=True` so that a trainer masks the sample instead of scoring it 0.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, NoReturn

from skyhub.errors import UsageError
from skyhub.sandbox.base import ExecResult, Sandbox

TAG = "SKYHUB-GRADE"
MAX_TOTAL_TIMEOUT = 300.0  # seconds: cap on one asserts/check harness run, whatever the count
_REASON_CHARS = 200

# Runs the program and each test in one process. Everything it relies on is bound before the
# program runs (a program that patches `os.write` later cannot reach these references), and
# it ends with os._exit so that non-daemon threads or atexit hooks of the program cannot hang
# or rewrite the end of the run.
_ASSERTS_HARNESS = r'''
import json, os, signal, sys

SPEC = json.loads(__SPEC__)


def _skyhub_grade():
    nonce = sys.stdin.readline().strip()
    write, dumps, setitimer, itimer = os.write, json.dumps, signal.setitimer, signal.ITIMER_REAL
    exit_now, compile_, exec_, type_, str_ = os._exit, compile, exec, type, str
    with open("program.py", "rb") as f:
        program = f.read()
    out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # the program's prints go to stderr: stdout carries only result lines
    limit = SPEC["limit"]

    def emit(text):
        write(out, ("\n" + "SKYHUB-GRADE " + nonce + " " + text + "\n").encode("utf-8", "replace"))

    class Timeout(BaseException):
        pass

    def on_alarm(signum, frame):
        raise Timeout()

    def reason(e):
        if isinstance(e, Timeout):
            return "timed out after %gs" % limit
        try:
            name = type_(e).__name__
            msg = str_(e)
        except BaseException:
            return "unprintable exception"
        if isinstance(e, SystemExit):
            return "SystemExit(%s): the program exited" % msg
        text = name + (": " + msg if msg else "")
        return text[:200]

    def run(src, filename, ns):
        setitimer(itimer, limit)
        try:
            exec_(compile_(src, filename, "exec"), ns)
        finally:
            setitimer(itimer, 0)

    signal.signal(signal.SIGALRM, on_alarm)
    emit("start")
    tests = SPEC["tests"]
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        run(SPEC["setup"], "<setup>", ns)
        run(program, "program.py", ns)
        run(SPEC["post"], "<tests>", ns)
    except BaseException as e:
        why = dumps("while loading the program: " + reason(e))
        for i in range(len(tests)):
            emit("%d fail %s" % (i, why))
        exit_now(0)
    for i, src in enumerate(tests):
        try:
            run(src, "<test %d>" % i, ns)
        except BaseException as e:
            emit("%d fail %s" % (i, dumps(reason(e))))
        else:
            emit("%d pass %s" % (i, dumps("")))
    exit_now(0)


_skyhub_grade()
'''

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
    program; `details` has one line per test."""

    passed: int
    total: int
    error: str = ""
    infra_error: bool = False
    details: list[str] = field(default_factory=list)

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class _SandboxFailed(Exception):
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
    spec["limit"] = timeout
    harness = _ASSERTS_HARNESS.replace("__SPEC__", repr(json.dumps(spec)))
    _call(sandbox.write_file, f"{subdir}/harness.py", harness)
    nonce = secrets.token_hex(16)
    overall = min(timeout * (total + 1), max(2 * timeout, MAX_TOTAL_TIMEOUT)) + 2.0
    r = _exec(sandbox, [python, "-I", "harness.py"], subdir, nonce + "\n", overall)
    started, verdicts = _parse(r.stdout, nonce)
    if not started:
        _not_started(r)
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
    return GradeResult(passed, total, error=error, details=details)


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
    passed, error, details = 0, "", []
    for i, case in enumerate(cases):
        r = _exec(sandbox, [python, "-I", "runner.py"], subdir, str(case["input"]), timeout)
        if not r.stderr.startswith(marker):
            _not_started(r)
        stderr = r.stderr[len(marker):]
        got, want = normalize_output(r.stdout), normalize_output(str(case["output"]))
        if r.timed_out:
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
    return GradeResult(passed, len(cases), error=error, details=details)


def _grade_functional(sandbox: Sandbox, subdir: str, tests: dict[str, Any], python: str,
                      timeout: float) -> GradeResult:
    harness = (_FUNCTIONAL_HARNESS.replace("__METHOD__", repr(json.dumps(str(tests["method"]))))
               .replace("__PRELUDE__", repr(json.dumps(_FUNCTIONAL_PRELUDE))))
    _call(sandbox.write_file, f"{subdir}/harness.py", harness)
    passed, error, details = 0, "", []
    for i, case in enumerate(tests["cases"]):
        nonce = secrets.token_hex(16)
        r = _exec(sandbox, [python, "-I", "harness.py"], subdir,
                  f"{nonce}\n{case['input']}", timeout)
        started, verdicts = _parse(r.stdout, nonce)
        if not started:
            _not_started(r)
        verdict, payload = verdicts.get(0, ("", ""))
        if verdict == "result":
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
    return GradeResult(passed, len(tests["cases"]), error=error, details=details)


class _Unparsable:
    """Stands for a result line that is not JSON (cut by the output cap): equal to nothing."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


__all__ = ["GradeResult", "grade", "normalize_output"]
