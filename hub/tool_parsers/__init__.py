"""Tool-call parsers: a model's sampled text -> its message content and `skyhub.ToolCall`s.

Models emit tool calls in their own family's format (the one their chat template renders and
their fine-tuning taught): Hermes-style JSON in `<tool_call>` tags (`hermes`: Qwen2.5, Qwen3),
Qwen3-Coder's XML functions (`qwen3_coder`), Llama 3.x's bare JSON (`llama3_json`). The
trainer's rollout (`rollout.tool_parser`) and the gateway parse with the parser of the model's
family; `auto_parser` picks it from the chat template. Each follows the non-streaming rules of
vLLM's parser of the same name (differential-tested against it on generated outputs:
tests/trainer/test_vllm_tool_parsers.py; the known differences: docs/tool-parsers.md): text that
does not parse as calls is content, never an error, so the env answers it by its text protocol.

    from skyhub.tool_parsers import get_parser
    turn = get_parser("hermes").parse(text)      # ParsedTurn(content, calls)
    turn = get_parser("qwen3_coder").parse(text, tools=env.tools)   # values typed by schema

Call ids are `call_<k>` (k counts the turn's calls from 0): deterministic, where vLLM draws
random ones.
"""

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


from .auto import auto_parser, resolve_parser  # noqa: E402 (needs PARSERS above)

__all__ = ["PARSERS", "ParsedTurn", "ToolParser", "auto_parser", "get_parser", "resolve_parser"]
