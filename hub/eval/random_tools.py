"""The `random` agent's tool turns: a fuzz test of an env's tool handling and a floor.

A turn is one to three calls (sometimes with text beside them), each drawn from the env's
`tools`: mostly a real tool with arguments of the schema's types (random words, numbers,
short random text), and, as a policy in training produces them, the malformed calls an env
must answer rather than raise on: an unknown or empty tool name, a missing required
parameter, a wrong-typed or extra one, arguments that are not JSON or not a JSON object,
empty or repeated call ids. Every action is plain JSON (the OpenAI `tool_calls` form), so
records stay JSON.
"""

from __future__ import annotations

import json
import random
from typing import Any

_WORDS = ("amber", "birch", "cobalt", "k1", "k42", "0", "1", "42", "yes", "no", "SELECT 1",
          "SELECT * FROM t", "print(1)", "ls -la", "done", "", " ", "'; DROP TABLE x; --")
_JUNK_JSON = ("{not json", "[1, 2]", "\"text\"", "null", "", "{\"a\": ", "42")
_SAY = ("", "", "", "Let me call a tool.", "<answer>42</answer>", "I think so.")


def random_text(rng: random.Random, limit: int = 24) -> str:
    """A short string: a word a tool might take, or random printable and non-ASCII text."""
    if rng.random() < 0.7:
        return rng.choice(_WORDS)
    alphabet = "abcxyz019 _-<>{}\"'\\\n\té漢🙂"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, limit)))


def random_value(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A value of the schema's type (the first of several), random within it."""
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if "enum" in schema and schema["enum"] and rng.random() < 0.8:
        return rng.choice(list(schema["enum"]))
    if kind == "integer":
        return rng.randint(-5, 100)
    if kind == "number":
        return round(rng.uniform(-5, 100), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return [random_value(items, rng, depth + 1) for _ in range(rng.randint(0, 3))] \
            if depth < 3 else []
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: random_value(v if isinstance(v, dict) else {}, rng, depth + 1)
                for k, v in props.items()} if depth < 3 else {}
    return random_text(rng)


def _wrong_value(schema: dict[str, Any], rng: random.Random) -> Any:
    """A value of another type than the schema's."""
    kind = schema.get("type")
    choices: list[Any] = [12345, 3.5, True, None, ["x"], {"x": 1}, "text"]
    return rng.choice([v for v in choices if not (kind == "string" and isinstance(v, str))])


def random_call(tools: list[dict[str, Any]], rng: random.Random, index: int) -> dict[str, Any]:
    """One call as an OpenAI `tool_calls` entry (arguments as JSON text, or junk text)."""
    fns = [t.get("function") or {} for t in tools if isinstance(t, dict)]
    r = rng.random()
    if not fns or r < 0.08:
        name = rng.choice(("", "no_such_tool", random_text(rng, 8), "answer "))
        fn: dict[str, Any] = {}
    else:
        fn = rng.choice(fns)
        name = str(fn.get("name", ""))
    params = fn.get("parameters") or {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    args: dict[str, Any] = {k: random_value(v if isinstance(v, dict) else {}, rng)
                            for k, v in props.items()}
    shape = rng.random()
    text: str | None = None
    if shape < 0.10 and args:  # a required parameter missing
        args.pop(rng.choice(sorted(args)))
    elif shape < 0.20 and props:  # a wrong type
        key = rng.choice(sorted(props))
        args[key] = _wrong_value(props[key] if isinstance(props[key], dict) else {}, rng)
    elif shape < 0.25:  # an unknown parameter
        args["unexpected_" + rng.choice(("x", "arg", "key"))] = random_text(rng)
    elif shape < 0.35:  # not a JSON object
        text = rng.choice(_JUNK_JSON)
    call_id = rng.choice((f"call_{index}", f"call_{index}", f"call_{index}", "", "call_0"))
    return {"id": call_id, "type": "function",
            "function": {"name": name,
                         "arguments": text if text is not None else
                         json.dumps(args, ensure_ascii=False)}}


def random_tool_turn(tools: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    """One assistant turn: 1 to 3 random calls (`random_call`), with text beside them now and
    then; the dict an OpenAI assistant message is."""
    n = rng.choice((1, 1, 1, 2, 3))
    return {"role": "assistant", "content": rng.choice(_SAY),
            "tool_calls": [random_call(tools, rng, k) for k in range(n)]}


__all__ = ["random_call", "random_tool_turn", "random_value"]
