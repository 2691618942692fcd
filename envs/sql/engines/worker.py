"""A child process for one engine's statements (duckdb, postgres): a runaway statement costs
that process, never the host.

Neither DuckDB nor libpq can bound what one statement costs the process that runs it. DuckDB
ignores `memory_limit` and `interrupt()` inside one operator: `len(list_concat(range(2e7),
range(2e7)))` ran 9.5 s past a 1 s timeout and took 3.7 GB; `list_distinct(range(2e7))` 40 s.
libpq reads a whole message before anyone sees its size: a 300 MB value, or an error message
quoting one (`repeat('x', 3e8)::int`), arrives in full, twice over. So an engine sends each
statement to a `Worker`, a child interpreter of its own (started on first use), and the
worker runs it in a session object of the engine's module (`DuckDBSession`, `PGSession`):
- the host waits for the reply until the statement's deadline (its `timeout_s` plus a
  grace); past it, or when the child's resident memory passes `rss_limit` (polled every
  10 ms), the child is killed and the call raises `WorkerLost`; the next call starts a new
  child;
- a reply is one frame of at most `max_reply` bytes (the engine's byte budget, with room):
  the session cuts results at `max_bytes` already, the frame limit is the host's own guard;
- the child's address space is capped too (`RLIMIT_AS`, loose: DuckDB reserves ~70 MB of
  address space per open database), which catches what polling may miss.
An engine turns `WorkerLost` into an error result, the agent's failure: its statement broke
the process that ran it. Cost: one round trip through two pipes per statement (0.1-0.8 ms,
by the machine's load) and one child per engine (~60 MB resident for DuckDB, ~30 MB for
PostgreSQL). A stopped worker whose child is healthy parks it, its session released (no
connection left open), for the next worker of the same kind: starting one costs ~0.5 s.

Frames are pickles: the child is our own code, started from this interpreter, and what it
sends back are results of types the drivers return (numbers, text, dates, decimals).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from skyhub.envs.sql.errors import WorkerLost
from skyhub.errors import InfraError

_HEADER = struct.Struct("!Q")
_POLL_S = 0.01
_START_S = 60.0  # imports on a loaded CI machine
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_IDLE_MAX = 4  # parked children per kind
_idle: dict[tuple, list[tuple[int, subprocess.Popen[bytes]]]] = {}
_idle_lock = threading.Lock()




class Worker:
    """A child interpreter running `session` ("module:Class"); `call` runs one of its methods.

    Not for concurrent use (engines call it under their own lock). A forked copy of a host
    starts its own child rather than share the parent's pipes."""

    def __init__(self, session: str, *, rss_limit: int, max_reply: int,
                 address_limit: int = 16 << 30, name: str = "worker") -> None:
        self.session, self.name = session, name
        self.rss_limit, self.max_reply, self.address_limit = rss_limit, max_reply, address_limit
        self._key = (session, rss_limit, address_limit)
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0  # the host process that started the child
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id, None when none is running."""
        return self._proc.pid if self._proc is not None and self._pid == os.getpid() else None

    def call(self, method: str, deadline_s: float, **kwargs: Any) -> Any:
        """`session.method(**kwargs)` in the child, within `deadline_s` seconds. Raises
        `WorkerLost` if the child dies, is killed past the deadline or its memory, or
        replies too much; an exception inside the method comes back as `RuntimeError`."""
        request = pickle.dumps((method, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            for attempt in (1, 2):
                fresh = self._ensure_started()
                try:
                    self._send(request)
                    break
                except OSError:  # it died between calls: nothing of this request ran
                    self._kill()
                    if fresh or attempt == 2:
                        raise WorkerLost(f"the {self.name} process exited") from None
            status, value = self._receive(time.monotonic() + deadline_s)
        if status == "error":
            raise RuntimeError(value)
        return value

    def stop(self) -> None:
        """Release the session (`session.release()`) and park the child for the next worker
        of its kind, or kill it if it does not answer or enough are parked. Idempotent."""
        with self._lock:
            if self._proc is None or self._pid != os.getpid():
                self._proc = None
                return
            try:
                self._send(pickle.dumps(("release", {}), protocol=pickle.HIGHEST_PROTOCOL))
                status, _ = self._receive(time.monotonic() + 5.0)
            except (OSError, WorkerLost):
                status = "lost"
            proc, self._proc = self._proc, None
            if proc is None:
                return
            if self._finalizer is not None:
                self._finalizer.detach()
            with _idle_lock:
                parked = _idle.setdefault(self._key, [])
                if status == "ok" and len(parked) < _IDLE_MAX:
                    parked.append((os.getpid(), proc))
                    return
            _kill(proc)

    # ------------------------------------------------------------------ host side
    def _ensure_started(self) -> bool:
        """Start the child unless one is running; True when this call started it. A failed
        start is ours, not the agent's: InfraError."""
        if self._proc is not None and self._pid == os.getpid() and self._proc.poll() is None:
            return False
        if self._proc is not None and self._pid == os.getpid():
            self._kill()
        elif self._proc is not None:  # a fork of the host: the parent's child stays its own
            for f in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    f.close()  # type: ignore[union-attr]
            self._proc = None
        with _idle_lock:
            parked = _idle.get(self._key, [])
            while parked:
                owner, proc = parked.pop()
                if owner == os.getpid() and proc.poll() is None:
                    self._proc, self._pid = proc, owner
                    self._finalizer = weakref.finalize(self, _kill, proc)
                    return False  # not fresh: a failed send is retried on a new child
        code = (f"import sys; sys.path[:] = {sys.path!r}; "
                "from skyhub.envs.sql.engines.worker import main; main()")
        try:
            self._proc = subprocess.Popen([sys.executable, "-I", "-c", code],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          close_fds=True)
            self._pid = os.getpid()
            self._finalizer = weakref.finalize(self, _kill, self._proc)
            self._send(pickle.dumps({"session": self.session, "parent": os.getpid(),
                                     "address_limit": self.address_limit}))
            status, value = self._receive(time.monotonic() + _START_S)
        except (OSError, WorkerLost) as e:
            self._kill()
            raise InfraError(f"could not start the {self.name} process ({e}); check that "
                             f"`{sys.executable} -c 'import {self.session.split(':')[0]}'` "
                             f"works") from None
        if status != "ready":
            self._kill()
            raise InfraError(f"could not start the {self.name} process: {value}")
        return True

    def _send(self, payload: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        fd = self._proc.stdin.fileno()
        view = memoryview(_HEADER.pack(len(payload)) + payload)
        while view:
            view = view[os.write(fd, view):]

    def _receive(self, deadline: float) -> tuple[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd, buf, need = self._proc.stdout.fileno(), bytearray(), _HEADER.size
        header = True
        while True:
            while len(buf) < need:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._kill()
                    raise WorkerLost(f"the {self.name} process did not answer in time",
                                     timed_out=True)
                ready, _, _ = select.select([fd], [], [], min(left, _POLL_S))
                if not ready:
                    if (rss := _rss(self._proc.pid)) > self.rss_limit:
                        self._kill()
                        raise WorkerLost(f"the statement needed more than "
                                         f"{self.rss_limit >> 20} MiB (it used {rss >> 20})")
                    continue
                chunk = os.read(fd, min(need - len(buf), 1 << 20))
                if not chunk:
                    code = self._kill()
                    raise WorkerLost(f"the {self.name} process exited ({_how(code)})")
                buf += chunk
            if not header:
                return pickle.loads(buf)
            (size,) = _HEADER.unpack(buf)
            if size > self.max_reply:
                self._kill()
                raise WorkerLost(f"the {self.name} process sent {size} bytes, more than "
                                 f"the {self.max_reply} a reply may hold")
            buf, need, header = bytearray(), size, False

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if self._finalizer is not None:
            self._finalizer.detach()
        return _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> int | None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    for f in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            if f is not None:
                f.close()
    return proc.returncode


@atexit.register
def _kill_parked() -> None:
    with _idle_lock:
        for parked in _idle.values():
            for owner, proc in parked:
                if owner == os.getpid():
                    _kill(proc)
            parked.clear()


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0  # no /proc (macOS): RLIMIT_AS is the guard


def _how(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


# ---------------------------------------------------------------------- child side
def main() -> None:
    """The child: frames in on stdin, frames out on a private copy of stdout (fd 1 becomes
    stderr, so that nothing a library prints can corrupt a frame)."""
    import importlib
    import resource

    out = os.dup(1)
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    spec = _read(inp)
    if spec is None:
        return
    # a host killed mid-statement leaves no deadline and no memory watch: end with it
    threading.Thread(target=_orphaned, args=(int(spec["parent"]),), daemon=True).start()
    try:
        limit = int(spec["address_limit"])
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        module, cls = spec["session"].split(":")
        session = getattr(importlib.import_module(module), cls)()
    except BaseException as e:  # reported to the host, which raises
        _write(out, ("error", f"{type(e).__name__}: {e}"))
        return
    _write(out, ("ready", None))
    while (request := _read(inp)) is not None:
        method, kwargs = request
        try:
            reply: tuple[str, Any] = ("ok", getattr(session, method)(**kwargs))
            payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as e:  # MemoryError included: report, go on
            payload = pickle.dumps(("error", f"{type(e).__name__}: {str(e)[:2000]}"))
        _write_bytes(out, payload)


def _orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _read(inp: Any) -> Any:
    header = inp.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = inp.read(size)
    return pickle.loads(payload) if len(payload) == size else None


def _write(fd: int, reply: tuple[str, Any]) -> None:
    _write_bytes(fd, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def _write_bytes(fd: int, payload: bytes) -> None:
    view = memoryview(_HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]
