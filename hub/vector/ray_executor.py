"""`RayExecutor`: each env of a VectorEnv in its own Ray actor, placed anywhere in a Ray cluster.

For envs that need more than one machine holds (a GPU reward model per env, many sandboxes)
or that must sit next to a resource only some nodes have. The VectorEnv is unchanged: its
dispatch thread for an env calls `ray.get(actor.call.remote(...))` and waits, so envs still
step concurrently and `recv()` still returns whichever finished first.

Failures look the same as with `executor="processes"`: an env that raises inside its actor
raises `RemoteEnvError` in the caller (the VectorEnv reports an infra error in that env's
slot), and an actor that dies (killed, out of memory, node lost) raises `WorkerDied`, so the
episode ends with `infra_error` and a new actor replaces it at the env's next reset.

Leaks: an actor killed at `step_timeout` or dead on its own never closed its env, so once Ray
reports it dead (and its process is gone) the sandboxes whose owner label is its pid are
removed (`skyhub.sandbox.reap_owner`), on its own node: directly when that is this
machine, else by a Ray task pinned to that node. An abandoned actor is cleaned up in the
background; `RayExecutor.close()` waits for it.

Resources: an env registered with `register(..., resources={...})` gets those per actor
(`num_cpus`, `num_gpus`, `memory`, `accelerator_type`, and custom `resources`), on top of
`DEFAULT_RESOURCES`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray
import ray.cloudpickle
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from skyhub.errors import InfraError, UsageError
from skyhub.vector.executors import (
    Cleanups,
    EnvFn,
    EnvWorker,
    Executor,
    RemoteEnvError,
    WorkerDied,
)

if TYPE_CHECKING:
    from skyhub.env import TextEnv

#: What one env actor reserves unless its spec or the executor says otherwise. Text envs are
#: I/O-bound (they wait on a database, a container, a kernel, a model server), so an env
#: reserves a quarter of a CPU: 8 envs share a 2-CPU machine, and Ray still spreads many envs
#: over a cluster's nodes instead of piling them on one (Ray's own actor default, 0 CPUs once
#: placed, puts no bound at all on how many env processes land on a node). An actor that does
#: not fit waits in Ray's queue; `RayExecutor.start_timeout` turns that wait into an error
#: that names what was asked for and what is free.
DEFAULT_RESOURCES: dict[str, Any] = {"num_cpus": 0.25}

#: Keys of a spec's or executor's `resources` that are passed to Ray's actor `.options(...)`.
RESOURCE_KEYS = ("num_cpus", "num_gpus", "memory", "accelerator_type", "resources")

_init_lock = threading.Lock()


class _EnvHost:
    """The body of an env actor: builds the env, then serves calls one at a time.

    Exceptions never leave the actor as Ray errors: they come back as `("error", (type, message,
    traceback))`, like `_child_main` of the process executor, so a Ray error seen by the
    caller always means the actor itself is in trouble.
    """

    def __init__(self) -> None:
        self.env: TextEnv | None = None

    def owner(self) -> tuple[str, Any]:
        """Who owns the env's sandboxes: this process's pid, start time and host, and the
        Ray node (where a reap of them must run)."""
        from skyhub.sandbox import owner_start_time

        return "ok", {"pid": os.getpid(), "start": owner_start_time(os.getpid()),
                      "host": socket.gethostname(),
                      "node_id": ray.get_runtime_context().get_node_id()}

    def start(self, path: list[str], env_fn_bytes: bytes) -> tuple[str, Any]:
        """Build the env; returns `owner()`."""
        # The driver's import path first, so that env_fn's module (a plugin, a test helper, a
        # script's directory) imports here as it does in the driver; entries that do not exist
        # on this node (another machine of the cluster) are skipped.
        sys.path[:0] = [p for p in path if p not in sys.path and os.path.exists(p)]
        try:
            self.env = ray.cloudpickle.loads(env_fn_bytes)()
        except BaseException as e:
            return "error", (type(e).__name__, str(e), traceback.format_exc())
        return self.owner()

    def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> tuple[str, Any]:
        try:
            if method == "__getattr__":
                return "ok", getattr(self.env, args[0])
            return "ok", getattr(self.env, method)(*args, **kwargs)
        except BaseException as e:
            return "error", (type(e).__name__, str(e), traceback.format_exc())

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


_EnvActor = ray.remote(max_restarts=0, max_task_retries=0)(_EnvHost)


def _running(pid: int, start: int) -> bool:
    """Whether process `pid`, started at `start` (clock ticks), still runs (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != b"Z" and fields[19] == str(start).encode()


def _reap_dead_actor(pid: int, start: int) -> list[str]:
    """Wait (up to 10 s) until the actor's process is gone (Ray's kill is asynchronous), then
    remove the sandboxes it owned; runs on the actor's node (as a Ray task for another one)."""
    from skyhub.sandbox import reap_owner

    deadline = time.monotonic() + 10.0
    while _running(pid, start) and time.monotonic() < deadline:
        time.sleep(0.05)
    return reap_owner(pid, start=start, before=time.time())


class RayWorker(EnvWorker):
    """One env in one Ray actor. `actor` is its handle (for `ray.kill` or Ray's tools; the
    actor is also named `name` in its Ray namespace). `pid`, `host` and `node_id` say where
    its process runs (None until the env is built)."""

    def __init__(self, env_fn_bytes: bytes, options: dict[str, Any], start_timeout: float,
                 on_closed: Callable[[RayWorker], None] | None = None,
                 cleanups: Cleanups | None = None) -> None:
        self.name = f"skyhub-env-{uuid.uuid4().hex[:12]}"
        self.options = options
        self._on_closed = on_closed
        self._cleanups = cleanups
        self.actor = _EnvActor.options(name=self.name, **options).remote()  # type: ignore[attr-defined]
        self._closed = False
        self._finished = False
        self._finish_lock = threading.Lock()
        self.pid: int | None = None
        self.host: str | None = None
        self.node_id: str | None = None
        self._start = -1
        path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        try:
            self._own(self._get(self.actor.start.remote(path, env_fn_bytes), start_timeout))
        except BaseException as e:
            if isinstance(e, RemoteEnvError):  # the env's constructor raised, maybe after
                with contextlib.suppress(Exception):  # making sandboxes: reap them too
                    self._own(self._get(self.actor.owner.remote(), 10.0))
            self._closed = True
            self._terminate()
            self._finish(clean=False)
            raise

    def _own(self, owner: dict[str, Any]) -> None:
        self.pid, self.host, self.node_id = owner["pid"], owner["host"], owner["node_id"]
        self._start = owner["start"]

    def _get(self, ref: Any, timeout: float | None = None) -> Any:
        try:
            status, value = ray.get(ref, timeout=timeout)
        except GetTimeoutError as e:
            free = _resources(ray.available_resources())
            total = _resources(ray.cluster_resources())
            raise WorkerDied(
                f"env actor {self.name} did not start within {timeout:.0f} s. Either Ray cannot "
                f"place an actor needing {self.options} (free now: {free}; cluster: {total}) or "
                "the env takes that long to build. Lower the env's resources "
                "(register(..., resources=...) or RayExecutor(resources=...)), run fewer envs, "
                "add CPUs/nodes (RayExecutor(num_cpus=...) for a local Ray), or raise "
                "RayExecutor(start_timeout=...).") from e
        except RayTaskError as e:  # the actor is alive but could not return the result
            cause = e.cause if isinstance(e.cause, BaseException) else e
            message = (str(cause).strip().splitlines() or [""])[-1]
            raise RemoteEnvError(type(cause).__name__, message, str(e)) from e
        except RayError as e:  # RayActorError (died, unavailable), node or worker lost, OOM
            first = (str(e).strip().splitlines() or [""])[0]
            raise WorkerDied(f"env actor {self.name} died ({type(e).__name__}: {first})") from e
        if status == "error":
            raise RemoteEnvError(*value)
        return value

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise WorkerDied(f"env actor {self.name} was closed")
        return self._get(self.actor.call.remote(method, args, kwargs))

    def get_attr(self, name: str) -> Any:
        return self.call("__getattr__", name)

    def close(self) -> None:
        """Close the env, kill the actor and wait (up to 10 s) until Ray reports it dead, so
        that its resources are free again when this returns; if the env did not close
        cleanly (the actor died, or close() raised), reap the sandboxes it owned."""
        if self._closed:
            return
        self._closed = True
        clean = False
        with contextlib.suppress(Exception):  # dead actor, Ray shut down, env.close() raising
            ray.get(self.actor.close.remote(), timeout=5.0)
            clean = True
        self._terminate()
        self._finish(clean)

    def kill(self) -> None:
        """Kill the actor without waiting (its env may hang in a call); wait until it is dead
        and reap the sandboxes it owned in the background (the executor's `close()` waits for
        that), or before returning for a worker made without a `Cleanups`."""
        if self._closed:
            return
        self._closed = True
        self._terminate()
        if self._cleanups is None:
            self._finish(clean=False)
        else:
            self._cleanups.start(lambda: self._finish(clean=False))

    def _terminate(self) -> None:
        with contextlib.suppress(Exception):
            ray.kill(self.actor, no_restart=True)

    def _finish(self, clean: bool) -> None:
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
        self.wait_dead(10.0)
        if not clean and self.pid is not None:
            self.reap()

    def reap(self) -> list[str]:
        """Remove the sandboxes this (dead) actor's process owned; returns what went.
        Waits (up to 10 s) for the process to be gone first; never raises."""
        pid, start = self.pid, self._start
        if pid is None:
            return []
        try:
            if self.host == socket.gethostname():
                return _reap_dead_actor(pid, start)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            task = ray.remote(num_cpus=0, max_retries=0)(_reap_dead_actor).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False))
            return ray.get(task.remote(pid, start), timeout=120)
        except Exception as e:
            import logging

            logging.getLogger(__name__).warning(
                "could not reap the sandboxes of dead env actor %s (pid %s on %s): %s: %s",
                self.name, pid, self.host, type(e).__name__, e)
            return []

    def wait_dead(self, timeout: float) -> None:
        """Wait until Ray reports the (killed) actor dead; never raises."""
        with contextlib.suppress(Exception):  # RayActorError is the answer we wait for
            ray.get(self.actor.__ray_ready__.remote(), timeout=timeout)
        if self._on_closed is not None:
            self._on_closed(self)


