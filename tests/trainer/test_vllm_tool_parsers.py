"""Our tool-call parsers against vLLM's own, on generated model outputs.

Runs where vLLM is installed (`bash scripts/vllm-venv.sh`, then `.venv-vllm/bin/python -m
pytest -m vllm tests/trainer/test_vllm_tool_parsers.py -s`). For each parser, seeded outputs
(hundreds: single and parallel calls with random names, nested and unicode arguments, content
around the calls, and malformed variants: truncated JSON, a missing name, extra text, unclosed
tags, wrong-typed values) go through vLLM's `extract_tool_calls(output, request)` (a
ChatCompletionRequest carrying the tools; a tiny tokenizer made here with the tokens the
parsers look up) and through ours. Compared: whether tools were called, the names, the
arguments as parsed JSON, the content (vLLM's None is our ""). Call ids are not compared
(vLLM's are random). Every difference must be one of the documented kinds
(docs/tool-parsers.md, `KNOWN` below); the counts are printed.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("vllm")

from skyhub.tool_parsers import get_parser
from skyhub.tools import function_tool

pytestmark = pytest.mark.vllm

PER_PARSER = 600
VLLM_NAMES = {"hermes": "hermes", "qwen3_coder": "qwen3_coder", "llama3_json": "llama3_json"}
TURN_END = "<|im_end|>"  # a special token of the tokenizer that is none of the parser's markers


def without_turn_end(text: str, ours: tuple, theirs: tuple) -> bool:
    """vLLM's qwen3_coder drops the tokenizer's special tokens that are not its own markers
    (wherever they are: content or arguments); ours has no tokenizer and keeps the text: the
    same text without them parses to vLLM's result."""
    return TURN_END in text and our_result("qwen3_coder", text.replace(TURN_END, "")) == theirs


#: parser -> documented kind of difference (docs/tool-parsers.md) -> what recognises one
KNOWN: dict[str, dict[str, Any]] = {
    "qwen3_coder": {"special tokens dropped by vLLM": without_turn_end},
}

TOOLS = [
    function_tool("lookup", "Look a key up.", {"key": {"type": "string"}}),
    function_tool("add", "Add numbers.", {"a": {"type": "integer"}, "b": {"type": "number"}}),
    function_tool("flags", "Set flags.", {"on": {"type": "boolean"},
                                          "tags": {"type": "array", "items": {"type": "string"}},
                                          "opts": {"type": "object"},
                                          "note": {"type": ["string", "null"]},
                                          "level": {"enum": [1, 2, 3]}}, required=[]),
]
WORDS = ["let", "me", "check", "the", "value", "ok", "done", "über", "naïve", "日本語", "🙂",
         "a<b", "x > y", "quote\"d", "tab\there", "line\nbreak", "50%", "back\\slash"]


def rand_str(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))


def rand_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(["str", "int", "float", "bool", "null", "list", "dict"] if depth < 3
                      else ["str", "int", "float", "bool", "null"])
    if kind == "str":
        return rand_str(rng)
    if kind == "int":
        return rng.randint(-10**6, 10**6)
    if kind == "float":
        return round(rng.uniform(-1e3, 1e3), rng.randint(0, 6))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rand_name(rng): rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def rand_name(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(["lookup", "add", "flags"])
    first = rng.choice("abcdefghijklmnopqrstuvwxyz_")
    return first + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_")
                           for _ in range(rng.randint(0, 12)))


def rand_args(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "lookup":
        return {"key": rand_str(rng)}
    if name == "add":
        return {"a": rng.randint(-99, 99), "b": rng.choice([1.5, -2, 0.25, 7])}
    return {rand_name(rng): rand_json(rng, 1) for _ in range(rng.randint(0, 4))}


def prose(rng: random.Random, braces: bool = False) -> str:
    text = rand_str(rng)
    if braces and rng.random() < 0.3:
        text += rng.choice([" {x}", " use {", " }", " {\"k\": 1}"])
    return rng.choice(["", text, text + "\n", "\n" + text + " "])


# ── hermes: {"name", "arguments"} in <tool_call> ──────────────────────────────────────────


def hermes_body(rng: random.Random) -> str:
    name = rand_name(rng)
    obj: dict[str, Any] = {"name": name, "arguments": rand_args(rng, name)}
    variant = rng.random()
    if variant < 0.06:
        obj.pop("name")
    elif variant < 0.12:
        obj.pop("arguments")
    elif variant < 0.17:
        obj["name"] = rng.choice([3, None, ["x"]])
    elif variant < 0.25:
        obj["arguments"] = rng.choice(["{\"key\": \"k\"}", [1, 2], 7, None, "text"])
    elif variant < 0.3:
        obj = dict(reversed(list(obj.items())))
    body = json.dumps(obj, ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, 2]))
    cut = rng.random()
    if cut < 0.08:
        body = body[:rng.randint(0, len(body) - 1)]          # truncated JSON
    elif cut < 0.12:
        body += rng.choice([" trailing", "}", ",", " {\"x\": 1}"])
    elif cut < 0.15:
        body = rng.choice(["", " ", "[]", "\"s\"", "null"])
    return body


