"""The TextEnv contract, with a small env written the way the docs tell an author to (`SayEnv`,
tests/support)."""

from __future__ import annotations

import sqlite3
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import skyhub
from skyhub import Task, TextEnv, UnicodeText
from skyhub.env import OUTCOMES, REQUIRED_INFO_KEYS
from skyhub.errors import DataNotFound

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from skyhub_testenvs import SayEnv


class SqliteEnv(SayEnv):
    """Holds a real connection; its `close` would fail if run twice."""

    def __init__(self) -> None:
        super().__init__()
        self.conn = sqlite3.connect(":memory:")
        self.close_calls = 0

    def close(self) -> None:
        self.close_calls += 1
        self.conn.execute("SELECT 1")  # sqlite3.ProgrammingError on a closed connection
        self.conn.close()


class ChildSqliteEnv(SqliteEnv):
    """A subclass of a subclass, each level with its own cleanup."""

    def __init__(self) -> None:
        super().__init__()
        self.child_close_calls = 0

    def close(self) -> None:
        self.child_close_calls += 1
        super().close()


# ----------------------------------------------------------------------------- construction
def test_subclass_init_needs_no_arguments_and_sets_text_spaces() -> None:
    env = SayEnv()
    assert isinstance(env, gymnasium.Env)
    assert isinstance(env.observation_space, UnicodeText)
    assert isinstance(env.action_space, UnicodeText)
    assert isinstance(env.observation_space, gymnasium.spaces.Text)
    assert env.task is None and env.turn == 0 and not env.closed


REAL_TEXT = [
    "",
    "SELECT name FROM \"users\" WHERE note = 'it''s';",
    "line one\nline two\r\n\ttabbed",
    "東京の人口は？ 中文 한국어",
    "emoji 🎉👍🏽 and ZWJ 👩‍💻",
    "\x00 control \x1b[31m",
]


@pytest.mark.parametrize("text", REAL_TEXT)
def test_spaces_accept_real_text(text: str) -> None:
    env = SayEnv()
    assert env.action_space.contains(text)
    assert text in env.observation_space


@pytest.mark.parametrize("value", [b"bytes", None, 42, ["list"], "lone \ud800 surrogate",
                                   "\udfff"])
def test_spaces_reject_non_str_and_lone_surrogates(value: object) -> None:
    env = SayEnv()
    assert not env.action_space.contains(value)
    assert value not in env.observation_space


def test_space_length_bounds_are_enforced() -> None:
    space = UnicodeText(5, min_length=2)
    assert "abc" in space
    assert "a" not in space
    assert "abcdef" not in space


def test_space_samples_are_members_and_repeat_with_seed() -> None:
    a, b = UnicodeText(seed=3), UnicodeText(seed=3)
    samples = [a.sample() for _ in range(20)]
    assert samples == [b.sample() for _ in range(20)]
    assert all(s in a for s in samples)
    assert len(set(samples)) > 1


