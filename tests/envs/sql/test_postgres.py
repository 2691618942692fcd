"""engine="postgres": episodes on per-episode clones of a template, hostile queries that
stop at their limits and never reach the template or the server, cleanup of clones, and how
much of Spider's (SQLite) gold SQL runs on PostgreSQL. Needs a server: `bash
scripts/services.sh` (the `postgres_dsn` fixture skips, or fails under
SKYHUB_REQUIRE_POSTGRES=1, without one)."""

from __future__ import annotations

import collections
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import skyhub
from skyhub.envs.sql.engines import postgres as pg
from skyhub.envs.sql.engines import rewrite, rewrite_postgres
from skyhub.envs.sql.engines.postgres import PostgresEngine, pg_type, template_name
from skyhub.envs.sql.env import SQLEnv
from skyhub.envs.sql.reward import has_order_by, spider_exec_match
from skyhub.errors import SandboxUnavailable

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import spider_db, start

pytestmark = pytest.mark.postgres

THINK = "<think>checking</think>"
CLOSED_DSN = "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=2"


@pytest.fixture
def engine(postgres_dsn: str) -> Iterator[PostgresEngine]:
    with closing(PostgresEngine(dsn=postgres_dsn, timeout_s=1.0)) as e:
        yield e


@pytest.fixture
def env(postgres_dsn: str) -> Iterator[SQLEnv]:
    with skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn, query_timeout_s=1.0) as e:
        yield e  # type: ignore[misc]


def sqlite_counts(path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = "
                                           "'table' AND name NOT LIKE 'sqlite_%'")]
        return {n.lower(): con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]
                for n in names}
    finally:
        con.close()


def pg_counts(engine: PostgresEngine, db: str) -> dict[str, int]:
    out = {}
    for t in sqlite_counts(spider_db(db)):
        r = engine.execute(db, spider_db(db), f'SELECT count(*) FROM "{t}"')
        assert r.ok, r.error
        out[t] = r.rows[0][0]
    return out


def exists(admin: psycopg.Connection, name: str) -> tuple[bool, bool]:
    """(a database of that name exists, a role of that name exists)"""
    db = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    role = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name]).fetchone()
    return db is not None, role is not None


def drop_template(admin: psycopg.Connection, name: str) -> None:
    admin.execute(sql.SQL("ALTER DATABASE {} IS_TEMPLATE false").format(sql.Identifier(name)))
    admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
    for k in [k for k, v in pg._templates.items() if v == name]:
        del pg._templates[k]


# ---------------------------------------------------------------------------- episodes
def test_episode_end_to_end(env: SQLEnv) -> None:
    obs = start(env, "concert_singer")
    assert "PostgreSQL" in obs and "CREATE TABLE" in obs
    obs, r, term, _, info = env.step(f"{THINK}<sql>SELECT count(*) FROM Singer</sql>")
    assert "6" in obs and not info["sql_error"] and (r, term) == (0.0, False)
    _, r, term, _, info = env.step(env.reference_action() or "")
    assert (r, term, info["outcome"]) == (1.0, True, "success")


def test_writes_are_refused_and_the_next_episode_sees_the_original(postgres_dsn: str) -> None:
    env = skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn, max_turns=20)
    assert isinstance(env, SQLEnv)
    start(env, "concert_singer")
    for stmt in ["DROP TABLE singer", "UPDATE singer SET age = 0", "DELETE FROM concert",
                 "INSERT INTO stadium (stadium_id) VALUES (99)", "TRUNCATE singer_in_concert",
                 "ALTER TABLE singer ADD COLUMN x int", "CREATE TABLE t (a int)"]:
        obs, *_ = env.step(f"{THINK}<sql>{stmt}</sql>")
        assert "Error:" in obs, (stmt, obs)
    # a write that got past the role (simulated as the superuser) stays in this clone
    engine = env.engine
    assert isinstance(engine, PostgresEngine) and engine.database
    with psycopg.connect(engine.dsn, dbname=engine.database, autocommit=True) as con:
        con.execute("DELETE FROM singer; DROP TABLE stadium CASCADE")
    assert "Error:" in env.step(f"{THINK}<sql>SELECT * FROM stadium</sql>")[0]
    start(env, "concert_singer")
    assert pg_counts(engine, "concert_singer") == sqlite_counts(spider_db("concert_singer"))
    env.close()