def hermes_text(rng: random.Random) -> str:
    calls = [hermes_body(rng) for _ in range(rng.choice([0, 1, 1, 1, 2, 3, 4]))]
    if not calls:
        return prose(rng)
    sep = rng.choice(["\n", "", " "])
    parts = [f"<tool_call>{rng.choice(['', chr(10)])}{b}{rng.choice(['', chr(10)])}</tool_call>"
             for b in calls]
    text = prose(rng) + sep.join(parts) + prose(rng)
    if rng.random() < 0.15:                                 # the last tag left open
        text = text[:text.rfind("</tool_call>")]
    if rng.random() < 0.05:
        text = text.replace("<tool_call>", "<tool_call><tool_call>", 1)
    return text


# ── qwen3_coder: <tool_call><function=NAME><parameter=P>value</parameter></function> ───


def xml_value(rng: random.Random, name: str, key: str, value: Any) -> str:
    wrong = rng.random() < 0.25
    if name == "add" and wrong:
        return rng.choice(["abc", "1.5", " 42 ", "1e3", "nan", "inf", "0x1f", "1_000", ""])
    if name == "flags" and wrong:
        return rng.choice(["yes", "TRUE", "0", "[1, 2", "null", "{\"a\": 1}", "2", "NULL"])
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def qwen_call(rng: random.Random, bare: bool = False) -> str:
    name = rand_name(rng)
    args = rand_args(rng, name)
    if name == "flags" and rng.random() < 0.6:
        args = {k: v for k, v in [("on", True), ("tags", ["a", "b"]), ("opts", {"x": 1}),
                                  ("note", None), ("level", 2)] if rng.random() < 0.6}
    nl = rng.choice(["\n", "\n", ""])
    params = "".join(f"<parameter={k}>{nl}{xml_value(rng, name, k, v)}{nl}</parameter>{nl}"
                     for k, v in args.items())
    variant = rng.random()
    if variant < 0.05:
        name = ""                                            # missing name
    elif variant < 0.08:
        name = rng.choice([" ", " lookup ", "look up"])
    elif variant < 0.12:
        params = params.replace("</parameter>", "", 1)       # an unclosed parameter
    elif variant < 0.15:
        params = "junk text " + params
    func = f"<function={name}>{nl}{params}</function>"
    if rng.random() < 0.06:
        func = func[:rng.randint(0, len(func) - 1)]          # truncated anywhere
    if bare:
        return func
    return f"<tool_call>{nl}{func}{nl}</tool_call>"


def qwen_text(rng: random.Random) -> str:
    n = rng.choice([0, 1, 1, 1, 2, 3])
    if not n:
        return prose(rng)
    calls = [qwen_call(rng, bare=rng.random() < 0.08) for _ in range(n)]
    text = prose(rng) + rng.choice(["\n", ""]).join(calls) + prose(rng)
    if rng.random() < 0.1:                                  # the sampled stop token kept
        text += TURN_END
    cut = rng.random()
    if cut < 0.06:
        text = text[:text.rfind("</tool_call>")] if "</tool_call>" in text else text
    elif cut < 0.1:
        text = text.replace("</function>", "", 1)            # no </function>
    elif cut < 0.13:
        text = text.replace("<tool_call>", "<tool_call>preamble text ", 1)
    return text


# ── llama3_json: {"name", "parameters"} objects, optionally after <|python_tag|> ──────


def llama_obj(rng: random.Random) -> str:
    name = rand_name(rng)
    key = rng.choice(["parameters", "parameters", "arguments"])
    obj: dict[str, Any] = {"name": name, key: rand_args(rng, name)}
    variant = rng.random()
    if variant < 0.05:
        obj.pop("name")
    elif variant < 0.1:
        obj.pop(key)
    elif variant < 0.13:
        obj["name"] = rng.choice([1, None])
    elif variant < 0.18:
        obj[key] = rng.choice(["{\"k\": 1}", [1], 3])
    body = json.dumps(obj, ensure_ascii=rng.random() < 0.3)
    if rng.random() < 0.06:
        body = body[:rng.randint(1, len(body) - 1)]
    return body


