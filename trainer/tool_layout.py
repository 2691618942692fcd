"""Tool layout: episodes in the model's own tool-call format, with exact tokens
(`rollout.tool_parser`).

The prompt is the chat template's rendering of the system prompt and first observation with
`tools=` (the env's tool schemas), so the model sees its tools the way it was tuned to. The
engine's sampled text is parsed into tool calls by the parser of the model's family
(`skyhub.tool_parsers`); the calls go to the env as an assistant message
(`ParsedTurn.action`), and the env's results (`info["tool_results"]`) come back as
`role: "tool"` messages. A turn without calls is text: the env plays it by its text protocol
and its observation is the next user message.

Exact tokens: the agent's sampled ids stay in the episode as sampled (never re-tokenized). What
follows them is the template's own text for the new messages, learned by rendering the
conversation before and after them (`ToolChat.reply_ids`): the end of the assistant turn (less
the end-of-turn token when the engine sampled it) and the tool (or user) messages up to the
next generation prompt. So the episode is, token for token, the template's rendering of the
whole conversation wherever the template renders a message the same way whatever follows it
(`check_exact` verifies it; docs/training.md lists where it cannot hold).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError
from skyhub.tool_parsers import ParsedTurn, ToolParser, get_parser
from skyhub.tools import ToolResult
from skyhub.trainer.token_layout import ChatFormat

_PROBE = "\x00ASSISTANT\x00"


def tool_parser(name: str, tokenizer: Any) -> ToolParser:
    """The parser `rollout.tool_parser` names; "auto" picks it from the chat template
    (`skyhub.tool_parsers.resolve_parser` where the registry has it)."""
    from skyhub import tool_parsers

    resolve = getattr(tool_parsers, "resolve_parser", None)
    if resolve is not None:
        return get_parser(resolve(name, tokenizer))
    if name != "auto":
        return get_parser(name)
    # a registry without `resolve_parser`: the template's own call markers say which
    template = getattr(tokenizer, "chat_template", None) or ""
    if "<tool_call>" in str(template):
        return get_parser("hermes")
    raise UsageError("rollout.tool_parser=auto: the chat template shows no tool-call format "
                     "this version recognises; set rollout.tool_parser to one of "
                     f"{', '.join(sorted(tool_parsers.PARSERS))}")


def template_call(call: Any) -> dict[str, Any]:
    """A parsed call as a chat template takes it: arguments as a dict where they are a JSON
    object (templates serialise them with `tojson`, which would quote a JSON string)."""
    args = call.arguments
    if isinstance(args, str):
        try:
            value = json.loads(args)
        except ValueError:
            value = None
        args = value if isinstance(value, dict) else args
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": args}}


@dataclass
class Conversation:
    """One episode's conversation as the template renders it: `messages` (assistant turns as
    parsed: content and `tool_calls`), the env's `tools`, and `texts`, each assistant turn's
    exact text as the model wrote it (special tokens included, its end-of-turn token not)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    texts: list[str] = field(default_factory=list)

    def verbatim(self) -> list[dict[str, Any]]:
        """The messages with each assistant turn as the model's exact text (no `tool_calls`):
        what a template that re-serialises calls cannot reproduce from the parsed ones."""
        texts = iter(self.texts)
        return [{"role": "assistant", "content": next(texts)} if m["role"] == "assistant"
                else m for m in self.messages]


