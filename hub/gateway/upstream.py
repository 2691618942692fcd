"""The gateway in eval mode (`skyhub gateway --upstream URL`): requests are forwarded to an
OpenAI-compatible endpoint (a hosted model, a vLLM server), and each session records what was
asked and answered.

An upstream gives text, not token ids: a record holds the messages, the reply (text and tool
calls as the upstream returned them, with the gateway's call ids), the finish reason, the
logprobs when the upstream returns them (`logprobs=True`), and the upstream's usage counts;
its `prompt_ids` and `completion_ids` are empty. That is enough to benchmark a harness and read
its trajectories (`GET /sessions/<id>`), not to train on them: training needs the engines
behind the gateway (`skyhub gateway --model`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from skyhub.errors import AgentError
from skyhub.gateway.core import Generation, Sampling
from skyhub.tools import ToolCall


class UpstreamBackend:
    """Args:
        base_url: the upstream's OpenAI base URL (ending in `/v1`).
        api_key: sent as `Authorization: Bearer` (None: no header).
        model: the model id sent upstream (and listed at `/v1/models`).
        logprobs: ask the upstream for logprobs (not every server returns them).
        timeout: seconds per upstream request.
    """

    def __init__(self, base_url: str, *, model: str, api_key: str | None = None,
                 logprobs: bool = False, timeout: float = 600.0) -> None:
        self.base_url, self.model, self.api_key = base_url.rstrip("/"), model, api_key
        self.logprobs, self.timeout = logprobs, timeout
        self.parser_name = "upstream"

    def begin(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
              ) -> tuple[list[dict[str, Any]], list[int]]:
        return [dict(m) for m in messages], []

    def extend(self, state: list[dict[str, Any]], ended_turn: bool,
               messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
               ) -> tuple[list[dict[str, Any]], list[int]]:
        return state + [dict(m) for m in messages], []

    def generate(self, state: list[dict[str, Any]], prompt_ids: list[int], sampling: Sampling,
                 tools: list[dict[str, Any]] | None) -> Generation:
        body: dict[str, Any] = {"model": self.model, "messages": state,
                                "temperature": sampling.temperature, "top_p": sampling.top_p}
        if sampling.max_tokens is not None:
            body["max_tokens"] = sampling.max_tokens
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if tools:
            body["tools"] = tools
            if not sampling.parse_calls:
                body["tool_choice"] = "none"
        if self.logprobs:
            body["logprobs"] = True
        answer = self._post(body)
        choice = (answer.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        calls = [ToolCall.from_openai(c, k) for k, c in
                 enumerate(message.get("tool_calls") or [])]
        content = message.get("content") or ""
        lp = (choice.get("logprobs") or {}).get("content") or []
        reply: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            reply["tool_calls"] = [c.to_openai() for c in calls]
        finish = str(choice.get("finish_reason") or "stop")
        return Generation(token_ids=[], logprobs=[float(t.get("logprob", 0.0)) for t in lp],
                          versions=[], finish_reason="length" if finish == "length" else "stop",
                          content=content, tool_calls=calls,
                          tokens=[str(t.get("token", "")) for t in lp],
                          ended_turn=finish != "length", state=[*state, reply],
                          usage=answer.get("usage"))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/chat/completions",
                                     data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode(errors="replace")
            raise AgentError(f"upstream {self.base_url} answered HTTP {e.code}: {detail}"
                             ) from None
        except OSError as e:
            raise AgentError(f"upstream {self.base_url} is unreachable: {e}") from e


__all__ = ["UpstreamBackend"]
