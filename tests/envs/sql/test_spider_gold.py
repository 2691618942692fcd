"""The acceptance figure: on the Spider dev subset (972 questions, 19 databases) the oracle
(the env's reference action) scores 1 on every task, on every engine and under both rewards.
Prints every failure.

sqlite runs whole episodes. DuckDB and PostgreSQL score each task's reference action
through the env's scoring path (`SQLEnv.judge`, what the final step calls) after checking
that the action ends the episode with a valid format, without a reset per task: a
PostgreSQL episode clones its database (about 0.6 s), and one reset per database is enough
for what is checked here. Where an engine cannot run a gold query (DuckDB and SQLite's
text-vs-number comparisons), the gold result is the canonical SQLite file's and the
reference action returns it as a literal table (see SQLEnv's docstring)."""

from __future__ import annotations

from typing import Any

import pytest

import skyhub
from skyhub.envs.sql.protocol import ends_episode, skyrl_format


def episode_failures(env: Any) -> list[tuple]:
    failures = []
    for task in env.tasks:
        env.reset(options={"task_id": task.id})
        _, r, term, _, info = env.step(env.reference_action() or "")
        assert term
        if r != 1.0:
            failures.append((task.id, task.meta["db_id"], r, info.get("error")
                             or info.get("solution_error"), task.answer))
    return failures


def scoring_failures(env: Any) -> list[tuple]:
    failures, db = [], None
    for task in sorted(env.tasks, key=lambda t: t.meta["db_id"]):
        if task.meta["db_id"] != db:
            db = task.meta["db_id"]
            env.reset(options={"task_id": task.id})
        else:
            env.start_episode(options={"task_id": task.id})
        action = env.reference_action() or ""
        check = skyrl_format([action])
        assert ends_episode(action) and check.ok, (task.id, action)
        correct, error = env.judge(check.solution or "")
        if not correct:
            failures.append((task.id, db, error, task.answer))
    return failures


def report(name: str, env: Any, failures: list[tuple]) -> None:
    print(f"\n{name}: oracle reward 1 on {1 - len(failures) / len(env.tasks):.2%} of "
          f"{len(env.tasks)} tasks")
    for f in failures:
        print("  FAIL", *f)


@pytest.mark.parametrize("reward", ["skyrl", "spider_exec"])
def test_oracle_scores_one_on_every_task_with_sqlite(reward: str) -> None:
    with skyhub.make("sql-spider", reward=reward) as env:
        assert len(env.tasks) == 972
        failures = episode_failures(env)
        report(f"sqlite/{reward}", env, failures)
    assert not failures


@pytest.mark.slow
@pytest.mark.parametrize("reward", ["skyrl", "spider_exec"])
def test_oracle_scores_one_on_every_task_with_duckdb(reward: str) -> None:
    with skyhub.make("sql-spider", engine="duckdb", reward=reward) as env:
        assert len(env.tasks) == 972
        failures = scoring_failures(env)
        report(f"duckdb/{reward}", env, failures)
    assert not failures


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("reward", ["skyrl", "spider_exec"])
def test_oracle_scores_one_on_every_task_with_postgres(postgres_dsn: str, reward: str) -> None:
    with skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn, reward=reward) as env:
        assert len(env.tasks) == 972
        failures = scoring_failures(env)
        report(f"postgres/{reward}", env, failures)
    assert not failures
