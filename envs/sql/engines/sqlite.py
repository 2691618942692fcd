"""The `sqlite` engine (default): the canonical files, read-only, one reused connection each.

Safety comes from SQLite itself, not from inspecting the SQL text:
- the file is opened `mode=ro` (and `immutable=1`: no locks, since nobody writes it), so
  DROP/UPDATE/INSERT fail with "attempt to write a readonly database";
- an authorizer allows only reading: no ATTACH (other files), no TEMP tables/views/triggers
  (they would shadow real tables for the gold query), no PRAGMA assignments, no
  `load_extension`; read-only PRAGMAs such as `table_info` stay allowed for exploration;
- a progress handler interrupts a statement past `timeout_s` (a recursive CTE that never
  ends, a cross join of millions of rows);
- rows are fetched up to `max_rows` (+1 to know it was cut), so a huge result costs little.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from .base import Engine, QueryResult, text_problem

#: What a query may do: read. Everything else is denied, including TEMP tables, views and
#: triggers, which the read-only file does not stop and which would shadow a real table for
#: the gold query (a reward hack), and ATTACH (reaching other files).
_ALLOW = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
#: PRAGMAs that only read the schema: allowed with an argument (`table_info(t)`).
_READ_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info",
                 "index_xinfo", "foreign_key_list"}
_FUNC = getattr(sqlite3, "SQLITE_FUNCTION", 31)


def _lenient(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


class SQLiteEngine(Engine):
    name = "sqlite"
    dialect = "SQLite"

    def __init__(self, *, timeout_s: float = 5.0, max_rows: int = 10_000) -> None:
        super().__init__(timeout_s=timeout_s, max_rows=max_rows)
        self._cons: dict[str, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        self._deadline = 0.0

    def _connect(self, db_id: str, path: Path) -> sqlite3.Connection:
        con = self._cons.get(db_id)
        if con is None:
            # check_same_thread=False: a VectorEnv may call one env from different threads
            # (never concurrently); the lock below serialises this engine's statements.
            con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True,
                                  check_same_thread=False, isolation_level=None)
            con.set_authorizer(self._authorize)
            # checked every 10k VM steps (~1 ms): fine-grained enough for a timeout in seconds
            con.set_progress_handler(self._progress, 10_000)
            self._cons[db_id] = con
        return con

    @staticmethod
    def _authorize(action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
        if action in _ALLOW:
            return sqlite3.SQLITE_OK
        if action == _FUNC:
            return sqlite3.SQLITE_DENY if arg2 == "load_extension" else sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (
                arg2 is None or (arg1 or "").lower() in _READ_PRAGMAS):
            return sqlite3.SQLITE_OK  # PRAGMA x = y would change the connection
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def execute(self, db_id: str, sqlite_path: Path, sql: str, *,
                max_rows: int | None = None) -> QueryResult:
        limit = self.max_rows if max_rows is None else max_rows
        if (problem := text_problem(sql)) is not None:
            return QueryResult(error=problem)
        with self._lock:
            con = self._connect(db_id, sqlite_path)
            self._deadline = time.monotonic() + self.timeout_s
            try:
                try:
                    cur = con.execute(sql)
                    rows = cur.fetchmany(limit + 1)
                except sqlite3.OperationalError as e:
                    if "decode" not in str(e):
                        raise
                    # text that is not UTF-8 (it exists in public datasets): decode leniently
                    # from now on; the fast C decoder serves every other database
                    con.text_factory = _lenient
                    cur = con.execute(sql)
                    rows = cur.fetchmany(limit + 1)
                columns = [d[0] for d in cur.description or ()]
                cur.close()
            except sqlite3.OperationalError as e:
                if str(e) == "interrupted":
                    return QueryResult(error=f"query interrupted: it ran longer than "
                                       f"{self.timeout_s:g} s", timed_out=True)
                return QueryResult(error=f"{e}")
            except sqlite3.DatabaseError as e:
                msg = str(e)
                if "not authorized" in msg:
                    msg += " (the database is read-only here: only SELECT queries and " \
                           "read-only PRAGMAs such as table_info run)"
                return QueryResult(error=msg)
            except (sqlite3.Error, UnicodeEncodeError, ValueError, OverflowError) as e:
                # Warning: several statements; ProgrammingError; lone surrogates; NUL bytes
                return QueryResult(error=f"{type(e).__name__}: {e}")
            except MemoryError:
                return QueryResult(error="the result does not fit in memory")
        truncated = len(rows) > limit
        del rows[limit:]
        return QueryResult(columns, rows, truncated=truncated)

    def close(self) -> None:
        with self._lock:
            for con in self._cons.values():
                con.close()
            self._cons.clear()
