"""Loading a SQLite file into a PostgreSQL template database (engines/postgres.py), and
what the gold rewrite needs to know of its columns (`SQLiteColumns`).

Types follow the values stored, not only the declared type (`pg_type`): SQLite columns are
dynamically typed, and a column whose values do not fit its declared type (text in an
INTEGER column) is loaded as text rather than fail or lose data. Values are loaded as
stored: a TEXT column holding '2014' stays text, as SQLite returns it; where SQLite would
compare it with a number, the gold query says so (engines/rewrite_postgres.py: type affinity).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from .rewrite_postgres import Column, affinity

GROUP = "skyhub_agent"
TEMPLATE_PREFIX = "skyhub_tmpl_"
_LOADER_VERSION = b"3"  # bump when loading changes: new templates get new names
#: Catalogs that list other episodes' databases, roles and sessions (or settings and
#: locks): SELECT revoked from PUBLIC in every template (so in every clone). Views that an
#: agent exploring its schema reads (pg_tables, information_schema) use none of them.
_HIDDEN = ("pg_database", "pg_roles", "pg_user", "pg_group", "pg_auth_members",
           "pg_db_role_setting", "pg_shdescription", "pg_shseclabel", "pg_tablespace",
           "pg_stat_activity", "pg_locks", "pg_stat_database", "pg_stat_database_conflicts",
           "pg_stat_ssl", "pg_stat_gssapi", "pg_stat_replication", "pg_stat_subscription",
           "pg_stat_wal_receiver", "pg_stat_progress_vacuum", "pg_stat_progress_analyze",
           "pg_stat_progress_create_index", "pg_stat_progress_cluster",
           "pg_stat_progress_basebackup", "pg_stat_progress_copy", "pg_prepared_xacts",
           "pg_replication_slots", "pg_replication_origin_status")
#: ... and the functions behind them (EXECUTE revoked), with the advisory lock functions:
#: those locks are session-level, so a ROLLBACK keeps them (engines/postgres_session.py)
_HIDDEN_FUNCTIONS = r"""SELECT p.oid::regprocedure::text FROM pg_proc p
    WHERE p.pronamespace = 'pg_catalog'::regnamespace AND (
        p.proname IN ('pg_stat_get_activity', 'pg_lock_status', 'pg_blocking_pids',
                      'pg_safe_snapshot_blocking_pids', 'pg_stat_get_progress_info')
        OR p.proname LIKE 'pg\_stat\_get\_backend\_%'
        OR (p.proname LIKE 'pg\_%advisory%lock%' AND p.proname NOT LIKE '%unlock%'))"""
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_CLASSES = ("integer", "real", "text", "blob")


def template_name(db_id: str, sqlite_path: Path) -> str:
    """`skyhub_tmpl_<db_id>_<10 hex>` (at most 63 bytes, PostgreSQL's limit): the hash is
    of the loader version, the db_id and the file's content (size+mtime past 256 MB), so a
    changed file gets a new template and an old one is never served stale."""
    h = hashlib.sha256(_LOADER_VERSION + b"\0" + db_id.encode() + b"\0")
    st = sqlite_path.stat()
    if st.st_size <= 256 << 20:
        h.update(sqlite_path.read_bytes())
    else:
        h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    slug = re.sub(r"[^a-z0-9_]", "_", db_id.lower())[:40]
    return f"{TEMPLATE_PREFIX}{slug}_{h.hexdigest()[:10]}"


def pg_type(declared: str, classes: set[str]) -> str:
    """A PostgreSQL type for a SQLite column, from the storage classes it actually holds
    (`classes`, NULL excluded), or from its declared type when it holds no values."""
    if classes:
        if classes == {"blob"}:
            return "bytea"
        if classes <= {"integer"}:
            return "bigint"
        return "double precision" if classes <= {"integer", "real"} else "text"
    d = declared.upper()
    if "INT" in d:
        return "bigint"
    if any(k in d for k in ("REAL", "FLOA", "DOUB", "DEC", "NUM")):
        return "double precision"
    return "bytea" if "BLOB" in d else "text"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns(src: sqlite3.Connection, table: str) -> tuple[list[tuple], list[str]]:
    """PRAGMA table_info of a table, and the PostgreSQL type of each column (`pg_type` of
    the storage classes it holds: one scan of the table)."""
    info = src.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
    if not info:
        return [], []
    probes = ", ".join(f"max(typeof({_quote(c[1])}) = '{k}')" for c in info for k in _CLASSES)
    seen = src.execute(f"SELECT {probes} FROM {_quote(table)}").fetchone()
    return info, [pg_type(c[2] or "", {k for j, k in enumerate(_CLASSES) if seen[4 * i + j]})
                  for i, c in enumerate(info)]


class SQLiteColumns:
    """The columns of a SQLite file as the template serves them, for the gold rewrite
    (`rewrite_postgres.Schema`): read when first asked for, table by table."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tables: dict[str, dict[str, Column] | None] = {}
        self._converts: dict[Column, bool] = {}

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        return con

    def table(self, name: str) -> dict[str, Column] | None:
        if name not in self._tables:
            with contextlib.closing(self._connect()) as src:
                real = src.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                   "lower(name) = ?", [name.lower()]).fetchone()
                info, types = _columns(src, real[0]) if real else ([], [])
            kinds = {"text": "text", "bytea": "blob"}
            self._tables[name] = {_lower(c[1]): Column(real[0], c[1], affinity(c[2] or ""),
                                                       kinds.get(t, "number"))
                                  for c, t in zip(info, types, strict=True)} if real else None
        return self._tables[name]

    def converts(self, column: Column) -> bool:
        """Whether SQLite's numeric affinity converts every text value of the column (as
        in `t.c = CAST(t.c AS NUMERIC)`, true exactly for the values it converts)."""
        if column not in self._converts:
            c, t = _quote(column.name), _quote(column.table)
            with contextlib.closing(self._connect()) as src:
                self._converts[column] = not src.execute(
                    f"SELECT 1 FROM {t} WHERE typeof({c}) = 'text' AND NOT "
                    f"{c} = CAST({c} AS NUMERIC) LIMIT 1").fetchone()
        return self._converts[column]


