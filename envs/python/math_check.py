"""`check_answer`: `math_grade.is_equiv` under a hard time and memory budget.

An agent's answer is untrusted text, and symbolic comparison can take as long as sympy and
mpmath want (`math_grade` refuses the sizes it can foresee, but not every slow path), so
python-math compares in a worker process: a few are kept warm (sympy imported, an address-
space limit set), each answers one comparison at a time over a pipe, and one that runs past
the time budget or dies is killed and replaced. A timed-out comparison is the answer's
failure (reward 0, like any answer that cannot be shown equal), never an infra error.

Cost: a comparison through a warm worker adds about a tenth of a millisecond of pipe
traffic; starting a worker (a Python with sympy) takes 1-2 s, once per process (and after
each kill). Answers that are the gold text itself, or two plain decimal numbers, are
decided here without a worker: those checks take microseconds whatever the input.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from . import math_grade

TIMEOUT_S = 10.0  # per comparison, once the worker is ready
MEMORY_MB = 2048  # the worker's address-space limit
START_TIMEOUT_S = 120.0  # for a worker to start and import sympy
MAX_IDLE = 4  # warm workers kept for later comparisons
_PLAIN = re.compile(r"[+-]?\d{1,40}(?:\.\d{1,40})?")


@dataclass(frozen=True)
class Verdict:
    """Whether the answer equals the gold one; `timed_out` when the comparison ran past its
    budget (or its worker died), which scores as not equal."""

    correct: bool
    timed_out: bool = False


def check_answer(pred: str, gold: str, *, timeout_s: float = TIMEOUT_S) -> Verdict:
    """`math_grade.is_equiv(pred, gold)`, bounded in time and memory. Never raises for what
    the answer contains; raises `InfraError` only when no worker process can start."""
    fast = _fast(pred, gold)
    if fast is not None:
        return Verdict(fast)
    worker = _take()
    answer = worker.ask(pred, gold, timeout_s)
    if answer is None:
        worker.kill()
        return Verdict(False, timed_out=True)
    _give_back(worker)
    return Verdict(answer)


def _fast(pred: str, gold: str) -> bool | None:
    """The verdict when it takes no parsing (bounded-length plain numbers), else None."""
    if not isinstance(pred, str) or not isinstance(gold, str):
        return False
    p, g = pred.strip(), gold.strip()
    if p == g and p and len(p) <= math_grade.MAX_TEXT_CHARS:
        return True
    if _PLAIN.fullmatch(p) and _PLAIN.fullmatch(g):
        a, b = math_grade._as_number(p), math_grade._as_number(g)
        if a is not None and b is not None:
            return a == b or math_grade._close(float(a), float(b))
    return None


def prewarm() -> None:
    """Start a worker in the background, so the first comparison does not wait for one."""
    with _lock:
        if _idle or _starting:
            return
        _starting.append(1)

    def run() -> None:
        try:
            _give_back(_Worker())
        except Exception:  # the first comparison starts one itself and reports the error
            pass
        finally:
            with _lock:
                _starting.clear()

    threading.Thread(target=run, daemon=True, name="skyhub-math-worker").start()


# ------------------------------------------------------------------------------ workers
_lock = threading.Lock()
_idle: list[_Worker] = []
_starting: list[int] = []


def _take() -> _Worker:
    with _lock:
        while _idle:
            w = _idle.pop()
            if w.alive():
                return w
    return _Worker()


def _give_back(worker: _Worker) -> None:
    with _lock:
        if len(_idle) < MAX_IDLE and worker.alive():
            _idle.append(worker)
            return
    worker.kill()


class _Worker:
    """A Python process that answers `is_equiv` questions, one JSON line each way."""

    def __init__(self) -> None:
        from skyhub.errors import InfraError

        code = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
                f"from skyhub.envs.python.math_check import _serve; _serve({MEMORY_MB})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self._buf = b""
        if self._line(START_TIMEOUT_S) != b"ready":
            self.kill()
            raise InfraError("the math grading worker did not start (a Python with sympy, "
                             f"{sys.executable}); install the 'python' extra")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, pred: str, gold: str, timeout_s: float) -> bool | None:
        """The verdict, or None when none came in time (or the worker died)."""
        try:
            self.proc.stdin.write(json.dumps([pred, gold]).encode() + b"\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            return None
        line = self._line(timeout_s)
        return {b"1": True, b"0": False}.get(line or b"")

    def _line(self, timeout_s: float) -> bytes | None:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.strip()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                f.close()  # type: ignore[union-attr]


def _serve(memory_mb: int) -> None:
    """The worker's loop: limits, sympy warmed up, then one verdict per line until EOF."""
    import resource

    limit = memory_mb << 20
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    math_grade.is_equiv("\\frac{1}{2}", "x")  # imports and warms sympy's parser
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for raw in sys.stdin.buffer:
        try:
            pred, gold = json.loads(raw)
            ok = math_grade.is_equiv(str(pred), str(gold))
        except BaseException:  # MemoryError too: the answer is not shown equal
            ok = False
        out.write(b"1\n" if ok else b"0\n")
        out.flush()


__all__ = ["Verdict", "check_answer", "prewarm"]