def test_the_template_is_frozen_and_unreachable(
        engine: PostgresEngine, admin: psycopg.Connection, postgres_dsn: str) -> None:
    tmpl = engine.template("concert_singer", spider_db("concert_singer"))
    row = admin.execute("SELECT datistemplate, datallowconn, datacl FROM pg_database "
                        "WHERE datname = %s", [tmpl]).fetchone()
    assert row is not None and row[:2] == (True, False)
    assert not any(a.startswith("=") for a in row[2] or [])  # no grant to PUBLIC
    engine.begin_episode("concert_singer", spider_db("concert_singer"))
    role = engine.database
    with pytest.raises(psycopg.OperationalError):  # not even the superuser gets in
        psycopg.connect(postgres_dsn, dbname=tmpl, connect_timeout=3)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_dsn, dbname=tmpl, user=role, connect_timeout=3)
    # another episode's clone: no CONNECT for this episode's role
    with closing(PostgresEngine(dsn=postgres_dsn)) as other:
        other.begin_episode("pets_1", spider_db("pets_1"))
        with pytest.raises(psycopg.OperationalError, match="permission denied"):
            psycopg.connect(postgres_dsn, dbname=other.database, user=role, password="",
                            connect_timeout=3)


# ---------------------------------------------------------------------------- limits
RUNAWAY = {
    "recursive CTE": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                     "SELECT count(*) FROM r",
    "cross join": "SELECT count(*) FROM city a, city b, city c",
    "sleep": "SELECT pg_sleep(30)",
    "timeout switched off inside": "SELECT set_config('statement_timeout', '0', false), "
                                   "pg_sleep(30)",
    "plpgsql loop": "DO $$ BEGIN LOOP END LOOP; END $$",
}


@pytest.mark.parametrize("query", list(RUNAWAY.values()), ids=list(RUNAWAY))
def test_runaway_queries_stop_at_the_timeout(engine: PostgresEngine, query: str) -> None:
    t = time.monotonic()
    r = engine.execute("world_1", spider_db("world_1"), query)
    assert r.timed_out and r.error and r.error.startswith("query interrupted"), r
    assert time.monotonic() - t < 4.0
    assert engine.execute("world_1", spider_db("world_1"), "SELECT 1").rows == [(1,)]
    assert engine.execute("world_1", spider_db("world_1"), "SHOW statement_timeout").rows \
        == [("1s",)]


def test_runaway_query_gives_an_observation(env: SQLEnv) -> None:
    start(env, "world_1")
    obs, _, term, _, info = env.step(f"{THINK}<sql>{RUNAWAY['cross join']}</sql>")
    assert "query interrupted" in obs and not term and info["sql_error"]
    assert "4079" in env.step(f"{THINK}<sql>SELECT count(*) FROM city</sql>")[0]


def test_a_huge_result_is_cut_at_max_rows(engine: PostgresEngine) -> None:
    t = time.monotonic()
    r = engine.execute("world_1", spider_db("world_1"), "SELECT * FROM city a, city b",
                       max_rows=10)
    assert r.ok and r.truncated and len(r.rows) == 10 and time.monotonic() - t < 2.0


@pytest.mark.parametrize("text", ["SELECT '\udcff'", "SELECT 'a\x00b'", "SELECT 1; SELECT 2"])
def test_malformed_text_gives_an_error_observation(env: SQLEnv, text: str) -> None:
    start(env, "concert_singer")
    obs, _, term, _, info = env.step(f"{THINK}<sql>{text}</sql>")
    assert "Error:" in obs and info["sql_error"] and not term


ESCAPES = [
    "COPY singer TO PROGRAM 'id'", "COPY singer FROM PROGRAM 'id'", "COPY singer TO '/tmp/x'",
    "SELECT pg_read_file('/etc/passwd')", "SELECT pg_ls_dir('.')",
    "SELECT lo_import('/etc/passwd')", "CREATE EXTENSION dblink", "CREATE EXTENSION pgcrypto",
    "SELECT dblink_connect('dbname=postgres')", "ALTER SYSTEM SET work_mem = '1GB'",
    "SET ROLE postgres", "CREATE TEMP TABLE t (a int)",
    "CREATE FUNCTION f() RETURNS int AS 'SELECT 1' LANGUAGE sql",
    "ALTER DATABASE CURRENT SET work_mem = '1GB'", "COPY singer TO STDOUT",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
    "SELECT pg_reload_conf()",
]


