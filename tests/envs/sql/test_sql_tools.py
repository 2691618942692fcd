"""Native tool calls in sql-spider (`execute_sql`, `submit_solution`; envs/sql/tools.py).

- Differential: on 162 bundled Spider dev tasks, scripts of queries (the gold, wrong ones,
  failing ones, a write) and malformed calls are played twice, as SkyRL-SQL tag turns (a
  think block each) and as tool calls (one or several per assistant turn); both episodes
  get the same reward, `reward_breakdown`, outcome, format verdict and end, under
  skyrl-train with either reward and under skyrl-eval.
- `protocol="tools"` describes the tools in the system prompt; the default prompt and first
  observation are byte for byte what they were before tools existed.
- The oracle through `reference_tool_calls` scores 1.0 wherever the tag oracle does.
- Malformed calls are answered, never raised; `check_env` passes with `protocol=tools`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

import skyhub
from skyhub import ToolCall
from skyhub.envs.sql.env import SQLEnv
from skyhub.envs.sql.tools import tool_result
from skyhub.errors import UsageError
from skyhub.eval.checks import check_env

Move = tuple[str, Any]  # ("sql", q), ("solution", q) or ("bad", kind)
TURN_KEYS = ("outcome", "reward_breakdown", "format_violations", "solution_error", "turn",
             "sql_error", "infra_error")

#: tag turns as a careful agent writes them, and the same intent as a malformed tag turn
TAG = {"sql": "<think>Let me look.</think>\n<sql>{}</sql>",
       "solution": "<think>This answers it.</think>\n<solution>{}</solution>"}
TAG_BAD = "I am not sure which table holds this."
TOOL = {"sql": "execute_sql", "solution": "submit_solution"}


def malformed_call(kind: str, call_id: str) -> ToolCall:
    """A call that `check_call` refuses, of each kind an agent gets wrong."""
    return {
        "unknown": ToolCall(call_id, "drop_table", {"query": "x"}),
        "json": ToolCall(call_id, "execute_sql", '{"query": "SELECT 1"'),
        "not_object": ToolCall(call_id, "execute_sql", '["SELECT 1"]'),
        "missing": ToolCall(call_id, "submit_solution", {}),
        "type": ToolCall(call_id, "execute_sql", {"query": 42}),
    }[kind]


def scripts(gold: str, other: str, max_turns: int) -> list[list[list[Move]]]:
    """Episodes as assistant turns of moves: `gold` the task's gold query, `other` another
    task's (usually a failing query here)."""
    sql, sol = ("sql", gold), ("solution", gold)
    return [
        [[sql], [sol]],                                        # explore, then answer
        [[sol]],                                               # answer at once
        [[("solution", other)]],                               # a wrong (often failing) query
        [[("solution", "SELEC nothing FROM")]],                # a syntax error
        [[("solution", "DROP TABLE IF EXISTS x")]],            # a write: refused
        [[("sql", other), ("sql", "SELECT 1"), sol]],          # three calls in one turn
        [[("bad", "unknown")], [sql], [sol]],                  # a malformed first turn
        [[sql], [("bad", "json")], [sol]],                     # malformed after an observation
        [[("bad", "type"), ("bad", "missing"), sol, ("sql", gold)]],  # a call after the submit
        [[sol, ("solution", "SELECT 1")]],                     # a second submit: not run
        [[("sql", "SELECT 1")]] * (max_turns + 1),             # never answers: out of turns
        [[("bad", "not_object")]] * (max_turns + 1),           # only malformed turns
        [[("sql", "")], [("solution", gold + " LIMIT 1")]],    # an empty query, then a guess
    ]


def play_tags(env: SQLEnv, task_id: str, turns: list[list[Move]]) -> dict[str, Any]:
    env.reset(options={"task_id": task_id})
    total, observations = 0.0, []
    for move in (m for turn in turns for m in turn):
        kind, arg = move
        action = TAG_BAD if kind == "bad" else TAG[kind].format(arg)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        observations.append((move, obs))
        if terminated or truncated:
            break
    return {"reward": total, "end": (terminated, truncated),
            **{k: info.get(k) for k in TURN_KEYS}, "observations": observations}


def play_tools(env: SQLEnv, task_id: str, turns: list[list[Move]]) -> dict[str, Any]:
    env.reset(options={"task_id": task_id})
    total, results = 0.0, []
    for t, turn in enumerate(turns):
        calls = [malformed_call(arg, f"c{t}_{i}") if kind == "bad" else
                 ToolCall(f"c{t}_{i}", TOOL[kind], {"query": arg})
                 for i, (kind, arg) in enumerate(turn)]
        _, reward, terminated, truncated, info = env.step(calls)
        total += reward
        assert [r["call_id"] for r in info["tool_results"]] == [c.id for c in calls]
        results += list(zip(turn, info["tool_results"], strict=True))
        if terminated or truncated:
            break
    return {"reward": total, "end": (terminated, truncated),
            **{k: info.get(k) for k in TURN_KEYS}, "results": results}


