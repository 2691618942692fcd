"""sql-spider on DuckDB: the cached copies of the SQLite files, hostile queries that never
change any database, time limits, and the SQLite-to-DuckDB rewrite of gold queries."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.sql.datasets.spider import BUNDLED_DIR
from skyhub.envs.sql.engines import duckdb as engine_mod
from skyhub.envs.sql.engines.duckdb import DuckDBEngine, duck_type, ensure_copy
from skyhub.envs.sql.env import SQLEnv

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import start

THINK = "<think>checking</think>"


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private cache ($SKYHUB_CACHE) so tests neither read nor fill ~/.cache."""
    root = tmp_path_factory.mktemp("skyhub-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYHUB_CACHE", str(root))
        yield root / "duckdb"


@pytest.fixture
def env() -> Iterator[SQLEnv]:
    with skyhub.make("sql-spider", engine="duckdb", query_timeout_s=1.0) as e:
        yield e  # type: ignore[misc]


def ask(env: SQLEnv, sql: str) -> tuple[str, dict]:
    obs, r, term, trunc, info = env.step(f"{THINK}<sql>{sql}</sql>")
    assert obs.startswith("<observation>") and not (term or trunc) and r == 0.0
    return obs, info


def hashes(*dirs: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs for p in sorted(d.rglob("*")) if p.is_file() and "lock" not in p.name}


def test_first_observation_names_duckdb_and_queries_run(env: SQLEnv) -> None:
    assert "DuckDB" in start(env)
    obs, info = ask(env, "SELECT count(*) FROM Student")
    assert "34" in obs and info["sql_error"] is False
    obs, _ = ask(env, "SELECT a.StuID FROM Student a, Student b")
    assert "more rows" in obs and obs.count("\n") < 70


@pytest.mark.parametrize("db", ["pets_1", "world_1", "dog_kennels", "orchestra", "car_1"])
def test_reference_episodes_succeed(env: SQLEnv, db: str) -> None:
    for task in [t for t in env.tasks if t.meta["db_id"] == db][:6]:
        env.reset(options={"task_id": task.id})
        gold = env.gold_result()
        if not gold.ok:  # a SQLite-only gold (see test_engines_agree): not the agent's fault
            continue
        _, r, term, _, info = env.step(env.reference_action() or "")
        assert (r, term, info["outcome"]) == (1.0, True, "success"), (task.answer, info)


def test_gold_solution_scores_one_on_every_task() -> None:
    """Whole episodes of the oracle, as test_spider_gold on sqlite. The golds DuckDB cannot
    run (text compared with numbers: see test_engines_agree) are scored against SQLite's
    gold result, and their reference action returns it as a literal table."""
    with skyhub.make("sql-spider", engine="duckdb") as env:
        failures = []
        for task in env.tasks:
            env.reset(options={"task_id": task.id})
            _, r, term, _, info = env.step(env.reference_action() or "")
            assert term
            if r != 1.0:
                failures.append((task.id, r, info.get("error") or info.get("solution_error")))
        rate = 1 - len(failures) / len(env.tasks)
        print(f"\nduckdb: gold solution reward 1 on {rate:.2%} of {len(env.tasks)} episodes")
        for f in failures:
            print("  FAIL", *f)
        assert not failures