def llama_text(rng: random.Random) -> str:
    n = rng.choice([0, 1, 1, 1, 2, 3])
    if not n:
        return prose(rng, braces=True)
    sep = rng.choice(["; ", ";", ";\n", " ", ""])
    text = sep.join(llama_obj(rng) for _ in range(n))
    if rng.random() < 0.5:
        text = "<|python_tag|>" + text
    return prose(rng, braces=True) + text + prose(rng, braces=True)


MARKERS = {"hermes": ["<tool_call>", "</tool_call>", "{", "}", "\"", "\n"],
           "qwen3_coder": ["<tool_call>", "</tool_call>", "<function=", "</function>",
                           "<parameter=", "</parameter>", ">", "<", "<think>", "</think>",
                           "\"name\": \"x\"", "\n"],
           "llama3_json": ["{", "}", ";", "\"", "<|python_tag|>", "[", ","]}


def noisy(name: str, make: Any) -> Any:
    """The generator, with a stray marker spliced in at random in a fifth of its outputs."""
    def generate(rng: random.Random) -> str:
        text = make(rng)
        for _ in range(rng.randint(1, 3) if rng.random() < 0.2 else 0):
            at = rng.randint(0, len(text))
            text = text[:at] + rng.choice(MARKERS[name]) + text[at:]
        return text
    return generate


GENERATORS = {"hermes": noisy("hermes", hermes_text),
              "qwen3_coder": noisy("qwen3_coder", qwen_text),
              "llama3_json": noisy("llama3_json", llama_text)}


# ── running both ──────────────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from skyhub.trainer.tiny import train_tokenizer

    tok = train_tokenizer(["let me check the value <tool_call> lookup"] * 8)
    # the markers the parsers look up in the vocabulary (llama3_json needs <|python_tag|>)
    tok.add_tokens(["<tool_call>", "</tool_call>", "<|python_tag|>"])
    tok.add_special_tokens({"additional_special_tokens": [TURN_END]})
    return tok


def vllm_result(name: str, tokenizer: Any, text: str) -> tuple[bool, list[tuple[str, Any]], str]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    request = ChatCompletionRequest(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                    tools=TOOLS)
    parser = ToolParserManager.get_tool_parser(VLLM_NAMES[name])(tokenizer, tools=request.tools)
    info = parser.extract_tool_calls(text, request)
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls]
    return info.tools_called, calls, info.content or ""


def our_result(name: str, text: str) -> tuple[bool, list[tuple[str, Any]], str]:
    turn = get_parser(name).parse(text, tools=TOOLS)
    calls = [(c.name, c.arguments if isinstance(c.arguments, dict) else json.loads(c.arguments))
             for c in turn.calls]
    return bool(turn.calls), calls, turn.content


def difference(ours: tuple, theirs: tuple) -> str | None:
    """Which part differs (tools_called, names, arguments, content), or None."""
    if ours[0] != theirs[0]:
        return "tools_called"
    if [n for n, _ in ours[1]] != [n for n, _ in theirs[1]]:
        return "names"
    if json.dumps([a for _, a in ours[1]], sort_keys=True) != \
            json.dumps([a for _, a in theirs[1]], sort_keys=True):
        return "arguments"
    if ours[2] != theirs[2]:
        return "content"
    return None


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_our_parser_agrees_with_vllms(name: str, tokenizer: Any) -> None:
    logging.getLogger("vllm").setLevel(logging.CRITICAL)  # vLLM logs each malformed output
    rng = random.Random(f"tool-parsers-{name}")
    counts: Counter[str] = Counter()
    undocumented: list[str] = []
    for _ in range(PER_PARSER):
        text = GENERATORS[name](rng)
        ours, theirs = our_result(name, text), vllm_result(name, tokenizer, text)
        part = difference(ours, theirs)
        if part is None:
            counts["agree"] += 1
            counts["agree, with calls" if theirs[0] else "agree, content only"] += 1
            continue
        kind = next((k for k, known in KNOWN.get(name, {}).items() if known(text, ours, theirs)),
                    None)
        counts[f"differ: {kind}" if kind else "differ: undocumented"] += 1
        if kind is None:
            undocumented.append(f"{part}: {text!r}\n  ours:   {ours}\n  vLLM's: {theirs}")
    print(f"\n{name}: {PER_PARSER} outputs: " + ", ".join(f"{k} {v}" for k, v in
                                                         sorted(counts.items())))
    assert counts["agree, with calls"] >= PER_PARSER // 4, counts  # the calls are exercised
    assert not undocumented, "\n".join(undocumented[:10])