@pytest.fixture(scope="module")
def dev_tasks() -> list[str]:
    """162 dev tasks spread over the bundled Spider dev subset (972 questions)."""
    with skyhub.make("sql-spider", split="dev") as env:
        return [t.id for t in env.tasks][::6]


CONFIGS = [
    pytest.param({}, id="skyrl-train"),
    pytest.param({"reward": "spider_exec"}, id="skyrl-train-spider_exec"),
    pytest.param({"protocol": "skyrl-eval"}, id="skyrl-eval"),
]


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_tag_and_tool_episodes_with_the_same_sql_score_the_same(
        dev_tasks: list[str], kwargs: dict[str, Any]) -> None:
    every = 1 if not kwargs else 3  # every task under the default, a third under the others
    verdicts: dict[tuple[float, str], int] = {}
    with skyhub.make("sql-spider", query_timeout_s=2.0, **kwargs) as tags, \
            skyhub.make("sql-spider", query_timeout_s=2.0, **kwargs) as tools:
        gold = {t.id: str(t.answer) for t in tags.tasks}
        task_ids = dev_tasks[::every]
        for n, task_id in enumerate(task_ids):
            other = gold[task_ids[(n + 1) % len(task_ids)]]
            for script in scripts(gold[task_id], other, tags.max_turns):
                text, tool = play_tags(tags, task_id, script), play_tools(tools, task_id, script)
                where = f"{task_id} {script}"
                for key in ("reward", "end", *TURN_KEYS):
                    assert text[key] == tool[key], f"{key} differs on {where}"
                verdicts[(text["reward"], text["outcome"])] = \
                    verdicts.get((text["reward"], text["outcome"]), 0) + 1
                # each valid call's result is its tag turn's observation, unframed
                for (move, obs), (_, result) in zip(text["observations"], tool["results"],
                                                    strict=False):
                    if move[0] != "bad":
                        assert result["content"] == tool_result(TOOL[move[0]], obs), where
    # the scripts reach every verdict: right, wrong, broken format (skyrl only)
    assert verdicts.get((1.0, "success"), 0) >= len(task_ids) * 0.9
    assert verdicts.get((0.0, "failure"), 0) > len(task_ids)
    if not kwargs:
        assert verdicts.get((-1.0, "failure"), 0) > len(task_ids)


def test_the_tools_protocol_describes_the_tools_and_the_default_is_unchanged() -> None:
    def digest(text: str | None) -> str:
        return hashlib.sha256((text or "").encode()).hexdigest()

    # the default prompt and first observation as they were before tools (commit 5b61fe6)
    with skyhub.make("sql-spider") as env:
        obs, _ = env.reset(options={"task_id": "spider-dev-0"})
        assert env.protocol == "skyrl-train" and env.tools is not None
        assert digest(env.system_prompt) == \
            "00f72908c5cb1f10e81e923632c1b9d200425d2b4bcb93cdede640c2241e6e0a"
        assert digest(obs) == "602e360727674aebe904d5438db797068bbb3edb32440fcf11ff6e66f30ee3d8"
        tag_obs = obs
    with skyhub.make("sql-spider", protocol="skyrl-eval") as env:
        obs, _ = env.reset(options={"task_id": "spider-dev-0"})
        assert digest(obs) == "ac8d4e5b6c81b812d26af6f2388c4636e10fc4f2ccf09c4627e720ddf69feb4b"
    with skyhub.make("sql-spider", protocol="tools") as env:
        obs, _ = env.reset(options={"task_id": "spider-dev-0"})
        prompt = env.system_prompt or ""
        assert env.protocol == "tools" and env.rules == "skyrl-train"
        assert "`execute_sql`" in prompt and "`submit_solution`" in prompt
        assert "<sql>" not in prompt and "<solution>" not in prompt and "<think>" not in prompt
        # the schema and the question as the tag prompt gives them; the budget counts calls
        assert obs.replace("You have 6 turns (each tool call takes one).", "You have 6 turns.") \
            == tag_obs
        for schema in env.tools or []:
            json.dumps(schema)  # plain JSON, as an API request carries it
        assert [t["function"]["name"] for t in env.tools or []] == \
            ["execute_sql", "submit_solution"]
    with skyhub.make("sql-spider", protocol="tags") as env:
        assert env.protocol == "skyrl-train"
    with pytest.raises(UsageError, match="skyrl-train, skyrl-eval, tags, tools"):
        skyhub.make("sql-spider", protocol="function-calling")


