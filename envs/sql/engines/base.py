"""The engine interface: run an agent's query against one database, safely and with limits.

Every database's canonical copy is a SQLite file (that is how Spider, BIRD and SynSQL ship).
An engine serves it in its own dialect and must guarantee, whatever the agent sends, that
the canonical data is never modified, that a query stops at its time, row and byte limits,
and that the next episode sees the original database. What a query costs the host is the
engine's to bound, not the agent's: a result holds at most `max_bytes` (`take_rows` counts
every value as it arrives and stops there), an error message at most `MAX_ERROR_CHARS`, and
a query past `timeout_s` ends soon after it as an error result (the agent's failure), never
as an exception or a host OOM.
"""

from __future__ import annotations

import abc
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

#: What one result may hold (`row_size` summed over its rows): past it the result is cut, as
#: past `max_rows`. Spider's largest gold result is ~3k rows of a few short values.
MAX_BYTES = 32 << 20
#: The longest error message an agent sees: a message may quote a value (PostgreSQL's
#: `invalid input syntax for type integer: "xxx..."` quotes all 300 MB of it).
MAX_ERROR_CHARS = 2000


@dataclass
class QueryResult:
    """Rows as tuples; `error` is the message an agent sees for a failed query."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    error: str | None = None
    truncated: bool = False  # more rows existed than `max_rows`, or more bytes than `max_bytes`
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class Engine(abc.ABC):
    """A database backend. `begin_episode(db)` gives a database the agent may use for one
    episode (the canonical one, read-only, or a fresh clone); `execute` runs one statement."""

    name = ""
    dialect = ""  # what the prompt calls the engine, e.g. "SQLite"
    #: True when the agent may change its episode's database (a per-episode clone): gold
    #: results must then come from the untouched database, before the agent acts.
    writable = False

    def __init__(self, *, timeout_s: float = 5.0, max_rows: int = 10_000,
                 max_bytes: int = MAX_BYTES) -> None:
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes

    def begin_episode(self, db_id: str, sqlite_path: Path) -> None:  # noqa: B027 - optional
        """Prepare `db_id` for a new episode (a clone, for engines whose agent may write)."""

    @abc.abstractmethod
    def execute(self, db_id: str, sqlite_path: Path, sql: str, *,
                max_rows: int | None = None) -> QueryResult:
        """Run one statement with the engine's limits; errors are returned, never raised."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections and per-episode databases. Idempotent."""

    def from_sqlite(self, db_id: str, sqlite_path: Path, sql: str) -> str:
        """A query written for SQLite (every dataset's gold SQL) in this engine's dialect, as
        far as a mechanical rewrite goes, so that the gold result is computed here too."""
        return sql


def row_size(row: tuple) -> int:
    """What a row costs the host, roughly: 16 bytes a value, plus the length of text and
    bytes (the values that can be large)."""
    n = 16 * len(row)
    for v in row:
        t = type(v)
        if t is str or t is bytes:
            n += len(v)
    return n


def hashable(row: tuple) -> tuple:
    """`row`, with values that cannot be hashed (PostgreSQL arrays and json come back as
    lists and dicts) as their text: rewards compare rows as sets."""
    try:
        hash(row)
        return row
    except TypeError:
        return tuple(v if _hashes(v) else str(v) for v in row)


def _hashes(v: object) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False


def take_rows(rows: Iterable[tuple], limit: int, max_bytes: int,
              kept: list[tuple] | None = None) -> tuple[list[tuple], str]:
    """Rows from `rows`, pulled one at a time, until `limit` rows or `max_bytes` bytes
    (`row_size`) are held (counting the rows already `kept`, which come first), and why
    they stopped short: "", "rows" or "bytes". The row that passes the budget is dropped, so
    what is kept stays within it."""
    out: list[tuple] = kept if kept is not None else []
    size = sum(map(row_size, out))
    if size > max_bytes:
        while out and size > max_bytes:
            size -= row_size(out.pop())
        return out, "bytes"
    for row in rows:
        if len(out) >= limit:
            return out, "rows"
        size += row_size(row)
        if size > max_bytes:
            return out, "bytes"
        out.append(row)
    return out, ""


