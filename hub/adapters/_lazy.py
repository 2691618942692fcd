"""One module-level `__getattr__`/`__dir__` pair for the adapters: an adapter's public names
live in its implementation module (`_openenv`, ...), which imports the framework, and are
loaded from it on first use, so importing the adapter imports no framework."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any


def lazy_names(module: str, implementation: str, names: Sequence[str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `module`, taking `names` from `implementation`."""
    public = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name in public:
            return getattr(importlib.import_module(implementation), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*importlib.import_module(module).__dict__, *public})

    return __getattr__, __dir__