@pytest.mark.parametrize("stmt", ESCAPES)
def test_statements_reaching_outside_are_refused(
        engine: PostgresEngine, admin: psycopg.Connection, stmt: str) -> None:
    db = spider_db("concert_singer")
    r = engine.execute("concert_singer", db, stmt)
    assert not r.ok and r.error, (stmt, r)
    assert engine.execute("concert_singer", db, "SELECT count(*) FROM singer").rows == [(6,)]
    assert admin.execute("SELECT 1").fetchone() == (1,)  # the superuser session survived


def test_killing_its_own_session_is_an_error_and_the_next_statement_reconnects(
        engine: PostgresEngine) -> None:
    db = spider_db("concert_singer")
    r = engine.execute("concert_singer", db, "SELECT pg_terminate_backend(pg_backend_pid())")
    assert not r.ok and "terminating" in (r.error or "")
    assert engine.execute("concert_singer", db, "SELECT count(*) FROM singer").rows == [(6,)]


def test_results_are_python_numbers(engine: PostgresEngine) -> None:
    r = engine.execute("concert_singer", spider_db("concert_singer"),
                       "SELECT sum(age), avg(age), count(*) FROM singer")
    assert r.rows == [(222, 37.0, 6)] and [type(v) for v in r.rows[0]] == [int, float, int]


# ---------------------------------------------------------------------------- cleanup
def test_close_drops_the_clone_and_its_role(postgres_dsn: str,
                                            admin: psycopg.Connection) -> None:
    engine = PostgresEngine(dsn=postgres_dsn)
    engine.begin_episode("pets_1", spider_db("pets_1"))
    first = engine.database
    assert first and exists(admin, first) == (True, True)
    engine.begin_episode("pets_1", spider_db("pets_1"))
    second = engine.database
    assert second and second != first and exists(admin, first) == (False, False)
    engine.close()
    engine.close()
    assert exists(admin, second) == (False, False) and engine.database is None
    assert engine.execute("pets_1", spider_db("pets_1"), "SELECT 1").rows == [(1,)]  # reusable
    engine.close()


def test_clones_of_dead_processes_are_dropped(postgres_dsn: str,
                                              admin: psycopg.Connection) -> None:
    with closing(PostgresEngine(dsn=postgres_dsn)) as engine:
        tmpl = engine.template("pets_1", spider_db("pets_1"))
    proc = subprocess.Popen(["true"])
    proc.wait()
    dead = f"{pg.CLONE_PREFIX}{pg._HOST}_{proc.pid}_1"
    alive = f"{pg.CLONE_PREFIX}{pg._HOST}_{os.getpid()}_999999999"
    for name in (dead, alive):
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(tmpl)))
    try:
        with closing(PostgresEngine(dsn=postgres_dsn)):
            assert exists(admin, dead) == (False, False)
            assert exists(admin, alive) == (True, True)
    finally:
        pg._drop_clone(admin, alive)
        pg._drop_clone(admin, dead)


def test_no_server_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SandboxUnavailable, match=r"scripts/services\.sh.*SKYHUB_POSTGRES_DSN"):
        PostgresEngine(dsn=CLOSED_DSN)
    monkeypatch.setenv("SKYHUB_POSTGRES_DSN", CLOSED_DSN)
    with pytest.raises(SandboxUnavailable, match="port=1"):
        PostgresEngine()
    with pytest.raises(SandboxUnavailable):
        skyhub.make("sql-spider", engine="postgres")


# ---------------------------------------------------------------------------- loading
def test_types_follow_the_stored_values() -> None:
    assert pg_type("INTEGER", {"integer"}) == "bigint"
    assert pg_type("INTEGER", {"integer", "text"}) == "text"
    assert pg_type("REAL", {"integer", "real"}) == "double precision"
    assert pg_type("TEXT", {"text"}) == "text"
    assert pg_type("", {"blob"}) == "bytea"
    assert pg_type("int(11)", set()) == "bigint"
    assert pg_type("decimal(10,2)", set()) == "double precision"
    assert pg_type("BLOB", set()) == "bytea"
    assert pg_type("datetime", set()) == "text"
    name = template_name("x" * 100, spider_db("pets_1"))
    assert len(name.encode()) <= 63 and name.startswith("skyhub_tmpl_xxx")


