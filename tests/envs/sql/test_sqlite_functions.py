"""SQLite runs in the host process, so its SQL functions are an allowlist:
`fts3_tokenizer()` leaked a pointer into libsqlite3 (and with two arguments installs a
tokenizer at any address). Refused functions are observations; every gold query (and every
prediction of the official-verdict set) of the bundled Spider dev subset still runs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.sql.engines.sqlite import ALLOWED_FUNCTIONS, SQLiteEngine
from skyhub.envs.sql.env import SQLEnv

ROOT = Path(__file__).parents[3]
SPIDER = ROOT / "envs/sql/data/spider-dev-subset"
VERDICTS = ROOT / "tests/envs/sql/data/spider-exec-verdicts/verdicts.jsonl"
THINK = "<think>checking</think>"

#: Built-ins that are no data functions, and names SQLite does not know.
REFUSED = {
    "fts3_tokenizer read": "SELECT hex(fts3_tokenizer('simple'))",
    "fts3_tokenizer write": "SELECT fts3_tokenizer('simple', x'4141414141414141')",
    "fts3_tokenizer in a subquery": "SELECT count(*) FROM (SELECT fts3_tokenizer('porter') "
                                    "AS p UNION ALL SELECT 1)",
    "fts3_tokenizer in a CTE": "WITH t(p) AS (SELECT fts3_tokenizer('unicode61')) "
                               "SELECT length(p) FROM t",
    "fts3_tokenizer upper case": "SELECT FTS3_TOKENIZER('simple')",
    "load_extension": "SELECT load_extension('/tmp/skyhub-x.so')",
    "fts5 api pointer": "SELECT fts5(NULL)",
    "rtreenode": "SELECT rtreenode(2, x'000000000000')",
    "sqlite_log": "SELECT sqlite_log(1, 'written to the host log')",
    "fts auxiliary": "SELECT matchinfo(x'00')",
    "unknown function": "SELECT readfile('/etc/passwd')",
    # the statement cache's SQL (a gold query run on this connection earlier) stays unread
    "sqlite_stmt": "SELECT sql FROM sqlite_stmt",
    "dbstat": "SELECT * FROM dbstat",
}


@pytest.fixture
def env() -> Iterator[SQLEnv]:
    with skyhub.make("sql-spider", query_timeout_s=2.0) as e:
        yield e  # type: ignore[misc]


@pytest.mark.hostile
@pytest.mark.parametrize("name", list(REFUSED))
def test_a_dangerous_or_unknown_function_is_an_observation(env: SQLEnv, name: str) -> None:
    task = next(t for t in env.tasks if t.meta["db_id"] == "pets_1")
    env.reset(options={"task_id": task.id})
    obs, r, term, trunc, info = env.step(f"{THINK}<sql>{REFUSED[name]}</sql>")
    assert obs.startswith("<observation>") and not (term or trunc) and r == 0.0
    assert info["sql_error"] is True, obs
    assert any(why in obs for why in ("not authorized", "no such function",
                                      "vtable constructor failed")), obs
    # the episode goes on: the next query runs as usual
    obs = env.step(f"{THINK}<sql>SELECT count(*) FROM Student</sql>")[0]
    assert "34" in obs


@pytest.mark.hostile
def test_the_refusal_names_the_function_and_leaks_no_pointer() -> None:
    db = SPIDER / "database/pets_1/pets_1.sqlite"
    engine = SQLiteEngine()
    try:
        r = engine.execute("pets_1", db, "SELECT fts3_tokenizer('simple')")
        assert not r.ok and not r.rows and "fts3_tokenizer()" in (r.error or ""), r
        # the tokenizer is untouched: FTS still works on an in-memory database of our own
        engine.execute("pets_1", db, "SELECT fts3_tokenizer('simple', zeroblob(8))")
        con = sqlite3.connect(":memory:")
        con.execute("CREATE VIRTUAL TABLE f USING fts4(body, tokenize=simple)")
        con.execute("INSERT INTO f VALUES ('hello world')")
        assert con.execute("SELECT count(*) FROM f WHERE f MATCH 'hello'").fetchone() == (1,)
        con.close()
        # a refusal does not stick to the next statement on the same connection
        assert engine.execute("pets_1", db, "SELECT upper('ok')").rows == [("OK",)]
    finally:
        engine.close()


@pytest.mark.hostile
def test_every_builtin_of_this_sqlite_is_allowed_or_refused_on_purpose() -> None:
    """A new SQLite with new built-ins is refused until they are listed; this pins the list
    against the library the tests run on, so that a dangerous one shows up here."""
    con = sqlite3.connect(":memory:")
    try:
        builtins = {n for (n,) in con.execute("SELECT name FROM pragma_function_list")}
    finally:
        con.close()
    refused_on_purpose = {
        "fts3_tokenizer", "load_extension", "fts5", "fts5_source_id", "bm25", "highlight",
        "snippet", "offsets", "matchinfo", "optimize", "match", "rtreecheck", "rtreedepth",
        "rtreenode", "sqlite_log", "sqlite_compileoption_get", "sqlite_compileoption_used",
        "subtype", "sqlite_offset", "fts3_tokenizer_internal_test", "geopoly_debug",
        "sqlite_rename_column", "sqlite_rename_table", "sqlite_rename_test",
        "sqlite_drop_column", "sqlite_rename_quotefix", "unknown", "sqlite_fts3_tokenizer",
    }
    unclassified = builtins - ALLOWED_FUNCTIONS - refused_on_purpose
    allowed_dangerous = ALLOWED_FUNCTIONS & refused_on_purpose
    assert not unclassified, f"classify these built-ins (allow or refuse): {unclassified}"
    assert not allowed_dangerous


def _gold_queries() -> list[tuple[str, str]]:
    out = []
    for line in (SPIDER / "dev_gold.sql").read_text(encoding="utf-8").splitlines():
        sql, _, db = line.rpartition("\t")
        if sql.strip():
            out.append((db.strip(), sql))
    return out


def _refusals(queries: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    engine = SQLiteEngine(timeout_s=10.0)
    bad = []
    try:
        for db, sql in queries:
            r = engine.execute(db, SPIDER / f"database/{db}/{db}.sqlite", sql)
            if not r.ok and "not authorized" in (r.error or ""):
                bad.append((db, sql, r.error or ""))
    finally:
        engine.close()
    return bad


def test_every_gold_query_of_the_spider_dev_subset_still_runs() -> None:
    gold = _gold_queries()
    assert len(gold) == 972
    engine = SQLiteEngine(timeout_s=10.0)
    failed = []
    try:
        for db, sql in gold:
            r = engine.execute(db, SPIDER / f"database/{db}/{db}.sqlite", sql)
            if not r.ok:
                failed.append((db, sql, r.error))
    finally:
        engine.close()
    assert not failed, failed[:5]


def test_no_prediction_of_the_official_verdict_set_is_refused_a_function() -> None:
    rows = [json.loads(line) for line in VERDICTS.read_text(encoding="utf-8").splitlines()]
    queries = sorted({(r["db_id"], q) for r in rows for q in (r["gold"], r["pred"])})
    assert len(queries) > 1000
    assert not _refusals(queries)


def test_the_functions_bird_and_synsql_queries_use_run() -> None:
    queries = [
        "SELECT CAST(strftime('%Y', '2024-03-05') AS INTEGER), julianday('2024-03-05') - "
        "julianday('2024-01-01'), date('now') IS NOT NULL, datetime('2024-01-01', '+1 day'), "
        "time('12:00'), unixepoch('2024-01-01'), CURRENT_TIMESTAMP IS NOT NULL",
        "SELECT iif(1 > 0, 'y', 'n'), instr('abc', 'b'), substr('abc', 2), "
        "replace('a-b', '-', ''), ltrim(' a'), rtrim('a '), trim(' a '), length('abc'), "
        "lower('A'), upper('a'), coalesce(NULL, 1), ifnull(NULL, 2), nullif(1, 1), "
        "printf('%.2f', 1.0), format('%d', 3), round(1.26, 1), abs(-1), typeof(1), "
        "hex('a'), char(65), unicode('A'), quote('x'), 'a' LIKE 'A', 'a' GLOB 'a'",
        "SELECT sqrt(16), power(2, 3), ln(1), log10(100), exp(0), floor(1.5), ceil(1.5), "
        "pi() > 3, mod(7, 3), sign(-2), trunc(1.7), degrees(pi()), atan2(1, 1) > 0",
        "SELECT json_extract('{\"a\": [1, 2]}', '$.a[1]'), json_array_length('[1, 2]'), "
        "'{\"a\": 1}' ->> '$.a', json_object('k', 1), json_valid('{}'), json_type('[]')",
        "SELECT name, row_number() OVER (ORDER BY name), rank() OVER (ORDER BY name), "
        "dense_rank() OVER (ORDER BY name), lag(name) OVER (ORDER BY name), "
        "lead(name) OVER (ORDER BY name), ntile(2) OVER (ORDER BY name), "
        "first_value(name) OVER (ORDER BY name), percent_rank() OVER (ORDER BY name), "
        "cume_dist() OVER (ORDER BY name) FROM sqlite_master",
        "SELECT count(*), sum(1), avg(1), min(1), max(1), total(1), group_concat('a', ','), "
        "json_group_array(1), json_group_object('k', 1) FROM sqlite_master",
        "SELECT sum(value) FROM json_each('[1, 2, 3]')",
        "SELECT count(*) FROM json_tree('{\"a\": [1, 2]}')",
    ]
    engine = SQLiteEngine()
    db = SPIDER / "database/pets_1/pets_1.sqlite"
    try:
        for sql in queries:
            r = engine.execute("pets_1", db, sql)
            assert r.ok, (sql, r.error)
    finally:
        engine.close()