HOSTILE = {
    "drop": "DROP TABLE Student",
    "update": "UPDATE Student SET Age = 0",
    "delete": "DELETE FROM Pets",
    "insert": "INSERT INTO Pets VALUES (1, 'x', 1, 1)",
    "create": "CREATE TABLE evil AS SELECT 1",
    "temp table shadowing": "CREATE TEMP TABLE Student AS SELECT 1 AS StuID",
    "explain analyze create": "EXPLAIN ANALYZE CREATE TEMP TABLE Student AS SELECT 1 AS x",
    "attach file": "ATTACH '{tmp}/evil.duckdb' AS evil",
    "attach memory": "ATTACH ':memory:' AS m",
    "detach": "DETACH DATABASE m",
    "install": "INSTALL sqlite",
    "load": "LOAD sqlite",
    "copy to": "COPY Student TO '{tmp}/out.csv'",
    "export": "EXPORT DATABASE '{tmp}/export'",
    "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
    "read_text": "SELECT * FROM read_text('/etc/passwd')",
    "glob": "SELECT * FROM glob('/etc/*')",
    "replacement scan": "SELECT * FROM '/etc/passwd'",
    "set": "SET threads = 8",
    "set external access": "SET enable_external_access = true",
    "reset": "RESET memory_limit",
    "pragma write": "PRAGMA threads = 4",
    "pragma profiling": "PRAGMA enable_profiling",
    "begin": "BEGIN TRANSACTION",
    "checkpoint": "CHECKPOINT",
    "secret": "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "endless cte": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                   "SELECT count(*) FROM c",
    # 34^8 rows (DuckDB counts the sqlite test's 34^6 within the second)
    "cross join": "SELECT count(*) FROM Student a, Student b, Student c, Student d, Student e, "
                  "Student f, Student g, Student h WHERE a.Age + b.Age + c.Age + d.Age + "
                  "e.Age + f.Age + g.Age + h.Age > 0",
    "huge sort": "SELECT a.LName || b.LName || c.LName || d.LName AS s FROM Student a, "
                 "Student b, Student c, Student d, Student e ORDER BY s DESC",
    "huge aggregate": "SELECT string_agg(repeat('x', 1000), '') FROM range(100000000)",
    "two statements": "SELECT 1; DROP TABLE Student",
    "invalid utf-8": "SELECT '\udcff\udcfe'",
    "nul": "SELECT 1\x00; DROP TABLE Student",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_query_is_contained_and_the_databases_are_untouched(
        env: SQLEnv, name: str, cache: Path, tmp_path: Path) -> None:
    start(env)  # builds the copy
    before = hashes(BUNDLED_DIR / "database", cache)
    t0 = time.monotonic()
    obs, info = ask(env, HOSTILE[name].format(tmp=tmp_path))
    assert info["sql_error"] is True, obs
    assert "Error:" in obs
    assert time.monotonic() - t0 < 10
    if name in ("endless cte", "cross join"):
        assert "interrupted" in obs
    assert list(tmp_path.iterdir()) == []  # nothing written outside
    # later statements, and the next episode, see the original database
    assert "34" in ask(env, "SELECT count(*) FROM Student")[0]
    start(env)
    obs, _ = ask(env, "SELECT count(*) AS n, min(StuID) AS m FROM Student")
    assert "34" in obs and "1001" in obs
    assert hashes(BUNDLED_DIR / "database", cache) == before


def test_the_gold_query_cannot_be_shadowed_by_the_agent(env: SQLEnv) -> None:
    """A TEMP table named like a real one would change what the gold query returns."""
    start(env)
    ask(env, "CREATE TEMP TABLE Student AS SELECT 1 AS StuID WHERE false")
    gold = env.gold_result()
    assert gold.ok and gold.rows and gold.rows != [(0,)]


def test_an_interrupt_ends_a_long_query_on_time() -> None:
    eng = DuckDBEngine(timeout_s=0.5)
    path = BUNDLED_DIR / "database" / "world_1" / "world_1.sqlite"
    try:
        for sql in ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                    "SELECT max(x) FROM c",
                    "SELECT count(*) FROM city a, city b, city c"):
            t0 = time.monotonic()
            r = eng.execute("world_1", path, sql)
            assert r.timed_out and "interrupted" in (r.error or ""), r
            assert time.monotonic() - t0 < 5
        r = eng.execute("world_1", path, "SELECT a.Name FROM city a, city b, city c", max_rows=5)
        assert r.ok and r.truncated and len(r.rows) == 5  # streamed: no need to finish
        assert eng.execute("world_1", path, "SELECT count(*) FROM city").rows == [(4079,)]
    finally:
        eng.close()


def test_nested_values_come_back_hashable() -> None:
    eng = DuckDBEngine()
    path = BUNDLED_DIR / "database" / "pets_1" / "pets_1.sqlite"
    try:
        r = eng.execute("pets_1", path, "SELECT list(PetID) AS l, {'a': 1} AS s FROM Pets")
        assert r.ok and isinstance(r.rows[0][0], str) and hash(r.rows[0])
    finally:
        eng.close()


