"""Batched, concurrent envs: `VectorEnv`, `make_vec` and the executors behind them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skyhub.errors import UsageError
from skyhub.vector.env import VectorEnv
from skyhub.vector.executor_names import get_executor
from skyhub.vector.executors import (
    EnvWorker,
    Executor,
    ProcessExecutor,
    ThreadExecutor,
    WorkerDied,
)
from skyhub.vector.factories import EnvFactory, RemoteFactory

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode


def make_vec(env_id: str, num_envs: int, *, executor: str | Executor = "threads",
             autoreset_mode: str | AutoresetMode = "next_step",
             step_timeout: float | None = None, inline_fast_steps: bool = True,
             info_format: str = "list", remote: str | None = None, token: str | None = None,
             **kwargs: Any) -> VectorEnv:
    """`num_envs` copies of `env_id` (made with `kwargs`) behind one `VectorEnv`.

    See `VectorEnv` for `executor`, `autoreset_mode`, `step_timeout`, `inline_fast_steps` and
    `info_format`. With `remote="ws://host:port"` each env is a session on a `skyhub serve`
    server (as in `skyhub.make`).
    """
    from skyhub.registry import spec

    if num_envs < 1:
        raise UsageError(f"num_envs must be >= 1, got {num_envs}")
    factory: Any = (RemoteFactory(env_id, remote, token, kwargs) if remote is not None
                    else EnvFactory(spec(env_id), kwargs))
    return VectorEnv([factory] * num_envs, executor=executor, autoreset_mode=autoreset_mode,
                     step_timeout=step_timeout, inline_fast_steps=inline_fast_steps,
                     info_format=info_format)  # type: ignore[arg-type]


__all__ = ["EnvFactory", "EnvWorker", "Executor", "ProcessExecutor", "RemoteFactory",
           "ThreadExecutor", "VectorEnv", "WorkerDied", "get_executor", "make_vec"]
