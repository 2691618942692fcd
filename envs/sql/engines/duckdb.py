"""The `duckdb` engine: the canonical SQLite files served by DuckDB, read-only.

DuckDB's own SQLite reader (the sqlite_scanner extension) is downloaded on first use, which
an offline machine cannot do, so each SQLite file is copied into a DuckDB database once and
cached on disk (`cache_dir`, else `$SKYHUB_CACHE/duckdb`, else ~/.cache/skyhub/duckdb), named
`<db_id>-<hash of the file's size and mtime>.duckdb`: a changed SQLite file gets a new copy.
The copy is written under a temporary name and renamed, under a file lock, so concurrent
processes never see half a database and build it once.

Types: SQLite columns are dynamically typed, so a column's DuckDB type comes from its declared
type *and* the values actually stored (`duck_type`); values that do not fit the declared type
(text in an INTEGER column) make the column VARCHAR rather than fail or lose data.

Safety, whatever the agent sends, comes from DuckDB itself:
- the copy is opened `read_only`: DROP/UPDATE/INSERT/CREATE fail (and the canonical SQLite
  file is never opened for writing at all);
- `enable_external_access=false`: no ATTACH of files, COPY TO, read_csv('/etc/passwd'),
  INSTALL/LOAD; extension autoloading is off and `lock_configuration` refuses SET/PRAGMA x=y,
  so none of this can be switched back on; `temp_directory=''` never spills to disk;
- each statement runs on a fresh connection (a cursor), so the TEMP objects it may create
  (which would shadow real tables, for the gold query too) and open transactions vanish with
  it; statements other than queries are refused with a clear message, as is more than one;
- DuckDB has no statement timeout: a timer calls `interrupt()` after `timeout_s` (a recursive
  CTE that never ends, a cross join of millions of rows), and `memory_limit` bounds the
  buffer manager;
- rows stream and are fetched up to `max_rows` (+1 to know the result was cut) and
  `max_bytes` (`base.take_rows`).
Neither the interrupt nor `memory_limit` reaches inside one operator (`list_concat` of two
2e7-element lists: 9.5 s past a 1 s timeout, 3.7 GB), so statements run in a worker process
of the engine's own (engines/worker.py, engines/duckdb_session.py): past `timeout_s` plus a
grace, or past `memory_limit` plus 768 MiB of resident memory, the worker is killed and the
statement is an error result; the next one starts a new worker (~0.5 s). The copies are
built, and gold SQL rewritten, in the host process: that is our data and our SQL.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from skyhub.envs.sql.errors import WorkerLost
from skyhub.errors import InfraError

from . import rewrite
from .base import (
    MAX_BYTES,
    Engine,
    QueryResult,
    clip,
    sqlite_identifiers,
    standardize_sqlite_sql,
    text_problem,
)
from .worker import Worker

#: Bump when the copy changes (types, what is copied): old cache files are then ignored.
FORMAT_VERSION = 1
_CHUNK = 50_000  # rows per insert while copying
#: Words DuckDB reserves but SQLite does not (so Spider may name a table `show`).
_RESERVED = frozenset({
    "any", "array", "asymmetric", "both", "describe", "fetch", "lambda", "lateral", "leading",
    "only", "pivot", "pivot_longer", "pivot_wider", "placing", "qualify", "show", "some",
    "summarize", "symmetric", "trailing", "unpivot", "variadic"})
_FITS = {"BIGINT": {"integer"}, "DOUBLE": {"integer", "real"}, "VARCHAR": {"text"},
         "BLOB": {"blob"}}
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10,
          "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def cache_root(cache_dir: str | Path | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("SKYHUB_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "skyhub") / "duckdb"


def cache_path(db_id: str, sqlite_path: Path, cache_dir: str | Path | None = None) -> Path:
    """Where the DuckDB copy of `sqlite_path` lives; the name changes when the file does.
    Size and mtime (not a content hash) so that a multi-GB BIRD file costs one stat."""
    st = Path(sqlite_path).stat()
    key = hashlib.sha256(f"{FORMAT_VERSION}:{st.st_size}:{st.st_mtime_ns}".encode())
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", db_id)
    return cache_root(cache_dir) / f"{safe}-{key.hexdigest()[:16]}.duckdb"


def duck_type(declared: str, stored: set[str]) -> str:
    """A DuckDB type for a SQLite column declared `declared` holding values whose SQLite
    `typeof` are `stored`. The declared type decides when the values fit it (INTEGER ->
    BIGINT, REAL/FLOAT/DOUBLE/NUMERIC/DECIMAL -> DOUBLE, CHAR/TEXT/CLOB -> VARCHAR, BLOB ->
    BLOB, by SQLite's affinity rules); otherwise, and for types SQLite gives no meaning to
    (DATETIME, BOOL, none), the values decide; mixed values fall back to VARCHAR."""
    d, stored = declared.upper(), stored - {"null"}
    want: str | None = None
    if "INT" in d:
        want = "BIGINT"
    elif any(k in d for k in ("CHAR", "CLOB", "TEXT")):
        want = "VARCHAR"
    elif "BLOB" in d:
        want = "BLOB"
    elif any(k in d for k in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL")):
        want = "DOUBLE"
    if want is not None and stored <= _FITS[want]:
        return want
    if stored and want != "VARCHAR":
        for t in ("BIGINT", "DOUBLE", "BLOB"):
            if stored <= _FITS[t]:
                return t
    return "VARCHAR"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column(values: tuple) -> Any:
    import numpy as np  # only the host builds copies: the workers do without numpy

    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def copy_sqlite(sqlite_path: Path, target: Path) -> None:
    """Copy every table (and the views DuckDB can parse) of a SQLite file into a new DuckDB
    database at `target`. Rows keep SQLite's scan order, so unordered queries list them in
    the same order on both engines. Values reach DuckDB as numpy object columns (a scan,
    not one INSERT per row: ~1M rows/s instead of a few thousand)."""
    src = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    src.text_factory = lambda b: b.decode("utf-8", errors="replace")  # as the sqlite engine
    dst = duckdb.connect(str(target), config={"threads": 1})
    try:
        master = src.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN "
                             "('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY rowid")
        objects = master.fetchall()
        for kind, name, _ in objects:
            if kind == "table":
                with contextlib.suppress(sqlite3.OperationalError):  # e.g. an FTS module
                    _copy_table(src, dst, name)
        for kind, _, ddl in objects:
            if kind == "view" and ddl:
                with contextlib.suppress(duckdb.Error):  # a view in SQLite-only SQL
                    dst.execute(ddl)
        dst.execute("CHECKPOINT")
    finally:
        dst.close()
        src.close()


def _copy_table(src: sqlite3.Connection, dst: duckdb.DuckDBPyConnection, name: str) -> None:
    cols = [(c[1], c[2] or "") for c in src.execute(f"PRAGMA table_info({_q(name)})")]
    probe = ", ".join(f"group_concat(DISTINCT typeof({_q(c)}))" for c, _ in cols)
    stored = src.execute(f"SELECT {probe} FROM {_q(name)}").fetchone() or ()
    types = [duck_type(decl, set((s or "").split(","))) for (_, decl), s in
             zip(cols, stored, strict=True)]
    dst.execute(f"CREATE TABLE {_q(name)} ("
                + ", ".join(f"{_q(c)} {t}" for (c, _), t in zip(cols, types, strict=True)) + ")")
    # SQLite converts what does not already have the target's storage class
    exprs = ", ".join(f"CAST({_q(c)} AS TEXT)" if t == "VARCHAR" else
                      f"CAST({_q(c)} AS REAL)" if t == "DOUBLE" else _q(c)
                      for (c, _), t in zip(cols, types, strict=True))
    casts = ", ".join(f"c{i}::{t}" for i, t in enumerate(types))
    cur = src.execute(f"SELECT {exprs} FROM {_q(name)}")
    while rows := cur.fetchmany(_CHUNK):
        columns = zip(*rows, strict=True)
        dst.register("__skyhub_chunk", {f"c{i}": _column(v) for i, v in enumerate(columns)})
        dst.execute(f"INSERT INTO {_q(name)} SELECT {casts} FROM __skyhub_chunk")
        dst.unregister("__skyhub_chunk")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_copy(db_id: str, sqlite_path: Path, cache_dir: str | Path | None = None) -> Path:
    """The cached DuckDB copy of `sqlite_path`, built first if missing. The lock makes a
    second process wait for the first one's copy instead of building its own; the rename
    makes a copy appear whole or not at all (a crash leaves only a stray temp file)."""
    final = cache_path(db_id, sqlite_path, cache_dir)
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.with_name(final.name + ".lock")):
        if final.is_file():
            return final
        tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            copy_sqlite(Path(sqlite_path), tmp)
            os.replace(tmp, final)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
    return final


class DuckDBEngine(Engine):
    name = "duckdb"
    dialect = "DuckDB"

    def __init__(self, *, timeout_s: float = 5.0, max_rows: int = 10_000,
                 cache_dir: str | Path | None = None, threads: int = 1,
                 memory_limit: str = "512MB", max_bytes: int = MAX_BYTES) -> None:
        super().__init__(timeout_s=timeout_s, max_rows=max_rows, max_bytes=max_bytes)
        self.cache_dir = cache_dir
        self.config: dict[str, Any] = {
            "enable_external_access": False, "autoload_known_extensions": False,
            "autoinstall_known_extensions": False, "allow_community_extensions": False,
            "threads": threads, "memory_limit": memory_limit, "temp_directory": "",
            "lock_configuration": True}
        self._copies: dict[tuple[str, str], Path] = {}
        self._lock = threading.Lock()
        self._parser: duckdb.DuckDBPyConnection | None = None
        self._worker = Worker("skyhub.envs.sql.engines.duckdb_session:DuckDBSession",
                              name="DuckDB query",
                              rss_limit=_bytes(memory_limit) + (768 << 20),
                              max_reply=2 * max_bytes + (1 << 20))

    def _copy(self, db_id: str, sqlite_path: Path, *, recheck: bool = False) -> Path:
        key = (db_id, str(sqlite_path))
        path = self._copies.get(key)
        if path is None or recheck:  # a stat notices a changed SQLite file
            path = self._copies[key] = ensure_copy(db_id, sqlite_path, self.cache_dir)
        return path

    def begin_episode(self, db_id: str, sqlite_path: Path) -> None:
        """Nothing to reset (read-only, nothing outlives a statement); a stat notices a
        changed SQLite file, and the first episode on a database builds its copy."""
        with self._lock:
            try:
                self._copy(db_id, sqlite_path, recheck=True)
            except (OSError, sqlite3.Error, duckdb.Error) as e:
                raise InfraError(f"no DuckDB copy of {sqlite_path}: {e}") from e

    def from_sqlite(self, db_id: str, sqlite_path: Path, sql: str) -> str:
        """SQLite's string literals in double quotes, case-blind LIKE and words DuckDB
        reserves (`base.standardize_sqlite_sql`), a JOIN without ON as the cross join SQLite
        reads (`rewrite.cross_joins`), and its bare columns and tie order in aggregate
        queries (`rewrite_like_sqlite`), in DuckDB's terms."""
        sql = standardize_sqlite_sql(sql, sqlite_identifiers(sqlite_path), _RESERVED)
        sql = rewrite.cross_joins(sql)
        with self._lock:
            if self._parser is None:
                self._parser = duckdb.connect(config=self.config)
            return rewrite_like_sqlite(sql, self._parser)

    def execute(self, db_id: str, sqlite_path: Path, sql: str, *,
                max_rows: int | None = None) -> QueryResult:
        limit = self.max_rows if max_rows is None else max_rows
        if (problem := text_problem(sql)) is not None:
            return QueryResult(error=problem)
        with self._lock:
            try:
                path = self._copy(db_id, sqlite_path)
            except (OSError, sqlite3.Error, duckdb.Error) as e:
                return QueryResult(error=f"database {db_id!r} is not available: {e}")
            try:
                return self._worker.call(
                    "execute", self.timeout_s + max(1.0, self.timeout_s / 2), path=str(path),
                    config=self.config, sql=sql, limit=limit, timeout_s=self.timeout_s,
                    max_bytes=self.max_bytes)
            except WorkerLost as e:  # what the statement did to its process: its failure
                if e.timed_out:
                    return QueryResult(error=f"query interrupted: it ran longer than "
                                       f"{self.timeout_s:g} s", timed_out=True)
                return QueryResult(error=f"the query was stopped: {e}")
            except RuntimeError as e:
                return QueryResult(error=clip(str(e)))

    def close(self) -> None:
        with self._lock:
            self._worker.stop()
            self._copies.clear()
            if self._parser is not None:
                self._parser.close()
                self._parser = None


def _bytes(size: str) -> int:
    """A DuckDB size setting ("512MB", "1GiB") in bytes; 1 GiB when it is not one."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([a-zA-Z]*)\s*", size)
    unit = _UNITS.get((m.group(2) or "b").lower()) if m else None
    return int(float(m.group(1)) * unit) if m and unit else 1 << 30


def rewrite_like_sqlite(sql: str, con: duckdb.DuckDBPyConnection) -> str:
    """Two SQLite behaviours of aggregate queries, rewritten on DuckDB's own syntax tree
    (json_serialize_sql/json_deserialize_sql; found by `rewrite.bare_columns` and
    `rewrite.tie_keys`); a query that needs neither, or that DuckDB cannot parse, comes
    back unchanged.

    - Bare columns: SQLite lets an aggregate query select a column that is neither grouped
      nor aggregated (`SELECT name, count(*) ... GROUP BY id`, common in Spider's gold SQL);
      DuckDB refuses it. With exactly one min()/max() in the query SQLite takes the column
      from the row holding that extreme (-> arg_min/arg_max), else from some row of the group
      (-> any_value; exact whenever the column depends on the grouped key, as in Spider).
    - Ties: `GROUP BY g ORDER BY count(*) DESC LIMIT 1` has several right answers when
      counts tie. SQLite emits groups in key order and keeps it among ties (reversed under
      DESC); DuckDB's order is arbitrary. The group keys are appended to ORDER BY in the
      first key's direction, so DuckDB picks the row SQLite picks.
    """
    tree = rewrite.parse(sql, con)
    if tree is None:
        return sql
    changed = [_wrap_bare(node) | _break_ties(node) for node in rewrite.select_nodes(tree)]
    if not any(changed):
        return sql
    try:
        row = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(tree)]).fetchone()
    except duckdb.Error:
        return sql
    return str(row[0]) if row else sql


def _wrap_bare(node: dict) -> bool:
    bare = rewrite.bare_columns(node)
    for i, by in bare:
        e = node["select_list"][i]
        fn = "any_value" if by is None else ("arg_" + by["function_name"].lower())
        args = [{"name": "", "expression": dict(e, alias="")}]
        if by is not None:
            args.append({"name": "", "expression": by["arguments"][0]["expression"]})
        node["select_list"][i] = {
            "class": "FUNCTION", "type": "FUNCTION", "alias": e["alias"] or e["column_names"][-1],
            "query_location": e["query_location"], "query_location_length": 0,
            "function_name": fn, "schema": "", "filter": None,
            "order_bys": {"type": "ORDER_MODIFIER", "orders": []}, "distinct": False,
            "is_operator": False, "export_state": False, "catalog": "", "arguments": args,
            "qualified_name": {"path": [fn]}, "is_legacy_function_call": False}
    return bool(bare)


def _break_ties(node: dict) -> bool:
    keys = rewrite.tie_keys(node)
    if keys is None:
        return False
    direction, groups = keys
    order = next(m for m in node["modifiers"] if m.get("type") == "ORDER_MODIFIER")
    order["orders"] += [{"type": direction, "null_order": "ORDER_DEFAULT",
                         "expression": dict(g, alias="")} for g in groups]
    return True
