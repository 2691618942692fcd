"""Hermes-style tool calls, as Qwen2.5 and Qwen3 emit them (vLLM's `hermes` parser's rules):

    Let me look.<tool_call>
    {"name": "lookup", "arguments": {"key": "k7"}}
    </tool_call>

The content is the text before the first `<tool_call>`. Each `<tool_call>...</tool_call>` holds
one JSON object with a string `name` and an `arguments` key; the last tag may be left unclosed
(its body runs to the end of the text). When any body is not such an object (bad JSON, no
`name` or `arguments`, a name that is not a string) the whole text is content and there are no
calls: the turn is one thing or the other, never a half-parsed mix. Arguments that are not a
JSON object are kept as their JSON text, which the env answers as a malformed call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from skyhub.tools import ToolCall

from .base import ParsedTurn, ToolParser

START = "<tool_call>"
# a closed tag, or (where none closes) an open one running to the end of the text
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def call_arguments(value: Any) -> dict[str, Any] | str:
    """A call's arguments as `ToolCall` keeps them: a JSON object as a dict, anything else as
    its JSON text (as vLLM passes it on)."""
    return value if isinstance(value, dict) else json.dumps(value, ensure_ascii=False)


class HermesParser(ToolParser):
    name = "hermes"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedTurn:
        if START not in text:
            return ParsedTurn(text)
        calls: list[ToolCall] = []
        for k, m in enumerate(_CALL.finditer(text)):
            # an empty closed body falls to the (absent) open one: both parse as nothing
            body = m.group(1) or m.group(2) or ""
            try:
                obj = json.loads(body)
            except ValueError:
                return ParsedTurn(text)
            if not (isinstance(obj, dict) and isinstance(obj.get("name"), str)
                    and "arguments" in obj):
                return ParsedTurn(text)
            calls.append(ToolCall(f"call_{k}", obj["name"], call_arguments(obj["arguments"])))
        return ParsedTurn(text[:text.index(START)], calls)
