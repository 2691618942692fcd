"""`skyhub check`'s fork check: an env forked mid-episode goes on exactly as the original does.

The procedure: reset, play a short prefix of the family's own random actions
(`sample_action`, the turns before the last), fork, then send one continuation (each env's
own reference action, as the oracle agent would, else one random action) to the original,
the fork and, where the fork was a copy (of state, or of a shell's sandbox), a fresh env
replayed to the same turn, interleaved step by step so that state the copies wrongly share
shows up as a difference.
Every observation (with the env's `replay_ignore` masks), reward and end flag must be the
same. A state copy is also checked to survive its sibling's close (a shared connection
closed under it), and every env made is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyhub.errors import CheckFailed, ForkUnavailable

PREFIX = 2
"""Turns played before the fork (fewer where the budget leaves no turn after them)."""

MAX_STEPS = 50


def check_fork(env: Any, seed: int, make_other: Callable[[], Any] | None,
               notes: list[str]) -> str:
    """The fork check (module docstring); returns its PASS message."""
    from skyhub.text_compare import ignore_patterns, mask, text_diff

    base = env.unwrapped
    tasks = getattr(base, "tasks", ()) or ()
    options = {"task_id": tasks[seed % len(tasks)].id} if len(tasks) else None
    prefix = _prefix(env, seed, options)
    if base.fork_state is None and env.spec is None and make_other is None:
        notes.append("skipped: the env was not made by skyhub.make and forks by replay, which "
                     "needs env.fork(n, factory=...)")
        return "skipped"
    # two copies where the fork is likely a copy (of state, or of a shell's sandbox)
    copies = 2 if base.fork_state is not None or getattr(base, "fork_by_sandbox", False) else 1
    made: list[Any] = []
    try:
        try:
            made = base.fork(copies, factory=make_other)
        except ForkUnavailable as e:
            raise CheckFailed(f"fork() after {len(prefix)} turn(s) of reset(seed={seed}) "
                              f"failed: {e}") from None
        how = made[0].forked_by or "replay"
        by_copy = how != "replay"
        if len(made) > 1:  # the second copy's close must leave its siblings whole
            made[1].close()
        child = made[0]
        if (child.turn, getattr(child.task, "id", None)) != (base.turn, getattr(base.task, "id",
                                                                                None)):
            raise CheckFailed(f"the fork is at turn {child.turn} of task "
                              f"{getattr(child.task, 'id', None)!r}, its parent at turn "
                              f"{base.turn} of {getattr(base.task, 'id', None)!r}")
        plays = {"the original": env, "the fork": child}
        if by_copy and make_other is not None:
            fresh = make_other()
            made.append(fresh)
            fresh.reset(seed=seed, options=options)
            for action in prefix:
                fresh.step(action)
            plays["a fresh env replayed to the same turn"] = fresh
        patterns = ignore_patterns(env)
        env.action_space.seed(seed + 1)
        for k in range(1, MAX_STEPS + 1):
            # each env as the oracle: its own reference (Harbor's names a one-time token)
            actions = {name: _reference(e) for name, e in plays.items()}
            if None in actions.values():
                shared = base.sample_action(seed + 100 + k)
                actions = dict.fromkeys(plays, shared)
            results = {name: e.step(actions[name]) for name, e in plays.items()}
            first = results["the original"]
            for name, r in results.items():
                a, b = mask(first[0], patterns), mask(r[0], patterns)
                if a != b:
                    raise CheckFailed(f"after a fork at turn {len(prefix)}, {name}'s observation "
                                      f"at continuation step {k} differs from the original's\n"
                                      f"{text_diff(a or '', b or '')}")
                if tuple(r[1:4]) != tuple(first[1:4]):
                    raise CheckFailed(f"after a fork at turn {len(prefix)}, {name}'s (reward, "
                                      f"terminated, truncated) at continuation step {k} is "
                                      f"{tuple(r[1:4])}, the original's {tuple(first[1:4])}")
            if first[2] or first[3]:
                break
    finally:
        for e in made:
            e.close()
    return (f"a fork at turn {len(prefix)} (by {how}) went on as the original for {k} step(s)"
            + (", as did a fresh replay" if len(plays) > 2 else ""))


def _prefix(env: Any, seed: int, options: dict[str, Any] | None) -> list[str]:
    """Reset and play up to PREFIX random turns that leave the episode running; returns the
    actions (the env is left at the fork point)."""
    budget = env.unwrapped.max_turns
    wanted = PREFIX if budget is None else max(min(PREFIX, budget - 1), 0)
    env.reset(seed=seed, options=options)
    actions: list[str] = []
    for k in range(wanted):
        action = env.unwrapped.sample_action(seed + k)
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:  # it ended the episode: play the turns before it again
            env.reset(seed=seed, options=options)
            for a in actions:
                env.step(a)
            break
        actions.append(action)
    return actions


def _reference(env: Any) -> str | None:
    """The env's reference action now, None where it has none (or it raises: the reference
    check reports a broken reference)."""
    try:
        action = env.unwrapped.reference_action()
    except Exception:
        return None
    return action if isinstance(action, str) else None


__all__ = ["PREFIX", "check_fork"]
