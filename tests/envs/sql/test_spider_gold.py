"""The acceptance figure: on the Spider dev subset (972 questions, 19 databases), the gold
SQL as the solution scores 1 on at least 99% of episodes with sqlite. Prints the rate and
every failure."""

from __future__ import annotations

import pytest

import skyhub


@pytest.mark.parametrize("reward", ["skyrl", "spider_exec"])
def test_gold_solution_scores_one_on_at_least_99_percent(reward: str) -> None:
    with skyhub.make("sql-spider", reward=reward) as env:
        assert len(env.tasks) == 972
        failures = []
        for task in env.tasks:
            env.reset(options={"task_id": task.id})
            _, r, term, _, info = env.step(env.reference_action() or "")
            assert term
            if r != 1.0:
                failures.append((task.id, task.meta["db_id"], r, info.get("error")
                                 or info.get("solution_error"), task.answer))
        rate = 1 - len(failures) / len(env.tasks)
        print(f"\n{reward}: gold solution reward 1 on {rate:.2%} of {len(env.tasks)} episodes")
        for f in failures:
            print("  FAIL", *f)
        assert rate >= 0.99
