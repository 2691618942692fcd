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

from .auto import auto_parser, resolve_parser
from .base import PARSERS, ParsedTurn, ToolParser, get_parser

__all__ = ["PARSERS", "ParsedTurn", "ToolParser", "auto_parser", "get_parser", "resolve_parser"]
