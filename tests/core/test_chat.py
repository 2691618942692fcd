"""Episodes as chat messages: `to_messages` and `Episode` recording a real toy episode."""

from __future__ import annotations

import json

import pytest

import skyhub
from skyhub import Episode, to_messages


# ----------------------------------------------------------------------------- to_messages
def test_to_messages_builds_system_user_assistant_turns() -> None:
    turns = [("<lookup>x</lookup>", "<result>4</result>"), ("<answer>4</answer>", "")]
    messages = to_messages("Be brief.", "What is 2+2?", turns)
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<lookup>x</lookup>"},
        {"role": "user", "content": "<result>4</result>"},
        {"role": "assistant", "content": "<answer>4</answer>"},
    ]


@pytest.mark.parametrize("system_prompt", [None, ""])
def test_to_messages_without_system_prompt_starts_with_user(system_prompt: str | None) -> None:
    messages = to_messages(system_prompt, "hello")
    assert messages == [{"role": "user", "content": "hello"}]


def test_empty_final_observation_adds_no_message() -> None:
    messages = to_messages(None, "q", [("a1", "o1"), ("a2", "")])
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[-1]["content"] == "a2"


def test_observation_role_applies_to_env_replies_only() -> None:
    messages = to_messages("sys", "first", [("act", "obs")], observation_role="tool")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[-1]["content"] == "obs"


def test_to_messages_accepts_any_iterable_of_turns() -> None:
    turns = iter([("a", "b")])
    assert len(to_messages(None, "q", turns)) == 3  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- Episode
def play_reference_episode(env_id: str, seed: int, **kwargs: object) -> Episode:
    with skyhub.make(env_id, **kwargs) as env:
        obs, info = env.reset(seed=seed)
        episode = Episode.start(env, obs, info)
        while not episode.done:
            action = env.reference_action()
            assert action is not None
            episode.add(action, *env.step(action))
    return episode


def test_reference_lookup_episode_is_recorded_as_a_success() -> None:
    episode = play_reference_episode("toy-lookup", seed=5)
    assert episode.total_reward == 1.0
    assert episode.outcome == "success"
    assert episode.terminated and not episode.truncated and not episode.infra_error
    assert len(episode.actions) == 2
    assert episode.actions[0].startswith("<lookup>") and episode.actions[1].startswith("<answer>")
    assert episode.task_id is not None and episode.task_id.startswith("lookup-")
    assert episode.final_info["reward_breakdown"]["correct"] == 1.0


def test_recorded_episode_messages_alternate_user_and_assistant() -> None:
    episode = play_reference_episode("toy-lookup", seed=11)
    messages = episode.messages()
    assert messages[0] == {"role": "system", "content": episode.system_prompt}
    assert "<lookup>" in messages[0]["content"]
    roles = [m["role"] for m in messages[1:]]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == episode.first_observation
    assert messages[3]["content"].startswith("<result>")
    assert episode.messages(observation_role="environment")[3]["role"] == "environment"


def test_episode_to_dict_is_json_serialisable_and_complete() -> None:
    episode = play_reference_episode("toy-lookup", seed=2)
    record = json.loads(json.dumps(episode.to_dict()))
    assert record["reward"] == 1.0
    assert record["outcome"] == "success"
    assert record["turns"] == 2
    assert record["terminated"] is True and record["truncated"] is False
    assert record["infra_error"] is False
    assert record["reward_breakdown"] == {"correct": 1.0, "format_errors": 0.0}
    assert record["rewards"] == [0.0, 1.0]
    assert record["task_id"] == episode.task_id
    assert record["messages"] == episode.messages()


def test_episode_of_wrong_answer_records_failure() -> None:
    with skyhub.make("toy-arith") as env:
        obs, info = env.reset(seed=0)
        episode = Episode.start(env, obs, info)
        episode.add("<answer>not a number</answer>", *env.step("<answer>not a number</answer>"))
    assert episode.done
    assert (episode.total_reward, episode.outcome) == (0.0, "failure")
    assert episode.system_prompt == env.system_prompt


def test_new_episode_is_running_and_empty() -> None:
    episode = Episode(task_id="t", system_prompt=None, first_observation="q")
    assert not episode.done
    assert episode.outcome == "running"
    assert episode.total_reward == 0.0
    assert episode.final_info == {}
    assert episode.messages() == [{"role": "user", "content": "q"}]


def test_episode_flags_infra_error_from_any_step() -> None:
    episode = Episode(task_id="t", system_prompt=None, first_observation="q")
    episode.add("a", "o", 0.0, False, False, {"outcome": "running", "infra_error": True})
    episode.add("b", "", 0.0, True, False, {"outcome": "error", "infra_error": False})
    assert episode.infra_error
    assert episode.outcome == "error"
