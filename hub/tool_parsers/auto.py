"""Which parser a model needs, read from its chat template (`rollout.tool_parser=auto`).

A template that renders tool calls spells out their format, so its text says the family:
Qwen3-Coder's XML functions (`<function=` with `<parameter=`), Hermes-style JSON in
`<tool_call>` tags (Qwen2.5, Qwen3), Llama 3.x's JSON (`<|python_tag|>`, or calls rendered as
`"parameters": ...`). The checks go from the most specific marker to the least: Qwen3-Coder's
template also holds `<tool_call>`.
"""

from __future__ import annotations

from typing import Any

from skyhub.errors import UsageError

from .base import PARSERS

# (parser, markers that must all be in the template), most specific first
_SIGNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("hermes", ("<tool_call>",)),
    ("llama3_json", ("<|python_tag|>",)),
    ("llama3_json", ('"parameters": ',)),
)


def template_text(tokenizer_or_template: Any) -> str:
    """The chat template's text: the string itself, or a tokenizer's `chat_template` (all of
    its named templates where it has several)."""
    if isinstance(tokenizer_or_template, str):
        return tokenizer_or_template
    template = getattr(tokenizer_or_template, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(str(t) for t in template.values())
    if isinstance(template, list):  # [{"name": ..., "template": ...}] as some configs save
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template or ""


def auto_parser(tokenizer_or_template: Any) -> str | None:
    """The parser name (`PARSERS`) the chat template's tool-call format needs, or None when
    the template renders no tool calls that we know."""
    text = template_text(tokenizer_or_template)
    for name, markers in _SIGNS:
        if all(m in text for m in markers):
            return name
    return None


def resolve_parser(name: str, tokenizer: Any) -> str:
    """`rollout.tool_parser` made concrete: a registered name as it is, `auto` as the chat
    template says (`auto_parser`); a `UsageError` naming the choices otherwise."""
    choices = ", ".join(sorted(PARSERS))
    if name == "auto":
        found = auto_parser(tokenizer)
        if found is None:
            raise UsageError(
                "rollout.tool_parser=auto: the tokenizer's chat template shows no tool-call "
                f"format we know (no <tool_call>, <function=, <|python_tag|>): set "
                f"rollout.tool_parser to one of {choices}")
        return found
    if name not in PARSERS:
        raise UsageError(f"unknown rollout.tool_parser {name!r}: use one of {choices}, or "
                         "'auto' to pick it from the chat template")
    return name
