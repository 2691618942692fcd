"""sql-spider on SQLite: episodes, rewards, turn limits, and hostile queries that never
change the canonical database."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.sql.env import SQLEnv

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import start

THINK = "<think>checking</think>"


@pytest.fixture
def env() -> Iterator[SQLEnv]:
    with skyhub.make("sql-spider", query_timeout_s=1.0) as e:
        yield e  # type: ignore[misc]


def db_hashes(env: SQLEnv) -> dict[str, str]:
    dbs = {t.meta["db_id"] for t in env.tasks}
    return {d: hashlib.sha256(env.data.db_path(d).read_bytes()).hexdigest() for d in dbs}


def test_first_observation_has_engine_schema_question_and_turns(env: SQLEnv) -> None:
    obs = start(env)
    assert "SQLite" in obs and "CREATE TABLE" in obs and "example rows" in obs
    assert env.task is not None and env.task.prompt in obs and "You have 6 turns." in obs
    assert "<solution>" in (env.system_prompt or "") and "50 rows" in (env.system_prompt or "")


def test_sql_turn_returns_a_table_and_the_turns_left(env: SQLEnv) -> None:
    start(env)
    obs, reward, term, trunc, info = env.step(f"{THINK}<sql>SELECT count(*) FROM Student</sql>")
    assert obs.startswith("<observation>") and obs.endswith("</observation>")
    assert "34" in obs and "You have 5 turns left." in obs
    assert (reward, term, trunc, info["sql_error"]) == (0.0, False, False, False)


def test_result_is_cut_to_max_rows(env: SQLEnv) -> None:
    start(env)
    obs = env.step(f"{THINK}<sql>SELECT a.StuID FROM Student a, Student b</sql>")[0]
    assert obs.count("\n") < 70 and "more rows" in obs


def test_gold_solution_scores_one_and_wrong_scores_zero(env: SQLEnv) -> None:
    start(env)
    _, r, term, _, info = env.step(env.reference_action() or "")
    assert (r, term, info["outcome"]) == (1.0, True, "success")
    assert info["reward_breakdown"] == {"format": 0.0, "execution": 1.0}
    start(env)
    _, r, _, _, info = env.step(f"{THINK}<solution>SELECT 12345</solution>")
    assert r == 0.0 and info["reward_breakdown"]["execution"] == 0.0


def test_broken_format_scores_minus_one_under_skyrl_but_not_spider_exec() -> None:
    for kind, expected in (("skyrl", -1.0), ("spider_exec", 1.0)):
        with skyhub.make("sql-spider", reward=kind) as e:
            start(e)  # type: ignore[arg-type]
            gold = e.task.answer  # type: ignore[union-attr]
            _, r, _, _, info = e.step(f"<solution>{gold}</solution>")  # no <think>
            assert r == expected and info["reward_breakdown"]["format"] == -1.0
            assert "no <think> block" in info["format_violations"]


def test_malformed_turn_is_an_observation_and_costs_a_turn(env: SQLEnv) -> None:
    start(env)
    for bad in ("", "just prose", "<sql>SELECT 1", "<sql></sql>", "\x00\ud800"):
        obs, r, term, trunc, _ = env.step(bad)
        if term or trunc:
            break
        assert "Invalid turn" in obs and r == 0.0


def test_running_out_of_turns_truncates_with_minus_one() -> None:
    with skyhub.make("sql-spider", max_turns=2) as e:
        start(e)  # type: ignore[arg-type]
        obs, r, term, trunc, _ = e.step(f"{THINK}<sql>SELECT 1</sql>")
        assert "This is the last one" in obs and not (term or trunc)
        obs, r, term, trunc, info = e.step(f"{THINK}<sql>SELECT 2</sql>")
        assert (obs, r, term, trunc) == ("", -1.0, False, True)
        assert info["reward_breakdown"] == {"format": -1.0, "execution": 0.0}


HOSTILE = {
    "drop": "DROP TABLE Student",
    "update": "UPDATE Student SET Age = 0",
    "delete": "DELETE FROM Pets",
    "insert": "INSERT INTO Pets VALUES (1, 'x', 1, 1)",
    "attach": "ATTACH DATABASE '/tmp/evil.db' AS evil",
    "pragma write": "PRAGMA writable_schema = 1",
    "pragma query_only": "PRAGMA query_only = 0",
    "vacuum into": "VACUUM INTO '/tmp/skyhub-copy.db'",
    "load_extension": "SELECT load_extension('/tmp/x.so')",
    "endless cte": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                   "SELECT count(*) FROM c",
    "cross join": "SELECT count(*) FROM Student a, Student b, Student c, Student d, Student e, "
                  "Student f WHERE a.Age + b.Age + c.Age + d.Age + e.Age + f.Age > 0",
    "two statements": "SELECT 1; DROP TABLE Student",
    "temp table": "CREATE TEMP TABLE Student AS SELECT 1 AS StuID WHERE 0",
    "temp view": "CREATE TEMP VIEW Pets AS SELECT 1 AS PetID",
    "temp trigger": "CREATE TEMP TRIGGER t AFTER INSERT ON Pets BEGIN SELECT 1; END",
    "invalid utf-8": "SELECT '\udcff\udcfe'",
    "nul": "SELECT 1\x00",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_query_is_contained_and_the_database_is_untouched(env: SQLEnv,
                                                                  name: str) -> None:
    before = db_hashes(env)
    start(env)
    obs, r, term, trunc, info = env.step(f"{THINK}<sql>{HOSTILE[name]}</sql>")
    assert obs.startswith("<observation>") and not (term or trunc) and r == 0.0
    assert info["sql_error"] is True, obs
    if name in ("endless cte", "cross join"):
        assert "interrupted" in obs
    # the next episode sees the original database
    start(env)
    obs = env.step(f"{THINK}<sql>SELECT count(*) FROM Student</sql>")[0]
    assert "34" in obs
    assert db_hashes(env) == before


def test_a_temp_table_cannot_shadow_the_table_the_gold_query_reads(env: SQLEnv) -> None:
    start(env)
    env.step(f"{THINK}<sql>CREATE TEMP TABLE Student AS SELECT 1 AS StuID WHERE 0</sql>")
    _, r, _, _, info = env.step(env.reference_action() or "")
    assert r == 1.0 and info["reward_breakdown"]["execution"] == 1.0


def test_a_hostile_solution_scores_zero_without_breaking_anything(env: SQLEnv) -> None:
    start(env)
    _, r, term, _, info = env.step(f"{THINK}<solution>DROP TABLE Student</solution>")
    assert (r, term, info["infra_error"]) == (0.0, True, False)
    assert "read-only" in (info["solution_error"] or "")


def test_sql_spider_passes_the_contract_checks() -> None:
    from skyhub.eval.checks import check_env

    report = check_env("sql-spider", episodes=2)
    assert report.ok, str(report)


def count_executions(env: SQLEnv) -> list[str]:
    calls: list[str] = []
    real = env.engine.execute

    def spy(db_id, path, sql, **kw):  # type: ignore[no-untyped-def]
        calls.append(sql)
        return real(db_id, path, sql, **kw)

    env.engine.execute = spy  # type: ignore[method-assign]
    return calls


def test_a_query_checked_then_submitted_runs_once() -> None:
    with skyhub.make("sql-spider") as env, skyhub.make("sql-spider") as other:
        calls = count_executions(env)
        start(env)
        gold = env.task.answer  # type: ignore[union-attr]
        env.step(f"{THINK}<sql>{gold}</sql>")
        _, r, *_ = env.step(f"{THINK}<solution>{gold}</solution>")
        assert r == 1.0 and calls == [gold]  # the solution and the gold reuse the result
        # another env in the process scores the same task without running the gold again
        calls2 = count_executions(other)
        start(other)
        _, r, *_ = other.step(f"{THINK}<solution>SELECT 1</solution>")
        assert r == 0.0 and calls2 == ["SELECT 1"]


def test_result_cache_off_runs_every_query() -> None:
    with skyhub.make("sql-spider", result_cache=False) as env:
        calls = count_executions(env)
        start(env)
        gold = env.task.answer  # type: ignore[union-attr]
        env.step(f"{THINK}<sql>{gold}</sql>")
        env.step(f"{THINK}<solution>{gold}</solution>")
        assert calls == [gold, gold, gold]
