"""An episode's statements on PostgreSQL, in the engine's worker process (engines/worker.py).

`PostgresEngine` (engines/postgres.py) makes the episode's clone and role in the host; this
session holds the episode role's connection in a worker process, where libpq may read a
message of any size (a 300 MB value, or an error message quoting one) without the host
paying for it. Each statement runs in a transaction that is rolled back, with
`statement_timeout` and a client-side cancel as a backstop; `pg_advisory_unlock_all()` runs
first, so a session-level lock (which a ROLLBACK keeps; the template also refuses the lock
functions to the agent) never outlives a statement. Rows come through a server-side cursor in
growing batches, until `max_rows` (+1 to know it was cut) or `max_bytes`
(`base.take_rows`), so a huge cross join costs what is fetched; what DECLARE refuses
(EXPLAIN, SHOW, DML) runs directly, in extended protocol (one statement only), rows streamed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Loader

from .base import QueryResult, clip, cut_result, hashable, take_rows


class _NumericLoader(Loader):
    """numeric -> int or float: Decimal('2.50') would differ from the 2.5 of other engines."""

    def load(self, data: Any) -> int | float:
        s = bytes(data).decode()
        return int(s) if s.lstrip("-").isdigit() else float(s)


class PGSession:
    """The episode role's connection, and the statements run on it."""

    def __init__(self) -> None:
        self._con: psycopg.Connection[Any] | None = None
        self._conninfo = ""

    def release(self) -> None:
        """Close the connection: the worker is parked for another engine."""
        self.disconnect()

    def disconnect(self) -> None:
        if self._con is not None:
            with contextlib.suppress(psycopg.Error):
                self._con.close()
        self._con, self._conninfo = None, ""

    def _connect(self, conninfo: str) -> psycopg.Connection[Any]:
        if self._con is None or self._con.closed or self._conninfo != conninfo:
            self.disconnect()
            self._con = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
            self._con.adapters.register_loader("numeric", _NumericLoader)
            self._conninfo = conninfo
        return self._con

    def execute(self, conninfo: str, sql: str, limit: int, timeout_s: float,
                max_bytes: int) -> QueryResult | dict[str, str]:
        """The statement's result; {"lost": message} when the episode's database cannot be
        reached (the host raises InfraError: that is not the agent's doing)."""
        try:
            con = self._connect(conninfo)
        except psycopg.Error as e:
            self.disconnect()
            if "too many connections" in str(e):  # sessions of statements that broke their
                return QueryResult(error=clip(_first_line(e)))  # worker, not yet ended
            return {"lost": _first_line(e)}
        watchdog = threading.Timer(timeout_s + 1.0, con.cancel_safe)
        watchdog.daemon = True
        try:
            con.execute(f"BEGIN; DEALLOCATE ALL; SELECT pg_advisory_unlock_all(); "
                        f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}; "
                        f"SAVEPOINT q")
            watchdog.start()
            return self._run(con, sql, limit, max_bytes)
        except psycopg.errors.QueryCanceled:
            return QueryResult(error=f"query interrupted: it ran longer than "
                               f"{timeout_s:g} s", timed_out=True)
        except psycopg.Error as e:
            if "multiple commands" in str(e):
                return QueryResult(error="only one statement at a time is allowed")
            return QueryResult(error=clip(_first_line(e)))
        except MemoryError:
            return QueryResult(error="the result does not fit in memory")
        except (ValueError, OverflowError) as e:  # a value Python cannot represent
            return QueryResult(error=clip(f"{type(e).__name__}: {e}"))
        finally:
            watchdog.cancel()
            try:  # undo whatever it did; a connection stuck mid-COPY is replaced
                if con.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                    raise psycopg.OperationalError("connection busy")
                con.execute("ROLLBACK; SELECT pg_advisory_unlock_all()")
            except psycopg.Error:
                self.disconnect()

    def _run(self, con: psycopg.Connection[Any], text: str, limit: int,
             max_bytes: int) -> QueryResult:
        cur = con.cursor(name="skyhub_q")
        try:
            cur.execute(text)
            columns = [d.name for d in cur.description or ()]
            rows, cut = take_rows(_batches(cur, limit + 1), limit, max_bytes)
        except psycopg.errors.SyntaxError:  # not a query (or a bad one: the same error again)
            con.execute("ROLLBACK TO SAVEPOINT q")
            plain, rows, cut, columns = con.cursor(), [], "", []
            try:
                rows, cut = take_rows(map(hashable, plain.stream(text)), limit, max_bytes)
                columns = [d.name for d in plain.description or ()]
            except psycopg.ProgrammingError as e:
                if "didn't produce a result" not in str(e):  # a command: it ran, no rows
                    raise
        finally:
            with contextlib.suppress(psycopg.Error):
                cur.close()
        return cut_result(columns, rows, cut, max_bytes)


def _batches(cur: psycopg.ServerCursor[Any], most: int) -> Iterator[tuple]:
    """A server-side cursor's rows, FETCHed 16, 64, 256, ... at a time (one round trip per
    batch), never more than `most` in all."""
    size, fetched = 16, 0
    while fetched < most:
        batch = cur.fetchmany(min(size, most - fetched))
        if not batch:
            return
        fetched += len(batch)
        yield from map(hashable, batch)
        size = min(size * 4, 4096)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    if text:
        return text.splitlines()[0]
    # libpq could not keep a message this long (the worker's memory is capped)
    return f"{type(e).__name__} (the server's message was too long to read)"