def make_sqlite(path: Path, tag: str) -> Path:
    con = sqlite3.connect(path)
    con.executescript(f"""
        CREATE TABLE "Mixed Table" ("Id" INTEGER PRIMARY KEY, "Score" INTEGER, "Ratio" REAL,
            "Note" TEXT, "Data" BLOB, "Empty" INTEGER, "Big" NUMERIC, "Untyped");
        INSERT INTO "Mixed Table" VALUES (1, 10, 1, 'plain', x'00ff', NULL, 4611686018427387904, 1);
        INSERT INTO "Mixed Table" VALUES (2, 'n/a', 2.5, 'nul' || char(0) || 'in', x'01', NULL,
            1, 'text');
        INSERT INTO "Mixed Table" VALUES (3, NULL, NULL, CAST(x'c328' AS TEXT), NULL, NULL, 2,
            NULL);
        CREATE TABLE Other (k TEXT);
        INSERT INTO Other VALUES ('{tag}');
    """)
    con.commit()
    con.close()
    return path


def test_a_dynamically_typed_mixed_case_database_loads(
        tmp_path: Path, engine: PostgresEngine, admin: psycopg.Connection) -> None:
    db = make_sqlite(tmp_path / "mixed.sqlite", "fixed")
    tmpl = engine.template("mixed", db)
    try:
        r = engine.execute("mixed", db, "SELECT column_name, data_type FROM "
                           "information_schema.columns WHERE table_name = 'mixed table' "
                           "ORDER BY ordinal_position")
        assert r.rows == [("id", "bigint"), ("score", "text"), ("ratio", "double precision"),
                          ("note", "text"), ("data", "bytea"), ("empty", "bigint"),
                          ("big", "bigint"), ("untyped", "text")]
        r = engine.execute("mixed", db, 'SELECT Id, Score, Ratio, Note, Data, Big, Untyped '
                           'FROM "mixed table" ORDER BY id')
        assert r.rows == [(1, "10", 1.0, "plain", b"\x00\xff", 4611686018427387904, "1"),
                          (2, "n/a", 2.5, "nulin", b"\x01", 1, "text"),
                          (3, None, None, "\ufffd(", None, 2, None)]
        assert not engine.execute("mixed", db, 'SELECT "Id" FROM "Mixed Table"').ok
    finally:
        engine.close()
        drop_template(admin, tmpl)


_BUILD = """
import sys
from contextlib import closing
from pathlib import Path
from skyhub.envs.sql.engines.postgres import PostgresEngine
with closing(PostgresEngine(dsn=sys.argv[1])) as e:
    r = e.execute("mixed", Path(sys.argv[2]), "SELECT k FROM other")
    print(e.template("mixed", Path(sys.argv[2])), r.rows[0][0])
"""


def test_processes_racing_for_a_new_template_build_it_once(
        tmp_path: Path, postgres_dsn: str, admin: psycopg.Connection) -> None:
    tag = uuid.uuid4().hex
    db = make_sqlite(tmp_path / "race.sqlite", tag)
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD, postgres_dsn, str(db)],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(outs) == 1
    tmpl, seen = outs.pop().split()
    assert seen == tag
    drop_template(admin, tmpl)


def test_from_sqlite_rewrites_sqlite_leniencies(engine: PostgresEngine) -> None:
    db = spider_db("world_1")
    out = engine.from_sqlite("world_1", db, 'SELECT "Name" FROM country WHERE Continent = '
                             '"Asia" AND "Name" LIKE \'%a%\' -- "Keep"')
    assert out == ('SELECT "name" FROM country WHERE Continent = \'Asia\' AND "name" ILIKE '
                   '\'%a%\' -- "Keep"')
    assert engine.execute("world_1", db, out).ok


# ---------------------------------------------------------------------------- Spider gold
def test_spider_gold_sql_on_postgres(postgres_dsn: str) -> None:
    """How many of the 972 gold queries (SQLite SQL through `from_sqlite`) run on
    PostgreSQL. Running is what counts: gold and solution run on the same engine, so the
    reference action scores 1 exactly when the gold query runs (checked through the env
    on one task per database). Every failure is printed: SQLite-isms PostgreSQL refuses
    that `from_sqlite` does not rewrite (it rewrites text/number comparisons, bare columns
    in GROUP BY, JOIN without ON, subqueries without alias: see engines/rewrite.py)."""
    with skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn) as env:
        engine = env.engine
        by_db = collections.defaultdict(list)
        for task in env.tasks:
            by_db[task.meta["db_id"]].append(task)
        failures = []
        for db, tasks in by_db.items():
            path = env.data.db_path(db)
            for task in tasks:
                r = engine.execute(db, path, engine.from_sqlite(db, path, str(task.answer)),
                                   max_rows=100_000)
                if not r.ok or r.truncated:
                    failures.append((task.id, db, r.error, task.answer))
            ok = next(t for t in tasks if t.id not in {f[0] for f in failures})
            env.reset(options={"task_id": ok.id})
            assert env.step(env.reference_action() or "")[1] == 1.0, ok.answer
    rate = 1 - len(failures) / len(env.tasks)
    kinds = collections.Counter(_kind(f[2] or "") for f in failures)
    print(f"\npostgres: {rate:.2%} of {len(env.tasks)} Spider gold queries run; failures: "
          f"{dict(kinds)}")
    for f in failures:
        print("  FAIL", *f)
    assert len(env.tasks) == 972
    assert rate >= 0.99  # measured 1.000 (0.877 before the rewrite of engines/rewrite.py)


