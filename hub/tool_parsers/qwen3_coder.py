"""Qwen3-Coder's XML tool calls (vLLM's `qwen3_coder` parser's rules, non-streaming):

    Let me look.
    <tool_call>
    <function=lookup>
    <parameter=key>
    k7
    </parameter>
    </function>
    </tool_call>

Parameter values are text; each is typed by the tool's JSON schema when the request's `tools`
are given (`parse(text, tools=...)`): `"3"` for an integer parameter is 3, `"[1, 2]"` for an
array is a list, `"null"` for a nullable one is None; a value that does not convert stays text
(or is read as JSON where that works), and without tools every value is a string. One newline
on each side of a value is the template's markup and is dropped.

How the text is read (vLLM reads it with a small state machine, and so do we):
- `<tool_call>` or a bare `<function=` starts a call; `<function=NAME>` names it (the name runs
  to the next `>`); the arguments run to `</function>`, or to the end of the text when none
  closes them (then even a `</tool_call>` inside is argument text); text between the calls and
  inside `<tool_call>` around the function is dropped.
- A call whose name is empty is no call (unless its body names one: `"name": "..."`).
- The content is the text before the first call, stripped, when there are calls; with none,
  all text outside the tool markup (so a call with an empty name leaves only the text around).
  Text after the calls is dropped. A stray `</think>` is dropped from the content.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from skyhub.tools import ToolCall, find_tool

from .base import ParsedTurn, ToolParser

_CONTENT, _PREAMBLE, _NAME, _ARGS, _BETWEEN = range(5)
# every marker vLLM's lexer knows: one without a move in the current state is plain text there,
# but it still cuts the text (a `>` ends a name; `<think>`'s `>` does not)
_MARKERS = ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=",
            "</parameter>", ">", "<think>", "</think>")
_LEX = re.compile("|".join(re.escape(m) for m in _MARKERS))
# (state, marker) -> (next state, starts a call)
_MOVES: dict[tuple[int, str], tuple[int, bool]] = {
    (_CONTENT, "<tool_call>"): (_PREAMBLE, True),
    (_CONTENT, "<function="): (_NAME, True),
    (_CONTENT, "</think>"): (_CONTENT, False),
    (_PREAMBLE, "</tool_call>"): (_CONTENT, False),
    (_PREAMBLE, "<function="): (_NAME, False),
    (_NAME, ">"): (_ARGS, False),
    (_NAME, "</function>"): (_BETWEEN, False),
    (_ARGS, "</function>"): (_BETWEEN, False),
    (_BETWEEN, "</tool_call>"): (_CONTENT, False),
    (_BETWEEN, "<tool_call>"): (_PREAMBLE, True),
    (_BETWEEN, "<function="): (_NAME, True),
}
_PARAM = re.compile(r"<\s*parameter\s*=\s*([^>]*)>(.*?)"
                    r"(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL)
_NAME_IN_BODY = re.compile(r'"name"\s*:\s*"([^"]*)"')


class Qwen3CoderParser(ToolParser):
    name = "qwen3_coder"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedTurn:
        state, before, after = _CONTENT, [], []
        slots: list[list[str]] = []          # [name, body] per call started
        for piece in _pieces(text):
            move = _MOVES.get((state, piece)) if piece in _MARKERS else None
            if move is not None:
                state, starts = move
                if starts:
                    slots.append(["", ""])
                continue
            if state == _CONTENT:
                (after if slots else before).append(piece)
            elif state == _NAME:
                slots[-1][0] += piece
            elif state == _ARGS:
                slots[-1][1] += piece
        calls: list[ToolCall] = []
        named = False
        for name, body in slots:
            if not name:
                m = _NAME_IN_BODY.search(body)
                name = m.group(1) if m else ""
            named = named or bool(name)
            call = _call(name.strip(), body, tools, len(calls))
            if call is not None:
                calls.append(call)
        content = "".join(before if named else before + after)
        if slots and not content.strip():
            content = ""
        return ParsedTurn(content.strip() if calls else content, calls)


def _pieces(text: str) -> list[str]:
    """The text cut at each marker: markers and the text between them, in order."""
    out: list[str] = []
    pos = 0
    for m in _LEX.finditer(text):
        if m.start() > pos:
            out.append(text[pos:m.start()])
        out.append(m.group())
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def _call(name: str, body: str, tools: list[dict[str, Any]] | None, k: int) -> ToolCall | None:
    if not name and body.strip():
        name, args = _json_body(body)
    elif body.strip():
        args = _parameters(body)
    else:
        args = {}
    if not name or not isinstance(name, str):
        return None
    if isinstance(args, dict):
        args = typed_arguments(args, tools, name)
    return ToolCall(f"call_{k}", name, args)


def _parameters(body: str) -> dict[str, Any]:
    """`<parameter=P>value</parameter>`s as {P: value} (an unclosed one ends at the next)."""
    params: dict[str, Any] = {}
    for m in _PARAM.finditer(body):
        value = m.group(2)
        value = value[1:] if value.startswith("\n") else value
        params[m.group(1)] = value[:-1] if value.endswith("\n") else value
    return params


def _json_body(body: str) -> tuple[Any, dict[str, Any] | str]:
    """A nameless call whose body is a JSON call object (`{"name", "arguments"}`)."""
    try:
        obj = json.loads(body.strip())
    except ValueError:
        return "", body
    if not isinstance(obj, dict):
        return "", body
    for key in ("arguments", "parameters"):
        if key in obj:
            value = obj[key]
            return obj.get("name", ""), value if isinstance(value, (dict, str)) else \
                json.dumps(value, ensure_ascii=False)
    return obj.get("name", ""), {k: v for k, v in obj.items() if k != "name"}


def typed_arguments(args: dict[str, Any], tools: list[dict[str, Any]] | None,
                    name: str) -> dict[str, Any]:
    """Text values typed by the schema of tool `name`'s parameters (others left as they are)."""
    fn = find_tool(tools, name)
    props = (fn.get("parameters") or {}).get("properties") if fn else None
    if not props or not isinstance(props, dict):
        return args
    out = dict(args)
    for key, value in args.items():
        schema = props.get(key)
        if isinstance(schema, dict) and isinstance(value, str):
            out[key] = convert_value(value, schema_types(schema))
    return out


