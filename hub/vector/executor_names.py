"""Executors by name: `get_executor("threads" | "processes" | "ray")`.

Above the executors it names (the Ray one imports the base classes of executors.py and is
itself imported only when asked for), so that executors.py never imports back a module
built on it.
"""

from __future__ import annotations

from collections.abc import Callable

from skyhub.errors import UsageError
from skyhub.vector.executors import Executor, ProcessExecutor, ThreadExecutor


def _ray_executor() -> Executor:
    """`RayExecutor` with its defaults, imported only when asked for (Ray is heavy)."""
    try:
        from skyhub.vector.ray_executor import RayExecutor
    except ImportError as e:
        from skyhub.errors import MissingDependency

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
        raise UsageError(f"unknown executor {executor!r}; choose one of {sorted(EXECUTORS)} "
                         "or pass an Executor instance") from None


__all__ = ["EXECUTORS", "get_executor"]