def _kind(error: str) -> str:
    if "GROUP BY" in error:
        return "bare column in GROUP BY"
    if "operator does not exist" in error or "function" in error:
        return "text vs number"
    return "other"


# ---------------------------------------------------------------------------- gold rewrite
_AFFINITY_DB = """
    CREATE TABLE a (id INTEGER PRIMARY KEY, name TEXT, year TEXT, code VARCHAR(5), score TEXT);
    INSERT INTO a VALUES (1, 'ann', '2014', '9', '12abc'), (2, 'bob', '2015', '10', 'null'),
        (3, 'cy', '2014', '007', '3.5'), (4, 'di', '2015', '12', NULL);
    CREATE TABLE b (a_id TEXT, v INTEGER);
    INSERT INTO b VALUES ('1', 7), ('2', 10), ('2', 3), ('3', 12);
"""


@pytest.mark.parametrize("query", [
    # type affinity: a TEXT column against an INTEGER one compares numbers ('007' = 7) ...
    "SELECT count(*) FROM b JOIN a ON b.a_id = a.id",
    "SELECT name FROM a WHERE id NOT IN (SELECT a_id FROM b)",
    "SELECT a.name, b.v FROM a JOIN b ON a.code = b.v",
    # ... against a number without affinity compares text ('9' > '8' but not '10' > '8')
    "SELECT name FROM a WHERE code > 8",
    "SELECT name FROM a WHERE code = 7",
    "SELECT name FROM a WHERE code IN (9, 10)",
    "SELECT name FROM a WHERE code < (SELECT count(*) FROM b)",
    "SELECT name, year + 1 FROM a WHERE year BETWEEN 2014 AND 2014",
    "SELECT name FROM a WHERE id LIKE '1%'",
    # text read as numbers by sum/avg: '12abc' -> 12, 'null' -> 0
    "SELECT avg(score), sum(score) FROM a",
    # bare columns: from the row of the only max(), else from the group
    "SELECT a.name, max(b.v) FROM a JOIN b ON a.id = b.a_id",
    "SELECT a.name, count(*) FROM b JOIN a ON b.a_id = a.id GROUP BY b.a_id",
    # ties: in SQLite's order
    "SELECT year FROM a GROUP BY year ORDER BY count(*) DESC LIMIT 1",
    "SELECT year FROM a GROUP BY year ORDER BY count(*) LIMIT 1",
    "SELECT name FROM a ORDER BY year DESC",
    # a JOIN without ON; a subquery in FROM without an alias
    "SELECT name FROM a JOIN b WHERE b.v = 7",
    "SELECT count(*) FROM (SELECT year FROM a INTERSECT SELECT year FROM a)",
])
def test_gold_sql_gives_sqlite_results(tmp_path: Path, engine: PostgresEngine,
                                       admin: psycopg.Connection, query: str) -> None:
    from skyhub.envs.sql.engines.sqlite import SQLiteEngine

    db = tmp_path / "affinity.sqlite"
    with closing(sqlite3.connect(db)) as con:
        con.executescript(_AFFINITY_DB)
    with closing(SQLiteEngine()) as lite:
        want = lite.execute("affinity", db, query)
    assert want.ok, want.error
    tmpl = engine.template("affinity", db)
    try:
        gold = engine.from_sqlite("affinity", db, query)
        got = engine.execute("affinity", db, gold)
        assert got.ok, (gold, got.error)
        assert spider_exec_match(got.rows, want.rows, order_matters=has_order_by(query)), gold
    finally:
        engine.close()
        drop_template(admin, tmpl)


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT a FROM t1 JOIN t2 WHERE x", "SELECT a FROM t1 CROSS JOIN t2 WHERE x"),
    ("SELECT a FROM t1 AS T1 INNER JOIN t2 AS T2 JOIN t3 ON T2.k = t3.k",
     "SELECT a FROM t1 AS T1 CROSS JOIN t2 AS T2 JOIN t3 ON T2.k = t3.k"),
    ("SELECT a FROM t1 JOIN t2 USING (k) LEFT JOIN t3 ON 1 = 1 NATURAL JOIN t4", None),
    ("SELECT 'x JOIN y WHERE' FROM t1 JOIN t2 t ON t.a = 1", None),
])
def test_a_join_without_on_is_a_cross_join(sql: str, expected: str | None) -> None:
    assert rewrite.cross_joins(sql) == (expected or sql)


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT count(*) FROM (SELECT a FROM t INTERSECT SELECT a FROM u)",
     "SELECT count(*) FROM (SELECT a FROM t INTERSECT SELECT a FROM u) AS _subquery1"),
    ("SELECT * FROM (SELECT 1) JOIN (SELECT 2) ON true WHERE x IN (SELECT 3)",
     "SELECT * FROM (SELECT 1) AS _subquery1 JOIN (SELECT 2) AS _subquery2 ON true WHERE x "
     "IN (SELECT 3)"),
    ("SELECT * FROM (SELECT 1) s, (SELECT 2) AS t", None),
])
def test_a_subquery_in_from_gets_an_alias(sql: str, expected: str | None) -> None:
    assert rewrite.alias_subqueries(sql) == (expected or sql)


