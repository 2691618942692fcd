"""A hostile agent against the SQL engines: queries that cost the
host memory or time past the engine's limits, and PostgreSQL session state and catalogs that
reach past the episode.

Each memory attack runs in a fresh interpreter (`_attack`), so that its peak RSS is measured
alone (`ru_maxrss` before and after the statement; the DuckDB and PostgreSQL workers are its
children, not counted) and this test process stays clean. That interpreter's address space is
capped (`_GUARD`) so that an engine which does not hold fails the test without taking the
machine down with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from skyhub.envs.sql.engines.postgres import PostgresEngine

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import SPIDER, spider_db

pytestmark = pytest.mark.hostile

GiB_KB = 1 << 20  # ru_maxrss is in KiB
_GUARD = 4 << 30  # RLIMIT_AS of the attacking interpreter, a guard for the machine

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
spec = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (spec["guard"], spec["guard"]))
from skyhub.envs.sql.engines import make_engine
path, db = Path(spec["path"]), spec["db"]
eng = make_engine(spec["engine"], **spec["kwargs"])
eng.begin_episode(db, path)
assert eng.execute(db, path, spec["check"]).ok  # workers and imports in the baseline
def written():  # bytes this process passed to write(): temporary files included
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("wchar")).split()[1])
before, w0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, written()
t0 = time.monotonic()
r = eng.execute(db, path, spec["sql"], max_rows=spec["max_rows"])
elapsed = time.monotonic() - t0
after, w1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, written()
then = eng.execute(db, path, spec["check"])
eng.close()
print(json.dumps({"ok": r.ok, "error": (r.error or "")[:300], "error_len": len(r.error or ""),
                  "rows": len(r.rows), "truncated": r.truncated, "timed_out": r.timed_out,
                  "elapsed": elapsed, "growth_kb": after - before, "written": w1 - w0,
                  "then": [list(x) for x in then.rows], "then_error": then.error}))
"""


def _attack(engine: str, sql: str, *, max_rows: int = 100_000, bound_s: float = 90,
            **kwargs: Any) -> dict[str, Any]:
    """Run `sql` on a fresh engine in a fresh interpreter; fails the test if it does not come
    back within `bound_s` (a generous bound: the engine's own limit is timeout_s)."""
    spec = {"engine": engine, "path": str(SPIDER / "world_1" / "world_1.sqlite"),
            "db": "world_1", "sql": sql, "max_rows": max_rows,
            "check": "SELECT count(*) FROM city", "kwargs": kwargs, "guard": _GUARD}
    try:
        p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)],
                           capture_output=True, text=True, timeout=bound_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{engine}: {sql[:80]!r} did not come back within {bound_s} s")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    # contained: an error, a cut result or nothing (a notice is not shown), the host process
    # did not take the result's size, and the engine still answers
    assert not out["ok"] or out["truncated"] or out["rows"] == 0, out
    assert out["growth_kb"] < GiB_KB, out
    assert out["then"] == [[4079]], out
    return out


# 20 rows of a value far past any budget (unbounded, it put 4 GB into the host in 10.9 s)
ROWS20 = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20) "


@pytest.mark.parametrize("sql", [
    ROWS20 + "SELECT zeroblob(200000000) FROM c",
    ROWS20 + "SELECT replace(printf('%.*c', 200000, 'x'), 'x', printf('%.*c', 1000, 'y')) "
             "FROM c",
    # many values each under any per-value limit, more rows than a budget
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
    "SELECT zeroblob(250000), printf('%.*c', 250000, 'y') FROM c",
    # rows of many columns, each value under the per-value limit
    "WITH a(x) AS (SELECT printf('%.*c', 250000, 'x')) SELECT "
    + ", ".join(["x"] * 1990) + " FROM a, (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)",
], ids=["zeroblob", "replace", "many rows", "many columns"])
def test_sqlite_results_have_a_byte_budget(sql: str) -> None:
    _attack("sqlite", sql, timeout_s=2.0)


def test_sqlite_timeout_holds_through_expensive_functions() -> None:
    """Each row costs one slow built-in call (a quadratic instr): the progress handler counts
    VM instructions, so a few cheap instructions per slow row never reach its check."""
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000), "
           "s(a, b) AS (SELECT printf('%.*c', 180000, 'a'), printf('%.*c', 60000, 'a') || 'b') "
           "SELECT count(instr(a, b || x)) FROM c, s")
    out = _attack("sqlite", sql, timeout_s=1.0, bound_s=30)
    assert out["timed_out"], out


def test_sqlite_temporary_files_have_a_budget() -> None:
    """A sort of long rows spills to temporary files: 3.6 GB written in a 5 s timeout (RAM,
    where /tmp is a tmpfs)."""
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
           "SELECT printf('%.*c', 200000, 'a') || x FROM c ORDER BY random()")
    out = _attack("sqlite", sql, timeout_s=10.0, max_rows=1)
    assert out["written"] < 1536 << 20, out
    assert "temporary" in out["error"] and not out["timed_out"], out


