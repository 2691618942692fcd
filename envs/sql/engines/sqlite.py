"""The `sqlite` engine (default): the canonical files, read-only, one reused connection each.

Safety comes from SQLite itself, not from inspecting the SQL text:
- the file is opened `mode=ro` (and `immutable=1`: no locks, since nobody writes it), so
  DROP/UPDATE/INSERT fail with "attempt to write a readonly database";
- an authorizer allows only reading: no ATTACH (other files), no TEMP tables/views/triggers
  (they would shadow real tables for the gold query), no PRAGMA assignments; read-only
  PRAGMAs such as `table_info` stay allowed for exploration;
- SQL functions by allowlist (`ALLOWED_FUNCTIONS`): the aggregate, core scalar, date/time,
  math, JSON and window functions that Spider/BIRD/SynSQL queries and agents use. SQLite runs
  in this (the host's) process, and some built-ins are not data functions: `fts3_tokenizer`
  returns a pointer into libsqlite3 and, with two arguments, installs a tokenizer at any
  address; `load_extension` loads a shared library; `fts5()` returns a pointer too;
  `rtreenode`, `sqlite_log` and the FTS auxiliaries have no use on these databases. A
  built-in added by a newer SQLite stays refused until it is listed here;
- a progress handler interrupts a statement past `timeout_s` (a recursive CTE that never
  ends, a cross join of millions of rows), and one watchdog thread per process interrupts
  it too (`_Watchdog`): the handler runs every 10k VM instructions, and when each row
  costs one slow instruction (a quadratic `instr` on long text) that is thousands of rows;
  the watchdog also stops a statement past `max_temp_bytes` (1 GiB) of temporary files;
- SQLite's own limits bound what one value and one row may take before Python sees them:
  a string or blob, and a row SQLite stores for a sort or a subquery, is at most
  `max_value_bytes` (256 KiB: `zeroblob(2e8)` fails inside SQLite, `printf('%.*c', 2e8,
  'x')` is NULL), a result has at most `max_columns` columns (1000, or the widest table's
  count), a LIKE pattern at most 1000 characters;
- rows are fetched one at a time up to `max_rows` (+1 to know it was cut) and `max_bytes`
  (`base.take_rows`; at once when that many rows of values at the length limit would fit
  anyway), so a huge result costs the host little.
A stored value longer than `max_value_bytes` cannot be read (SQLite's "string or blob too
big"); raise it for such data. What the limits leave: one row's expressions run to their end
before an interrupt is seen, so built-in functions on long values (about 0.5 s for a
quadratic `instr`/`replace` at 256 KiB) can overrun `timeout_s` by what one row costs.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

from .base import MAX_BYTES, Engine, QueryResult, clip, cut_result, take_rows, text_problem

#: What a query may do: read. Everything else is denied, including TEMP tables, views and
#: triggers, which the read-only file does not stop and which would shadow a real table for
#: the gold query (a reward hack), and ATTACH (reaching other files).
_ALLOW = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
#: PRAGMAs that only read the schema: allowed with an argument (`table_info(t)`).
_READ_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info",
                 "index_xinfo", "foreign_key_list"}
_FUNC = getattr(sqlite3, "SQLITE_FUNCTION", 31)
#: The SQL functions a query may call (SQLite's lower-case names). Everything else that SQLite
#: knows is refused with an observation that names the function; an unknown name is SQLite's
#: own "no such function". Newer SQLite versions' data functions (concat, string_agg, unhex,
#: timediff, jsonb_*, median, ...) are listed so that they work where the library has them.
ALLOWED_FUNCTIONS = frozenset({
    # aggregates
    "avg", "count", "group_concat", "max", "min", "string_agg", "sum", "total",
    "median", "percentile", "percentile_cont", "percentile_disc",
    # core scalar
    "abs", "changes", "char", "coalesce", "concat", "concat_ws", "format", "glob", "hex",
    "if", "ifnull", "iif", "instr", "last_insert_rowid", "length", "like", "likelihood",
    "likely", "lower", "ltrim", "nullif", "octet_length", "printf", "quote", "random",
    "randomblob", "replace", "round", "rtrim", "sign", "soundex", "sqlite_source_id",
    "sqlite_version", "substr", "substring", "total_changes", "trim", "typeof", "unhex",
    "unicode", "unistr", "unistr_quote", "unlikely", "upper", "zeroblob",
    # date and time
    "current_date", "current_time", "current_timestamp", "date", "datetime", "julianday",
    "strftime", "time", "timediff", "unixepoch",
    # math
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos",
    "cosh", "degrees", "exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow",
    "power", "radians", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
    # JSON (the -> and ->> operators are functions to the authorizer)
    "->", "->>", "json", "json_array", "json_array_length", "json_error_position",
    "json_extract", "json_group_array", "json_group_object", "json_insert", "json_object",
    "json_patch", "json_pretty", "json_quote", "json_remove", "json_replace", "json_set",
    "json_type", "json_valid", "jsonb", "jsonb_array", "jsonb_extract",
    "jsonb_group_array", "jsonb_group_object", "jsonb_insert", "jsonb_object", "jsonb_patch",
    "jsonb_remove", "jsonb_replace", "jsonb_set",
    # window functions
    "cume_dist", "dense_rank", "first_value", "lag", "last_value", "lead", "nth_value",
    "ntile", "percent_rank", "rank", "row_number",
})
MAX_VALUE_BYTES = 256 << 10
MAX_COLUMNS = 1000
MAX_TEMP_BYTES = 1 << 30
_LIKE_PATTERN = 1000  # SQLite's default (50,000) makes one LIKE cost O(value x 50,000)


def _lenient(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


class _Watchdog:
    """One daemon thread for the process that interrupts statements past their deadline, or
    past their budget of temporary files (a sort or DISTINCT of long rows spills to disk:
    3.6 GB in 5 s, RAM where /tmp is a tmpfs). It polls every 50 ms, so arming costs a
    statement one dict entry; the temporary files are counted for a statement running
    longer than that, by its thread's bytes written (/proc/self/task/<tid>/io: SQLite sorts
    in the thread that runs the statement)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(con) -> (con, start, deadline, max_written, thread id)
        self._due: dict[int, tuple[sqlite3.Connection, float, float, int, int]] = {}
        self._base: dict[int, tuple[float, int]] = {}  # bytes written when first looked at
        self._why: dict[int, str] = {}
        self._thread: threading.Thread | None = None

    def arm(self, con: sqlite3.Connection, start: float, deadline: float,
            max_written: int) -> None:
        # one dict store (atomic: no lock)
        self._due[id(con)] = (con, start, deadline, max_written, threading.get_native_id())
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="skyhub-sqlite-watchdog")
                    # one per process, for every env: `skyhub check` does not count it as
                    # a thread the env left behind
                    self._thread.skyhub_process_wide = True  # type: ignore[attr-defined]
                    self._thread.start()

    def disarm(self, con: sqlite3.Connection) -> str:
        """Why the statement was interrupted ("time", "written"), or ""; after this, no
        interrupt reaches the connection's next statement."""
        with self._lock:
            self._due.pop(id(con), None)
            return self._why.pop(id(con), "")

    def _run(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with self._lock:
                for key, (con, start, deadline, max_written, tid) in list(self._due.items()):
                    why = "time" if now > deadline else ""
                    if not why and now - start > 0.05:
                        written = _written(tid)
                        base = self._base.get(key)
                        if base is None or base[0] != start:  # a new statement
                            self._base[key] = (start, written)
                        elif written - base[1] > max_written:
                            why = "written"
                    if why:
                        del self._due[key]
                        self._why[key] = why
                        with contextlib.suppress(sqlite3.Error):  # closed meanwhile
                            con.interrupt()
                for key in [k for k in self._base if k not in self._due]:
                    del self._base[key]


def _written(tid: int) -> int:
    """Bytes thread `tid` of this process passed to write() so far; 0 without /proc."""
    try:
        with open(f"/proc/self/task/{tid}/io", "rb") as f:
            for line in f:
                if line.startswith(b"wchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


_WATCHDOG = _Watchdog()


class SQLiteEngine(Engine):
    name = "sqlite"
    dialect = "SQLite"

    def __init__(self, *, timeout_s: float = 5.0, max_rows: int = 10_000,
                 max_bytes: int = MAX_BYTES, max_value_bytes: int = MAX_VALUE_BYTES,
                 max_columns: int = MAX_COLUMNS, max_temp_bytes: int = MAX_TEMP_BYTES) -> None:
        super().__init__(timeout_s=timeout_s, max_rows=max_rows, max_bytes=max_bytes)
        self.max_value_bytes, self.max_columns = max_value_bytes, max_columns
        self.max_temp_bytes = max_temp_bytes
        self._cons: dict[str, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        self._deadline = 0.0
        self._refused = ""  # the function the authorizer refused in the running statement

    def _connect(self, db_id: str, path: Path) -> sqlite3.Connection:
        con = self._cons.get(db_id)
        if con is None:
            # check_same_thread=False: a VectorEnv may call one env from different threads
            # (never concurrently); the lock below serialises this engine's statements.
            con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True,
                                  check_same_thread=False, isolation_level=None)
            # a table wider than the column limit would make the schema unreadable
            widest = 0
            with contextlib.suppress(sqlite3.Error):  # e.g. a virtual table's missing module
                widest = con.execute(
                    "SELECT max((SELECT count(*) FROM pragma_table_info(name))) FROM "
                    "sqlite_master WHERE type = 'table'").fetchone()[0] or 0
            # JSON's table-valued functions are eponymous virtual tables: their first use on
            # a connection writes their schema, which the authorizer below refuses; made
            # here, before it, they serve queries (sqlite_stmt and dbstat stay refused)
            for vtab in ("json_each", "json_tree"):
                with contextlib.suppress(sqlite3.Error):
                    con.execute(f"SELECT count(*) FROM {vtab}('[]')").fetchone()
            con.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, max(self.max_columns, widest))
            con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.max_value_bytes)
            con.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, _LIKE_PATTERN)
            con.set_authorizer(self._authorize)
            # checked every 10k VM steps (~1 ms): fine-grained enough for a timeout in seconds
            con.set_progress_handler(self._progress, 10_000)
            self._cons[db_id] = con
        return con

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
        if action in _ALLOW:
            return sqlite3.SQLITE_OK
        if action == _FUNC:
            if (arg2 or "").lower() in ALLOWED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            self._refused = self._refused or str(arg2)
            return sqlite3.SQLITE_DENY
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
            now = time.monotonic()
            self._deadline = now + self.timeout_s
            # the progress handler usually ends a statement on time before the watchdog
            _WATCHDOG.arm(con, now, self._deadline + 0.1, self.max_temp_bytes)
            self._refused = ""
            try:
                r = self._run(con, sql, limit)
            finally:
                why = _WATCHDOG.disarm(con)
            refused, self._refused = self._refused, ""
        if refused and not r.ok:
            return QueryResult(error=clip(
                f"not authorized: the function {refused}() is not available here (allowed: "
                "aggregate, core scalar, date/time, math, JSON and window functions)"))
        if why == "written" and not r.ok:
            return QueryResult(error=f"query interrupted: it wrote more than "
                               f"{self.max_temp_bytes >> 20} MiB of temporary files (a sort, "
                               f"DISTINCT or GROUP BY over too much data)")
        return r

    def _run(self, con: sqlite3.Connection, sql: str, limit: int) -> QueryResult:
        cur = None
        try:
            try:
                cur = con.execute(sql)
                rows, cut = self._fetch(cur, limit)
            except sqlite3.OperationalError as e:
                if "decode" not in str(e):
                    raise
                # text that is not UTF-8 (it exists in public datasets): decode leniently
                # from now on; the fast C decoder serves every other database
                if cur is not None:
                    cur.close()
                con.text_factory = _lenient
                cur = con.execute(sql)
                rows, cut = self._fetch(cur, limit)
            columns = [d[0] for d in cur.description or ()]
        except sqlite3.OperationalError as e:
            if str(e) == "interrupted":
                return QueryResult(error=f"query interrupted: it ran longer than "
                                   f"{self.timeout_s:g} s", timed_out=True)
            return QueryResult(error=clip(str(e)))
        except sqlite3.DatabaseError as e:
            msg = str(e)
            if "not authorized" in msg:
                msg += " (the database is read-only here: only SELECT queries and " \
                       "read-only PRAGMAs such as table_info run)"
            elif "too big" in msg:
                msg += f" (a value may hold at most {self.max_value_bytes >> 10} KiB here)"
            return QueryResult(error=clip(msg))
        except (sqlite3.Error, UnicodeEncodeError, ValueError, OverflowError) as e:
            # Warning: several statements; ProgrammingError; lone surrogates; NUL bytes
            return QueryResult(error=clip(f"{type(e).__name__}: {e}"))
        except MemoryError:
            return QueryResult(error="the result does not fit in memory")
        finally:
            if cur is not None:
                cur.close()  # ends the statement before the watchdog is disarmed
        return cut_result(columns, rows, cut, self.max_bytes)

    def _fetch(self, cur: sqlite3.Cursor, limit: int) -> tuple[list[tuple], str]:
        """`base.take_rows`, but the first rows in one `fetchmany`: as many as could not pass
        `max_bytes` even if every value were at SQLite's length limit (a short result of a
        few columns is all of them: nothing to count)."""
        width = len(cur.description or ()) * (self.max_value_bytes + 16)
        free = max(1, min(limit + 1, self.max_bytes // width if width else limit + 1))
        rows = cur.fetchmany(free)
        if len(rows) > limit:
            del rows[limit:]
            return rows, "rows"
        if len(rows) < free:
            return rows, ""
        return take_rows(cur, limit, self.max_bytes, rows)  # more may follow: count

    def close(self) -> None:
        with self._lock:
            for con in self._cons.values():
                con.close()
            self._cons.clear()
