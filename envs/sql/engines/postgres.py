"""The `postgres` engine: every episode gets its own clone of a template database.

- *template* `skyhub_tmpl_<db_id>_<hash of the file>`: the SQLite file's tables loaded once
  with COPY (any process; an advisory lock makes racing processes build it once), then
  frozen `IS_TEMPLATE true, ALLOW_CONNECTIONS false`, CONNECT revoked from PUBLIC: nobody
  connects to it, so nobody changes it. The flag set last marks a complete load.
- *clone* `skyhub_ep_<host>_<pid>_<n>`: `CREATE DATABASE ... TEMPLATE` (0.05-0.2 s) at each
  `begin_episode`, dropped at the next one and at `close()`; clones left by dead processes
  of this host are dropped when an engine starts.
- *role*: the agent connects as a login role made for the episode (named as the clone, in
  the NOLOGIN group `skyhub_agent`) that may CONNECT to its clone and SELECT its tables,
  nothing else: no CREATE (so no CREATE EXTENSION, functions, TEMP tables), no file or
  program access (COPY ... PROGRAM, pg_read_file, ALTER SYSTEM need roles it lacks), and
  even `ALTER ROLE <self> SET` dies with the episode.
Writes are refused, as on sqlite: an agent that could DELETE rows before its solution runs
would change the gold result too (an empty answer would score). Each statement runs in a
transaction that is rolled back, with `statement_timeout`, up to `max_rows` and `max_bytes`,
in a worker process of the engine's own (engines/postgres_session.py, engines/worker.py):
libpq reads a whole message before anyone sees its size, so a 300 MB value, or an error
message quoting one, costs that process (killed past its memory or deadline), not the host.

What an episode can see of others. The template revokes from PUBLIC (so in every clone):
the lock functions of advisory locks (session-level: a ROLLBACK keeps them, and thousands
fill the server's shared lock table; each statement also starts and ends with
`pg_advisory_unlock_all()`), and the catalogs and functions that list databases, roles and
sessions (`pg_database`, `pg_roles`, `pg_stat_activity`, `pg_locks`, ...: `_HIDDEN` in
engines/postgres_load.py). What PostgreSQL still shows: role names (a clone's is its role's)
through casts and functions any role may call (`oid::regrole`, `pg_get_userbyid(oid)`,
`has_database_privilege(...)`), which system views a schema explorer needs (`pg_tables`)
call. Those names carry nothing secret: `skyhub_ep_<host hash>_<pid>_<n>` for a clone and
its role, `skyhub_tmpl_<db_id>_<hash>` for a template (db_ids are the dataset's);
passwords are random per episode and only the superuser reads them; PostgreSQL shows a
session's query text only to its own role, and no episode role is a member of another.

Tables and columns are created in LOWER case: Spider's SQL, written for SQLite, is blind to
identifier case (`T1.Name`), and PostgreSQL folds unquoted names to lower case, so those
queries work; a quoted `"Name"` does not (the cost). Types follow the values stored, not
only the declared type (`pg_type`, engines/postgres_load.py): a TEXT column holding '2014'
stays text, as SQLite returns it. The C collation orders text as SQLite's BINARY does;
`numeric` results (sum/avg of integers) come back as int or float, as on SQLite. Views
are not copied (their SQL is SQLite's).

Gold SQL is SQLite's: `from_sqlite` rewrites what PostgreSQL reads otherwise or refuses
(engines/rewrite_postgres.py): SQLite's type affinity in comparisons (that '2014' column against
2014), bare columns in aggregates, the order of ties, JOIN without ON, subqueries in FROM
without an alias. Agents write PostgreSQL and get PostgreSQL's semantics.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import os
import re
import secrets
import socket
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from skyhub.envs.sql.errors import WorkerLost
from skyhub.errors import InfraError, SandboxUnavailable

from . import rewrite, rewrite_postgres
from .base import (
    MAX_BYTES,
    Engine,
    QueryResult,
    clip,
    sqlite_identifiers,
    standardize_sqlite_sql,
    text_problem,
)
from .postgres_load import (  # noqa: F401 - pg_type, TEMPLATE_PREFIX: the module's API
    GROUP,
    TEMPLATE_PREFIX,
    _load_template,
    _lower,
    pg_type,
    sqlite_columns,
    template_name,
)
from .worker import Worker

DEFAULT_DSN = "host=127.0.0.1 port=55432 user=postgres dbname=postgres"
CLONE_PREFIX = "skyhub_ep_"
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]
_HOW_TO = ("Start one with `bash scripts/services.sh` (PostgreSQL on 127.0.0.1:55432), or "
           "point SKYHUB_POSTGRES_DSN / dsn= at a server where this user may create roles "
           "and databases")
_counter = itertools.count(1)  # clone numbers in this process (next() is atomic)
_template_lock = threading.Lock()  # advisory locks do not exclude threads of one session
_templates: dict[tuple[str, str, int, int], str] = {}  # (dsn, path, size, mtime) -> name
_live: weakref.WeakSet[PostgresEngine] = weakref.WeakSet()
#: Words PostgreSQL reserves that SQLite lets a table or column be named unquoted.
_RESERVED = frozenset({
    "analyse", "analyze", "array", "asymmetric", "authorization", "binary", "both",
    "collation", "concurrently", "current_catalog", "current_role", "current_user", "do",
    "fetch", "freeze", "ilike", "lateral", "leading", "localtime", "localtimestamp", "only",
    "overlaps", "placing", "returning", "session_user", "similar", "some", "symmetric",
    "tablesample", "trailing", "user", "variadic", "verbose", "window"})
_QUOTED = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/|\"(?:[^\"]|\"\")*\"", re.S)


class PostgresEngine(Engine):
    name = "postgres"
    dialect = "PostgreSQL"

    def __init__(self, *, dsn: str | None = None, timeout_s: float = 5.0,
                 max_rows: int = 10_000, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(timeout_s=timeout_s, max_rows=max_rows, max_bytes=max_bytes)
        self.dsn = dsn or os.environ.get("SKYHUB_POSTGRES_DSN") or DEFAULT_DSN
        self._admin: psycopg.Connection[Any] | None = None
        self._lock = threading.RLock()
        self._db_id: str | None = None
        self._clone: str | None = None  # also the episode role's name
        self._conninfo = ""  # the episode role's, for the worker
        self._parser: Any = None  # a DuckDB connection: its parser reads the gold SQL
        self._worker = Worker("skyhub.envs.sql.engines.postgres_session:PGSession",
                              name="PostgreSQL query", rss_limit=4 * max_bytes + (256 << 20),
                              address_limit=4 * max_bytes + (1 << 30),
                              max_reply=2 * max_bytes + (1 << 20))
        admin = self._admin_con()
        with contextlib.suppress(psycopg.errors.DuplicateObject,
                                 psycopg.errors.UniqueViolation):  # two processes at once
            if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                 [GROUP]).fetchone():
                admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(GROUP)))
        self.reap()
        _live.add(self)

    @property
    def database(self) -> str | None:
        """The current episode's clone (also its role's name), None between episodes."""
        return self._clone

    def _admin_con(self) -> psycopg.Connection[Any]:
        """The engine's superuser connection (to the DSN's database), reopened if lost."""
        if self._admin is None or self._admin.closed or self._admin.broken:
            try:
                self._admin = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
            except psycopg.Error as e:
                raise SandboxUnavailable(
                    f"PostgreSQL at {self.dsn!r} does not answer ({_first_line(e)}). "
                    f"{_HOW_TO}.") from None
        return self._admin

    # ---------------------------------------------------------------- templates
    def template(self, db_id: str, sqlite_path: Path) -> str:
        """The template database for this SQLite file, built on first use (by any process)."""
        st = Path(sqlite_path).stat()
        key = (self.dsn, str(Path(sqlite_path).resolve()), st.st_size, st.st_mtime_ns)
        if key in _templates:
            return _templates[key]
        name = template_name(db_id, Path(sqlite_path))
        with _template_lock, psycopg.connect(self.dsn, autocommit=True) as lock_con:
            lock_con.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [name])
            row = lock_con.execute("SELECT datistemplate FROM pg_database WHERE datname = %s",
                                   [name]).fetchone()
            if row is None or not row[0]:  # absent, or left half-loaded by a crash
                if row is not None:
                    lock_con.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
                        sql.Identifier(name)))
                _load_template(lock_con, self.dsn, name, Path(sqlite_path))
        _templates[key] = name
        return name

    # ---------------------------------------------------------------- episodes
    def begin_episode(self, db_id: str, sqlite_path: Path) -> None:
        """Clone the template for this episode, then drop the previous clone and role."""
        try:
            tmpl = self.template(db_id, sqlite_path)
        except (psycopg.Error, sqlite3.Error) as e:
            raise InfraError(f"could not build the PostgreSQL template of {sqlite_path}: "
                             f"{_first_line(e)}") from e
        with self._lock:
            admin, old = self._admin_con(), self._clone
            self._disconnect()
            self._clone = self._db_id = None
            name = f"{CLONE_PREFIX}{_HOST}_{os.getpid()}_{next(_counter)}"
            password = secrets.token_hex(16)
            q = sql.Identifier(name)
            # FILE_COPY copies the files; the default WAL-logs every page (slow when large)
            strategy = " STRATEGY FILE_COPY" if admin.info.server_version >= 150000 else ""
            try:
                admin.execute(sql.SQL(
                    "CREATE ROLE {r} LOGIN PASSWORD {pw} NOSUPERUSER NOCREATEDB NOCREATEROLE "
                    "NOREPLICATION NOBYPASSRLS CONNECTION LIMIT 4 IN ROLE {g}; "
                    "ALTER ROLE {r} SET temp_file_limit = '1GB'").format(
                        r=q, pw=sql.Literal(password), g=sql.Identifier(GROUP)))
                self._clone = name  # from here on, close() drops what exists of it
                admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}" + strategy).format(
                    q, sql.Identifier(tmpl)))
                admin.execute(sql.SQL("REVOKE ALL ON DATABASE {d} FROM PUBLIC; "
                                      "GRANT CONNECT ON DATABASE {d} TO {d}").format(d=q))
                self._conninfo = make_conninfo(self.dsn, user=name, password=password,
                                               dbname=name)
                self._db_id = db_id
            except psycopg.Error as e:
                for k in [k for k, v in _templates.items() if v == tmpl]:
                    del _templates[k]  # dropped behind our back? rebuilt at the next try
                raise InfraError(f"could not create the episode database {name} from "
                                 f"{tmpl}: {_first_line(e)}") from e
            finally:
                # dropped last: by now the old session has exited, so DROP need not wait
                # (it polls for other sessions every 100 ms)
                if old is not None:
                    with contextlib.suppress(psycopg.Error):
                        _drop_clone(admin, old)

    def _disconnect(self) -> None:
        """Close the episode role's connection (in the worker, if one runs)."""
        self._conninfo = ""
        if self._worker.pid is not None:
            with contextlib.suppress(WorkerLost, RuntimeError):
                self._worker.call("disconnect", 5.0)

    def from_sqlite(self, db_id: str, sqlite_path: Path, sql_text: str) -> str:
        """SQLite's leniencies (`base.standardize_sqlite_sql`: "France" as a string, case-blind
        LIKE, words PostgreSQL reserves), quoted identifiers in lower case, as the tables
        are, a JOIN without ON as the cross join SQLite reads, an alias for a subquery in
        FROM, then what `rewrite_postgres.for_postgres` makes explicit: SQLite's bare columns in
        aggregates, its order of ties, and its type affinity in comparisons."""
        text = standardize_sqlite_sql(sql_text, sqlite_identifiers(sqlite_path), _RESERVED)
        text = _QUOTED.sub(lambda m: _lower(m.group(0)) if m.group(0)[0] == '"'
                           else m.group(0), text)
        text = rewrite.alias_subqueries(rewrite.cross_joins(text))
        st = Path(sqlite_path).stat()
        with self._lock:
            if self._parser is None:
                try:
                    import duckdb  # the SQL extra's; only its parser is used, in memory
                except ImportError:  # then only the rewrites above
                    return text
                self._parser = duckdb.connect(config={
                    "enable_external_access": False, "autoload_known_extensions": False,
                    "autoinstall_known_extensions": False})
            return rewrite_postgres.for_postgres(text, self._parser, sqlite_columns(
                Path(sqlite_path), st.st_size, st.st_mtime_ns))

    def execute(self, db_id: str, sqlite_path: Path, sql_text: str, *,
                max_rows: int | None = None) -> QueryResult:
        limit = self.max_rows if max_rows is None else max_rows
        if (problem := text_problem(sql_text)) is not None:
            return QueryResult(error=problem)
        with self._lock:
            if self._db_id != db_id or self._clone is None:
                self.begin_episode(db_id, sqlite_path)
            try:
                r = self._worker.call(
                    "execute", self.timeout_s + max(2.0, self.timeout_s / 2),
                    conninfo=self._conninfo, sql=sql_text, limit=limit,
                    timeout_s=self.timeout_s, max_bytes=self.max_bytes)
            except WorkerLost as e:  # what the statement did to its process: its failure
                if e.timed_out:
                    return QueryResult(error=f"query interrupted: it ran longer than "
                                       f"{self.timeout_s:g} s", timed_out=True)
                return QueryResult(error=f"the query was stopped: {e}")
            except RuntimeError as e:
                return QueryResult(error=clip(str(e)))
        if isinstance(r, dict):
            raise InfraError(f"lost the episode database {self._clone}: {r['lost']}")
        return r

    # ---------------------------------------------------------------- cleanup
    def close(self) -> None:
        """Drop the episode's clone and role and close the connections. Idempotent; the
        engine stays usable (the next episode reconnects)."""
        with self._lock:
            self._conninfo = ""
            self._worker.stop()  # its connection closed first: DROP need not wait
            if self._clone is not None:
                with contextlib.suppress(psycopg.Error, SandboxUnavailable):
                    _drop_clone(self._admin_con(), self._clone)
            self._clone = self._db_id = None
            if self._admin is not None:
                self._admin.close()
            if self._parser is not None:
                self._parser.close()
                self._parser = None

    def reap(self) -> list[str]:
        """Drop the clones and roles left by processes of this host that have died."""
        dead = []
        pat = f"{CLONE_PREFIX}{_HOST}_%"
        admin = self._admin_con()
        names = {r[0] for r in admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s UNION "
            "SELECT rolname FROM pg_roles WHERE rolname LIKE %s", [pat, pat])}
        for name in sorted(names):
            m = re.fullmatch(rf"{CLONE_PREFIX}{_HOST}_(\d+)_\d+", name)
            if m and not _pid_alive(int(m.group(1))):
                with contextlib.suppress(psycopg.Error):
                    _drop_clone(admin, name)
                    dead.append(name)
        return dead


def _drop_clone(admin: psycopg.Connection[Any], name: str) -> None:
    """Drop a clone (terminating its sessions) and the role of the same name."""
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
        sql.Identifier(name)))
    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        pass
    return True


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@atexit.register
def _close_all() -> None:
    for engine in list(_live):
        with contextlib.suppress(Exception):
            engine.close()


