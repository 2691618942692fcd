"""Forking a SQL episode on each engine: a state copy over SQLite's and DuckDB's read-only
files, a replay under PostgreSQL (the agent may write to its episode's clone)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import skyhub

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from fork_checks import fork_check


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_the_fork_check_passes_by_state_copy(engine: str) -> None:
    message = fork_check("sql-spider", engine=engine)
    assert "by state copy" in message and "as did a fresh replay" in message


def test_the_fork_check_passes_under_postgres(postgres_dsn: str) -> None:
    message = fork_check("sql-spider", engine="postgres", dsn=postgres_dsn)
    assert "by state copy" in message and "as did a fresh replay" in message


def test_a_postgres_fork_has_its_own_clone(postgres_dsn: str) -> None:
    """Each child queries its own clone of the episode's database, as its own role; closing
    it (its clone dropped) leaves the parent's."""
    with skyhub.make("sql-spider", engine="postgres", dsn=postgres_dsn, max_turns=8) as env:
        env.reset(seed=0)

        def database(e: skyhub.TextEnv, k: int) -> str:
            """Its database's name (a new query each time: an episode reuses the result of
            a query it already ran, and a fork copies those results)."""
            obs = e.step(f"<sql>SELECT current_database() AS db{k}</sql>")[0]
            assert "Error" not in obs
            lines = obs.splitlines()
            return lines[lines.index(next(x for x in lines if x.startswith("---"))) + 1].strip()

        parent = database(env, 1)
        assert parent.startswith("skyhub_")  # the episode's clone
        (child,) = env.fork()
        try:
            assert child.engine is not env.engine
            assert database(child, 2) != parent
        finally:
            child.close()
        assert database(env, 3) == parent
