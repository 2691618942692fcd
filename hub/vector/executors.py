"""Where a vector env's environments live: the executor interface and two executors.

The VectorEnv gives each environment its own dispatch thread, so steps run concurrently
whatever the executor. An executor only decides where the env object itself lives and how a
call reaches it:

- `ThreadExecutor` (default): the env lives in this process and the dispatch thread calls it
  directly. Best for I/O-bound envs (databases, containers, kernels, HTTP), the common case.
- `ProcessExecutor`: each env lives in its own spawned process and the dispatch thread talks
  to it over a pipe. For CPU-bound envs or envs that must not share an interpreter; a
  crashing or killed process is detected and replaced.
- `RayExecutor` (`executor="ray"`, in `ray_executor.py`, needs the `ray` extra): each env in
  a Ray actor placed in a Ray cluster with the resources its spec declares; a dead actor is
  detected and replaced like a dead process.

A new executor (a remote env server) implements `spawn` and returns an `EnvWorker`;
VectorEnv needs no change.

A worker that ends without closing its env (killed at `step_timeout`, a segfault, the OOM
killer, `kill -9` from outside) leaves nothing behind: once it is dead, the sandboxes whose
owner label is its pid are removed (`skyhub.sandbox.reap_owner`) before its slot is
reported (a death seen by a call) or in the background (a kill at `step_timeout`; the
executor's `close()` waits for those). A worker whose parent dies closes its env and exits.

Over ~400 lines, for a reason: the executor interface and its two executors (threads,
processes) share one worker protocol, read together.
"""

from __future__ import annotations

import abc
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from skyhub.errors import RemoteEnvError, UsageError, WorkerDied

if TYPE_CHECKING:
    from skyhub.env import TextEnv

EnvFn = Callable[[], "TextEnv"]



class EnvWorker(abc.ABC):
    """One environment, reachable by blocking calls from its dispatch thread."""

    @abc.abstractmethod
    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call `env.method(*args, **kwargs)` and return its result; re-raise its exception.
        Raises `WorkerDied` when the env's host is gone."""

    @abc.abstractmethod
    def get_attr(self, name: str) -> Any:
        """Read an attribute of the env."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the env and release its host. Idempotent; must not raise."""

    def kill(self) -> None:
        """Abandon a worker that hangs; by default the same as `close`."""
        self.close()


