"""SQL engines: one module per backend, all behind `Engine` (engines/base.py)."""

from __future__ import annotations

from typing import Any

from skyhub.errors import UsageError

from .base import Engine, QueryResult

ENGINES = ("sqlite", "duckdb", "postgres")


def make_engine(name: str, **kwargs: Any) -> Engine:
    """An engine by name; heavy drivers are imported only for the engine chosen."""
    if name == "sqlite":
        from .sqlite import SQLiteEngine

        return SQLiteEngine(**kwargs)
    if name == "duckdb":
        from .duckdb import DuckDBEngine

        return DuckDBEngine(**kwargs)
    if name == "postgres":
        from .postgres import PostgresEngine

        return PostgresEngine(**kwargs)
    raise UsageError(f"engine must be one of {ENGINES}, got {name!r}")


__all__ = ["ENGINES", "Engine", "QueryResult", "make_engine"]
