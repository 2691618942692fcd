"""Llama 3.x JSON tool calls (vLLM's `llama3_json` parser's rules):

    <|python_tag|>{"name": "lookup", "parameters": {"key": "k7"}}; {"name": ...}

Every `{` that does not sit inside (or right after) an object already read starts a JSON
object; each must have a string `name` and an `arguments` or `parameters` key (`arguments` wins
where both are there). Text around and between the objects (`<|python_tag|>`, the `;`
separators, prose) is dropped once there are calls: a turn with calls has no content. One `{`
that does not start such an object makes the whole text content, with no calls.
"""

from __future__ import annotations

import json
from typing import Any

from skyhub.tools import ToolCall

from .base import ParsedTurn, ToolParser
from .hermes import call_arguments

_DECODER = json.JSONDecoder()


class Llama3JsonParser(ToolParser):
    name = "llama3_json"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedTurn:
        calls: list[ToolCall] = []
        pos = text.find("{")
        while pos >= 0:
            try:
                obj, end = _DECODER.raw_decode(text, pos)
            except ValueError:
                return ParsedTurn(text)
            name = obj.get("name")
            key = "arguments" if "arguments" in obj else "parameters"
            if not isinstance(name, str) or key not in obj:
                return ParsedTurn(text)
            calls.append(ToolCall(f"call_{len(calls)}", name, call_arguments(obj[key])))
            # vLLM skips a `{` right at an object's end as if it were inside it (`}{`)
            pos = text.find("{", end + 1)
        return ParsedTurn("" if calls else text, calls)