@pytest.mark.parametrize("env_id", ["toy-arith", "toy-lookup"])
def test_toy_envs_pass_gymnasium_env_checker_without_warnings(env_id: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = skyhub.make(env_id)
        check_env(env)
        env.close()
    assert [str(w.message) for w in caught] == []


def test_registered_small_subclass_passes_gymnasium_env_checker(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, SayEnv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(skyhub.make(tmp_env_id))
    assert [str(w.message) for w in caught] == []


# ----------------------------------------------------------------------------- select_task
def test_select_task_by_task_id() -> None:
    env = SayEnv()
    obs, info = env.reset(options={"task_id": "say-7"})
    assert obs == "Say 7."
    assert info["task_id"] == "say-7"


def test_select_task_by_task_id_in_a_plain_list_of_tasks() -> None:
    env = SayEnv()
    env.tasks = list(env.tasks)
    assert env.reset(options={"task_id": "say-3"})[0] == "Say 3."
    with pytest.raises(KeyError, match="'missing'"):
        env.reset(options={"task_id": "missing"})


def test_select_task_with_a_task_outside_the_task_set() -> None:
    env = SayEnv()
    task = Task(id="custom", prompt="say hi", answer="hi")
    obs, info = env.reset(options={"task": task})
    assert (obs, info["task_id"]) == ("say hi", "custom")
    assert env.step("<answer>hi</answer>")[1] == 1.0


def test_select_task_rejects_a_task_that_is_not_a_task() -> None:
    with pytest.raises(TypeError, match=r"skyhub\.Task"):
        SayEnv().reset(options={"task": {"id": "x", "prompt": "p"}})


def test_same_seed_selects_same_task_and_seeds_spread_over_tasks() -> None:
    a, b = SayEnv(), SayEnv()
    picks = [a.reset(seed=s)[1]["task_id"] for s in range(10)]
    assert picks == [b.reset(seed=s)[1]["task_id"] for s in range(10)]
    assert len(set(picks)) > 3
    # unseeded resets continue the seeded stream, also reproducibly
    a.reset(seed=42)
    b.reset(seed=42)
    after_a = [a.reset()[1]["task_id"] for _ in range(5)]
    assert after_a == [b.reset()[1]["task_id"] for _ in range(5)]


def test_unknown_task_id_raises_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match="'say-999'"):
        SayEnv().reset(options={"task_id": "say-999"})


def test_env_without_tasks_raises_data_not_found() -> None:
    env = SayEnv(n_tasks=0)
    with pytest.raises(DataNotFound, match=r"self\.tasks"):
        env.reset(seed=0)
    # ...but a task passed in options still works
    assert env.reset(options={"task": Task(id="x", prompt="p")})[0] == "p"


# ----------------------------------------------------------------------------- make_info
def test_make_info_fills_contract_keys_from_episode_state() -> None:
    env = SayEnv()
    env.reset(options={"task_id": "say-2"})
    env.turn = 3
    info = env.make_info("failure", infra_error=True, reward_breakdown={"a": 1.0}, extra="x")
    assert set(REQUIRED_INFO_KEYS) <= set(info)
    assert info == {"task_id": "say-2", "turn": 3, "outcome": "failure", "infra_error": True,
                    "reward_breakdown": {"a": 1.0}, "extra": "x"}


def test_make_info_defaults_to_running_without_breakdown() -> None:
    info = SayEnv().make_info()
    assert info == {"task_id": None, "turn": 0, "outcome": "running", "infra_error": False}


def test_make_info_copies_reward_breakdown() -> None:
    env = SayEnv()
    breakdown = {"a": 1.0}
    info = env.make_info("success", reward_breakdown=breakdown)
    breakdown["a"] = 0.0
    assert info["reward_breakdown"] == {"a": 1.0}


@pytest.mark.parametrize("outcome", ["done", "SUCCESS", "", None])
def test_make_info_rejects_unknown_outcomes(outcome: Any) -> None:
    with pytest.raises(ValueError, match="outcome must be one of"):
        SayEnv().make_info(outcome)


def test_every_documented_outcome_is_accepted() -> None:
    env = SayEnv()
    assert [env.make_info(o)["outcome"] for o in OUTCOMES] == list(OUTCOMES)
    assert set(OUTCOMES) == {"running", "success", "failure", "error"}


# ----------------------------------------------------------------------------- close
def test_close_is_idempotent_when_subclass_close_would_fail_twice() -> None:
    env = SqliteEnv()
    env.close()
    env.close()
    assert env.close_calls == 1
    assert env.closed
    with pytest.raises(sqlite3.ProgrammingError):
        env.conn.execute("SELECT 1")


def test_close_runs_every_level_of_a_subclass_chain_once() -> None:
    env = ChildSqliteEnv()
    env.close()
    env.close()
    assert (env.child_close_calls, env.close_calls) == (1, 1)
    assert env.closed


def test_close_marks_env_closed_even_when_cleanup_raises() -> None:
    env = SqliteEnv()
    env.conn.close()  # cleanup will now fail
    with pytest.raises(sqlite3.ProgrammingError):
        env.close()
    assert env.closed
    env.close()  # and a second call does not raise again
    assert env.close_calls == 1


def test_base_close_is_idempotent() -> None:
    env = SayEnv()
    env.close()
    env.close()
    assert env.closed


def test_with_statement_closes_made_env() -> None:
    with skyhub.make("toy-arith") as env:
        env.reset(seed=0)
        assert not env.closed
    assert env.closed


def test_with_statement_closes_env_on_error() -> None:
    with pytest.raises(RuntimeError, match="boom"), SqliteEnv() as env:
        raise RuntimeError("boom")
    assert env.closed and env.close_calls == 1


# ----------------------------------------------------------------------------- spec from make
def test_make_sets_spec_id_and_merged_kwargs() -> None:
    env = skyhub.make("toy-lookup", max_turns=5, n_tasks=7)
    try:
        assert env.spec is not None
        assert env.spec.id == "toy-lookup"
        assert env.spec.kwargs == {"max_turns": 5, "n_tasks": 7}
        assert env.max_turns == 5 and len(env.tasks) == 7
        assert "toy-lookup" in repr(env)
        # the registered spec is untouched
        assert skyhub.spec("toy-lookup").kwargs == {}
    finally:
        env.close()


def test_env_recreated_from_its_spec_is_equivalent() -> None:
    env = skyhub.make("toy-arith", n_tasks=5, seed=3)
    twin = env.spec.make()
    via_gymnasium = gymnasium.make(env.spec)  # what gymnasium tools do with a spec
    try:
        for other in (twin, via_gymnasium.unwrapped):
            assert type(other) is type(env)
            assert other.tasks.ids() == env.tasks.ids() == [f"arith-3-{i}" for i in range(5)]
    finally:
        env.close()
        twin.close()
        via_gymnasium.close()


def test_start_episode_seeds_picks_the_task_and_zeroes_the_turn() -> None:
    with skyhub.make("toy-lookup") as env:
        env.turn = 5
        task = env.start_episode(seed=3)
        assert env.task is task and env.turn == 0
        assert env.start_episode(seed=3).id == task.id
        assert env.start_episode(options={"task_id": "lookup-0-7"}).id == "lookup-0-7"
        obs, _ = env.reset(seed=3)
        assert obs == task.prompt


# ----------------------------------------------------------------------------- the turn budget
def test_max_turns_defaults_to_no_budget() -> None:
    env = SayEnv()
    assert (env.max_turns, env.turns_left, env.out_of_turns, env.turns_left_note()) == (
        None, None, False, "")
    assert env.next_turn() == 1 and env.turn == 1 and not env.out_of_turns


def test_max_turns_is_validated_wherever_it_is_set() -> None:
    env = SayEnv()
    env.max_turns = 3
    assert env.max_turns == 3
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_turns must be >= 1"):
            env.max_turns = bad  # type: ignore[assignment]
    with pytest.raises(ValueError, match="max_turns must be >= 1, got 0"):
        TextEnv(max_turns=0)
    assert TextEnv(max_turns=2).max_turns == 2


def test_next_turn_counts_down_the_budget_and_the_note_says_what_is_left() -> None:
    env = SayEnv()
    env.max_turns = 3
    env.start_episode(seed=0)
    assert (env.turn, env.turns_left, env.turns_left_note()) == (0, 3, "(3 turns left)")
    env.next_turn()
    assert (env.turns_left, env.out_of_turns) == (2, False)
    env.next_turn()
    assert env.turns_left_note() == "(1 turn left)"
    assert env.next_turn() == 3 and env.out_of_turns and env.turns_left == 0
    env.start_episode(seed=0)
    assert env.turns_left == 3  # a new episode has the whole budget


def test_end_rule_terminates_the_task_end_and_truncates_the_budget() -> None:
    env = SayEnv()
    env.max_turns = 3
    assert env.end_flags(task_ended=True) == (True, False)
    assert env.end_flags(task_ended=False) == (False, True)
    env.start_episode(seed=0)
    env.turn = 3
    obs, reward, terminated, truncated, info = env.out_of_turns_step(
        reward_breakdown={"match": 0.0}, error="no answer")
    assert (obs, reward, terminated, truncated) == ("", 0.0, False, True)
    assert (info["outcome"], info["turn"], info["reward_breakdown"], info["error"]) == (
        "failure", 3, {"match": 0.0}, "no answer")
    env.max_turns = 1  # one turn is the task's one attempt: it terminates
    assert env.end_flags(task_ended=False) == (True, False)
    assert env.out_of_turns_step(reward_breakdown={})[2:4] == (True, False)


def test_step_result_is_exported_from_skyhub() -> None:
    from skyhub.env import StepResult

    assert skyhub.StepResult is StepResult
    assert "StepResult" in skyhub.__all__