class RayExecutor(Executor):
    """Each env in its own Ray actor.

    Args:
        address: the Ray cluster to join; default `RAY_ADDRESS` from the environment, and
            without it a local Ray instance is started (`"auto"` joins one started with
            `ray start` on this machine). Used only if Ray is not initialised yet: a program
            that called `ray.init` itself keeps its own settings.
        num_cpus: CPUs of a local Ray instance started here (default: all of this machine's).
        resources: per-actor resources that override the env spec's and `DEFAULT_RESOURCES`,
            e.g. `{"num_cpus": 1, "num_gpus": 0.5}`.
        start_timeout: seconds an actor may take to be placed and build its env.
        init_kwargs: more arguments for `ray.init` (e.g. `runtime_env`, `namespace`).

    `env_fn` must be serialisable by Ray's cloudpickle (what `make_vec` builds always is) and
    its module importable on the nodes (installed there, or on this machine's `sys.path` for a
    local Ray).
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: float | None = None,
                 resources: dict[str, Any] | None = None, start_timeout: float = 120.0,
                 init_kwargs: dict[str, Any] | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.resources = _check_resources(resources or {}, "RayExecutor(resources=...)")
        self.start_timeout = start_timeout
        self.init_kwargs = dict(init_kwargs or {})
        self._workers: set[RayWorker] = set()  # not yet confirmed dead
        self._lock = threading.Lock()
        self._cleanups = Cleanups()
        self.ensure_ray()

    def spawn(self, env_fn: EnvFn) -> EnvWorker:
        try:
            data = ray.cloudpickle.dumps(env_fn)
        except Exception as e:
            raise UsageError(f"executor='ray' needs an env_fn that Ray can serialise, and "
                             f"{env_fn!r} is not ({e}). Register the env and use "
                             "skyhub.make_vec, or pass a module-level function.") from e
        options = self.actor_options(env_fn)
        self.ensure_ray()
        worker = RayWorker(data, options, self.start_timeout, on_closed=self._forget,
                           cleanups=self._cleanups)
        with self._lock:
            self._workers.add(worker)
        return worker

    def _forget(self, worker: RayWorker) -> None:
        with self._lock:
            self._workers.discard(worker)

    def actor_options(self, env_fn: EnvFn) -> dict[str, Any]:
        """The Ray `.options(...)` of `env_fn`'s actor: `DEFAULT_RESOURCES`, updated by the env
        spec's `resources` (when `env_fn` comes from `make_vec`), updated by this executor's."""
        from skyhub.vector.factories import EnvFactory

        spec_resources: dict[str, Any] = {}
        if isinstance(env_fn, EnvFactory):
            spec_resources = _check_resources(getattr(env_fn.spec, "resources", None) or {},
                                              f"the resources registered for {env_fn.spec.id!r}")
        return {**DEFAULT_RESOURCES, **spec_resources, **self.resources}

    def ensure_ray(self) -> None:
        """Start (or join) Ray unless it is up: called when the executor is made, that is in
        the thread creating the VectorEnv, and again by `spawn`.

        Ray must not be started from an env's dispatch thread: it ties the processes of a
        local Ray instance to the thread that starts them (PR_SET_PDEATHSIG), so they would
        die when that thread ends, e.g. when the VectorEnv closes or replaces a hung env.
        """
        with _init_lock:
            if ray.is_initialized():
                return
            if threading.current_thread().name.startswith("skyhub-vec-"):
                raise InfraError("Ray is not running (was ray.shutdown() called?) and cannot "
                                 "be started from an env's dispatch thread. Call ray.init() "
                                 "or create a new VectorEnv.")
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, **self.init_kwargs}
            if address is None:
                kwargs.setdefault("include_dashboard", False)
                ray.init(address="local", num_cpus=self.num_cpus, **kwargs)
            else:
                ray.init(address=address, **kwargs)

    def close(self) -> None:
        """Kill every actor of this executor still up (e.g. one abandoned for hanging), wait
        until Ray reports them dead and what they owned is reaped. Ray itself stays up:
        starting it again costs seconds, and the program (or Ray's exit hook) shuts it
        down."""
        with self._lock:
            workers = list(self._workers)
        for w in workers:
            w.kill()
        self._cleanups.join(60.0)
        for w in workers:
            w.wait_dead(10.0)


def _check_resources(resources: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(resources) - set(RESOURCE_KEYS))
    if unknown:
        raise UsageError(f"{where} has unknown keys {unknown}: use {list(RESOURCE_KEYS)}, and "
                         f"put custom Ray resources under 'resources', e.g. "
                         f"{{'resources': {{{unknown[0]!r}: 1}}}}")
    return dict(resources)


def _resources(r: dict[str, Any]) -> dict[str, Any]:
    """Ray's resource dict without its per-node bookkeeping entries ('node:1.2.3.4')."""
    return {k: v for k, v in sorted(r.items()) if not k.startswith("node:")}
