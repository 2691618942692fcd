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
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from skyhub.errors import InfraError

if TYPE_CHECKING:
    from skyhub.env import TextEnv

EnvFn = Callable[[], "TextEnv"]


class WorkerDied(InfraError):
    """The process (or actor) holding an env is gone; the env must be recreated."""


class RemoteEnvError(InfraError):
    """An env raised inside a worker process; carries the remote traceback text."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.remote_traceback = remote_traceback


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


# -------------------------------------------------------------------------------- processes
def _child_main(fd: int) -> None:
    """Body of a worker process: receive sys.path and the pickled env_fn, build the env,
    then serve calls until told to close or until the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent, which closes us
    conn = Connection(fd)

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
    except BaseException as e:
        reply("error", (type(e).__name__, str(e), traceback.format_exc()))
        return
    reply("ok", os.getpid())
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break  # parent is gone
        if method == "__close__":
            try:
                env.close()
            finally:
                reply("ok", None)
            break
        try:
            result = getattr(env, args[0]) if method == "__getattr__" else \
                getattr(env, method)(*args, **kwargs)
        except BaseException as e:
            reply("error", (type(e).__name__, str(e), traceback.format_exc()))
        else:
            reply("ok", result)


class ProcessWorker(EnvWorker):
    """An env in a child interpreter started with `python -c` (not multiprocessing's spawn,
    which re-runs the caller's `__main__`: that breaks from a REPL or stdin and forks without
    end in scripts lacking an `if __name__ == "__main__"` guard)."""

    def __init__(self, env_fn_bytes: bytes, start_timeout: float) -> None:
        ours, theirs = socket.socketpair()
        code = f"from skyhub.vector.executors import _child_main; _child_main({theirs.fileno()})"
        self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()],
                                      stdin=subprocess.DEVNULL)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._closed = False
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
            code = self._proc.poll()
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
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.send(("__close__", (), {}))
            if self._conn.poll(5.0):
                self._conn.recv()
        except Exception:
            pass
        self._stop(grace=5.0)

    def kill(self) -> None:
        self._closed = True
        self._stop(grace=0.0)

    def _stop(self, grace: float) -> None:
        try:
            self._proc.wait(grace)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5.0)
        self._conn.close()

    @property
    def pid(self) -> int:
        return self._proc.pid


class ProcessExecutor(Executor):
    """Each env in its own process. `env_fn` must be picklable by reference (a module-level
    function or class, or what `make_vec` builds), not a lambda or a `__main__` function."""

    name = "processes"

    def __init__(self, start_timeout: float = 120.0) -> None:
        self.start_timeout = start_timeout

    def spawn(self, env_fn: EnvFn) -> EnvWorker:
        try:
            data = pickle.dumps(env_fn)
        except Exception as e:
            raise ValueError(f"executor='processes' needs a picklable env_fn, and {env_fn!r} is "
                             f"not ({e}). Register the env and use skyhub.make_vec, or pass a "
                             "module-level function.") from e
        return ProcessWorker(data, self.start_timeout)


def _ray_executor() -> Executor:
    """`RayExecutor` with its defaults, imported only when asked for (Ray is heavy)."""
    try:
        from skyhub.vector.ray_executor import RayExecutor
    except ImportError as e:
        from skyhub.registry import MissingDependency

        raise MissingDependency(f"executor='ray' needs Ray ({e}). Install it with "
                                "pip install 'skyhub[ray]'.") from e
    return RayExecutor()


EXECUTORS: dict[str, Callable[[], Executor]] = {
    "threads": ThreadExecutor,
    "processes": ProcessExecutor,
    "ray": _ray_executor,
}


def get_executor(executor: str | Executor) -> Executor:
    """An executor by name (`threads`, `processes`, `ray`) or the instance given."""
    if isinstance(executor, Executor):
        return executor
    try:
        return EXECUTORS[executor]()
    except KeyError:
        raise ValueError(f"unknown executor {executor!r}; choose one of {sorted(EXECUTORS)} "
                         "or pass an Executor instance") from None
