"""`env.fork(n)` and `VectorEnv.fork`: the children are in the parent's state, go on as it
does, and are independent of it and of each other (skyhub.fork's rules)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import skyhub
from skyhub.env import TextEnv
from skyhub.errors import ForkUnavailable, UsageError
from skyhub.fork import Played
from skyhub.registry import unregister
from skyhub.task import Task, TaskSet
from skyhub.tools import ToolCall


class Walk(TextEnv):
    """No `fork_state`: forks by replay. Each step adds the action's length to a position and
    draws a seeded number, so a replay that loses the generator's state shows."""

    def __init__(self, max_turns: int = 6) -> None:
        super().__init__(max_turns=max_turns)
        self.tasks = TaskSet([Task(f"w{k}", f"walk {k}") for k in range(4)])
        self.position = 0
        self.resets = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        self.position, self.resets = 0, self.resets + 1
        return f"{self.task.prompt}: at 0", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.next_turn()
        self.position += len(action)
        draw = int(self.np_random.integers(1000))
        if action == "stop" or self.out_of_turns:
            terminated, truncated = self.end_flags(action == "stop")
            return "", float(self.position), terminated, truncated, self.make_info(
                "success", reward_breakdown={"position": self.position})
        return f"at {self.position}, drew {draw}", 0.0, False, False, self.make_info()