# ------------------------------------------------------------------ the cache
def mini_spider(root: Path, db: str = "pets_1") -> Path:
    """A Spider-layout data_dir with one database (a copy) and two questions."""
    (root / "database" / db).mkdir(parents=True)
    path = root / "database" / db / f"{db}.sqlite"
    shutil.copyfile(BUNDLED_DIR / "database" / db / f"{db}.sqlite", path)
    (root / "dev.json").write_text(json.dumps([
        {"db_id": db, "question": "How many pets?", "query": "SELECT count(*) FROM Pets"},
        {"db_id": db, "question": "Oldest pet?", "query": 'SELECT max(pet_age) FROM Pets'}]))
    (root / "tables.json").write_text("[]")
    return path


def count_pets(data_dir: Path) -> str:
    with skyhub.make("sql-spider", engine="duckdb", data_dir=data_dir) as e:
        e.reset(options={"task_id": "spider-dev-0"})
        _, r, *_ = e.step(e.reference_action() or "")
        assert r == 1.0
        e.reset(options={"task_id": "spider-dev-0"})
        return e.step(f"{THINK}<sql>SELECT count(*) FROM Pets</sql>")[0]


def test_the_copy_is_reused_and_rebuilt_when_the_sqlite_file_changes(
        tmp_path: Path, cache: Path) -> None:
    path = mini_spider(tmp_path / "spider")
    assert "3" in count_pets(tmp_path / "spider")
    copies = sorted(cache.glob("pets_1-*.duckdb"))
    stamp = {p: p.stat().st_mtime_ns for p in copies}
    assert "3" in count_pets(tmp_path / "spider")  # a second env: nothing rebuilt
    assert {p: p.stat().st_mtime_ns for p in cache.glob("pets_1-*.duckdb")} == stamp

    with sqlite3.connect(path) as con:
        con.execute("INSERT INTO Pets VALUES (9999, 'cat', 1, 1)")
    con.close()
    assert "4" in count_pets(tmp_path / "spider")
    assert len(list(cache.glob("pets_1-*.duckdb"))) == len(copies) + 1
    assert not list(cache.glob("*.tmp-*")) and not list(cache.glob("*.wal"))


def test_an_engine_notices_a_changed_file_at_the_next_episode(tmp_path: Path) -> None:
    path = mini_spider(tmp_path)
    eng = DuckDBEngine(cache_dir=tmp_path / "cache")
    try:
        eng.begin_episode("pets_1", path)
        assert eng.execute("pets_1", path, "SELECT count(*) FROM Pets").rows == [(3,)]
        with sqlite3.connect(path) as con:
            con.execute("DELETE FROM Pets")
        con.close()
        eng.begin_episode("pets_1", path)
        assert eng.execute("pets_1", path, "SELECT count(*) FROM Pets").rows == [(0,)]
    finally:
        eng.close()


