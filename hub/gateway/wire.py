"""OpenAI's chat-completion wire format for a recorded reply: the response object, and the
same reply as server-sent events for `stream: true`.

The gateway samples a reply whole (the engine's future completes with it), so a stream is the
reply sent as chunks after sampling: the role, the content, each tool call with its arguments,
then the finish reason and (with `stream_options.include_usage`) the usage, as OpenAI's own
streams are shaped, so clients that only stream work unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from skyhub.gateway.sessions import Record


def _logprobs(record: Record) -> dict[str, Any]:
    tokens = record.tokens or [""] * len(record.completion_ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()),
                         "top_logprobs": []}
                        for t, lp in zip(tokens, record.logprobs, strict=False)]}


def usage(record: Record) -> dict[str, int]:
    if record.usage is not None:  # an upstream's own count (no token ids here)
        return dict(record.usage)
    p, c = len(record.prompt_ids), len(record.completion_ids)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def completion_body(record: Record, model: str, *, logprobs: bool = False) -> dict[str, Any]:
    """The `chat.completion` object for `record`."""
    return {"id": record.request_id, "object": "chat.completion",
            "created": int(record.created), "model": model,
            "choices": [{"index": 0, "message": record.reply,
                         "finish_reason": record.finish_reason,
                         "logprobs": _logprobs(record) if logprobs else None}],
            "usage": usage(record)}


def stream_events(record: Record, model: str, *, logprobs: bool = False,
                  include_usage: bool = False) -> Iterator[str]:
    """The reply as `chat.completion.chunk` events (`data: {...}\\n\\n`), then `[DONE]`."""
    head = {"id": record.request_id, "object": "chat.completion.chunk",
            "created": int(record.created or time.time()), "model": model}

    def event(delta: dict[str, Any], finish: str | None = None,
              extra: dict[str, Any] | None = None) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish,
                                  "logprobs": None}
        if extra:
            choice.update(extra)
        return f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"

    yield event({"role": "assistant", "content": ""})
    content = record.reply.get("content")
    if content:
        yield event({"content": content},
                    extra={"logprobs": _logprobs(record)} if logprobs else None)
    for k, call in enumerate(record.reply.get("tool_calls") or []):
        fn = call["function"]
        yield event({"tool_calls": [{"index": k, "id": call["id"], "type": "function",
                                     "function": {"name": fn["name"], "arguments": ""}}]})
        yield event({"tool_calls": [{"index": k,
                                     "function": {"arguments": fn["arguments"]}}]})
    yield event({}, record.finish_reason)
    if include_usage:
        yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage(record)})}\n\n"
    yield "data: [DONE]\n\n"


def error_body(message: str, kind: str = "invalid_request_error",
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: clients raise it with its message."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


__all__ = ["completion_body", "error_body", "stream_events", "usage"]
