"""`builtin`: skyhub's own agent loop, through the gateway.

One request per turn with the whole conversation so far (`Episode.messages()`: the system
prompt, the task, each reply and what the env answered), the env's tools when its protocol is
`tools`, and the reply played as the env's action: its text, or the assistant message with
its tool calls. The conversation is re-sent exactly as the gateway replied, so the gateway
re-uses the sampled ids of every earlier turn and the episode is one segment.
"""

from __future__ import annotations

from typing import Any

from skyhub.harness.base import Endpoint, Harness, Play


class Builtin(Harness):
    """Args:
        max_tokens: a turn's limit (None: the gateway's).
        temperature: sampling temperature (None: the server's default).
        request_timeout: seconds one request may take before it fails (an infra error).
    """

    name = "builtin"

    def __init__(self, *, max_tokens: int | None = None, temperature: float | None = None,
                 request_timeout: float = 600.0) -> None:
        self.max_tokens, self.temperature = max_tokens, temperature
        self.request_timeout = request_timeout

    def play(self, play: Play, endpoint: Endpoint) -> None:
        client = endpoint.client(max_retries=2, timeout=self.request_timeout)
        tools = getattr(play.env, "tools", None) if getattr(
            play.env, "protocol", "tags") == "tools" else None
        extra: dict[str, Any] = {}
        if self.max_tokens is not None:
            extra["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        if tools:
            extra["tools"] = list(tools)
        while not play.done:
            reply = client.chat.completions.create(model=endpoint.model,
                                                   messages=play.episode.messages(), **extra)
            message = reply.choices[0].message
            if message.tool_calls:
                play.step(message.model_dump(exclude_none=True))
            else:
                play.step(message.content or "")
