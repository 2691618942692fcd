"""A `DuckDBEngine`'s statements, in its worker process (engines/worker.py).

The engine (engines/duckdb.py) builds the read-only copies in the host; this session opens
them in the worker under the engine's locked configuration (the last few kept open), refuses
what is not a query, interrupts a statement past `timeout_s` (the worker is killed if that
does not stop it) and fetches rows up to `max_rows` and `max_bytes` (`base.take_rows`).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import duckdb

from .base import QueryResult, clip, cut_result, hashable, take_rows

#: Statement types that only read. Anything else could only touch the TEMP catalog (the
#: database is read-only and the configuration locked), but refusing it says so plainly.
_READ = {"SELECT", "EXPLAIN", "PRAGMA"}
#: PRAGMAs that only read (others set options: refused, whatever the configuration lock).
_READ_PRAGMAS = {"table_info", "show_tables", "show_tables_expanded", "show_databases",
                 "database_list", "database_size", "storage_info", "version", "platform",
                 "functions", "collations", "show", "metadata_info", "user_agent"}
_OPEN = 8  # databases a worker keeps open (each reserves ~70 MB of address space)


class DuckDBSession:
    """A `DuckDBEngine`'s statements, in its worker process (engines/worker.py): the copies
    it reads, open read-only under the engine's locked configuration, the last few kept."""

    def __init__(self) -> None:
        self._dbs: OrderedDict[str, duckdb.DuckDBPyConnection] = OrderedDict()

    def _db(self, path: str, config: dict[str, Any]) -> duckdb.DuckDBPyConnection:
        con = self._dbs.pop(path, None)
        if con is None:
            con = duckdb.connect(path, read_only=True, config=config)
        self._dbs[path] = con
        while len(self._dbs) > _OPEN:
            self._dbs.popitem(last=False)[1].close()
        return con

    def release(self) -> None:
        """Close every database: the worker is parked for another engine."""
        while self._dbs:
            self._dbs.popitem()[1].close()

    def execute(self, path: str, config: dict[str, Any], sql: str, limit: int,
                timeout_s: float, max_bytes: int) -> QueryResult:
        try:
            db = self._db(path, config)
        except (OSError, duckdb.Error) as e:
            return QueryResult(error=f"the database is not available: {clip(str(e))}")
        cur = db.cursor()
        fired = threading.Event()

        def stop() -> None:
            fired.set()
            with contextlib.suppress(duckdb.Error):  # the statement may just have ended
                cur.interrupt()

        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        try:
            statements = cur.extract_statements(sql)
            if not statements:
                return QueryResult()
            if len(statements) > 1:
                return QueryResult(error="You can only execute one statement at a time.")
            kind, second = statements[0].type.name, _second_word(statements[0].query)
            if kind == "EXPLAIN" and second in ("analyze", "analyse"):
                kind = "EXPLAIN ANALYZE"  # which runs the statement it explains
            elif kind == "PRAGMA" and second not in _READ_PRAGMAS:
                kind = "PRAGMA SET"
            if kind not in _READ:
                return QueryResult(error=f"the database is read-only: only queries run "
                                   f"here, and this is a {kind} statement")
            timer.start()
            cur.execute(statements[0])
            description = cur.description or []
            nested = {i for i, d in enumerate(description) if _is_nested(str(d[1]))}
            rows, cut = take_rows(_stream(cur, nested), limit, max_bytes)
        except Exception as e:  # errors are the agent's observation, never raised
            if fired.is_set():
                return QueryResult(error=f"query interrupted: it ran longer than "
                                   f"{timeout_s:g} s", timed_out=True)
            return QueryResult(error=clip(_message(e)))
        finally:
            timer.cancel()
            cur.close()
        return cut_result([d[0] for d in description], rows, cut, max_bytes)


def _stream(cur: duckdb.DuckDBPyConnection, nested: set[int]) -> Iterator[tuple]:
    """Rows in small batches; lists and structs as text (they are unhashable, and rewards
    compare rows as sets)."""
    while batch := cur.fetchmany(64):
        for r in batch:
            yield tuple(str(v) if i in nested and v is not None else v
                        for i, v in enumerate(r)) if nested else hashable(tuple(r))


def _second_word(text: str) -> str:
    """The statement's second token, lower case, comments skipped (DuckDB's tokenizer)."""
    starts = [p for p, t in duckdb.tokenize(text) if t != duckdb.token_type.comment]
    m = re.match(r"\w*", text[starts[1]:]) if len(starts) > 1 else None
    return m.group(0).lower() if m else ""


def _is_nested(type_name: str) -> bool:
    return type_name.endswith("]") or type_name.startswith(("STRUCT", "MAP", "UNION"))


def _message(e: BaseException) -> str:
    if isinstance(e, duckdb.Error):
        return str(e)
    return "the result does not fit in memory" if isinstance(e, MemoryError) else \
        f"{type(e).__name__}: {e}"
