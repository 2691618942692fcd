"""Remote envs: `skyhub serve ENV_ID...` on one machine, `make_remote(ENV_ID, url)` on another.

The server (`skyhub.remote.server`, FastAPI + uvicorn; extra `skyhub[serve]`) runs registered
envs, one per WebSocket session; the client (`RemoteEnv`, websockets' sync client) is a
`TextEnv`, so trainers, `VectorEnv` and `skyhub eval` use it unchanged.

Protocol (version 1), JSON text messages over `ws://HOST:PORT/v1/envs/{env_id}/session`;
the token, when the server has one, goes in the `Authorization: Bearer TOKEN` header (never
in the URL: a `?token=` is refused, and scrubbed from the server's logs). Requests, one reply
each, in order:

    {"op": "open", "kwargs": {...}}         -> {"ok": true, "session", "env_id", "protocol",
                                                "system_prompt", "stop_strings", "num_tasks",
                                                "tools", "env_protocol"}
    {"op": "reset", "seed": 3, "options": {"task_id": "t1"}}
                                            -> {"ok": true, "obs", "info", "task": {id, prompt,
                                                meta}, "system_prompt", "question"}
    {"op": "step", "action": "..."}         -> {"ok": true, "obs", "reward", "terminated",
                                                "truncated", "info"}
    {"op": "step", "action": {"content": "", "tool_calls": [{"id", "type": "function",
        "function": {"name", "arguments"}}]}}   a turn of tool calls (OpenAI entries), played
                                            by the server's env; the same reply, its info
                                            with "tool_results" by call id
    {"op": "call", "name": "reference_action"}   (or "reference_tool_calls",
                                            "task_record", or a readable
                                            attribute: system_prompt, stop_strings,
                                            max_turns) -> {"ok": true, "value"}
                                            (reference_action and task_record: only where
                                            the operator exposes the gold,
                                            `--expose-reference`; otherwise the error
                                            `ReferenceNotExposed`; `open`'s reply says which
                                            in "reference_action": bool)
    {"op": "tasks", "offset": 0, "limit": 1000}  -> {"ok": true, "total", "offset",
                                                "tasks": [{id, prompt, meta}, ...]}
    {"op": "ping"}                          -> {"ok": true, "pong": true}
    {"op": "close"}                         -> {"ok": true}, then the server closes (1000)

`open` comes first, within the server's `open_timeout_s` of connecting. Env kwargs in `open`
are refused unless the operator allowed them by name (`--allow-kwargs`), and so is a
client-defined task (`options.task`, unless `--allow-client-tasks`); `options` may hold
`task_id` (and then `task`) only. A failure is `{"ok": false, "op", "error": {"type",
"message"}}` and the session goes on: protocol errors (`BadMessage`, `UnknownOp`,
`MessageTooBig`, `NotOpen`, `AlreadyOpen`, `KwargsNotAllowed`, `NotAllowed`), an unknown
`task_id` (`KeyError`), and `EnvError` for anything the env raised: its message names an
incident id and nothing else (the details, which may name the server's files, go to the
server's log only). Close codes: 4401 missing/wrong token, 4404 env not served, 4408 no
`open` in time, idle past the TTL or past the session's lifetime, 4429 server full, 4504 an
env call ran past `op_timeout_s`, 1009 frame over the transport limit. HTTP: `GET /health`
(no token) and, with the token like every other route (`/docs`, `/openapi.json`),
`GET /v1/envs` (ids, descriptions, sessions in use, capacity). Every request, the handshake
included, is refused with 403 when its `Host` is not loopback (nor allowed: `--allow-host`)
or it carries a browser `Origin` that is not allowed (`--allow-origin`); see
`skyhub.remote.guard`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyhub.remote.client import RemoteEnv


def make_remote(env_id: str, url: str, token: str | None = None, **kwargs: Any) -> RemoteEnv:
    """A `RemoteEnv` for `env_id` served at `url`; see `skyhub.remote.client.make_remote`."""
    from skyhub.remote.client import make_remote as _make_remote

    return _make_remote(env_id, url, token, **kwargs)


__all__ = ["make_remote"]
