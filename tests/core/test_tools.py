"""The tool-call contract (skyhub.tools, TextEnv.step with calls, chat messages with tool
calls): the shapes a call arrives in, the schema check, and the rules of a tool turn, played
on the real toy-lookup env."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

import skyhub
from skyhub import Episode, TextEnv, ToolCall, ToolResult
from skyhub.tools import as_tool_turn, check_call, check_value, function_tool, to_plain

LOOKUP_ARGS = {"key": "k7"}


def lookup_env(**kwargs: Any) -> TextEnv:
    return skyhub.make("toy-lookup", protocol="tools", **kwargs)


# ------------------------------------------------------------------ ToolCall.from_openai
def test_from_openai_reads_the_chat_completions_entry() -> None:
    entry = {"id": "call_9", "type": "function",
             "function": {"name": "lookup", "arguments": '{"key": "k7"}'}}
    call = ToolCall.from_openai(entry)
    assert call == ToolCall("call_9", "lookup", '{"key": "k7"}')
    assert call.parsed_arguments() == LOOKUP_ARGS


def test_from_openai_reads_the_flat_dict_with_object_arguments() -> None:
    call = ToolCall.from_openai({"id": "c1", "name": "lookup", "arguments": LOOKUP_ARGS})
    assert call == ToolCall("c1", "lookup", LOOKUP_ARGS)


def test_from_openai_reads_the_sdk_object() -> None:
    try:
        from openai.types.chat import ChatCompletionMessageToolCall as SdkCall

        sdk = SdkCall(id="call_x", type="function",
                      function={"name": "lookup", "arguments": '{"key": "k7"}'})
    except ImportError:  # the same attributes, where the openai package is not installed
        sdk = SimpleNamespace(id="call_x", type="function", function=SimpleNamespace(
            name="lookup", arguments='{"key": "k7"}'))
    call = ToolCall.from_openai(sdk)
    assert (call.id, call.name, call.parsed_arguments()) == ("call_x", "lookup", LOOKUP_ARGS)


def test_a_call_without_id_gets_one_from_its_position() -> None:
    calls = as_tool_turn([{"function": {"name": "lookup", "arguments": "{}"}},
                          {"name": "answer", "arguments": None}])
    assert calls is not None
    assert [c.id for c in calls[1]] == ["call_0", "call_1"]
    assert calls[1][1].arguments == {}


def test_a_tool_call_passes_through_from_openai_unchanged() -> None:
    call = ToolCall("a", "lookup", LOOKUP_ARGS)
    assert ToolCall.from_openai(call) is call


@pytest.mark.parametrize("arguments", [LOOKUP_ARGS, '{"key": "k7"}', {"key": "ключ ✓"}, {}])
def test_to_openai_round_trips(arguments: dict[str, Any] | str) -> None:
    call = ToolCall("call_1", "lookup", arguments)
    entry = call.to_openai()
    assert entry["type"] == "function" and isinstance(entry["function"]["arguments"], str)
    back = ToolCall.from_openai(json.loads(json.dumps(entry)))
    assert (back.id, back.name) == ("call_1", "lookup")
    assert back.parsed_arguments() == call.parsed_arguments()


def test_to_plain_records_a_tool_turn_as_json() -> None:
    plain = to_plain([ToolCall("a", "lookup", LOOKUP_ARGS)])
    assert json.loads(json.dumps(plain)) == {"content": "", "tool_calls": [
        {"id": "a", "type": "function",
         "function": {"name": "lookup", "arguments": '{"key": "k7"}'}}]}
    assert to_plain("<lookup>k7</lookup>") == "<lookup>k7</lookup>"


def test_as_tool_turn_leaves_text_and_other_dicts_alone() -> None:
    assert as_tool_turn("<answer>1</answer>") is None
    assert as_tool_turn({"foo": 1}) is None
    assert as_tool_turn({"role": "assistant", "content": "hi"}) == ("hi", [])


# ------------------------------------------------------------------ check_call, check_value
SEARCH = function_tool("search", "Search.", {
    "query": {"type": "string"},
    "k": {"type": "integer"},
    "mode": {"type": "string", "enum": ["bm25", "dense"]},
    "ids": {"type": "array", "items": {"type": "integer"}},
    "score": {"type": "number"},
}, required=["query"])
SEARCH["function"]["parameters"]["additionalProperties"] = False


def problem(arguments: dict[str, Any] | str, name: str = "search") -> str:
    args, why = check_call(ToolCall("c", name, arguments), [SEARCH])
    assert args is None and why is not None
    return why


def test_a_call_that_fits_its_schema_returns_its_arguments() -> None:
    good = {"query": "q", "k": 3, "mode": "bm25", "ids": [1, 2], "score": 0.5}
    assert check_call(ToolCall("c", "search", json.dumps(good)), [SEARCH]) == (good, None)
    # an integral float is an integer (JSON has one number type)
    assert check_call(ToolCall("c", "search", {"query": "q", "k": 3.0}), [SEARCH])[1] is None


def test_an_unknown_tool_names_the_known_ones() -> None:
    why = problem({"query": "q"}, name="grep")
    assert "unknown tool 'grep'" in why and "search" in why
    assert "none" in check_call(ToolCall("c", "grep", {}), None)[1]


@pytest.mark.parametrize(("arguments", "says"), [
    ('{"query": ', "not valid JSON"),
    ("[1, 2]", "must be a JSON object, not list"),
    ('"text"', "must be a JSON object, not str"),
    ("", "missing the required parameter 'query'"),
    ({}, "missing the required parameter 'query'"),
    ({"query": "q", "limit": 3}, "unknown parameter(s) ['limit']"),
    ({"query": 3}, "parameter 'query' must be string, got int"),
    ({"query": "q", "k": "3"}, "parameter 'k' must be integer, got str"),
    ({"query": "q", "k": 2.5}, "parameter 'k' must be integer, got float"),
    ({"query": "q", "mode": "fuzzy"}, "parameter 'mode' must be one of ['bm25', 'dense']"),
    ({"query": "q", "ids": [1, "2"]}, "parameter 'ids'[1] must be integer, got str"),
    ({"query": "q", "ids": 1}, "parameter 'ids' must be array, got int"),
    ({"query": "q", "k": True}, "parameter 'k' must be integer, got bool"),
    ({"query": "q", "score": False}, "parameter 'score' must be number, got bool"),
])
def test_a_malformed_call_says_what_to_fix(arguments: dict[str, Any] | str, says: str) -> None:
    why = problem(arguments)
    assert says in why, why


def test_extra_parameters_pass_unless_the_schema_forbids_them() -> None:
    lookup = function_tool("lookup", "Look up.", {"key": {"type": "string"}})
    assert check_call(ToolCall("c", "lookup", {"key": "k", "x": 1}), [lookup])[1] is None


def test_check_value_accepts_a_union_type_and_nested_objects() -> None:
    schema = {"type": "object", "properties": {
        "v": {"type": ["string", "null"]},
        "o": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    assert check_value(schema, {"v": None, "o": {"n": 1}}, "args") is None
    assert "missing the required parameter 'n'" in check_value(schema, {"o": {}}, "args")
    assert "must be string or null" in check_value(schema, {"v": 1}, "args")


# ------------------------------------------------------------------ the rules of a tool turn
def test_each_call_is_one_turn_and_results_come_back_by_call_id_in_order() -> None:
    with lookup_env(max_turns=4) as env:
        env.reset(seed=0)
        key, answer = env.task.meta["key"], env.task.answer
        obs, reward, terminated, truncated, info = env.step([
            ToolCall("b", "lookup", {"key": key}), ToolCall("a", "lookup", {"key": "k-none"})])
        assert info["turn"] == 2 and not (terminated or truncated) and reward == 0.0
        results = info["tool_results"]
        assert [(r["call_id"], r["name"], r["error"]) for r in results] == [
            ("b", "lookup", False), ("a", "lookup", False)]
        assert results[0]["content"].startswith(str(answer))  # <result> wrapping removed
        assert "no such key" in results[1]["content"]
        assert "[lookup b]" in obs and "[lookup a]" in obs
        _, reward, terminated, _, info = env.step(ToolCall("c", "answer", {"value": answer}))
        assert (reward, terminated, info["outcome"]) == (1.0, True, "success")
        assert info["tool_results"] == [ToolResult("c", "answer", "").to_dict()]


def test_calls_after_the_end_are_not_run() -> None:
    with lookup_env() as env:
        env.reset(seed=1)
        obs, reward, terminated, _, info = env.step([
            ToolCall("a", "answer", {"value": env.task.answer}),
            ToolCall("b", "lookup", {"key": env.task.meta["key"]}),
            ToolCall("c", "answer", {"value": "wrong"})])
        assert (obs, reward, terminated, info["turn"]) == ("", 1.0, True, 1)
        later = info["tool_results"][1:]
        assert [r["call_id"] for r in later] == ["b", "c"]
        assert all(r["error"] and r["content"].startswith("not run") for r in later)


class _PaidTurns(TextEnv):
    """Rewards every turn with its number / 10, so that a step's reward shows the sum."""

    def __init__(self) -> None:
        super().__init__(max_turns=5)
        self.tasks = [skyhub.Task("t", "go", None, {})]
        self.tools = [function_tool("tick", "Tick.", {})]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.start_episode(seed, options).prompt, self.make_info()

    def step(self, action: str) -> skyhub.StepResult:
        turn = self.next_turn()
        return f"tick {turn}", turn / 10, False, False, self.make_info()

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        return "tick"