class ToolChat:
    """The chat template with tools, for one tokenizer and one tool parser."""

    def __init__(self, chat: ChatFormat, parser: ToolParser) -> None:
        self.chat, self.parser, self.tokenizer = chat, parser, chat.tokenizer
        # parsers that type arguments by the schema (qwen3_coder) take the tools
        self._typed = "tools" in inspect.signature(parser.parse).parameters
        #: what the template writes after an assistant message's text (ChatML: "<|im_end|>\n")
        probe = self.render([{"role": "user", "content": "u"},
                             {"role": "assistant", "content": _PROBE}], None, False)
        self.close = probe[probe.index(_PROBE) + len(_PROBE):]

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def start(self, user: str, system: str | None, tools: list[dict[str, Any]] | None
              ) -> tuple[Conversation, list[int]]:
        """The episode's conversation and its prompt's ids (up to the generation prompt)."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}]
        return Conversation(messages, tools), self.chat.encode(
            self.render(messages, tools, True))

    def parse(self, text: str, tools: list[dict[str, Any]] | None) -> ParsedTurn:
        return self.parser.parse(text, tools) if self._typed else self.parser.parse(text)

    def turn(self, conv: Conversation, text: str, raw: str) -> ParsedTurn:
        """Parse the engine's `text` (special tokens skipped) into what the env is sent, and
        add the assistant turn to `conv` as the model wrote it (`raw`: special tokens kept,
        the end-of-turn token not)."""
        parsed = self.parse(text, conv.tools)
        seen = parsed if raw == text else self.parse(raw, conv.tools)
        msg: dict[str, Any] = {"role": "assistant", "content": seen.content}
        if seen.calls:
            msg["tool_calls"] = [template_call(c) for c in seen.calls]
        conv.messages.append(msg)
        conv.texts.append(raw)
        return parsed

    def replies(self, conv: Conversation, observation: str,
                tool_results: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The messages that answer the last assistant turn: one `tool` message per result
        when it made calls, else the observation as a user message."""
        if conv.messages[-1].get("tool_calls") and tool_results:
            return [ToolResult.message(r) for r in tool_results]
        return [{"role": "user", "content": observation}]

    def close_text(self, agent_ended_turn: bool) -> str:
        """The end of an assistant turn, less the end-of-turn token the engine sampled."""
        if agent_ended_turn:
            for tid in self.chat.stop_token_ids:
                tok = self.tokenizer.convert_ids_to_tokens(tid)
                if tok and self.close.startswith(tok):
                    return self.close[len(tok):]
        return self.close

    def reply_ids(self, conv: Conversation, replies: list[dict[str, Any]],
                  agent_ended_turn: bool) -> list[int]:
        """The ids after the agent's turn: the end of its message and `replies` (added to
        `conv`) as the template renders them, up to the next generation prompt."""
        from jinja2 import TemplateError  # transformers renders chat templates with jinja2

        try:
            before = self.render(conv.messages, conv.tools, False)
            after = self.render(conv.messages + replies, conv.tools, True)
        except TemplateError:
            # The template refuses the turn as parsed (Llama 3.1's takes one call per turn):
            # the turn is rendered as the model's text, so training goes on.
            conv.messages[-1] = {"role": "assistant", "content": conv.texts[-1]}
            before = self.render(conv.messages, conv.tools, False)
            after = self.render(conv.messages + replies, conv.tools, True)
        if after.startswith(before):
            delta = after[len(before):]
        else:
            # The template renders the assistant turn differently once messages follow it
            # (Qwen3 drops an empty reasoning block): the delta starts after its end.
            start = next((i for i, (a, b) in enumerate(zip(before, after, strict=False))
                          if a != b), len(before))
            end = after.find(self.close, start) if self.close else -1
            if end < 0:
                raise UsageError("rollout.tool_parser: the chat template renders an assistant "
                                 "turn differently once tool messages follow it, and its end "
                                 f"({self.close!r}) is not found after it: this template "
                                 "cannot be extended turn by turn; use rollout.tool_parser="
                                 "null (the text protocol)")
            delta = after[end + len(self.close):]
        conv.messages += replies
        return self.chat.encode(self.close_text(agent_ended_turn) + delta)


def check_exact(tool_chat: ToolChat, conv: Conversation, token_ids: list[int], *,
                verbatim: bool = False) -> str | None:
    """None when `token_ids` (an episode's stream) is the tokenizer's encoding of the chat
    template's rendering of `conv` (assistant turns as parsed, or as the model's exact text
    with `verbatim`), else where and how they differ. An episode that ends on an assistant
    turn is compared with the end of that turn added (the template writes it; the episode
    stops before it)."""
    messages = conv.verbatim() if verbatim else conv.messages
    ends_on_agent = messages[-1]["role"] == "assistant"
    text = tool_chat.render(messages, conv.tools, not ends_on_agent)
    expected = tool_chat.chat.encode(text)
    got = list(token_ids)
    if ends_on_agent:
        got += tool_chat.chat.encode(tool_chat.close_text(
            bool(got) and got[-1] in tool_chat.chat.stop_token_ids))
    if got == expected:
        return None
    at = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
              min(len(got), len(expected)))

    def show(ids: list[int]) -> str:
        return repr(tool_chat.tokenizer.decode(ids[max(0, at - 8):at + 8],
                                               skip_special_tokens=False))

    return (f"the stream ({len(got)} ids) differs from the template's rendering "
            f"({len(expected)} ids) at id {at}: stream {show(got)} vs template {show(expected)}")


__all__ = ["Conversation", "ToolChat", "check_exact", "template_call", "tool_parser"]
