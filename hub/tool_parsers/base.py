"""What every tool parser shares: `ParsedTurn`, the `ToolParser` base class and the registry
(`PARSERS`, `get_parser`). The package's docstring says what the parsers are for."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError
from skyhub.tools import ToolCall


@dataclass
class ParsedTurn:
    """An assistant turn parsed: its `content` (the text outside the calls) and its calls."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)

    @property
    def action(self) -> Any:
        """What to pass to `env.step`: the calls as an assistant message, or the text."""
        if not self.calls:
            return self.content
        return {"role": "assistant", "content": self.content,
                "tool_calls": [c.to_openai() for c in self.calls]}


class ToolParser:
    """Base class: `parse(text, tools=None) -> ParsedTurn`. `name` is the `rollout.tool_parser`
    value. `tools` (the request's OpenAI function schemas) matters to formats whose argument
    values are untyped text (`qwen3_coder` types them by the schema); the others ignore it."""

    name = ""

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedTurn:
        raise NotImplementedError


#: parser name -> "module:Class" (imported when asked for)
PARSERS: dict[str, str] = {
    "hermes": "skyhub.tool_parsers.hermes:HermesParser",
    "qwen3_coder": "skyhub.tool_parsers.qwen3_coder:Qwen3CoderParser",
    "llama3_json": "skyhub.tool_parsers.llama3_json:Llama3JsonParser",
}


def get_parser(name: str) -> ToolParser:
    """The parser registered as `name` (`PARSERS`); a `UsageError` naming the known ones."""
    target = PARSERS.get(name)
    if target is None:
        raise UsageError(f"unknown tool parser {name!r}: use one of {', '.join(sorted(PARSERS))}"
                         " (or 'auto' where the chat template says which)")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["PARSERS", "ParsedTurn", "ToolParser", "get_parser"]
