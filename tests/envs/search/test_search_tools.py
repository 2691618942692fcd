"""Native tool calls in search-qa (`search`, `answer`; envs/search/tools.py), on the bundled
corpus and its 50 questions.

- Differential: scripts of searches (the gold title, other queries, an empty one), answers
  (the gold, a near miss, a wrong one) and malformed calls are played as Search-R1 tag turns
  and as tool calls (one or several per assistant turn): same reward, `reward_breakdown`,
  outcome and end, and each search's result is its tag turn's passages.
- `protocol="tools"` describes the tools; the default prompt is byte for byte unchanged.
- The oracle through `reference_tool_calls` scores 1.0 wherever the tag oracle does.
- Malformed calls are answered, never raised; `check_env` passes with `protocol=tools`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

import skyhub
from skyhub import ToolCall
from skyhub.envs.search.env import SearchEnv
from skyhub.errors import UsageError
from skyhub.eval.checks import check_env

Move = tuple[str, Any]  # ("search", q), ("answer", a) or ("bad", kind)
KEYS = ("outcome", "reward_breakdown", "turn", "infra_error", "answer", "query", "doc_ids")
TAG = {"search": "<think>I need to look it up.</think>\n<search>{}</search>",
       "answer": "<think>Found it.</think>\n<answer>{}</answer>"}
TAG_BAD = "Let me think about where this could be written down."
ARG = {"search": "query", "answer": "answer"}


def malformed_call(kind: str, call_id: str) -> ToolCall:
    return {
        "unknown": ToolCall(call_id, "browse", {"url": "http://example.com"}),
        "json": ToolCall(call_id, "search", "{query: Elarmor}"),
        "missing": ToolCall(call_id, "answer", {"text": "1760"}),
        "type": ToolCall(call_id, "search", {"query": ["a", "list"]}),
    }[kind]


def scripts(title: str, answer: str, max_turns: int) -> list[list[list[Move]]]:
    search, right = ("search", title), ("answer", answer)
    return [
        [[search], [right]],
        [[right]],
        [[("answer", f"  The {answer}!")]],                  # normalised: still exact
        [[("answer", f"{answer} or so")]],                   # F1 > 0, EM 0
        [[("answer", "Atlantis")]],
        [[search, ("search", "weather tomorrow"), right]],   # three calls in one turn
        [[("bad", "unknown")], [search], [right]],
        [[search], [("bad", "json"), ("bad", "type")], [right, ("search", title)]],
        [[right, ("answer", "Atlantis")]],                   # the second answer is not run
        [[("search", "")], [right]],                         # an empty query
        [[search]] * (max_turns + 1),                        # never answers
        [[("bad", "missing")]] * (max_turns + 1),            # only malformed turns
    ]


def play_tags(env: SearchEnv, task_id: str, turns: list[list[Move]]) -> dict[str, Any]:
    env.reset(options={"task_id": task_id})
    total, observations = 0.0, []
    for kind, arg in (m for turn in turns for m in turn):
        obs, reward, terminated, truncated, info = env.step(
            TAG_BAD if kind == "bad" else TAG[kind].format(arg))
        total += reward
        observations.append((kind, obs))
        if terminated or truncated:
            break
    return {"reward": total, "end": (terminated, truncated), "observations": observations,
            **{k: info.get(k) for k in KEYS}}


def play_tools(env: SearchEnv, task_id: str, turns: list[list[Move]]) -> dict[str, Any]:
    env.reset(options={"task_id": task_id})
    total, results = 0.0, []
    for t, turn in enumerate(turns):
        calls = [malformed_call(arg, f"c{t}_{i}") if kind == "bad" else
                 ToolCall(f"c{t}_{i}", kind, {ARG[kind]: arg})
                 for i, (kind, arg) in enumerate(turn)]
        _, reward, terminated, truncated, info = env.step(calls)
        total += reward
        assert [r["call_id"] for r in info["tool_results"]] == [c.id for c in calls]
        results += info["tool_results"]
        if terminated or truncated:
            break
    return {"reward": total, "end": (terminated, truncated), "results": results,
            **{k: info.get(k) for k in KEYS}}


def test_tag_and_tool_episodes_with_the_same_calls_score_the_same() -> None:
    verdicts: dict[tuple[float, str], int] = {}
    with skyhub.make("search-qa") as tags, skyhub.make("search-qa", protocol="tools") as tools:
        assert len(tags.tasks) == 50
        for task in tags.tasks:
            for script in scripts(task.meta["gold_title"], task.answer[0], tags.max_turns):
                text = play_tags(tags, task.id, script)
                tool = play_tools(tools, task.id, script)
                for key in ("reward", "end", *KEYS):
                    assert text[key] == tool[key], f"{key} differs on {task.id} {script}"
                for (kind, obs), result in zip(text["observations"], tool["results"],
                                               strict=False):
                    if kind == "search" and obs:  # the passages, without the tags
                        assert result["content"] == obs.replace("<information>", "").replace(
                            "</information>", "")
                        assert "Doc 1(Title:" in obs or "No results found." in obs
                key = (text["reward"], text["outcome"])
                verdicts[key] = verdicts.get(key, 0) + 1
    assert verdicts[(1.0, "success")] >= 50 * 6 and verdicts[(0.0, "failure")] >= 50 * 3


def test_the_tools_protocol_describes_the_tools_and_the_default_is_unchanged() -> None:
    with skyhub.make("search-qa") as env:
        obs, _ = env.reset(options={"task_id": "synth-42"})
        assert env.protocol == "tags"
        assert hashlib.sha256((env.system_prompt or "").encode()).hexdigest() == \
            "0737e571aa2abbe7474c96aec495314e6aaa68c7c0c2c9439bb9edc86207b136"
        tag_obs = obs
    with skyhub.make("search-qa", protocol="tools", max_turns=5) as env:
        obs, _ = env.reset(options={"task_id": "synth-42"})
        prompt = env.system_prompt or ""
        assert "`search`" in prompt and "`answer`" in prompt and "within 5 turns" in prompt
        assert "<search>" not in prompt and "<answer>" not in prompt and "<think>" not in prompt
        assert obs == tag_obs  # the question as the tag protocol gives it
        assert [t["function"]["name"] for t in env.tools or []] == ["search", "answer"]
    with pytest.raises(UsageError, match="protocol must be one of tags, tools"):
        skyhub.make("search-qa", protocol="r1")


def test_the_tool_oracle_scores_one_where_the_tag_oracle_does() -> None:
    with skyhub.make("search-qa", protocol="tools") as env:
        assert env.reference_tool_calls() is None  # no episode yet
        for task in env.tasks:
            rewards = []
            for via_tools in (False, True):
                env.reset(options={"task_id": task.id})
                names = []
                for _ in range(env.max_turns):
                    if via_tools:
                        calls = env.reference_tool_calls()
                        assert calls is not None
                        names += [c.name for c in calls]
                        _, reward, terminated, truncated, _ = env.step(calls)
                    else:
                        _, reward, terminated, truncated, _ = env.step(env.reference_action())
                    if terminated or truncated:
                        break
                rewards.append(reward)
            assert names == ["search", "answer"]
            assert rewards == [1.0, 1.0], task.id


@pytest.fixture
def env() -> Iterator[SearchEnv]:
    with skyhub.make("search-qa", protocol="tools") as e:
        e.reset(options={"task_id": "synth-42"})
        yield e  # type: ignore[misc]


def test_malformed_calls_are_answered_with_what_to_fix(env: SearchEnv) -> None:
    calls = [malformed_call(k, k) for k in ("unknown", "json", "missing")]
    obs, reward, terminated, truncated, info = env.step(calls)
    assert (reward, terminated, truncated, info["turn"]) == (0.0, False, False, 3)
    contents = {r["call_id"]: r["content"] for r in info["tool_results"]}
    assert "unknown tool 'browse'" in contents["unknown"] and "search, answer" in \
        contents["unknown"]
    assert "not valid JSON" in contents["json"]
    assert "missing the required parameter 'answer'" in contents["missing"]
    assert all(c in obs for c in contents.values())
    _, reward, terminated, truncated, info = env.step(malformed_call("type", "last"))
    assert (reward, terminated, truncated, info["outcome"]) == (0.0, False, True, "failure")
    assert info["reward_breakdown"]["format_errors"] == 4.0
    assert "parameter 'query' must be string" in info["tool_results"][0]["content"]


def test_an_openai_message_with_parallel_calls_is_played_in_order(env: SearchEnv) -> None:
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function",
         "function": {"name": "search", "arguments": '{"query": "Elarmor"}'}},
        {"id": "b", "type": "function",
         "function": {"name": "answer", "arguments": '{"answer": "1760"}'}},
        {"id": "c", "type": "function",
         "function": {"name": "search", "arguments": '{"query": "more"}'}}]}
    _, reward, terminated, _, info = env.step(message)
    assert (reward, terminated, info["outcome"]) == (1.0, True, "success")
    results = info["tool_results"]
    assert "Doc 1(Title: Elarmor)" in results[0]["content"]
    assert "<information>" not in results[0]["content"]
    assert results[1]["content"] == "Answer submitted; the episode has ended."
    assert results[2]["error"] and "not run" in results[2]["content"]


def test_check_env_passes_with_tools() -> None:
    report = check_env("search-qa", env_kwargs={"protocol": "tools"}, episodes=2)
    assert report.ok, report
    assert "reference_tool_calls() scored as reference_action()" in report["tools"].message
