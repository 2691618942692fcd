"""Hermes-style tool calls, as Qwen2.5 and Qwen3 emit them (vLLM's `hermes` parser's rules):

    Let me look.<tool_call>
    {"name": "lookup", "arguments": {"key": "k7"}}
    </tool_call>

The content is the text before the first `<tool_call>`; each `<tool_call>...</tool_call>`
(the last may be left unclosed at the end of the text) holds one JSON object with `name` and
`arguments`. When any of them is not valid JSON the whole text is content (no calls).
"""

from __future__ import annotations

import json
import re

from skyhub.tools import ToolCall

from . import ParsedTurn, ToolParser

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(?!.*<tool_call>)(.*)", re.DOTALL)


class HermesParser(ToolParser):
    name = "hermes"

    def parse(self, text: str) -> ParsedTurn:
        if "<tool_call>" not in text:
            return ParsedTurn(text)
        calls: list[ToolCall] = []
        for k, m in enumerate(_CALL.finditer(text)):
            body = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
            try:
                obj = json.loads(body)
            except ValueError:
                return ParsedTurn(text)
            if not isinstance(obj, dict) or "name" not in obj:
                return ParsedTurn(text)
            args = obj.get("arguments", {})
            calls.append(ToolCall(f"call_{k}", str(obj["name"]),
                                  args if isinstance(args, (dict, str)) else json.dumps(args)))
        content = text[:text.index("<tool_call>")]
        return ParsedTurn(content, calls)