_ALIASES = {"str": "string", "text": "string", "varchar": "string", "char": "string",
            "enum": "string", "int": "integer", "int32": "integer", "int64": "integer",
            "uint": "integer", "uint32": "integer", "uint64": "integer", "long": "integer",
            "short": "integer", "unsigned": "integer", "float": "number",
            "float32": "number", "float64": "number", "double": "number",
            "bool": "boolean", "dict": "object", "arr": "array", "list": "array",
            "sequence": "array"}
_ENUM_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))


def schema_types(schema: Any) -> set[str]:
    """The JSON types a schema allows: `type` (one or a list), the types of its `enum` values,
    and those of its `anyOf`/`oneOf`/`allOf` branches; `{"string"}` when it says none."""
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    kind = schema.get("type")
    for k in kind if isinstance(kind, list) else [kind]:
        if isinstance(k, str):
            types.add(k)
    enum = schema.get("enum")
    if isinstance(enum, list):
        for v in enum:
            types.add("null" if v is None else
                      next((t for cls, t in _ENUM_TYPES if isinstance(v, cls)), "string"))
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            for branch in schema[key]:
                types |= schema_types(branch)
    return types or {"string"}


def convert_value(value: str, types: set[str]) -> Any:
    """`value` as the first of the allowed types it converts to, in the order null, integer,
    number, boolean, object, array, string (so "1" is 1 where both integer and string are
    allowed); failing all, the JSON it reads as, or the text itself."""
    allowed = {_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types}
    if "null" in allowed and value.lower() == "null":
        return None
    if "integer" in allowed:
        try:
            return int(value)
        except ValueError:
            pass
    if "number" in allowed:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return int(number) if number == int(number) else number
    if "boolean" in allowed:
        word = value.lower().strip()
        if word in ("true", "1", "false", "0"):
            return word in ("true", "1")
    for kind in ("object", "array"):
        if kind in allowed:
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if _finite(parsed):
                return parsed
    if "string" in allowed:
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if _finite(parsed) else value


def _finite(value: Any) -> bool:
    """No inf or nan anywhere in `value` (they have no JSON spelling)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True