@pytest.mark.slow
@pytest.mark.parametrize(("sql", "timeout_s"), [
    ("SELECT repeat('x', 200000000) FROM range(20)", 5.0),  # 1.8 GB into the host before
    ("SELECT len(list_concat(range(20000000), range(20000000)))", 1.0),  # 9.5 s, 3.7 GB
], ids=["repeat", "list_concat"])
def test_duckdb_results_and_operators_are_bounded(sql: str, timeout_s: float,
                                                  tmp_path: Path) -> None:
    _attack("duckdb", sql, timeout_s=timeout_s, cache_dir=str(tmp_path))


def test_a_result_is_cut_at_the_byte_budget() -> None:
    from skyhub.envs.sql.engines.sqlite import SQLiteEngine

    path = SPIDER / "world_1" / "world_1.sqlite"
    with closing(SQLiteEngine(max_bytes=1 << 20)) as eng:
        r = eng.execute("world_1", path, "SELECT printf('%.*c', 100000, 'x') FROM city")
        assert r.ok and r.truncated and 5 <= len(r.rows) <= 10, (len(r.rows), r.error)
        r = eng.execute("world_1", path, "SELECT printf('%.*c', 200000, 'x'), "
                        "printf('%.*c', 200000, 'y'), printf('%.*c', 200000, 'z'), "
                        "printf('%.*c', 200000, 'w'), printf('%.*c', 200000, 'v'), "
                        "printf('%.*c', 200000, 'u')")  # one row of 1.2 MB
        assert not r.ok and "too large" in (r.error or ""), r
        assert eng.execute("world_1", path, "SELECT count(*) FROM city").rows == [(4079,)]


def test_a_query_that_breaks_its_worker_is_the_agents_failure(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """An error observation that costs a turn, not an exception nor an infra error; the
    next statement runs on a new worker."""
    import skyhub

    monkeypatch.setenv("SKYHUB_CACHE", str(tmp_path))
    with skyhub.make("sql-spider", engine="duckdb", query_timeout_s=1.0) as env:
        task = next(t for t in env.tasks if t.meta["db_id"] == "world_1")
        env.reset(options={"task_id": task.id})
        obs, reward, term, trunc, info = env.step(
            "<think>x</think><sql>SELECT len(list_concat(range(20000000), range(20000000)))"
            "</sql>")
        assert "Error:" in obs and info["sql_error"] and not info["infra_error"], obs
        assert reward == 0.0 and not (term or trunc)
        obs = env.step("<think>x</think><sql>SELECT count(*) FROM city</sql>")[0]
        assert "4079" in obs


@pytest.mark.slow
def test_duckdb_timeout_holds_inside_one_operator(tmp_path: Path) -> None:
    """interrupt() is not checked inside list_distinct over one huge list (40 s, 4 GB in
    process, with a 1 s timeout): the engine must stop it anyway."""
    out = _attack("duckdb", "SELECT len(list_distinct(range(20000000)))", timeout_s=1.0,
                  cache_dir=str(tmp_path), bound_s=30)
    assert out["error"], out


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("sql", [
    "SELECT repeat('x', 300000000)",
    "SELECT repeat('x', 200000000) FROM generate_series(1, 5)",
    # the value comes back inside the error message
    "SELECT repeat('x', 300000000)::int",
    "DO $$ BEGIN RAISE NOTICE '%', repeat('x', 300000000); END $$",
], ids=["one value", "rows", "error message", "notice"])
def test_postgres_results_and_messages_are_bounded(sql: str, postgres_dsn: str) -> None:
    """Before: the 300 MB value, 2.2 GB and 2.3 GB (and a 300 MB observation) into the host,
    and a DO block's 300 MB notice; timeout_s is long enough for a loaded server to build
    them."""
    out = _attack("postgres", sql, timeout_s=10.0, dsn=postgres_dsn)
    assert out["error_len"] < 10_000, out  # an observation, not the value


# ---------------------------------------------------------------------- PostgreSQL state
@pytest.fixture
def engine(postgres_dsn: str) -> Iterator[PostgresEngine]:
    with closing(PostgresEngine(dsn=postgres_dsn, timeout_s=2.0)) as e:
        e.begin_episode("concert_singer", spider_db("concert_singer"))
        yield e


def advisory_locks(admin: psycopg.Connection, database: str) -> int:
    row = admin.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = "
                        "l.database WHERE l.locktype = 'advisory' AND d.datname = %s",
                        [database]).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.postgres
