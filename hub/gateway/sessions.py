"""Sessions: what the gateway recorded for each agent, and how a session becomes a trajectory.

A `Record` is one `/chat/completions` request as the model saw and answered it: the prompt's
token ids, the sampled ids with their logprobs and policy versions, the finish reason, and the
reply the agent was sent. A `Session` holds one agent's records in arrival order.

Two rules make the recorded tokens exact:

- **Re-sent turns keep their ids** (`Session.extends`): when a request's messages start with an
  earlier request's messages followed by the reply the gateway gave it, the new prompt is that
  request's prompt ids + its sampled ids + the template's tokens for what follows. The agent's
  earlier turn is never re-tokenized from its text (a tokenizer need not give back the ids it
  decoded from).
- **A trajectory is a list of segments** (`Session.segments`): a request whose prompt ids start
  with a segment's ids so far (its prompt, then everything after it) extends that segment (the
  latest such); any other request (a summary that replaces the history, a sub-agent, a history
  cut short) starts a new one. Each segment is one training sample: its prompt, then its
  tokens with a mask that is 1 exactly where the model sampled them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Record:
    """One request to the gateway and what the model answered."""

    request_id: str
    messages: list[dict[str, Any]]  # as the agent sent them
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str  # "stop", "length" or "tool_calls"
    reply: dict[str, Any]  # the assistant message returned: role, content, tool_calls
    reused_ids: int = 0  # how many prompt ids came from earlier records, not the template
    ended_turn: bool = False  # the model sampled its end-of-turn token (the last id)
    tokens: list[str] = field(default_factory=list)  # each sampled id's text
    usage: dict[str, int] | None = None  # an upstream's token counts (eval mode: no ids)
    created: float = field(default_factory=time.time)
    state: Any = field(default=None, repr=False)  # the backend's conversation after the reply

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("state")
        return out


@dataclass
class Segment:
    """One training sample made from a session: `prompt_ids`, then `token_ids` with `mask` 1
    where the model sampled the token (its `logprobs` and `versions` are the engine's; 0.0 and
    -1 elsewhere), the indices of the records merged into it, and where each record's
    completion lies in `token_ids` (`spans`: [start, end), one per record): what a per-turn
    signal (`algo.turn_weight`) is attributed by."""

    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    records: list[int] = field(default_factory=list)
    spans: list[list[int]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.token_ids

    def add(self, ids: list[int], *, sampled: bool, logprobs: list[float] | None = None,
            versions: list[int] | None = None) -> None:
        self.token_ids += ids
        self.mask += [int(sampled)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.versions += versions if versions is not None else [-1] * len(ids)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _arguments(args: Any) -> str:
    """A call's arguments in one canonical text, whether sent as JSON text or as an object."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return args
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


def text_of(content: Any) -> str:
    """A message's text: the string, or its text parts joined (OpenAI's content parts)."""
    if isinstance(content, list):  # content parts: the text ones, in order
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def message_key(message: dict[str, Any], *, call_ids: bool = True) -> tuple[Any, ...]:
    """What makes two messages the same turn for the template: role, text, calls (arguments
    compared as JSON values), the call a tool message answers."""
    calls = []
    for c in message.get("tool_calls") or []:
        fn = c.get("function") or {}
        calls.append((c.get("id") if call_ids else None, fn.get("name"),
                      _arguments(fn.get("arguments"))))
    return (message.get("role"), text_of(message.get("content")), tuple(calls),
            message.get("tool_call_id"), message.get("name"))


class Session:
    """One agent's records. Requests of a session may arrive concurrently; records are kept
    in the order they were answered."""

    def __init__(self, session_id: str, key: str | None = None) -> None:
        self.id, self.key = session_id, key
        self.records: list[Record] = []
        self.created = time.time()
        self._lock = threading.Lock()

    def add(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)

    def extends(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
                ) -> tuple[Record, list[dict[str, Any]]] | None:
        """The latest record whose messages and reply start `messages` (same tools), and the
        messages after that reply; None when no record does (the prompt is rendered afresh).
        A request that adds nothing after the reply is not an extension."""
        with self._lock:
            records = list(self.records)
        keys = [message_key(m) for m in messages]
        for record in reversed(records):
            n = len(record.messages)
            if len(messages) <= n + 1 or record.tools != tools:
                continue
            if keys[:n] != [message_key(m) for m in record.messages]:
                continue
            if message_key(messages[n], call_ids=False) != message_key(record.reply,
                                                                        call_ids=False):
                continue
            return record, messages[n + 1:]
        return None

    def segments(self) -> list[Segment]:
        """The session as training samples: see the module docstring."""
        with self._lock:
            records = list(self.records)
        out: list[Segment] = []
        for k, r in enumerate(records):
            # the latest segment this request extends (a sub-agent's requests may come
            # between two of the main agent's)
            seg = next((s for s in reversed(out) if r.prompt_ids[:len(s.ids)] == s.ids), None)
            if seg is not None:
                seg.add(r.prompt_ids[len(seg.ids):], sampled=False)
            else:
                seg = Segment(prompt_ids=list(r.prompt_ids))
                out.append(seg)
            start = len(seg.token_ids)
            seg.add(list(r.completion_ids), sampled=True, logprobs=list(r.logprobs),
                    versions=list(r.versions))
            seg.records.append(k)
            seg.spans.append([start, len(seg.token_ids)])
        return out

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            records = [r.to_json() for r in self.records]
        return {"id": self.id, "created": self.created, "records": records,
                "segments": [s.to_json() for s in self.segments()]}


class SessionStore:
    """The gateway's sessions by id. A session opened with a key (`open`) answers only
    requests that carry that key; one first named by a request (`X-Session-ID`, `/s/<id>/v1`)
    is created without one."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, session_id: str | None = None, *, key: str | None = None) -> Session:
        session_id = session_id or uuid.uuid4().hex
        with self._lock:
            if session_id in self._sessions:
                from skyhub.errors import UsageError

                raise UsageError(f"gateway session {session_id!r} exists already: open it "
                                 "without an id to get a fresh one")
            session = self._sessions[session_id] = Session(session_id, key)
        return session

    def get(self, session_id: str, *, create: bool = False) -> Session | None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None and create:
                session = self._sessions[session_id] = Session(session_id)
            return session

    def close(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.pop(session_id, None)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)


__all__ = ["Record", "Segment", "Session", "SessionStore", "message_key", "text_of"]
