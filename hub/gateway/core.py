"""The gateway's logic without HTTP: a request's messages become prompt ids (re-using recorded
ids for turns the model wrote), the backend samples, the reply is parsed and recorded.

`Gateway.complete(session, body)` is what `/v1/chat/completions` runs, so harnesses in this
process (and the overhead benchmark) can call it directly. The backend (`Backend`) renders
with the model's chat template, samples and parses tool calls: `skyhub.trainer.gateway_backend`
puts skyhub's engines (hf, vllm, the engine pool) behind it.
"""

from __future__ import annotations

import copy
import dataclasses
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from skyhub.errors import UsageError
from skyhub.gateway.sessions import Record, Session, SessionStore
from skyhub.tools import ToolCall


@dataclass(frozen=True)
class Sampling:
    """A request's sampling settings. `max_tokens` None: the backend's default."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    parse_calls: bool = True  # False for tool_choice="none": the text is the reply


@dataclass
class Generation:
    """What a backend sampled for one prompt: the ids as sampled, their logprobs and policy
    versions, why it stopped ("stop" or "length"), each id's text (`tokens`, for the
    response's logprobs), the reply parsed (content and tool calls), whether the model ended
    its turn itself (`ended_turn`: its end-of-turn token is the last id), and the backend's
    conversation with this turn added (`state`, kept in the record for the next request)."""

    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    ended_turn: bool = False
    state: Any = None
    usage: dict[str, int] | None = None  # an upstream's counts, where there are no ids


class Backend(Protocol):
    """A model behind the gateway."""

    model: str  # the id `/v1/models` lists

    def begin(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
              ) -> tuple[Any, list[int]]:
        """The conversation state and the prompt ids of `messages` rendered afresh, up to the
        assistant's generation prompt."""
        ...

    def extend(self, state: Any, ended_turn: bool, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None) -> tuple[Any, list[int]]:
        """The ids that follow a recorded assistant turn (`state` ends with it): the end of
        that turn (less the end-of-turn token when the model sampled it: `ended_turn`) and
        `messages` as the template renders them, up to the next generation prompt."""
        ...

    def generate(self, state: Any, prompt_ids: list[int], sampling: Sampling,
                 tools: list[dict[str, Any]] | None) -> Generation:
        """Sample a reply to `prompt_ids` and parse it (tool calls only where
        `sampling.parse_calls`)."""
        ...


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise UsageError("'messages' must be a non-empty list of chat messages")
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user",
                                                            "assistant", "tool"):
            raise UsageError(f"messages[{k}] must be an object whose 'role' is system, "
                             "developer, user, assistant or tool")
    return [dict(m, role="system") if m["role"] == "developer" else m for m in messages]


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, bool]:
    tools = body.get("tools") or None
    if tools is not None and (not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict)
            and t["function"].get("name") for t in tools)):
        raise UsageError("'tools' must be a list of {'type': 'function', 'function': "
                         "{'name': ..., 'parameters': {...}}}")
    choice = body.get("tool_choice", "auto")
    if choice not in (None, "auto", "none"):
        raise UsageError(f"tool_choice {choice!r} is not supported by the gateway: use "
                         "'auto' (the model decides) or 'none'")
    return tools, choice != "none"


def sampling_of(body: dict[str, Any]) -> Sampling:
    """The request's sampling settings, or a `UsageError` naming the field to fix."""
    if int(body.get("n") or 1) != 1:
        raise UsageError("n must be 1: send one request per sample (each is recorded)")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    try:
        out = Sampling(max_tokens=None if max_tokens is None else int(max_tokens),
                       temperature=float(body.get("temperature", 1.0)),
                       top_p=float(body.get("top_p", 1.0)),
                       seed=None if body.get("seed") is None else int(body["seed"]),
                       stop=tuple(str(s) for s in stop))
    except (TypeError, ValueError) as e:
        raise UsageError(f"a sampling field has the wrong type ({e}): max_tokens and seed "
                         "are integers, temperature and top_p numbers") from e
    if out.max_tokens is not None and out.max_tokens < 1:
        raise UsageError("max_tokens must be at least 1")
    if out.temperature < 0 or not 0 < out.top_p <= 1:
        raise UsageError("temperature must be >= 0 and top_p in (0, 1]")
    return out


class Gateway:
    """Sessions and records in front of one backend (see the package docstring).

    Args:
        backend: the model (`Backend`).
        token: the admin token: it opens any session and reads any record. None: requests
            without a token are served (loopback only: the CLI refuses to listen elsewhere
            without one).
    """

    def __init__(self, backend: Backend, *, token: str | None = None) -> None:
        self.backend, self.token = backend, token
        self.sessions = SessionStore()

    def open_session(self, session_id: str | None = None, *, keyed: bool = True) -> Session:
        """A new session; with `keyed`, one only its key (`session.key`, what a harness sets
        as `OPENAI_API_KEY`) or the admin token can use or read."""
        return self.sessions.open(session_id, key=secrets.token_urlsafe(24) if keyed else None)

    def complete(self, session: Session, body: dict[str, Any]) -> Record:
        """Answer one chat-completion request `body` (OpenAI's fields) in `session` and record
        it. A `UsageError` for a malformed request (the HTTP layer answers 400)."""
        messages = _messages(body)
        tools, parse_calls = _tools(body)
        sampling = sampling_of(body)
        if not parse_calls:
            sampling = dataclasses.replace(sampling, parse_calls=False)
        found = session.extends(messages, tools)
        if found is not None:
            prev, after = found
            state, delta = self.backend.extend(copy.deepcopy(prev.state), prev.ended_turn,
                                               after, tools)
            reused = len(prev.prompt_ids) + len(prev.completion_ids)
            prompt = list(prev.prompt_ids) + list(prev.completion_ids) + list(delta)
        else:
            state, prompt = self.backend.begin(messages, tools)
            reused = 0
        gen = self.backend.generate(state, prompt, sampling, tools)
        # unique call ids, as OpenAI's are (parsers number a turn's calls from 0)
        calls = [dict(c.to_openai(), id=f"call_{uuid.uuid4().hex[:24]}")
                 for c in gen.tool_calls]
        reply: dict[str, Any] = {"role": "assistant",
                                 "content": gen.content if gen.content or not calls else None}
        if calls:
            reply["tool_calls"] = calls
        record = Record(request_id=f"chatcmpl-{uuid.uuid4().hex}", messages=messages,
                        tools=tools, prompt_ids=list(prompt),
                        completion_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
                        versions=list(gen.versions),
                        finish_reason="tool_calls" if calls else gen.finish_reason,
                        reply=reply, reused_ids=reused, ended_turn=gen.ended_turn,
                        tokens=list(gen.tokens), usage=gen.usage, state=gen.state)
        session.add(record)
        return record


__all__ = ["Backend", "Gateway", "Generation", "Sampling", "sampling_of"]