def test_a_turn_of_calls_is_rewarded_the_sum_of_their_turns() -> None:
    env = _PaidTurns()
    env.reset(seed=0)
    _, reward, _, _, info = env.step([ToolCall(str(i), "tick", {}) for i in range(3)])
    assert reward == pytest.approx(0.1 + 0.2 + 0.3)
    assert [r["content"] for r in info["tool_results"]] == ["tick 1", "tick 2", "tick 3"]


def test_a_malformed_call_is_the_familys_malformed_turn() -> None:
    with lookup_env(max_turns=3) as env:
        env.reset(seed=2)
        _, reward, terminated, truncated, info = env.step(
            [ToolCall("a", "grep", {}), ToolCall("b", "lookup", '{"key": ')])
        assert (reward, terminated, truncated, info["turn"]) == (0.0, False, False, 2)
        first, second = info["tool_results"]
        assert first["error"] and "unknown tool 'grep'" in first["content"]
        assert "(2 turns left)" in first["content"]
        assert second["error"] and "not valid JSON" in second["content"]
        # the third malformed call spends the budget: the family's end, with its penalty count
        _, reward, terminated, truncated, info = env.step(ToolCall("c", "lookup", {}))
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["reward_breakdown"] == {"correct": 0.0, "format_errors": 3.0}
        assert "missing the required parameter 'key'" in info["tool_results"][0]["content"]


