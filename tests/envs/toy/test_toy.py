"""The toy envs: toy-arith (one question), toy-lookup (look up, then answer) and toy-recall
(one bare word; more in test_recall.py)."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import skyhub
from skyhub import Task, TextEnv
from skyhub.envs.toy.tasks import arith_tasks, lookup_tasks

ENV_IDS = ("toy-arith", "toy-lookup", "toy-recall")


@pytest.fixture(params=ENV_IDS)
def env(request: pytest.FixtureRequest) -> Any:
    with skyhub.make(request.param) as e:
        yield e


def run_reference(env: TextEnv, seed: int) -> tuple[float, dict[str, Any], int]:
    env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        action = env.reference_action()
        assert action is not None
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps += 1
        if terminated or truncated:
            assert terminated and not truncated
            return total, info, steps


# ----------------------------------------------------------------------------- success
def test_reference_episodes_succeed_on_50_seeds(env: TextEnv) -> None:
    task_ids = set()
    for seed in range(50):
        total, info, _ = run_reference(env, seed)
        assert (total, info["outcome"], info["infra_error"]) == (1.0, "success", False), seed
        assert info["reward_breakdown"]["correct"] == 1.0
        task_ids.add(info["task_id"])
    assert len(task_ids) > 25  # seeds pick different tasks


def test_lookup_reference_episode_takes_two_turns() -> None:
    with skyhub.make("toy-lookup") as env:
        _, info, steps = run_reference(env, 3)
    assert steps == 2 and info["turn"] == 2


def test_arith_answer_is_compared_after_normalising_whitespace() -> None:
    with skyhub.make("toy-arith") as env:
        env.reset(seed=1)
        answer = env.task.answer
        _, reward, terminated, _, info = env.step(f"Let me think. <ANSWER>  {answer}\n</ANSWER>")
    assert (reward, terminated, info["outcome"]) == (1.0, True, "success")
    assert info["answer"] == answer


def test_unclosed_answer_at_stop_string_still_counts() -> None:
    with skyhub.make("toy-arith") as env:
        env.reset(seed=4)
        _, reward, *_ = env.step(f"<answer>{env.task.answer}")
    assert reward == 1.0


def test_every_info_has_the_contract_keys(env: TextEnv) -> None:
    _, info = env.reset(seed=0)
    infos = [info]
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(env.reference_action())
        infos.append(info)
        done = terminated or truncated
    for i in infos:
        assert {"task_id", "turn", "outcome", "infra_error"} <= set(i)
    assert infos[0]["outcome"] == "running" and infos[0]["turn"] == 0
    assert "reward_breakdown" in infos[-1]
    assert all("reward_breakdown" not in i for i in infos[:-1])


# ----------------------------------------------------------------------------- failure
def test_wrong_arith_answer_gives_zero_and_failure() -> None:
    with skyhub.make("toy-arith") as env:
        env.reset(seed=0)
        wrong = str(int(env.task.answer) + 1)
        obs, reward, terminated, truncated, info = env.step(f"<answer>{wrong}</answer>")
    assert (obs, reward, terminated, truncated) == ("", 0.0, True, False)
    assert info["outcome"] == "failure"
    assert info["reward_breakdown"] == {"correct": 0.0, "format_errors": 0.0}


def test_wrong_lookup_answer_gives_zero_and_failure() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("<answer>not-a-word</answer>")
    assert (obs, reward, terminated, truncated) == ("", 0.0, True, False)
    assert info["outcome"] == "failure"
    assert info["turn"] == 1


def test_lookup_answer_without_looking_up_is_only_a_guess() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(f"<answer>{env.task.answer}</answer>")
    # allowed: the reward checks the answer, not the path to it
    assert (reward, terminated, info["outcome"]) == (1.0, True, "success")


# ----------------------------------------------------------------------------- malformed
def test_malformed_arith_action_is_explained_when_turns_remain() -> None:
    with skyhub.make("toy-arith", max_turns=2) as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("the answer is 42")
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert "<answer>" in obs and "1 turn left" in obs
        assert info["outcome"] == "running" and "error" in info
        _, reward, terminated, _, info = env.step(env.reference_action())
    assert (reward, terminated) == (1.0, True)
    assert info["reward_breakdown"]["format_errors"] == 1.0


def test_malformed_single_turn_arith_action_ends_episode_as_failure() -> None:
    with skyhub.make("toy-arith") as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("42")
    assert (obs, reward, terminated, truncated) == ("", 0.0, True, False)
    assert info["outcome"] == "failure"
    assert "<answer>" in info["error"]
    assert info["reward_breakdown"]["format_errors"] == 1.0


def test_malformed_lookup_action_is_explained() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("I don't know, maybe k123?")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "<lookup>KEY</lookup>" in obs and "<answer>VALUE</answer>" in obs
    assert "2 turns left" in obs
    assert info["outcome"] == "running"


def test_lookup_of_missing_key_says_so() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("<lookup>k_missing</lookup>")
    assert obs.startswith("<result>no such key: 'k_missing'</result>")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["looked_up"] == "k_missing"


def test_lookup_of_existing_key_returns_its_value() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        table = env.task.meta["table"]
        key = next(k for k in sorted(table) if k != env.task.meta["key"])
        obs, *_ = env.step(f"<lookup> {key} </lookup>")
    assert obs.startswith(f"<result>{table[key]}</result>")


def test_first_tag_decides_between_lookup_and_answer() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        key = env.task.meta["key"]
        obs, _, terminated, *_ = env.step(f"<lookup>{key}</lookup> then <answer>x</answer>")
    assert not terminated
    assert obs.startswith("<result>")


@settings(max_examples=100, deadline=None, database=None)
@given(actions=st.lists(st.one_of(st.text(max_size=40), st.sampled_from(
    ["<lookup>", "<answer>", "</answer>", "<lookup></lookup>", "<answer></answer>",
     "<lookup>\ud800</lookup>"])), min_size=1, max_size=4))
def test_no_action_raises_and_rewards_stay_in_range(actions: list[str]) -> None:
    for env_id in ENV_IDS:
        with skyhub.make(env_id, max_turns=3, n_tasks=5) as env:
            env.reset(seed=0)
            for action in actions:
                obs, reward, terminated, truncated, info = env.step(action)
                assert obs in env.observation_space and 0.0 <= reward <= 1.0
                assert info["outcome"] in ("running", "success", "failure")
                if terminated or truncated:
                    assert obs == "" and "reward_breakdown" in info
                    break
                assert obs and info["outcome"] == "running"


# ----------------------------------------------------------------------------- turn limit
def test_running_out_of_lookup_turns_truncates_with_reward_breakdown() -> None:
    with skyhub.make("toy-lookup", max_turns=2) as env:
        env.reset(seed=0)
        key = env.task.meta["key"]
        obs, _, terminated, truncated, _ = env.step(f"<lookup>{key}</lookup>")
        assert not (terminated or truncated) and "1 turn left" in obs
        obs, reward, terminated, truncated, info = env.step(f"<lookup>{key}</lookup>")
    assert (obs, reward, terminated, truncated) == ("", 0.0, False, True)
    assert info["outcome"] == "failure"
    assert info["reward_breakdown"] == {"correct": 0.0, "format_errors": 0.0}
    assert info["turn"] == 2


def test_malformed_last_turn_truncates_unless_episode_has_one_turn() -> None:
    with skyhub.make("toy-arith", max_turns=1) as env:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("no tags")
    # max_turns=1: the one action is the answer attempt, so it terminates
    assert (obs, reward, terminated, truncated) == ("", 0.0, True, False)
    with skyhub.make("toy-lookup", max_turns=2) as env:
        env.reset(seed=0)
        env.step("no tags")
        obs, reward, terminated, truncated, info = env.step("still no tags")
    assert (obs, reward, terminated, truncated) == ("", 0.0, False, True)
    assert info["reward_breakdown"]["format_errors"] == 2.0


def test_system_prompt_states_lookup_turn_limit() -> None:
    with skyhub.make("toy-lookup", max_turns=7) as env:
        assert "7 turns" in env.system_prompt
    with skyhub.make("toy-arith") as env:
        assert "<answer>" in env.system_prompt


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_max_turns_below_one_is_rejected(env_id: str) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        skyhub.make(env_id, max_turns=0)


def test_lookup_needs_two_turns_to_be_solvable() -> None:
    with pytest.raises(ValueError, match="max_turns >= 2"):
        skyhub.make("toy-lookup", max_turns=1)


# ----------------------------------------------------------------------------- tasks
def test_tasks_file_loads_jsonl_tasks(tmp_path: Path) -> None:
    tasks = [Task(id="sum", prompt="What is 1 + 1?", answer="2"),
             Task(id="big", prompt="What is 1000 * 1000?", answer="1000000")]
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks), encoding="utf-8")
    with skyhub.make("toy-arith", tasks_file=str(path)) as env:
        assert env.tasks.ids() == ["sum", "big"]
        obs, info = env.reset(options={"task_id": "big"})
        assert obs == "What is 1000 * 1000?" and info["task_id"] == "big"
        _, reward, *_ = env.step("<answer>1000000</answer>")
    assert reward == 1.0


def test_lookup_tasks_file_round_trips_generated_tasks(tmp_path: Path) -> None:
    generated = lookup_tasks(5, seed=9)
    path = tmp_path / "lookup.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generated), encoding="utf-8")
    with skyhub.make("toy-lookup", tasks_file=path) as env:
        assert list(env.tasks) == list(generated)
        total, _, _ = run_reference(env, 0)
    assert total == 1.0


def test_missing_tasks_file_raises_data_not_found(tmp_path: Path) -> None:
    with pytest.raises(skyhub.errors.DataNotFound, match=r"nope\.jsonl"):
        skyhub.make("toy-arith", tasks_file=tmp_path / "nope.jsonl")


def test_generated_tasks_are_deterministic_per_seed() -> None:
    for generate in (arith_tasks, lookup_tasks):
        a, b, c = generate(30, seed=1), generate(30, seed=1), generate(30, seed=2)
        assert list(a) == list(b)
        assert [t.prompt for t in a] != [t.prompt for t in c]
        assert a.ids() == [t.id for t in b] and a.ids()[0] != c.ids()[0]


def test_env_seed_kwarg_controls_generated_tasks_and_reset_seed_the_choice() -> None:
    with skyhub.make("toy-arith", seed=5) as a, skyhub.make("toy-arith", seed=5) as b, \
            skyhub.make("toy-arith", seed=6) as c:
        assert list(a.tasks) == list(b.tasks)
        assert [t.prompt for t in a.tasks] != [t.prompt for t in c.tasks]
        assert [a.reset(seed=s)[0] for s in range(10)] == [b.reset(seed=s)[0] for s in range(10)]


def test_generated_tasks_are_well_formed() -> None:
    for task in arith_tasks(200, seed=0):
        a, op, b = task.prompt.removeprefix("What is ").removesuffix("?").split()
        result = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op](int(a), int(b))
        assert str(result) == task.answer and task.meta["op"] == op
    for task in lookup_tasks(200, seed=0):
        table = task.meta["table"]
        assert len(table) == 8
        assert task.meta["key"] in task.prompt
        assert table[task.meta["key"]] == task.answer


def test_n_tasks_sets_task_set_size() -> None:
    with skyhub.make("toy-lookup", n_tasks=12) as env:
        assert len(env.tasks) == 12
        assert len(set(env.tasks.ids())) == 12


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_bundled_dev_split_is_fixed_and_disjoint_from_train(env_id: str) -> None:
    with skyhub.make(env_id, split="dev") as dev, skyhub.make(env_id) as train:
        assert len(dev.tasks) == 100
        assert dev.tasks[0].id.endswith("-10000-0")
        assert not set(dev.tasks.ids()) & set(train.tasks.ids())
        obs, info = dev.reset(options={"task_id": dev.tasks[5].id})
        assert obs == dev.tasks[5].prompt and info["task_id"] == dev.tasks[5].id
    with pytest.raises(ValueError, match="split"):
        skyhub.make(env_id, split="test")


def test_bundled_dev_files_match_the_generator(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from skyhub.envs.toy import tasks

    shipped = {k: tasks.dev_file(k).read_text() for k in ("arith", "lookup", "recall")}
    monkeypatch.setattr(tasks, "DATA_DIR", tmp_path)
    tasks.write_dev_split()
    for kind, text in shipped.items():
        assert (tmp_path / f"{kind}-dev.jsonl").read_text() == text