def test_concurrent_builders_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mini_spider(tmp_path)
    calls = []
    real = engine_mod.copy_sqlite
    monkeypatch.setattr(engine_mod, "copy_sqlite",
                        lambda *a: (calls.append(a), time.sleep(0.2), real(*a)))
    out: list[Path] = []
    threads = [threading.Thread(target=lambda: out.append(
        ensure_copy("pets_1", path, tmp_path / "cache"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(out)) == 1 and out[0].is_file()


def test_types_follow_the_declaration_and_the_stored_values(tmp_path: Path) -> None:
    assert duck_type("INTEGER", {"integer", "null"}) == "BIGINT"
    assert duck_type("int", {"integer", "real"}) == "DOUBLE"
    assert duck_type("INTEGER", {"integer", "text"}) == "VARCHAR"  # dynamic typing
    assert duck_type("DECIMAL(19,4)", {"integer"}) == "DOUBLE"
    assert duck_type("float(10,2)", {"real"}) == "DOUBLE"
    assert duck_type("VARCHAR(20)", {"text"}) == "VARCHAR"
    assert duck_type("TEXT", {"blob", "text"}) == "VARCHAR"
    assert duck_type("BLOB", {"blob"}) == "BLOB"
    assert duck_type("DATETIME", {"text"}) == "VARCHAR"
    assert duck_type("bool", {"integer"}) == "BIGINT"
    assert duck_type("", set()) == "VARCHAR"
    db = tmp_path / "x.sqlite"
    with sqlite3.connect(db) as con:
        con.execute('CREATE TABLE "Odd ""name""" (i INTEGER, t TEXT, b BLOB, m, "two words")')
        con.executemany('INSERT INTO "Odd ""name""" VALUES (?, ?, ?, ?, ?)',
                        [(1, "a", b"\x00\xff", 1, 2.5), (None, "\xe9", None, "x", None),
                         (2, None, b"z", 3.5, 1)])
        con.execute("INSERT INTO \"Odd \"\"name\"\"\" (t) VALUES (CAST(X'61FF62' AS TEXT))")
    con.close()
    eng = DuckDBEngine(cache_dir=tmp_path / "cache")
    try:
        r = eng.execute("x", db, 'SELECT * FROM "odd ""NAME"""')  # case-blind, as SQLite
        assert r.ok, r.error
        assert r.rows[:3] == [(1, "a", b"\x00\xff", "1", 2.5), (None, "\xe9", None, "x", None),
                              (2, None, b"z", "3.5", 1.0)]
        assert r.rows[3][1] == "a\ufffdb"  # invalid UTF-8 text: replaced, as the sqlite engine
    finally:
        eng.close()


def test_gold_sql_is_rewritten_from_sqlite(tmp_path: Path) -> None:
    eng = DuckDBEngine()
    path = BUNDLED_DIR / "database" / "orchestra" / "orchestra.sqlite"
    try:
        def run(sql: str) -> list[tuple]:
            r = eng.execute("orchestra", path, eng.from_sqlite("orchestra", path, sql))
            assert r.ok, (sql, eng.from_sqlite("orchestra", path, sql), r.error)
            return r.rows

        assert run('SELECT count(*) FROM conductor WHERE Nationality = "USA"') == [(6,)]
        assert run("SELECT count(*) FROM conductor WHERE Nationality LIKE 'usa'") == [(6,)]
        assert run("SELECT avg(Attendance) > 0 FROM SHOW") == [(True,)]  # reserved in DuckDB
        assert run("SELECT `Name` AS \"n\" FROM conductor WHERE Conductor_ID = 1") == [
            ("Antal Doráti",)]
        # bare columns: from the row of the only max(), else from the group
        assert run("SELECT Name, max(Age) FROM conductor") == [("Robert Craft", 63)]
        assert len(run("SELECT T1.Name, count(*) FROM conductor AS T1 JOIN orchestra AS T2 "
                       "ON T1.Conductor_ID = T2.Conductor_ID GROUP BY T2.Conductor_ID")) == 12
        # ties under ORDER BY ... LIMIT: SQLite's pick (the first group key, the last
        # under DESC); 11 types of performance, once each
        for order, first in (("ASC", "Auditions 1"), ("DESC", "Series average")):
            assert run(f"SELECT Type FROM performance GROUP BY Type "
                       f"ORDER BY count(*) {order} LIMIT 1") == [(first,)]
    finally:
        eng.close()


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT a, count(*) FROM t GROUP BY a", None),  # nothing to do: unchanged
    ("SELECT name, max(age) FROM t", 'SELECT arg_max("name", age) AS "name", max(age) FROM t'),
    ("SELECT b, a FROM t GROUP BY 2", "SELECT any_value(b) AS b, a FROM t GROUP BY 2"),
    ("SELECT a AS x, b FROM t GROUP BY x", "SELECT a AS x, any_value(b) AS b FROM t GROUP BY x"),
    ("SELECT T1.b FROM t AS T1 GROUP BY T1.a ORDER BY count(*) DESC LIMIT 1",
     "SELECT any_value(T1.b) AS b FROM t AS T1 GROUP BY T1.a "
     "ORDER BY count_star() DESC, T1.a DESC LIMIT 1"),
    ("SELECT DISTINCT a FROM t GROUP BY a ORDER BY count(*) LIMIT 1", None),
    ("SELECT a FROM t WHERE 'unterminated", None),
])
def test_rewrite_of_sqlite_aggregates(sql: str, expected: str | None) -> None:
    import duckdb

    con = duckdb.connect()
    assert engine_mod.rewrite_like_sqlite(sql, con) == (expected or sql)
