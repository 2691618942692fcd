"""Forking an episode mid-way: `env.fork(n)` returns n envs in exactly the state of `env` now
(same task, turn, history and family state), independent from then on.

Tree search and branching rollouts (best-of-N from a mid-episode state, tree-structured GRPO,
per-turn Monte-Carlo values) continue one shared prefix many ways. Each env forks by the
fastest means that is exact for it:

- **state copy**, where the episode's state is data over read-only resources (toy, search,
  SQL on SQLite). A family lists its mutable per-episode attributes in `fork_state`; the child
  is a shallow copy of the env with those attributes (and the base's: the turn, the seeded
  random generator, the record of the episode) copied, and `fork_resources()` gives it its own
  of what must not be shared (SQL: its engine). Everything else (tasks, indexes, data) is
  shared, read-only. Microseconds.
- **replay**, the general fallback: a fresh env (`env.spec.make()`, or the `factory` given)
  is reset as the episode was and sent its recorded actions one by one. Every observation,
  reward and end flag must come out as recorded (with the env's `replay_ignore` masks); if
  one does not, the env is not deterministic enough to fork this way and `ForkUnavailable`
  says where it differed. The cost is the prefix's: every command is run again.

What the base records for this (`Played`): the reset's seed and options, each action sent and
what it got back. It is kept per episode by `TextEnv`'s wrappers of `reset` and `step` (the
outermost call only, so a family's `super().step` or a tool turn's text actions are not
counted twice); an episode whose step raised, or reported an infra error, cannot be replayed.

A family may fork its own way where it holds more than data: the shell families copy their
sandbox and shell into a warm spare (`skyhub.shell.fork`), replaying only where they cannot.
A child's `forked_by` says which means made it ("state copy", "sandbox copy", "replay").

Not forkable, with `ForkUnavailable`: an env never reset, a closed one, an episode that has
ended (fork before its last step), and, by replay, one made without `skyhub.make` and no
`factory`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyhub.errors import ForkUnavailable, UsageError
from skyhub.text_compare import ignore_patterns, mask, text_diff

if TYPE_CHECKING:
    from skyhub.env import TextEnv

COPIED_BASE = ("turn", "_played", "_np_random")
"""What every state copy copies besides a family's `fork_state`: the turn counter, the
episode's record and the seeded generator (so that a child draws what the parent would)."""


@dataclass
class Played:
    """What an episode has been so far: how it was reset, each action and its result
    (`(observation, reward, terminated, truncated)`), and why it cannot be replayed, if so."""

    seed: int | None
    options: dict[str, Any] | None
    first_observation: str
    actions: list[Any] = field(default_factory=list)
    results: list[tuple[str, float, bool, bool]] = field(default_factory=list)
    unreplayable: str = ""

    @property
    def done(self) -> bool:
        return bool(self.results) and (self.results[-1][2] or self.results[-1][3])

    def copy(self) -> Played:
        """An independent record (its lists copied; their items are immutable)."""
        return Played(self.seed, self.options, self.first_observation, list(self.actions),
                      list(self.results), self.unreplayable)

    def __deepcopy__(self, memo: dict[int, Any]) -> Played:
        return self.copy()