class _Schema:
    """t(id INTEGER, name TEXT, year TEXT holding '2014'...), u(t_id TEXT holding ids)."""

    def __init__(self) -> None:
        def col(table: str, name: str, aff: str, kind: str) -> rewrite_postgres.Column:
            return rewrite_postgres.Column(table, name, aff, kind)
        self.tables = {
            "t": {"id": col("t", "id", "INTEGER", "number"),
                  "name": col("t", "name", "TEXT", "text"),
                  "year": col("t", "year", "TEXT", "text")},
            "u": {"t_id": col("u", "t_id", "TEXT", "text")}}

    def table(self, name: str) -> dict[str, rewrite_postgres.Column] | None:
        return self.tables.get(name)

    def converts(self, column: rewrite_postgres.Column) -> bool:
        return True


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT name FROM t WHERE year > 2014", "SELECT name FROM t WHERE year > '2014'"),
    ("SELECT name FROM t WHERE year IN (2014, 2.0)",
     "SELECT name FROM t WHERE year IN ('2014', '2.0')"),
    ("SELECT count(*) FROM t JOIN u ON t.id = u.t_id",
     "SELECT count(*) FROM t JOIN u ON t.id = CAST(u.t_id AS numeric)"),
    ("SELECT name FROM t WHERE id NOT IN (SELECT t_id FROM u)",
     "SELECT name FROM t WHERE id NOT IN (SELECT CAST(t_id AS numeric) FROM u)"),
    ("SELECT name FROM t WHERE year < (SELECT count(*) FROM u)",
     "SELECT name FROM t WHERE year < (SELECT CAST(count(*) AS text) FROM u)"),
    ("SELECT T1.name, count(*) FROM u AS T2 JOIN t AS T1 ON T1.id = T2.t_id GROUP BY T2.t_id "
     "ORDER BY count(*) DESC LIMIT 1",
     'SELECT (array_agg(T1.name))[1] AS "name", count(*) FROM u AS T2 JOIN t AS T1 ON '
     "T1.id = CAST(T2.t_id AS numeric) GROUP BY T2.t_id ORDER BY count(*) DESC, T2.t_id DESC "
     "NULLS LAST LIMIT 1"),
    ("SELECT name, max(id) FROM t",
     'SELECT (array_agg(name ORDER BY id DESC NULLS LAST))[1] AS "name", max(id) FROM t'),
    ("SELECT name FROM t ORDER BY year DESC LIMIT 2",
     "SELECT name FROM t ORDER BY year DESC, ctid LIMIT 2"),
    ("SELECT name FROM t WHERE name = 'x'", None),  # nothing to do: unchanged
    ("SELECT a FROM t WHERE 'unterminated", None),  # DuckDB cannot parse it: unchanged
])
def test_sqlite_semantics_are_spliced_into_the_gold_sql(sql: str, expected: str | None) -> None:
    import duckdb

    with closing(duckdb.connect()) as con:
        assert rewrite_postgres.for_postgres(sql, con, _Schema()) == (expected or sql)