class Executor(abc.ABC):
    """Creates `EnvWorker`s. `spawn` is called from the env's dispatch thread, so
    environments start concurrently."""

    name: str = ""

    @abc.abstractmethod
    def spawn(self, env_fn: EnvFn) -> EnvWorker: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release shared resources once every worker is closed."""


# ---------------------------------------------------------------------------------- threads
class LocalWorker(EnvWorker):
    def __init__(self, env: TextEnv) -> None:
        self.env = env

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.env, method)(*args, **kwargs)

    def get_attr(self, name: str) -> Any:
        return getattr(self.env, name)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.env.close()

    def kill(self) -> None:
        # The env may still be busy in an abandoned thread: closing it from here could race
        # with that call. Drop our reference; the env is garbage-collected when it returns.
        self.env = None  # type: ignore[assignment]


class ThreadExecutor(Executor):
    """Envs live in this process; the default."""

    name = "threads"

    def spawn(self, env_fn: EnvFn) -> EnvWorker:
        return LocalWorker(env_fn())


# ------------------------------------------------------------------ background cleanups
class Cleanups:
    """Cleanups of killed workers, run in background threads (a kill at `step_timeout` comes
    from the VectorEnv's own thread, which must not wait for containers to be removed);
    `join` waits for them, so that an executor's `close()` returns once all is gone."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def start(self, fn: Callable[[], None]) -> None:
        def run() -> None:
            try:
                fn()
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        t = threading.Thread(target=run, daemon=True, name="skyhub-worker-cleanup")
        with self._lock:
            self._threads.add(t)
        t.start()

    def join(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads or time.monotonic() >= deadline:
                return
            threads[0].join(max(0.0, deadline - time.monotonic()))


# -------------------------------------------------------------------------------- processes
class _Terminated(BaseException):
    """Raised in a worker process by SIGTERM (from anyone, or from its own watchdog once its
    parent is gone): unwinds whatever the env is doing, so that the env gets closed."""


_closing = False  # set in a worker once it closes its env: a SIGTERM then must not cut in


def _on_sigterm(signum: int, frame: Any) -> None:
    if not _closing:
        raise _Terminated


def _close_env(env: TextEnv) -> None:
    global _closing
    _closing = True
    env.close()


def _watch_parent(parent_pid: int) -> None:
    """SIGTERM ourselves when the parent process is gone (killed, crashed): a worker whose env
    hangs in a step would otherwise run on, holding its sandboxes, with no one to kill it."""
    main = threading.main_thread().ident
    assert main is not None

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        signal.pthread_kill(main, signal.SIGTERM)  # a real signal: it interrupts a blocked call

    threading.Thread(target=watch, daemon=True, name="skyhub-parent-watch").start()


def _child_main(fd: int, parent_pid: int = 0) -> None:
    """Body of a worker process: receive sys.path and the pickled env_fn, build the env,
    then serve calls until told to close or until the parent goes away. Whichever way it
    ends (told to close, parent gone, SIGTERM), the env is closed; a close that hangs is cut
    short after 30 s."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent, which closes us
    signal.signal(signal.SIGTERM, _on_sigterm)
    conn = Connection(fd)
    if parent_pid:
        _watch_parent(parent_pid)

    def reply(status: str, value: Any) -> None:
        try:
            conn.send((status, value))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            conn.send(("error", (type(e).__name__, f"result is not picklable: {e}",
                                 traceback.format_exc())))

    try:
        path, env_fn_bytes = conn.recv()
        sys.path[:] = path
        env = pickle.loads(env_fn_bytes)()
    except _Terminated:
        raise SystemExit(128 + signal.SIGTERM) from None
    except BaseException as e:
        reply("error", (type(e).__name__, str(e), traceback.format_exc()))
        return
    closed = terminated = False
    try:
        reply("ok", os.getpid())
        while True:
            try:
                method, args, kwargs = conn.recv()
            except (EOFError, OSError, KeyboardInterrupt):
                break  # parent is gone
            if method == "__close__":
                closed = True
                try:
                    _close_env(env)
                except Exception as e:  # the parent then reaps what the env still held
                    reply("error", (type(e).__name__, str(e), traceback.format_exc()))
                else:
                    reply("ok", None)
                break
            try:
                result = getattr(env, args[0]) if method == "__getattr__" else \
                    getattr(env, method)(*args, **kwargs)
            except _Terminated:
                raise
            except BaseException as e:
                reply("error", (type(e).__name__, str(e), traceback.format_exc()))
            else:
                reply("ok", result)
    except _Terminated:
        terminated = True
    finally:
        if not closed:
            signal.alarm(30)  # SIGALRM's default action ends us if close() hangs
            with contextlib.suppress(BaseException):
                _close_env(env)
    if terminated:
        raise SystemExit(128 + signal.SIGTERM)


def _exit_code(pid: int) -> int | None:
    """How a child ended (a return code as `Popen.returncode` gives it), or None while it
    runs, without reaping it: its pid stays taken until we `wait()`, so nobody else's
    process can take it while we reap the sandboxes labelled with it."""
    try:
        r = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return -1  # already reaped
    if r is None or r.si_pid == 0:
        return None
    return r.si_status if r.si_code == os.CLD_EXITED else -r.si_status


class ProcessWorker(EnvWorker):
    """An env in a child interpreter started with `python -c` (not multiprocessing's spawn,
    which re-runs the caller's `__main__`: that breaks from a REPL or stdin and forks without
    end in scripts lacking an `if __name__ == "__main__"` guard).

    A worker that did not end by closing its env (killed, crashed, or its close failed) has
    the sandboxes it owned reaped while it is still an unreaped zombie (see `_exit_code`).
    """

    def __init__(self, env_fn_bytes: bytes, start_timeout: float,
                 cleanups: Cleanups | None = None) -> None:
        from skyhub.sandbox import owner_start_time

        ours, theirs = socket.socketpair()
        code = ("from skyhub.vector.executors import _child_main; "
                f"_child_main({theirs.fileno()}, {os.getpid()})")
        self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()],
                                      stdin=subprocess.DEVNULL)
        theirs.close()
        self._start = owner_start_time(self._proc.pid)  # with the pid, names the owner exactly
        self._conn = Connection(ours.detach())
        self._closed = False
        self._cleanups = cleanups
        self._finish_lock = threading.Lock()
        self._finished = False
        try:
            self._conn.send((list(sys.path), env_fn_bytes))
            if not self._conn.poll(start_timeout):
                raise WorkerDied(f"env process did not start within {start_timeout:.0f} s")
            self._receive()
        except BaseException:
            self.kill()
            raise

    def _receive(self) -> Any:
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError) as e:
            code = _exit_code(self._proc.pid)
            raise WorkerDied(f"env process {self._proc.pid} died (exit code {code})") from e
        if status == "error":
            raise RemoteEnvError(*value)
        return value

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            self._conn.send((method, args, kwargs))
        except (OSError, ValueError) as e:
            raise WorkerDied(f"env process {self._proc.pid} is gone ({e})") from e
        return self._receive()

    def get_attr(self, name: str) -> Any:
        return self.call("__getattr__", name)

    def close(self) -> None:
        """Ask the env to close and the process to exit (5 s each); reap what it owned
        unless it closed cleanly. Returns when all is done."""
        if self._closed:
            return
        self._closed = True
        clean = False
        try:
            self._conn.send(("__close__", (), {}))
            if self._conn.poll(5.0):
                clean = self._conn.recv()[0] == "ok"
        except Exception:
            pass
        self._finish(grace=5.0, clean=clean)

    def kill(self) -> None:
        """SIGKILL now; reap what the process owned in the background when it has a
        `Cleanups` (the executor's, which its `close()` waits for), else before returning."""
        if self._closed:
            return
        self._closed = True
        self._sigkill()
        if self._cleanups is None:
            self._finish(grace=0.0, clean=False)
        else:
            self._cleanups.start(lambda: self._finish(grace=0.0, clean=False))

    def _finish(self, grace: float, clean: bool) -> None:
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
        try:
            if not self._wait_exit(grace):
                self._sigkill()
                self._wait_exit(30.0)
            if not (clean and _exit_code(self._proc.pid) == 0):
                from skyhub.sandbox import reap_owner

                reap_owner(self._proc.pid, start=self._start)
        finally:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5.0)
            self._conn.close()

    def _sigkill(self) -> None:
        # os.kill, not Popen.kill: that polls first, which would reap a dead child and free
        # its pid; ours stays taken (alive or a zombie) until _finish has reaped its sandboxes
        with contextlib.suppress(OSError):
            os.kill(self._proc.pid, signal.SIGKILL)

    def _wait_exit(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the process to end (without reaping it)."""
        deadline, pause = time.monotonic() + timeout, 0.002
        while _exit_code(self._proc.pid) is None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        return True

    @property
    def pid(self) -> int:
        return self._proc.pid


class ProcessExecutor(Executor):
    """Each env in its own process. `env_fn` must be picklable by reference (a module-level
    function or class, or what `make_vec` builds), not a lambda or a `__main__` function."""

    name = "processes"

    def __init__(self, start_timeout: float = 120.0) -> None:
        self.start_timeout = start_timeout
        self._cleanups = Cleanups()

    def spawn(self, env_fn: EnvFn) -> EnvWorker:
        try:
            data = pickle.dumps(env_fn)
        except Exception as e:
            raise UsageError(f"executor='processes' needs a picklable env_fn, and {env_fn!r} is "
                             f"not ({e}). Register the env and use skyhub.make_vec, or pass a "
                             "module-level function.") from e
        return ProcessWorker(data, self.start_timeout, self._cleanups)

    def close(self) -> None:
        """Wait (up to 60 s) until the sandboxes of killed workers are reaped."""
        self._cleanups.join(60.0)
