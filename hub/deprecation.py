"""Renamed kwargs: old names keep working for a while, with a `DeprecationWarning`.

    class PythonEnv(TextEnv):
        @renamed_kwargs(cell_timeout="cell_timeout_s")
        def __init__(self, *, cell_timeout_s: float = 10.0) -> None: ...

`PythonEnv(cell_timeout=5)` then warns and runs as `PythonEnv(cell_timeout_s=5)`; passing
both names is a `UsageError`. The registry reads `__renamed_kwargs__` off the wrapper, so
`skyhub.make(..., cell_timeout=5)` passes its kwarg validation too (see `skyhub.registry`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from skyhub.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


def warn_renamed(old: str, new: str, *, where: str = "", stacklevel: int = 3) -> None:
    """Warn that kwarg `old` is now `new`."""
    at = f"{where}: " if where else ""
    warnings.warn(f"{at}the kwarg {old!r} is deprecated; use {new!r}", DeprecationWarning,
                  stacklevel=stacklevel)


def renamed_kwargs(**old_to_new: str) -> Callable[[F], F]:
    """Decorate a function (an env's `__init__`) so each old kwarg name still works: it warns
    once per call and is passed on under its new name."""

    def decorate(fn: F) -> F:
        where = fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise UsageError(f"{where}: pass {new!r} only ({old!r} is its old name)")
                    warn_renamed(old, new, where=where)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed_kwargs__ = dict(old_to_new)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


__all__ = ["renamed_kwargs", "warn_renamed"]