def test_a_message_without_calls_is_played_as_text() -> None:
    with lookup_env() as env:
        env.reset(seed=3)
        key = env.task.meta["key"]
        obs, _, _, _, info = env.step({"role": "assistant", "content": f"<lookup>{key}</lookup>",
                                       "tool_calls": []})
        assert obs.startswith(f"<result>{env.task.answer}</result>")
        assert "tool_results" not in info and info["turn"] == 1


def test_the_sdk_message_object_is_a_tool_turn() -> None:
    from openai.types.chat import ChatCompletionMessage

    with lookup_env() as env:
        env.reset(seed=4)
        message = ChatCompletionMessage(role="assistant", content=None, tool_calls=[
            {"id": "call_q", "type": "function", "function": {
                "name": "answer", "arguments": json.dumps({"value": env.task.answer})}}])
        _, reward, terminated, _, info = env.step(message)
        assert (reward, terminated, info["tool_results"][0]["call_id"]) == (1.0, True, "call_q")


def test_an_env_without_tools_answers_calls_not_run() -> None:
    with skyhub.make("toy-arith") as env:
        env.tools = None  # an env that takes text only
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(
            {"role": "assistant", "content": f"<answer>{env.task.answer}</answer>",
             "tool_calls": [{"id": "x", "function": {"name": "answer", "arguments": "{}"}}]})
        assert (reward, terminated) == (1.0, True)  # its content played as the text action
        (result,) = info["tool_results"]
        assert result["call_id"] == "x" and result["error"]
        assert result["content"].startswith("not run: this environment declares no tools")