@lru_cache(maxsize=256)
def sqlite_columns(path: Path, size: int, mtime_ns: int) -> SQLiteColumns:
    """One `SQLiteColumns` per version of a file."""
    return SQLiteColumns(path)


def _lower(name: str) -> str:
    return name.translate(_ASCII_LOWER)  # PostgreSQL folds only ASCII letters in UTF-8


def _convert(v: Any, typ: str) -> Any:
    if v is None:
        return None
    if typ == "text":
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        return s.replace("\x00", "")  # PostgreSQL text cannot hold NUL
    if typ == "double precision":
        return float(v)
    return v


def _load_template(admin: psycopg.Connection[Any], dsn: str, name: str, path: Path) -> None:
    """Create database `name` from the SQLite file, then freeze it as a template."""
    ident = sql.Identifier(name)
    admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' "
                          "LC_COLLATE 'C' LC_CTYPE 'C'").format(ident))
    admin.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(ident))
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    src.text_factory = lambda b: b.decode("utf-8", "replace")
    indexes: list[tuple[sql.Composable, sql.Composable]] = []
    try:
        with psycopg.connect(make_conninfo(dsn, dbname=name)) as dst:
            tables = [r[0] for r in src.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                "'sqlite_%' ORDER BY rowid")]
            for table in tables:
                indexes += _load_table(src, dst, table)
            dst.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {g}; GRANT SELECT ON ALL "
                                "TABLES IN SCHEMA public TO {g}").format(
                                    g=sql.Identifier(GROUP)))
            _hide_others(dst)
        with psycopg.connect(make_conninfo(dsn, dbname=name), autocommit=True) as dst:
            for stmt, fallback in indexes:
                try:
                    dst.execute(stmt)
                except psycopg.Error:  # a key SQLite did not enforce (NULLs in a PK)
                    with contextlib.suppress(psycopg.Error):
                        dst.execute(fallback)
            dst.execute("ANALYZE")
    finally:
        src.close()
    admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false IS_TEMPLATE true")
                  .format(ident))


def _hide_others(dst: psycopg.Connection[Any]) -> None:
    """Revoke from PUBLIC what shows other episodes, in this database's own catalog."""
    views = [r[0] for r in dst.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'pg_catalog'::regnamespace "
        "AND c.relname = ANY(%s)", [list(_HIDDEN)])]
    for name in views:
        dst.execute(sql.SQL("REVOKE ALL ON pg_catalog.{} FROM PUBLIC").format(
            sql.Identifier(name)))
    for (signature,) in dst.execute(_HIDDEN_FUNCTIONS).fetchall():
        # a regprocedure's text (`pg_advisory_lock(bigint)`), from the catalog itself
        dst.execute(sql.SQL("REVOKE ALL ON FUNCTION pg_catalog.{} FROM PUBLIC").format(
            sql.SQL(signature)))


def _load_table(src: sqlite3.Connection, dst: psycopg.Connection[Any],
                table: str) -> list[tuple[sql.Composable, sql.Composable]]:
    """Create and COPY one table; returns its keys and indexes to create afterwards, each
    as (statement, fallback). The primary key is declared (PostgreSQL then accepts
    `GROUP BY t.pk` with other columns of t in SELECT, as Spider's queries do); indexes
    are plain, non-unique: they only serve the planner."""
    qt = _quote(table)
    info, types = _columns(src, table)  # info: cid, name, type, notnull, default, pk
    names = [_lower(c[1]) or f"column{c[0]}" for c in info]
    quoted = [_quote(c[1]) for c in info]  # no generated columns
    tid = sql.Identifier(_lower(table))
    dst.execute(sql.SQL("CREATE TABLE {} ({})").format(tid, sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in zip(names, types,
                                                                                 strict=True))))
    cols = sql.SQL(", ").join(map(sql.Identifier, names))
    with dst.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(tid, cols)) as cp:
        for row in src.execute(f"SELECT {', '.join(quoted)} FROM {qt}"):
            cp.write_row([_convert(v, t) for v, t in zip(row, types, strict=True)])
    pk = tuple(names[c[0]] for c in sorted(info, key=lambda c: c[5]) if c[5])
    keys = {pk} if pk else set()
    for idx in src.execute(f"PRAGMA index_list({qt})").fetchall():
        if idx[4]:  # partial index: its WHERE is SQLite SQL
            continue
        cids = [r[1] for r in src.execute(
            'PRAGMA index_info("' + idx[1].replace('"', '""') + '")')]
        if cids and all(0 <= c < len(names) for c in cids):
            keys.add(tuple(names[c] for c in cids))

    def cols_of(k: tuple[str, ...]) -> sql.Composable:
        return sql.SQL(", ").join(map(sql.Identifier, k))

    out = []
    for k in sorted(keys):
        index = sql.SQL("CREATE INDEX ON {} ({})").format(tid, cols_of(k))
        out.append((sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(tid, cols_of(k))
                    if k == pk else index, index))
    return out
