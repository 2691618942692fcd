"""The fork check (`skyhub.eval.fork_check`) on a family's env made with `kwargs`, for the
families' own tests: a fork mid-episode goes on exactly as the original."""

from __future__ import annotations

import functools
from typing import Any

import skyhub
from skyhub.eval.fork_check import check_fork


def fork_check(env_id: str, seed: int = 0, **kwargs: Any) -> str:
    """The check's PASS message (its failure is raised, `CheckFailed` with the difference)."""
    env = skyhub.make(env_id, **kwargs)
    notes: list[str] = []
    try:
        return check_fork(env, seed, functools.partial(skyhub.make, env_id, **kwargs), notes)
    finally:
        env.close()
