"""skyhub's inference engines behind `skyhub gateway` (`EngineBackend`, a
`skyhub.gateway.Backend`).

A request is rendered with the tokenizer's chat template and `tools=` (`ToolChat`, the same
rendering the rollout's tool layout uses), sampled by the engine (`hf`, `vllm` or the engine
pool: anything with `submit` or `generate`), and parsed into tool calls by the parser of the
model's family (`rollout.tool_parser`'s names; "auto" reads the template). The ids the engine
sampled are what the gateway records and re-uses; the text is only for the agent.
"""

from __future__ import annotations

import secrets
from typing import Any

from skyhub.gateway import Generation, Sampling
from skyhub.gateway.sessions import text_of
from skyhub.tool_parsers import ParsedTurn, ToolParser
from skyhub.tools import ToolCall
from skyhub.trainer.inference.engine import SamplingParams, submitter
from skyhub.trainer.token_layout import ChatFormat
from skyhub.trainer.tool_layout import Conversation, ToolChat, template_call
from skyhub.trainer.tool_layout import tool_parser as tool_parser_of


class _TextOnly(ToolParser):
    """For a template with no tool-call format: every reply is text."""

    name = "text"

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedTurn:
        return ParsedTurn(content=text)


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A request's message as the chat template takes it: text content, calls with their
    arguments as objects (`template_call`)."""
    out = {k: v for k, v in message.items() if k not in ("tool_calls", "content")}
    out["content"] = text_of(message.get("content"))
    if message.get("tool_calls"):
        out["tool_calls"] = [template_call(ToolCall.from_openai(c, k))
                             for k, c in enumerate(message["tool_calls"])]
    return out


class EngineBackend:
    """One engine and its tokenizer as a gateway backend.

    Args:
        engine: a skyhub engine (`skyhub.trainer.inference.make_engine`), or anything with
            `submit(prompt_ids, SamplingParams, seed) -> Future[Completion]` or `generate`.
        tokenizer: the model's tokenizer, with its chat template.
        model: the id served at `/v1/models`.
        tool_parser: a parser name (`skyhub.tool_parsers.PARSERS`), "auto" (from the template;
            a template without a tool-call format then gets text-only replies), or None.
        max_tokens: a request's limit when it sets none.
    """

    def __init__(self, engine: Any, tokenizer: Any, *, model: str = "skyhub",
                 tool_parser: str | None = "auto", max_tokens: int = 512) -> None:
        self.engine, self.model, self.max_tokens = engine, model, max_tokens
        self.chat = ChatFormat(tokenizer)
        parser: ToolParser = _TextOnly()
        if tool_parser == "auto":
            from skyhub.tool_parsers.auto import auto_parser

            if auto_parser(tokenizer) is not None:
                parser = tool_parser_of(tool_parser, tokenizer)
        elif tool_parser:
            parser = tool_parser_of(tool_parser, tokenizer)
        self.parser_name = parser.name
        self.tool_chat = ToolChat(self.chat, parser)
        self._submit = submitter(engine)

    def begin(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
              ) -> tuple[Conversation, list[int]]:
        msgs = [_template_message(m) for m in messages]
        conv = Conversation(msgs, tools, [m["content"] for m in msgs if m["role"] == "assistant"])
        return conv, self.chat.encode(self.tool_chat.render(msgs, tools, True))

    def extend(self, state: Conversation, ended_turn: bool, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None) -> tuple[Conversation, list[int]]:
        msgs = [_template_message(m) for m in messages]
        ids = self.tool_chat.reply_ids(state, msgs, ended_turn)
        state.texts += [m["content"] for m in msgs if m["role"] == "assistant"]
        return state, ids

    def generate(self, state: Conversation, prompt_ids: list[int], sampling: Sampling,
                 tools: list[dict[str, Any]] | None) -> Generation:
        params = SamplingParams(max_tokens=sampling.max_tokens or self.max_tokens,
                                temperature=sampling.temperature, top_p=sampling.top_p,
                                stop=sampling.stop, stop_token_ids=self.chat.stop_token_ids)
        seed = sampling.seed if sampling.seed is not None else secrets.randbelow(2**31)
        c = self._submit(list(prompt_ids), params, seed).result()
        ids = list(c.token_ids)
        ended = bool(ids) and ids[-1] in self.chat.stop_token_ids
        tok = self.chat.tokenizer
        raw = tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
        text = c.text if c.text or not ids else tok.decode(ids, skip_special_tokens=True)
        if sampling.parse_calls and tools:
            parsed = self.tool_chat.turn(state, text, raw)
        else:
            state.messages.append({"role": "assistant", "content": raw})
            state.texts.append(raw)
            parsed = ParsedTurn(content=text)
        return Generation(token_ids=ids, logprobs=list(c.logprobs), versions=list(c.versions),
                          finish_reason=c.finish_reason, content=parsed.content,
                          tool_calls=list(parsed.calls),
                          tokens=tok.batch_decode([[i] for i in ids],
                                                  skip_special_tokens=False),
                          ended_turn=ended, state=state)


__all__ = ["EngineBackend"]