class Noisy(Walk):
    """Draws from the process-wide `random`: a replay cannot reproduce it."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, *rest = super().step(action)
        return f"{obs} noise {random.random()}", *rest  # type: ignore[return-value]


@pytest.fixture
def walk() -> Iterator[TextEnv]:
    skyhub.register("test-fork-walk", Walk, override=True)
    skyhub.register("test-fork-noisy", Noisy, override=True)
    env = skyhub.make("test-fork-walk")
    yield env
    env.close()
    unregister("test-fork-walk")
    unregister("test-fork-noisy")


def play(env: TextEnv, actions: list[Any]) -> list[tuple[Any, ...]]:
    return [env.step(a)[:4] for a in actions]


def test_a_replayed_fork_is_in_the_parents_state_and_goes_on_as_it(walk: TextEnv) -> None:
    walk.reset(seed=5)
    play(walk, ["ab", "cde"])
    (child,) = walk.fork()
    try:
        assert type(child) is Walk and child is not walk
        assert (child.task.id, child.turn, child.position) == (walk.task.id, 2, 5)
        assert child.resets == 1  # a fresh env, reset once
        assert child._played.actions == ["ab", "cde"]
        # the same continuation gives the same results, generator draws included
        assert play(child, ["x", "yy", "stop"]) == play(walk, ["x", "yy", "stop"])
    finally:
        child.close()


def test_children_are_independent_of_the_parent_and_each_other(walk: TextEnv) -> None:
    walk.reset(seed=1)
    play(walk, ["a"])
    a, b = walk.fork(2)
    try:
        play(a, ["long action"])
        assert (walk.turn, walk.position) == (1, 1)
        assert (b.turn, b.position) == (1, 1)
        assert (a.turn, a.position) == (2, 12)
        assert len(walk._played.actions) == len(b._played.actions) == 1
    finally:
        a.close()
        b.close()


def test_a_fork_by_replay_is_refused_where_the_replay_differs() -> None:
    skyhub.register("test-fork-noisy", Noisy, override=True)
    env = skyhub.make("test-fork-noisy")
    try:
        env.reset(seed=0)
        play(env, ["a", "b"])
        with pytest.raises(ForkUnavailable, match="observation at step 1 differs") as e:
            env.fork()
        assert "replay_ignore" in str(e.value) and "fork_state" in str(e.value)
    finally:
        env.close()
        unregister("test-fork-noisy")


def test_refusals_say_what_to_do(walk: TextEnv) -> None:
    with pytest.raises(ForkUnavailable, match="call reset"):
        walk.fork()
    walk.reset(seed=0)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UsageError, match="positive int"):
            walk.fork(bad)  # type: ignore[arg-type]
    play(walk, ["stop"])
    with pytest.raises(ForkUnavailable, match="has ended"):
        walk.fork()
    walk.close()
    with pytest.raises(ForkUnavailable, match="closed"):
        walk.fork()


def test_an_env_made_without_make_needs_a_factory() -> None:
    env = Walk()
    env.reset(seed=2)
    play(env, ["abc"])
    with pytest.raises(ForkUnavailable, match="factory"):
        env.fork()
    (child,) = env.fork(factory=Walk)
    assert (child.turn, child.position) == (1, 3)
    child.close()
    env.close()


def test_a_failed_child_closes_those_made() -> None:
    made: list[Walk] = []

    def factory() -> Walk:
        if len(made) == 2:
            raise RuntimeError("no more sandboxes")
        made.append(Walk())
        return made[-1]

    env = Walk()
    env.reset(seed=0)
    play(env, ["a"])
    with pytest.raises(RuntimeError, match="no more sandboxes"):
        env.fork(3, factory=factory)
    assert [m.closed for m in made] == [True, True]
    assert not env.closed and env.step("b")[0].startswith("at 2")


def test_a_step_that_raised_makes_the_episode_unreplayable(walk: TextEnv) -> None:
    walk.reset(seed=0)
    walk.position = None  # type: ignore[assignment]  # the next step raises a TypeError
    with pytest.raises(TypeError):
        walk.step("a")
    with pytest.raises(ForkUnavailable, match="step 1 raised TypeError"):
        walk.fork()


def test_a_reset_starts_a_new_record(walk: TextEnv) -> None:
    walk.reset(seed=0)
    play(walk, ["a", "b"])
    walk.reset(seed=3, options={"task_id": "w2"})
    assert walk._played.actions == [] and walk._played.seed == 3
    assert walk._played.options == {"task_id": "w2"}
    play(walk, ["q"])
    (child,) = walk.fork()
    assert (child.task.id, child.turn) == ("w2", 1)
    child.close()


# ------------------------------------------------------------------ state copies
def test_a_state_copy_is_exact_and_independent() -> None:
    env = skyhub.make("toy-lookup", max_turns=5)
    env.reset(seed=4)
    key = env.task.meta["key"] if "key" in (env.task.meta or {}) else "k1"
    play(env, [f"<lookup>{key}</lookup>"])
    a, b = env.fork(2)
    try:
        assert a._looked_up == env._looked_up and a._looked_up is not env._looked_up
        assert a.tasks is env.tasks  # read-only data is shared
        play(a, ["<lookup>k0</lookup>"])
        assert "k0" in a._looked_up and "k0" not in env._looked_up | b._looked_up
        assert a.turn == 2 and env.turn == b.turn == 1
        reference = env.reference_action()
        assert play(b, [reference]) == play(env, [reference])
        # the copies' generators are the parent's, not shared: each draws the same next
        assert a.np_random is not env.np_random
    finally:
        a.close()
        b.close()
        env.close()


def test_tool_turns_are_recorded_once_and_replay() -> None:
    """A tool turn is played as text actions inside `step`; the record holds the turn as it
    was sent, once."""
    skyhub.register("test-fork-lookup-replay", "skyhub.envs.toy.env:LookupEnv", override=True)
    env = skyhub.make("test-fork-lookup-replay", max_turns=5)
    env.fork_state = None  # fork this one by replay
    try:
        env.reset(seed=1)
        call = ToolCall("c1", "lookup", {"key": "k3"})
        obs = env.step(call)[0]
        assert env._played.actions == [call] and env.turn == 1
        (child,) = env.fork()
        assert child._played.results[0][0] == obs and child.turn == 1
        child.close()
    finally:
        env.close()
        unregister("test-fork-lookup-replay")


def test_a_sql_copy_has_its_own_engine() -> None:
    env = skyhub.make("sql-spider")
    env.reset(seed=0)
    play(env, ["<sql>SELECT 1</sql>"])
    (child,) = env.fork()
    assert child.engine is not env.engine and child._actions == env._actions
    assert child._results == env._results and child._results is not env._results
    child.step("<sql>SELECT 3</sql>")
    assert len(child._results) == len(env._results) + 1  # its own results from here on
    child.close()  # closing the child leaves the parent's engine open
    obs = env.step("<sql>SELECT 2</sql>")[0]
    assert "2" in obs and "Error" not in obs
    (other,) = env.fork()
    reference = env.reference_action()
    assert play(other, [reference]) == play(env, [reference])
    other.close()
    env.close()


def test_played_copies_are_independent() -> None:
    p = Played(1, {"task_id": "x"}, "start", ["a"], [("o", 0.0, False, False)])
    q = p.copy()
    q.actions.append("b")
    assert p.actions == ["a"] and not p.done
    p.results.append(("", 1.0, True, False))
    assert p.done and not q.done


# ------------------------------------------------------------------ vector envs
@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_vector_fork_adds_slots_mid_episode(executor: str) -> None:
    venv = skyhub.make_vec("toy-lookup", 2, executor=executor, max_turns=5)
    try:
        venv.reset(seed=7)
        venv.step(["<lookup>k1</lookup>", "<lookup>k2</lookup>"])
        ids = venv.fork(0, 2)
        assert ids == [2, 3] and venv.num_envs == 4 and len(venv.action_space) == 4
        assert venv.get_attr("turn") == (1, 1, 1, 1)
        reference = venv.call("reference_action", env_ids=[0])[0]
        obs, rewards, terminated, truncated, infos = venv.step(
            [reference, "<lookup>k5</lookup>", reference, "<lookup>k9</lookup>"])
        assert obs[2] == obs[0] and rewards[2] == rewards[0]
        assert infos[2]["task_id"] == infos[0]["task_id"]
        assert venv.get_attr("turn") == (2, 2, 2, 2)
        for _ in range(3):  # play env 0 to its end: then it has nothing to fork
            if terminated[0] or truncated[0]:
                break
            reference = venv.call("reference_action", env_ids=[0])[0]
            obs, rewards, terminated, truncated, infos = venv.step([reference] * 4)
        assert terminated[0]
        with pytest.raises(ForkUnavailable, match="no running episode"):
            venv.fork(0)
        with pytest.raises(UsageError, match="positive int"):
            venv.fork(1, 0)
        with pytest.raises(IndexError):
            venv.fork(9)
        # the forked slots go again; the others keep their ids and episodes
        kept = venv.get_attr("_played", env_ids=[0, 1])
        venv.shrink(2)
        assert venv.num_envs == 2 and len(venv.action_space) == 2
        assert [p.actions for p in venv.get_attr("_played")] == [p.actions for p in kept]
        with pytest.raises(UsageError, match="shrink"):
            venv.shrink(3)
    finally:
        venv.close()



def test_an_env_that_breaks_the_api_is_reported_by_its_checks_not_by_the_record() -> None:
    """The record never raises in the env's place: a 4-tuple step or a reward of None go
    back to the caller as the env returned them (its checks report them), and only make the
    episode unreplayable."""

    class Old(Walk):
        def step(self, action: str) -> Any:
            obs, reward, terminated, truncated, info = super().step(action)
            return (obs, reward, terminated, info) if action == "old" else \
                (obs, None, terminated, truncated, info)

    env = Old()
    env.reset(seed=0)
    assert len(env.step("old")) == 4
    with pytest.raises(ForkUnavailable, match="step 1 did not return a StepResult"):
        env.fork(factory=Old)
    env.reset(seed=0)
    assert env.step("none")[1] is None
    assert env._played.unreplayable
