"""Tool-call parsers on hand-written model outputs, and picking one from a chat template.

Each parser follows vLLM's parser of the same name (the differential test against vLLM's own:
tests/trainer/test_vllm_tool_parsers.py); these tests pin the rules a user relies on. The chat
templates under tests/support/chat_templates/ are the real ones (Qwen2.5 whole; Qwen3-Coder and
Llama 3.1 excerpts with their tool-call parts), taken from public repositories.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import skyhub
from skyhub.errors import UsageError
from skyhub.tool_parsers import PARSERS, auto_parser, get_parser, resolve_parser
from skyhub.tools import ToolCall, function_tool

TEMPLATES = Path(__file__).parents[1] / "support" / "chat_templates"
TOOLS = [
    function_tool("add", "Add.", {"a": {"type": "integer"}, "b": {"type": "number"}}),
    function_tool("flags", "Flags.", {"on": {"type": "boolean"}, "tags": {"type": "array"},
                                      "opts": {"type": "object"},
                                      "note": {"type": ["string", "null"]},
                                      "key": {"type": "string"}}, required=[]),
]


def hermes(text: str) -> Any:
    return get_parser("hermes").parse(text)


def calls(turn: Any) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for c in turn.calls]


# ── hermes ───────────────────────────────────────────────────────────────────────────────
def test_hermes_reads_a_call_and_the_content_before_it() -> None:
    turn = hermes('Let me look.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "k7"}}\n'
                  "</tool_call>")
    assert turn.content == "Let me look.\n"
    assert turn.calls == [ToolCall("call_0", "lookup", {"key": "k7"})]


def test_hermes_reads_parallel_calls_and_drops_the_text_after_them() -> None:
    turn = hermes('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
                  '<tool_call>{"name": "b", "arguments": {"x": [1, {"y": "ü"}]}}</tool_call> bye')
    assert calls(turn) == [("a", {}), ("b", {"x": [1, {"y": "ü"}]})]
    assert [c.id for c in turn.calls] == ["call_0", "call_1"]
    assert turn.content == ""


def test_hermes_reads_an_unclosed_last_call() -> None:
    turn = hermes('<tool_call>{"name": "a", "arguments": {"k": 1}}</tool_call>'
                  '<tool_call>\n{"name": "b", "arguments": {"k": 2}}\n')
    assert calls(turn) == [("a", {"k": 1}), ("b", {"k": 2})]


@pytest.mark.parametrize("body", [
    '{"name": "a", "arguments": {"k": 1}',          # truncated JSON
    '{"arguments": {"k": 1}}',                      # no name
    '{"name": "a"}',                                # no arguments key
    '{"name": 3, "arguments": {}}',                 # a name that is not a string
    '["a", {}]', '', 'call a with k=1',
])
def test_hermes_turns_a_malformed_call_into_content_with_no_calls(body: str) -> None:
    text = f'Sure.<tool_call>{{"name": "ok", "arguments": {{}}}}</tool_call><tool_call>{body}' \
           "</tool_call>"
    turn = hermes(text)
    assert (turn.content, turn.calls) == (text, [])
    assert turn.action == text  # the env answers it by its text protocol


def test_hermes_keeps_arguments_that_are_no_object_as_json_text() -> None:
    turn = hermes('<tool_call>{"name": "lookup", "arguments": "{\\"key\\": \\"k7\\"}"}</tool_call>')
    call = turn.calls[0]
    assert json.loads(call.arguments) == '{"key": "k7"}'      # a JSON string, as vLLM passes it
    assert "must be a JSON object" in call.parsed_arguments()  # what the env answers
    assert hermes('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>').calls[0] \
        .arguments == "[1, 2]"


def test_hermes_text_without_tags_is_content() -> None:
    assert hermes("just text {not a call}").content == "just text {not a call}"


# ── qwen3_coder ──────────────────────────────────────────────────────────────────────────
def coder(text: str, tools: list[dict[str, Any]] | None = TOOLS) -> Any:
    return get_parser("qwen3_coder").parse(text, tools=tools)


def xml_call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_qwen3_coder_types_values_by_the_tool_schema() -> None:
    turn = coder("I will add.\n" + xml_call("add", a="3", b="2.5") + "\n" +
                 xml_call("flags", on="true", tags='["x", "y"]', opts='{"k": 1}', note="null",
                          key="007"))
    assert turn.content == "I will add."
    assert calls(turn) == [("add", {"a": 3, "b": 2.5}),
                           ("flags", {"on": True, "tags": ["x", "y"], "opts": {"k": 1},
                                      "note": None, "key": "007"})]


def test_qwen3_coder_without_tools_keeps_every_value_text() -> None:
    assert calls(coder(xml_call("add", a="3"), tools=None)) == [("add", {"a": "3"})]


def test_qwen3_coder_keeps_a_wrong_typed_value_as_its_text_or_json() -> None:
    turn = coder(xml_call("add", a="three", b="1e400") + xml_call("add", a="1.5") +
                 xml_call("flags", on="yes", tags="[1, 2"))
    assert calls(turn) == [("add", {"a": "three", "b": "1e400"}), ("add", {"a": 1.5}),
                           ("flags", {"on": "yes", "tags": "[1, 2"})]


def test_qwen3_coder_reads_multiline_values_and_drops_one_newline_each_side() -> None:
    turn = coder(xml_call("flags", key="line 1\nline 2\n"))
    assert calls(turn) == [("flags", {"key": "line 1\nline 2\n"})]


def test_qwen3_coder_arguments_run_to_the_end_without_a_closing_function() -> None:
    turn = coder("<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</tool_call>\n"
                 "<parameter=b>\n2\n</parameter>\nafter")
    assert calls(turn) == [("add", {"a": 1, "b": 2})]
    assert turn.content == ""


def test_qwen3_coder_reads_an_unclosed_call_and_a_bare_function() -> None:
    turn = coder("ok <function=add><parameter=a>4</parameter></function> then "
                 "<tool_call><function=flags><parameter=on>0</parameter>")
    assert calls(turn) == [("add", {"a": 4}), ("flags", {"on": False})]
    assert turn.content == "ok"


def test_qwen3_coder_a_call_without_a_name_is_no_call() -> None:
    turn = coder("before " + xml_call("", a="1") + " after")
    assert (turn.calls, turn.content) == ([], "before  after")


# ── llama3_json ──────────────────────────────────────────────────────────────────────────
def llama(text: str) -> Any:
    return get_parser("llama3_json").parse(text)


def test_llama3_json_reads_calls_after_the_python_tag_separated_by_semicolons() -> None:
    turn = llama('<|python_tag|>{"name": "lookup", "parameters": {"key": "k7"}}; '
                 '{"name": "answer", "arguments": {"value": "日本"}}')
    assert calls(turn) == [("lookup", {"key": "k7"}), ("answer", {"value": "日本"})]
    assert turn.content == ""


def test_llama3_json_drops_the_prose_around_calls() -> None:
    assert llama('Sure: {"name": "f", "parameters": {}} done').content == ""


@pytest.mark.parametrize("text", [
    'The set {1, 2} and {"name": "f", "parameters": {}}',    # a brace that is no JSON
    '{"parameters": {"k": 1}}', '{"name": "f"}', '{"name": null, "parameters": {}}',
    '{"name": "f", "parameters": {"k": 1}',
])
def test_llama3_json_malformed_output_is_content_with_no_calls(text: str) -> None:
    assert (llama(text).content, llama(text).calls) == (text, [])


def test_llama3_json_keeps_parameters_that_are_no_object_as_json_text() -> None:
    assert calls(llama('{"name": "f", "parameters": ["a"]}')) == [("f", '["a"]')]


# ── a parsed turn played in a real env ───────────────────────────────────────────────────
@pytest.mark.parametrize("name,render", [
    ("hermes", lambda c: f'<tool_call>\n{json.dumps({"name": c.name, "arguments": c.arguments})}'
                         "\n</tool_call>"),
    ("qwen3_coder", lambda c: xml_call(c.name, **c.arguments)),
    ("llama3_json", lambda c: json.dumps({"name": c.name, "parameters": c.arguments})),
])
def test_the_reference_calls_rendered_and_parsed_win_toy_lookup(name: str, render: Any) -> None:
    with skyhub.make("toy-lookup", protocol="tools") as env:
        env.reset(seed=3)
        reward, done = 0.0, False
        while not done:
            text = "Thinking.\n" + "".join(render(c) for c in env.reference_tool_calls())
            turn = get_parser(name).parse(text, tools=env.tools)
            _, reward, done, _, info = env.step(turn.action)
            assert [r["name"] for r in info["tool_results"]] == [c.name for c in turn.calls]
        assert reward == 1.0


# ── choosing the parser ──────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("template,parser", [
    ("qwen2.5.jinja", "hermes"), ("qwen3-coder.jinja", "qwen3_coder"),
    ("llama3.1.jinja", "llama3_json"),
])
def test_auto_parser_reads_the_family_from_real_chat_templates(template: str, parser: str) -> None:
    text = (TEMPLATES / template).read_text()
    assert auto_parser(text) == parser
    assert auto_parser(SimpleNamespace(chat_template=text)) == parser   # a tokenizer
    assert auto_parser(SimpleNamespace(chat_template={"default": "x", "tool_use": text})) \
        == parser
    assert resolve_parser("auto", SimpleNamespace(chat_template=text)) == parser


def test_auto_parser_says_none_for_a_template_without_tool_calls() -> None:
    plain = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    assert auto_parser(plain) is None
    assert auto_parser(SimpleNamespace(chat_template=None)) is None
    with pytest.raises(UsageError, match=r"rollout\.tool_parser to one of hermes, "
                                         r"llama3_json, qwen3_coder"):
        resolve_parser("auto", SimpleNamespace(chat_template=plain))


def test_a_parser_name_is_checked() -> None:
    assert resolve_parser("qwen3_coder", None) == "qwen3_coder"
    with pytest.raises(UsageError, match=r"unknown rollout\.tool_parser 'qwen'.*hermes"):
        resolve_parser("qwen", None)
    with pytest.raises(UsageError, match="unknown tool parser 'x'"):
        get_parser("x")
    assert sorted(PARSERS) == ["hermes", "llama3_json", "qwen3_coder"]
