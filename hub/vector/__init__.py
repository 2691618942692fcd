"""Batched, concurrent envs: `VectorEnv`, `make_vec` and the executors behind them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skyhub.vector.env import VectorEnv
from skyhub.vector.executors import (
    EnvWorker,
    Executor,
    ProcessExecutor,
    ThreadExecutor,
    WorkerDied,
    get_executor,
)
from skyhub.vector.runner import infra_error_info

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode

    from skyhub.env import TextEnv
    from skyhub.registry import EnvSpec


class EnvFactory:
    """A picklable `env_fn`: builds the env from its spec, so a worker process needs neither
    the parent's registry nor its plugins loaded."""

    def __init__(self, spec: EnvSpec, kwargs: dict[str, Any]) -> None:
        self.spec, self.kwargs = spec, kwargs

    def __call__(self) -> TextEnv:
        return self.spec.make(**self.kwargs)

    def __repr__(self) -> str:
        return f"EnvFactory({self.spec.id!r}, {self.kwargs!r})"


def make_vec(env_id: str, num_envs: int, *, executor: str | Executor = "threads",
             autoreset_mode: str | AutoresetMode = "next_step",
             step_timeout: float | None = None, inline_fast_steps: bool = True,
             info_format: str = "list", **kwargs: Any) -> VectorEnv:
    """`num_envs` copies of `env_id` (made with `kwargs`) behind one `VectorEnv`.

    See `VectorEnv` for `executor`, `autoreset_mode`, `step_timeout`, `inline_fast_steps` and
    `info_format`.
    """
    from skyhub.registry import spec

    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    factory = EnvFactory(spec(env_id), kwargs)
    return VectorEnv([factory] * num_envs, executor=executor, autoreset_mode=autoreset_mode,
                     step_timeout=step_timeout, inline_fast_steps=inline_fast_steps,
                     info_format=info_format)  # type: ignore[arg-type]


__all__ = ["EnvFactory", "EnvWorker", "Executor", "ProcessExecutor", "ThreadExecutor",
           "VectorEnv", "WorkerDied", "get_executor", "infra_error_info", "make_vec"]