@pytest.mark.parametrize("sql", [
    "SELECT pg_advisory_lock(42)",
    "SELECT pg_advisory_lock_shared(1, 2)",
    "SELECT pg_try_advisory_lock(7)",
    "SELECT count(pg_advisory_lock(g)) FROM generate_series(1, 3000) g",
])
def test_advisory_locks_do_not_outlive_the_statement(
        engine: PostgresEngine, admin: psycopg.Connection, sql: str) -> None:
    """pg_advisory_lock is session-level: the statement's ROLLBACK keeps it, so an agent
    could hold thousands (the server's shared lock table) for the episode."""
    db = spider_db("concert_singer")
    engine.execute("concert_singer", db, sql)
    assert engine.database is not None
    assert advisory_locks(admin, engine.database) == 0
    assert engine.execute("concert_singer", db, "SELECT count(*) FROM singer").rows == [(6,)]


SEES_OTHERS = {
    "databases": "SELECT datname FROM pg_database",
    "roles": "SELECT rolname FROM pg_roles",
    "users": "SELECT usename FROM pg_user",
    "sessions": "SELECT datname, usename, query FROM pg_stat_activity",
    "locks": "SELECT database, pid FROM pg_locks",
    "database stats": "SELECT datname FROM pg_stat_database",
    "memberships": "SELECT member FROM pg_auth_members",
    "role settings": "SELECT setrole FROM pg_db_role_setting",
    "backend ids": "SELECT pg_stat_get_backend_idset()",
    "backend activity": "SELECT pg_stat_get_activity(NULL)",
}


@pytest.fixture(scope="module")
def two_episodes(postgres_dsn: str) -> Iterator[tuple[PostgresEngine, PostgresEngine]]:
    """Another episode, connected (it ran a statement), and mine."""
    with closing(PostgresEngine(dsn=postgres_dsn, timeout_s=3.0)) as other, \
            closing(PostgresEngine(dsn=postgres_dsn, timeout_s=3.0)) as me:
        assert other.execute("pets_1", spider_db("pets_1"), "SELECT 'a secret'").ok
        me.begin_episode("concert_singer", spider_db("concert_singer"))
        yield other, me


@pytest.mark.postgres
@pytest.mark.parametrize("sql", list(SEES_OTHERS.values()), ids=list(SEES_OTHERS))
def test_an_episode_cannot_list_other_episodes(
        two_episodes: tuple[PostgresEngine, PostgresEngine], sql: str) -> None:
    """Another episode's database, role and session stay out of sight; what PostgreSQL
    shows anyway is in engines/postgres.py's docstring."""
    other, me = two_episodes
    r = me.execute("concert_singer", spider_db("concert_singer"), sql)
    assert other.database is not None
    text = repr(r.rows)
    assert other.database not in text and "secret" not in text, r
    assert not r.ok and "permission denied" in (r.error or ""), r


@pytest.mark.postgres
@pytest.mark.parametrize("sql", [
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
    "ORDER BY 1",
    "SELECT column_name FROM information_schema.columns WHERE table_name = 'singer' "
    "ORDER BY ordinal_position LIMIT 2",
    "SELECT relname FROM pg_class WHERE relname = 'singer'",
    "SELECT current_database() LIKE 'skyhub_ep_%', current_user = current_database()",
])
def test_exploring_the_own_database_still_works(engine: PostgresEngine, sql: str) -> None:
    r = engine.execute("concert_singer", spider_db("concert_singer"), sql)
    assert r.ok and r.rows, r


_HOST = r"""
import sys, time
from pathlib import Path
from skyhub.envs.sql.engines.duckdb import DuckDBEngine
path = Path(sys.argv[1])
eng = DuckDBEngine(timeout_s=120.0, cache_dir=sys.argv[2])
assert eng.execute("world_1", path, "SELECT 1").ok
print(eng._worker.pid, flush=True)
eng.execute("world_1", path, "SELECT count(*) FROM range(1000000000000)")
"""


def test_a_worker_ends_with_its_host(tmp_path: Path) -> None:
    """A host killed mid-statement leaves its worker with no deadline and no memory watch:
    the worker must end too."""
    import os
    import signal
    import time

    host = subprocess.Popen([sys.executable, "-c", _HOST, str(SPIDER / "world_1/world_1.sqlite"),
                             str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        worker = int(host.stdout.readline())
        time.sleep(0.5)  # the long statement is running
        host.send_signal(signal.SIGKILL)
        host.wait(10)
        for _ in range(200):  # polled, 20 s at most
            if not _alive(worker):
                break
            time.sleep(0.1)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail("the worker outlived its host")
    finally:
        host.kill()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper that may not come (a container's init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.postgres
def test_unhashable_values_in_a_solution_score_instead_of_raising(postgres_dsn: str) -> None:
    """PostgreSQL arrays and json come back as lists and dicts; the reward compares rows as
    sets (before: `step()` raised TypeError: unhashable type: 'list')."""
    import skyhub

    with skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn) as env:
        task = next(t for t in env.tasks if t.meta["db_id"] == "world_1")
        env.reset(options={"task_id": task.id})
        _, reward, term, _, info = env.step(
            "<think>x</think><solution>SELECT ARRAY[1, 2], '{\"a\": [1]}'::jsonb</solution>")
        assert term and reward <= 0.0 and not info["infra_error"], info
