"""Forking a SQL episode on each engine: a state copy over SQLite's and DuckDB's read-only
files, a replay under PostgreSQL (the agent may write to its episode's clone)."""

from __future__ import annotations

import pytest
from fork_checks import fork_check

import skyhub


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_the_fork_check_passes_by_state_copy(engine: str) -> None:
    message = fork_check("sql-spider", engine=engine)
    assert "by state copy" in message and "as did a fresh replay" in message


def test_the_fork_check_passes_by_replay_under_postgres(postgres_dsn: str) -> None:
    message = fork_check("sql-spider", engine="postgres", dsn=postgres_dsn)
    assert "by replay" in message


def test_a_write_in_a_postgres_fork_stays_in_it(postgres_dsn: str) -> None:
    with skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn, max_turns=8) as env:
        env.reset(seed=0)
        env.step("<sql>CREATE TABLE forked_note (x int)</sql>")
        (child,) = env.fork()
        try:
            obs = child.step("<sql>INSERT INTO forked_note VALUES (7)</sql>")[0]
            assert "Error" not in obs
            assert "7" in child.step("<sql>SELECT x FROM forked_note</sql>")[0]
            parent = env.step("<sql>SELECT count(*) FROM forked_note</sql>")[0]
            assert "0" in parent and "7" not in parent
        finally:
            child.close()