def test_the_tools_protocol_plays_skyrl_trains_episode_with_tool_wording() -> None:
    with skyhub.make("sql-spider", protocol="tools") as env:
        env.reset(options={"task_id": "spider-dev-0"})
        for _ in range(4):
            obs, *_ = env.step(ToolCall("q", "execute_sql", {"query": "SELECT 1"}))
        assert "You have 2 turns left." in obs and "<observation>" not in obs
        obs, *_ = env.step(ToolCall("q", "execute_sql", {"query": "SELECT 1"}))
        assert "give the final query with the `submit_solution` tool" in obs
        assert "<solution>" not in obs
        _, reward, terminated, truncated, info = env.step(
            ToolCall("s", "submit_solution", {"query": "SELECT count(*) FROM singer"}))
        assert (reward, terminated, truncated, info["outcome"]) == (1.0, True, False, "success")
        assert info["tool_results"][0]["content"] == "Solution submitted; the episode has ended."


@pytest.mark.parametrize("kwargs", [{}, {"protocol": "skyrl-eval"}, {"engine": "duckdb"}],
                         ids=["skyrl-train", "skyrl-eval", "duckdb"])
def test_the_tool_oracle_scores_one_where_the_tag_oracle_does(
        dev_tasks: list[str], kwargs: dict[str, Any]) -> None:
    task_ids = dev_tasks if not kwargs.get("engine") else dev_tasks[::4]
    with skyhub.make("sql-spider", **kwargs) as env:
        ones = 0
        for task_id in task_ids:
            env.reset(options={"task_id": task_id})
            tag_reward = env.step(env.reference_action() or "")[1]
            env.reset(options={"task_id": task_id})
            calls = env.reference_tool_calls()
            assert calls is not None and [c.name for c in calls] == ["submit_solution"]
            _, reward, terminated, _, info = env.step(calls)
            assert terminated and reward == tag_reward, (task_id, info)
            ones += reward == 1.0
        assert ones == len(task_ids)  # the tag oracle scores 1.0 on every task
    with skyhub.make("sql-spider") as fresh:
        assert fresh.reference_tool_calls() is None  # no episode yet


@pytest.fixture
def env() -> Iterator[SQLEnv]:
    with skyhub.make("sql-spider", protocol="tools") as e:
        e.reset(options={"task_id": "spider-dev-0"})
        yield e  # type: ignore[misc]


def test_malformed_calls_are_answered_with_what_to_fix(env: SQLEnv) -> None:
    calls = [malformed_call(k, k) for k in ("unknown", "json", "not_object", "missing", "type")]
    obs, reward, terminated, truncated, info = env.step(calls)
    assert (reward, terminated, truncated, info["turn"]) == (0.0, False, False, 5)
    contents = {r["call_id"]: r["content"] for r in info["tool_results"]}
    assert all(r["error"] for r in info["tool_results"])
    assert "unknown tool 'drop_table'" in contents["unknown"]
    assert "execute_sql, submit_solution" in contents["unknown"]
    assert "not valid JSON" in contents["json"]
    assert "must be a JSON object" in contents["not_object"]
    assert "missing the required parameter 'query'" in contents["missing"]
    assert "parameter 'query' must be string" in contents["type"]
    assert all(c in obs for c in contents.values())
    # the last turn: a malformed call there ends the episode without a solution
    _, reward, terminated, truncated, info = env.step(malformed_call("json", "last"))
    assert (terminated, truncated, info["outcome"]) == (False, True, "failure")
    assert reward == -1.0 and "expected exactly one <solution>, found 0" in \
        info["format_violations"]


def test_an_openai_message_with_parallel_calls_is_played_in_order(env: SQLEnv) -> None:
    message = {"role": "assistant", "content": "Counting first, then answering.", "tool_calls": [
        {"id": "a", "type": "function", "function": {
            "name": "execute_sql",
            "arguments": json.dumps({"query": "SELECT count(*) FROM singer"})}},
        {"id": "b", "type": "function", "function": {
            "name": "submit_solution",
            "arguments": json.dumps({"query": "SELECT count(*) FROM singer"})}},
        {"id": "c", "type": "function", "function": {
            "name": "execute_sql", "arguments": json.dumps({"query": "SELECT 2"})}}]}
    _, reward, terminated, _, info = env.step(message)
    assert (reward, terminated, info["outcome"], info["turn"]) == (1.0, True, "success", 2)
    results = info["tool_results"]
    assert [r["call_id"] for r in results] == ["a", "b", "c"]
    assert results[0]["content"].startswith("count(*)") and "6" in results[0]["content"]
    assert results[2]["error"] and "not run: the episode ended at call b" in results[2]["content"]


def test_a_message_without_calls_is_a_tag_turn(env: SQLEnv) -> None:
    obs, *_ , info = env.step({"role": "assistant", "content": "<think>hm</think><sql>SELECT 1"
                                                               "</sql>", "tool_calls": []})
    assert obs.startswith("<observation>") and "tool_results" not in info


@pytest.mark.parametrize("protocol", ["tools", "skyrl-train"])
def test_check_env_passes_with_tools(protocol: str) -> None:
    report = check_env("sql-spider", env_kwargs={"protocol": protocol}, episodes=2)
    assert report.ok, report
    assert "reference_tool_calls() scored as reference_action()" in report["tools"].message