# ------------------------------------------------------------------ episodes with tool turns
def test_a_tool_episode_records_tool_messages_and_a_json_record() -> None:
    with lookup_env() as env:
        obs, info = env.reset(seed=5)
        episode = Episode.start(env, obs, info)
        while not episode.done:
            calls = env.reference_tool_calls()
            episode.add(calls, *env.step(calls))
    assert episode.total_reward == 1.0 and episode.outcome == "success"
    messages = episode.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool",
                                             "assistant", "tool"]
    assert "`lookup` tool" in messages[0]["content"]
    lookup, answer = messages[2], messages[4]
    assert lookup["tool_calls"][0]["function"]["name"] == "lookup"
    assert messages[3]["tool_call_id"] == lookup["tool_calls"][0]["id"]
    assert messages[3]["content"].startswith(str(env.task.answer))
    assert messages[5]["tool_call_id"] == answer["tool_calls"][0]["id"]
    record = episode.to_record("toy-lookup", "oracle", {"protocol": "tools"})
    back = json.loads(json.dumps(record))
    assert back["messages"] == messages and back["reward"] == 1.0
    assert back["final_info"]["tool_results"][0]["name"] == "answer"


# ------------------------------------------------------------------ skyhub check's tools check
def test_skyhub_check_passes_toy_lookups_tools() -> None:
    from skyhub.eval.checks import check_env

    report = check_env("toy-lookup", env_kwargs={"protocol": "tools"}, episodes=2)
    result = report["tools"]
    assert result.passed, result.message
    assert "lookup, answer" in result.message
    assert "reference_tool_calls() scored as reference_action() on 2 seed(s)" in result.message


def test_an_env_without_tools_passes_with_no_tools() -> None:
    from skyhub.eval.tool_checks import check_tools

    with skyhub.make("toy-arith") as env:
        env.tools = None
        notes: list[str] = []
        assert check_tools(env, 0, 2, notes).startswith("no tools")


def _lookup_variant(**overrides: Any) -> TextEnv:
    """toy-lookup with one of its tool hooks replaced (a broken env to check)."""
    from skyhub.envs.toy.env import LookupEnv

    variant = type("Variant", (LookupEnv,), overrides)
    return variant(protocol="tools")


def _tools_check(env: TextEnv) -> Any:
    from skyhub.eval.checks import CheckReport, _run
    from skyhub.eval.tool_checks import check_tools

    report = CheckReport("variant")
    with env:
        _run(report, "tools", check_tools, env, 0, 2)
    return report["tools"]


def test_the_check_fails_an_invalid_schema() -> None:
    env = _lookup_variant()
    env.tools = [function_tool("look up", "Look.", {"key": {"type": "strin"}}),
                 {"type": "function", "function": {"name": "answer",
                                                   "parameters": {"type": "array"}}}]
    result = _tools_check(env)
    assert not result.passed
    assert "'look up' is not 1-64 letters" in result.message
    assert "not a valid JSON schema at properties/key/type" in result.message
    assert "tool 'answer': parameters must be a JSON schema with \"type\": \"object\"" \
        in result.message


def test_the_check_fails_a_tool_that_raises() -> None:
    def tool_action(self: Any, name: str, arguments: dict[str, Any]) -> str:
        raise RuntimeError("forgot the answer tool")

    result = _tools_check(_lookup_variant(tool_action=tool_action))
    assert not result.passed
    assert "a call of 'lookup'" in result.message and "RuntimeError" in result.message


def test_the_check_fails_a_tool_oracle_that_scores_otherwise() -> None:
    def reference_tool_calls(self: Any) -> list[ToolCall]:
        return [ToolCall("c", "answer", {"value": "not it"})]

    result = _tools_check(_lookup_variant(reference_tool_calls=reference_tool_calls))
    assert not result.passed
    assert "the tool and text oracles must get the same verdict" in result.message


def test_the_check_fails_results_that_lose_call_ids() -> None:
    def step_tools(self: Any, content: str, calls: list[ToolCall]) -> Any:
        obs, reward, terminated, truncated, info = self.step("<lookup>k1</lookup>")
        return obs, reward, terminated, truncated, {**info, "tool_results": [
            {"call_id": "?", "name": c.name, "content": obs} for c in calls]}

    result = _tools_check(_lookup_variant(step_tools=step_tools))
    assert not result.passed and "answer call ids ['?']" in result.message


def test_arguments_made_from_a_schema_fit_it() -> None:
    from skyhub.eval.tool_checks import sample_arguments

    params = SEARCH["function"]["parameters"]
    params = {**params, "required": list(params["properties"])}
    args = sample_arguments(params)
    assert args == {"query": "x", "k": 1, "mode": "bm25", "ids": [1], "score": 1.0}
    assert check_value(params, args, "args") is None
    assert sample_arguments({"type": ["null", "integer"], "minimum": 5}) == 6
