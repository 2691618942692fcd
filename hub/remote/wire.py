"""What the remote server and client share: the message encoding and the error mapping.

Kept free of fastapi/uvicorn/websockets so that both sides (and `import skyhub.remote`) stay
light.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

PROTOCOL_VERSION = 1

#: Close codes the server uses (4000-4999 is the application range of RFC 6455).
CLOSE_UNAUTHORIZED = 4401  # missing or wrong token
CLOSE_NOT_FOUND = 4404  # the env id is not served here
CLOSE_IDLE = 4408  # no open within open_timeout_s, no message for idle_ttl_s, or past max_session_s
CLOSE_CAPACITY = 4429  # max_sessions reached
CLOSE_OP_TIMEOUT = 4504  # one env call ran past op_timeout_s
CLOSE_TOO_BIG = 1009  # RFC 6455 "message too big"

#: Attributes and methods a client may read or call with `{"op": "call", "name": ...}`.
#: `reference_action` and `task_record` (its `expected` is the answer) only where the operator
#: exposes the gold (`skyhub serve --expose-reference`).
CALLABLE = frozenset({"reference_action", "reference_tool_calls", "task_record"})
REFERENCE_GATED = frozenset({"reference_action", "reference_tool_calls", "task_record"})
#: The error type of a `reference_action` call on a server that does not expose it.
REFERENCE_NOT_EXPOSED = "ReferenceNotExposed"
REFERENCE_REFUSED = (
    "this server does not expose reference_action: it returns the task's reference "
    "solution, and whoever reads it scores as the oracle (a policy being trained, or a web "
    "page that reached the server). Its operator can expose it to clients trusted with the "
    "answers with `skyhub serve --expose-reference`; to evaluate the oracle otherwise, run "
    "the env locally (skyhub.make without remote=)")
READABLE = frozenset({"system_prompt", "stop_strings", "max_turns"})


def _default(obj: Any) -> Any:
    """JSON for what infos commonly hold besides JSON types: numpy scalars and arrays, sets,
    tuples (as lists), dataclasses (a `Task`); anything else as its `str`."""
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "shape", None) == ():
        return item()
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=str)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return str(obj)


def dumps(msg: dict[str, Any]) -> str:
    """One message as compact JSON (NaN and infinities allowed: rewards may be NaN)."""
    return json.dumps(msg, default=_default, separators=(",", ":"))


def checked_action(action: Any) -> str | dict[str, Any] | None:
    """A `step` request's action as the env takes it: text, or a tool turn `{"content":
    str, "tool_calls": [OpenAI entries]}` (what `skyhub.tools.to_plain` writes) as an
    assistant message; None when it is neither. The calls' contents are the env's to judge
    (a malformed call is answered in its result), so only the turn's shape is checked."""
    if isinstance(action, str):
        return action
    if not isinstance(action, dict) or not isinstance(action.get("tool_calls"), list):
        return None
    content = action.get("content")
    if content is not None and not isinstance(content, str):
        return None
    if not all(isinstance(c, dict) for c in action["tool_calls"]):
        return None
    return {"role": "assistant", "content": content or "", "tool_calls": action["tool_calls"]}


def task_summary(task: Any) -> dict[str, Any] | None:
    """A task as the client sees it: id, prompt and meta. The answer stays on the server (it
    is the grader's secret; `reference_action` is the sanctioned way to an oracle action)."""
    if task is None:
        return None
    return {"id": task.id, "prompt": task.prompt, "meta": task.meta}


def env_error_body(op: str | None, incident: str) -> dict[str, Any]:
    """The `error` member of a reply to a request the env failed: the same words whatever
    the env raised, so that a client learns nothing of the server's files from it (not even
    whether a path exists)."""
    return {"type": ENV_ERROR, "incident": incident,
            "message": f"the env's {op or 'call'} failed on the server (incident {incident}; "
                       "the server's log has the details)"}


#: Error types the client re-raises as themselves: they are the caller's mistakes (a bad
#: task id, a bad kwarg) or documented skyhub errors. Anything else an env raised on the
#: server is broken infrastructure from the client's point of view: `InfraError`.
_BUILTIN = {"KeyError": KeyError, "ValueError": ValueError, "TypeError": TypeError}
_SKYHUB = ("EnvNotFound", "DataNotFound", "SandboxUnavailable", "InfraError", "AgentError",
           "UsageError", "RegistrationError", "MissingDependency")
#: Protocol errors: the client sent something the server cannot use.
PROTOCOL_ERRORS = frozenset({"BadMessage", "UnknownOp", "MessageTooBig", "NotOpen",
                             "AlreadyOpen", "KwargsNotAllowed", "NotAllowed",
                             REFERENCE_NOT_EXPOSED})
#: What the env raised on the server: the reply names an incident id, never the exception's
#: text (which may name the server's files); the server's log has the details.
ENV_ERROR = "EnvError"


def raise_error(error: dict[str, Any], where: str) -> None:
    """Raise the exception a failed reply stands for, its message prefixed with `where`."""
    from skyhub import errors

    kind, message = str(error.get("type", "Error")), str(error.get("message", ""))
    text = f"{where}: {message}"
    if kind in _BUILTIN:
        raise _BUILTIN[kind](text)
    if kind == "MissingDependency":
        from skyhub.errors import MissingDependency

        raise MissingDependency(text)
    if kind == "EnvNotFound":
        raise errors.EnvNotFound(text)
    if kind in _SKYHUB:
        raise getattr(errors, kind)(text)
    if kind in PROTOCOL_ERRORS:
        raise errors.UsageError(f"{text} ({kind})")
    if kind == ENV_ERROR:
        raise errors.InfraError(text)
    raise errors.InfraError(f"{where}: the env raised {kind}: {message}")