def cut_result(columns: list[str], rows: list[tuple], cut: str, max_bytes: int) -> QueryResult:
    """The result of a query whose rows `take_rows` gave. A first row already past the byte
    budget is an error: an empty table marked "cut" would tell the agent nothing."""
    if cut == "bytes" and not rows:
        return QueryResult(columns, error=f"the result is too large: one row is over the "
                           f"{max_bytes / 2**20:g} MiB a result may hold here; select fewer or "
                           f"shorter values (e.g. substr(x, 1, 100))")
    return QueryResult(columns, rows, truncated=bool(cut))


def clip(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """An error message cut to `limit` characters, saying so."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} more characters)"


def text_problem(sql: str) -> str | None:
    """Why `sql` cannot go to a database driver as it is, or None: a NUL character (libpq cuts
    the query there, DuckDB skips it between tokens) or lone surrogates (invalid UTF-8 that
    a model's decoder let through). The agent gets the reason as an observation."""
    if "\x00" in sql:
        return "the query contains a NUL character"
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"the query is not valid UTF-8 text ({e.reason} at position {e.start})"
    return None


def sqlite_schema(sqlite_path: Path, example_rows: int = 3) -> str:
    """CREATE TABLE statements with a few example rows per table: how SkyRL-SQL shows a
    database to the agent. Read from the canonical SQLite file for every engine."""
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        con.text_factory = lambda b: b.decode("utf-8", errors="replace")
        parts = []
        for name, ddl in con.execute("SELECT name, sql FROM sqlite_master WHERE type='table' "
                                     "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"):
            parts.append((ddl or f"CREATE TABLE {name} (...)").strip() + ";")
            if example_rows:
                cur = con.execute(f'SELECT * FROM "{name}" LIMIT {int(example_rows)}')
                cols = [d[0] for d in cur.description]
                rows = cur.fetchall()
                if rows:
                    parts.append(f"/* {len(rows)} example rows of {name}:\n"
                                 + "\n".join(" | ".join(_short(v) for v in r) for r in
                                             [tuple(cols), *rows]) + "\n*/")
        return "\n\n".join(parts)
    finally:
        con.close()


def _short(v: object, limit: int = 40) -> str:
    s = "NULL" if v is None else str(v).replace("\n", " ")
    return s if len(s) <= limit else s[: limit - 3] + "..."


@lru_cache(maxsize=512)
def sqlite_identifiers(sqlite_path: Path) -> frozenset[str]:
    """Lower-cased table and column names of a SQLite file."""
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        names = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
        for t in list(names):
            quoted = '"' + t.replace('"', '""') + '"'
            names |= {c[1] for c in con.execute(f"PRAGMA table_info({quoted})")}
        return frozenset(n.lower() for n in names if n)
    finally:
        con.close()


_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/|[A-Za-z_]\w*",
                    re.S)


def standardize_sqlite_sql(sql: str, identifiers: frozenset[str] | set[str],
                           reserved: frozenset[str] | set[str] = frozenset()) -> str:
    """SQLite leniencies that standard SQL engines (DuckDB, PostgreSQL) reject or read
    differently, rewritten: a double-quoted word that names no table or column and is no
    alias is a string literal in SQLite ("France" -> 'France'); `backticks` quote identifiers,
    and so do double quotes around a table or column named by a word the engine `reserved`
    (lower case) but SQLite did not (a table `show`); LIKE ignores ASCII case in SQLite
    (-> ILIKE)."""
    prev = ""

    def fix(m: re.Match[str]) -> str:
        nonlocal prev
        tok, last = m.group(0), prev
        if tok[0] in "-/":
            return tok
        prev = tok.upper()
        if tok[0] == "`":
            return '"' + tok[1:-1].replace('"', '""') + '"'
        if tok[0] == '"':
            name = tok[1:-1].replace('""', '"')
            if name.lower() in identifiers or last == "AS":
                return tok
            return "'" + name.replace("'", "''") + "'"
        if prev == "LIKE":
            return "ILIKE"
        low = tok.lower()
        return f'"{tok}"' if low in reserved and low in identifiers else tok

    return _TOKEN.sub(fix, sql)
