"""Play a list of actions from a reset and return what is scored: the tests that compare a tag
episode with a tool episode of the same actions (tests/envs/*/test_*_tools.py) use one rule."""

from __future__ import annotations

from typing import Any


def play(env: Any, task_id: str, actions: list[Any], *extra: str) -> tuple[Any, ...]:
    """Play `actions` from a reset on `task_id` until the episode ends: its last reward, end
    flags, outcome, infra_error and reward_breakdown, then the final info's `extra` keys."""
    env.reset(options={"task_id": task_id})
    for action in actions:
        _obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return (reward, terminated, truncated, info["outcome"], info["infra_error"],
            info["reward_breakdown"], *(info.get(k) for k in extra))