def check_forkable(env: TextEnv, n: int) -> Played:
    """The env's record, after the checks every fork makes (a positive `n`, an open env in
    an episode that has not ended)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(f"fork(n) needs a positive int n (how many copies), got {n!r}")
    if env.closed:
        raise ForkUnavailable(f"{env!r} is closed: fork an env while its episode runs")
    played = getattr(env, "_played", None)
    if played is None:
        raise ForkUnavailable(f"{env!r} has no episode to fork: call reset() first")
    if played.done:
        raise ForkUnavailable(f"{env!r}'s episode has ended (at turn {env.turn}): fork before "
                              "its last step, or reset and play to the turn to fork at")
    return played


def fork_by_copy(env: TextEnv, means: str = "state copy") -> TextEnv:
    """One child by state copy: a shallow copy of `env` with `COPIED_BASE` and the family's
    `fork_state` attributes copied, then `fork_resources()` (the family's own resources).
    `means`: what the child's `forked_by` says (a family that copies more, such as a
    sandbox, names it)."""
    child = copy.copy(env)
    state = child.__dict__
    for name in (*COPIED_BASE, *(env.fork_state or ())):
        if name in state:
            state[name] = copy.deepcopy(state[name])
    state["_closed"] = False
    child.forked_by = means
    child.fork_resources()
    return child


def fork_by_replay(env: TextEnv, factory: Callable[[], TextEnv] | None = None) -> TextEnv:
    """One child by replay: a fresh env, reset as `env` was and sent its recorded actions;
    `ForkUnavailable` (the child closed) when what comes back is not what was recorded."""
    played = env._played
    if played.unreplayable:
        raise ForkUnavailable(f"{env!r} cannot be forked by replay: {played.unreplayable}")
    if factory is None:
        if env.spec is None:
            raise ForkUnavailable(f"{env!r} was not made by skyhub.make, so a fork cannot make "
                                  "a fresh one to replay into: pass fork(n, factory=...) (a "
                                  "function returning a new env of the same kind and kwargs)")
        factory = env.spec.make
    child = factory()
    try:
        replay_into(child, played, env)
    except BaseException:
        child.close()
        raise
    child.forked_by = "replay"
    return child


def replay_into(child: TextEnv, played: Played, parent: Any = None) -> None:
    """Reset `child` as `played` was and send its actions, checking each result against the
    record (masked by the env's `replay_ignore`); `ForkUnavailable` at the first difference."""
    patterns = ignore_patterns(child)
    name = repr(parent if parent is not None else child)

    def same(recorded: str, replayed: str, where: str) -> None:
        a, b = mask(recorded, patterns), mask(replayed, patterns)
        if a != b:
            raise ForkUnavailable(
                f"{name} cannot be forked by replay: the replay's {where} differs from the "
                f"episode's\n{text_diff(a or '', b or '')}\n(the env's results depend on more "
                "than its seed and actions: draw randomness from self.np_random, declare what "
                "legitimately varies in replay_ignore, or fork it by state copy (fork_state))")

    obs, _ = child.reset(seed=played.seed, options=played.options)
    same(played.first_observation, obs, "first observation")
    for k, (action, recorded) in enumerate(zip(played.actions, played.results, strict=True), 1):
        obs, reward, terminated, truncated, info = child.step(action)
        if info.get("infra_error"):
            raise ForkUnavailable(f"{name} could not be forked: replaying step {k} hit an infra "
                                  f"error ({info.get('error', 'no message')})")
        same(recorded[0], obs, f"observation at step {k}")
        if (float(reward), bool(terminated), bool(truncated)) != tuple(recorded[1:]):
            raise ForkUnavailable(
                f"{name} cannot be forked by replay: step {k} gave reward {reward!r}, "
                f"terminated={terminated}, truncated={truncated}; the episode had "
                f"{recorded[1]!r}, {recorded[2]}, {recorded[3]}")


def fork(env: TextEnv, n: int = 1,
         factory: Callable[[], TextEnv] | None = None) -> list[TextEnv]:
    """`env.fork(n)`: n children by state copy where the env declares `fork_state`, else by
    replay. If one child cannot be made, those made are closed and the error raised."""
    check_forkable(env, n)
    children: list[TextEnv] = []
    try:
        for _ in range(n):
            children.append(fork_by_copy(env) if env.fork_state is not None
                            else fork_by_replay(env, factory))
    except BaseException:
        for child in children:
            child.close()
        raise
    return children


__all__ = ["COPIED_BASE", "Played", "check_forkable", "fork", "fork_by_copy", "fork_by_replay",
           "replay_into"]
