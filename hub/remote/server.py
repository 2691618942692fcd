"""The skyhub env server: registered envs over WebSocket, one env per session (FastAPI).

Why: a trainer on a GPU box can play envs that live elsewhere (next to their databases,
containers or data) without code changes: `skyhub.remote.make_remote(id, url)` returns a
`TextEnv` that forwards to a session here. See `skyhub.remote` for the protocol.

Guarantees a client may rely on:
- a session's env is created by `open`, used only by that session and closed when the session
  ends for any reason: `close`, a client disconnect (a vanished client included: its socket
  ends or stops answering pings), `idle_ttl_s` without a message, or server shutdown;
- env calls are blocking, so each session runs its env in its own thread (one thread per
  session: an env is never called concurrently and always from the same thread, as an env
  bound to its creating thread expects); many sessions proceed at once;
- a malformed, unknown or oversized message gets an error reply and the session goes on;
  a frame beyond the transport limit (4x `max_message_bytes`) closes that session with code
  1009; the server itself stays up;
- binding to a non-loopback address needs a token (`UsageError` otherwise); with a token, a
  WebSocket without it is closed with 4401 and every HTTP route but `/health` (`/docs` and
  `/openapi.json` included) answers 401. The token is read from the `Authorization` header
  only; one sent in a URL (`?token=`) is refused and never reaches a log line;
- a request is answered only when its `Host` is a loopback name or address (or one the
  operator allowed: `allow_hosts`, `--allow-host`) and it carries no `Origin` (a program) or
  an allowed one (`allow_origins`, `--allow-origin`): a web page open in the user's browser
  cannot drive a session, whether cross-origin or through DNS rebinding (403 at the
  handshake; `skyhub.remote.guard`);
- connections are bounded: a request head must arrive within `header_timeout_s`, at most
  `max_connections` wait in the HTTP phase (the oldest idle one is dropped at the cap), and
  running out of descriptors sheds pending connections with one log line per interval.

What a client cannot do (the operator decides; a hostile client is assumed):
- read the gold: `reference_action` (the task's reference solution) is refused unless the
  operator exposes it (`expose_reference`, `--expose-reference`), for clients trusted with
  the answers (an oracle eval), never for a policy being trained or anyone who can reach it;
- choose env kwargs (`open`'s `kwargs`) other than those the operator allowed by name
  (`allow_kwargs`; none by default), or define its own task (`options.task`, refused unless
  `allow_client_tasks`): kwargs such as `tasks_file`, `data_dir`, `dsn` or a huge `n_tasks`
  would let it read the server's files or exhaust its memory;
- learn anything about the server's files from an error: whatever an env raises reaches the
  client as `EnvError` with an incident id (the same words for every exception), the details
  go to the server's log;
- hold a slot without using it: a connection that has not opened an env within
  `open_timeout_s` is closed (4408), as is a session idle for `idle_ttl_s` or older than
  `max_session_s`; an env call running past `op_timeout_s` ends its session (4504). A
  session's env runs in its own single thread, and its slot stays counted until that thread
  is done, so stuck envs cannot pile up beyond `max_sessions`.

Over ~400 lines, for a reason: one server: a session, its limits and its messages are one
lifecycle (its thread is `env_thread`, the token gate `token_gate`, uvicorn `http_server`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

# fastapi at module level: FastAPI resolves the endpoints' annotations in this module's
# globals. `import skyhub` never imports this module; `skyhub serve` does.
from fastapi import FastAPI, WebSocket

from skyhub.errors import SkyhubError, UsageError
from skyhub.remote import wire
from skyhub.remote.env_thread import EnvThread
from skyhub.remote.guard import (
    HEADER_TIMEOUT_S,
    CallerPolicy,
    OriginGate,
    is_loopback,
    listen_socket,
)
from skyhub.remote.http_server import UvicornThread, ws_server
from skyhub.remote.token_gate import SECRET_PARAM, TokenGate, authorized

if TYPE_CHECKING:
    from skyhub.env import TextEnv

log = logging.getLogger("skyhub.remote")

TASK_PAGE_MAX = 1000  # tasks per `tasks` reply
SEED_MAX = 2**64  # seeds are integers in [0, SEED_MAX)
def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose envs (which run agent-chosen code and queries) without a token."""
    if not token and not is_loopback(host):
        raise UsageError(
            f"refusing to serve on {host!r} without a token: anyone who can reach it could run "
            "envs. Pass --token SECRET (or set SKYHUB_TOKEN); clients pass the same token "
            "(token=... or SKYHUB_TOKEN). Without a token, bind to 127.0.0.1.")


class _Hub:
    """The server's state: what it serves, its limits and the live sessions."""

    def __init__(self, env_ids: Sequence[str], token: str | None, *, max_sessions: int,
                 idle_ttl_s: float, open_timeout_s: float, op_timeout_s: float | None,
                 max_session_s: float | None, max_message_bytes: int,
                 allow_kwargs: bool | Collection[str], allow_client_tasks: bool,
                 env_kwargs: dict[str, Any], expose_reference: bool = False) -> None:
        from skyhub.registry import spec

        if not env_ids:
            raise UsageError("no env to serve: name at least one env id, e.g. "
                             "`skyhub serve toy-lookup`")
        if max_sessions < 1:
            raise UsageError(f"max_sessions must be >= 1, got {max_sessions}")
        for name, value in (("idle_ttl_s", idle_ttl_s), ("open_timeout_s", open_timeout_s),
                            ("op_timeout_s", op_timeout_s), ("max_session_s", max_session_s)):
            if value is not None and not value > 0:
                raise UsageError(f"{name} must be > 0 seconds, got {value}")
        if isinstance(allow_kwargs, str):
            raise UsageError(f"allow_kwargs={allow_kwargs!r}: pass a collection of kwarg "
                             "names, e.g. ('max_turns', 'split')")
        self.specs = {env_id: spec(env_id) for env_id in env_ids}  # EnvNotFound early
        self.token = token or None
        self.max_sessions, self.idle_ttl_s = max_sessions, idle_ttl_s
        self.open_timeout_s, self.op_timeout_s = open_timeout_s, op_timeout_s
        self.max_session_s = max_session_s
        self.max_message_bytes = max_message_bytes
        self.allow_kwargs: bool | frozenset[str] = (
            allow_kwargs if isinstance(allow_kwargs, bool) else frozenset(allow_kwargs))
        self.allow_client_tasks = allow_client_tasks
        self.expose_reference = bool(expose_reference)
        self.env_kwargs = dict(env_kwargs)
        self.sessions: dict[str, _Session] = {}
        #: sessions that ended while their env thread was still busy (a stuck step): they
        #: hold their slot until it is done
        self.draining: dict[str, _Session] = {}
        self.started = time.time()

    def in_use(self) -> int:
        return len(self.sessions) + len(self.draining)

    def authorized(self, headers: Any) -> bool:
        """Whether the request carries the token (`token_gate.authorized`)."""
        return authorized(self.token, headers)

    def check_kwargs(self, kwargs: dict[str, Any]) -> None:
        if self.allow_kwargs is True or not kwargs:
            return
        allowed = frozenset() if self.allow_kwargs is False else self.allow_kwargs
        refused = sorted(set(kwargs) - allowed)
        if refused:
            shown = [k[:40] for k in refused[:10]]
            raise _ProtocolError("KwargsNotAllowed", f"this server does not accept env kwargs "
                                 f"{shown} (allowed: {sorted(allowed) or 'none'}); ask its "
                                 "operator (`skyhub serve --allow-kwargs NAME,...`), or serve "
                                 "the env yourself")

    def describe(self) -> dict[str, Any]:
        return {"envs": [{"id": s.id, "description": s.description, "tags": list(s.tags)}
                         for s in self.specs.values()],
                "sessions": self.in_use(), "capacity": self.max_sessions,
                "idle_ttl_s": self.idle_ttl_s, "open_timeout_s": self.open_timeout_s,
                "op_timeout_s": self.op_timeout_s, "max_session_s": self.max_session_s,
                "max_message_bytes": self.max_message_bytes,
                "allowed_kwargs": (True if self.allow_kwargs is True
                                   else sorted(self.allow_kwargs or ())),
                "client_tasks": self.allow_client_tasks,
                "reference_action": self.expose_reference,
                "protocol": wire.PROTOCOL_VERSION}


class _ProtocolError(SkyhubError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _OpTimeout(SkyhubError):
    """An env call ran past `op_timeout_s`: the session ends (its thread may still be busy)."""


class _Session:
    """One client's env, its thread, and the handlers of its messages."""

    def __init__(self, hub: _Hub, env_id: str) -> None:
        self.hub, self.env_id = hub, env_id
        self.id = uuid.uuid4().hex[:12]
        self.env: TextEnv | None = None
        self.thread = EnvThread(f"skyhub-session-{self.id}")
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "open": self._open, "reset": self._reset, "step": self._step, "call": self._call,
            "tasks": self._tasks, "close": self._close, "ping": self._ping}

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` in the session's thread; `_OpTimeout` past `op_timeout_s`
        (the call itself cannot be stopped: it finishes in its thread, which is why the
        session's slot stays taken until then)."""
        loop = asyncio.get_running_loop()
        fut = self.thread.submit_async(loop, functools.partial(fn, *args, **kwargs))
        if fut is None:
            return fn(*args, **kwargs)  # the interpreter is exiting: no new threads
        # `asyncio.timeout` around a plain await: no extra future or task per call (a
        # `wait_for(shield(...))` cost two more loop iterations a step). On expiry the await
        # is cancelled; the call itself goes on in its thread (a running call cannot be
        # cancelled) and the session's close is queued behind it.
        try:
            async with asyncio.timeout(self.hub.op_timeout_s):
                return await fut
        except TimeoutError:
            raise _OpTimeout(getattr(fn, "__name__", "call")) from None

    async def handle(self, raw: str | bytes) -> tuple[dict[str, Any], bool]:
        """The reply to one message, and whether the session ends after it."""
        op = None
        try:
            limit = self.hub.max_message_bytes
            # a str's UTF-8 size is between len and 4 * len: encode only when that decides
            size = len(raw) if isinstance(raw, bytes) or 4 * len(raw) <= limit \
                else len(raw.encode("utf-8"))
            if size > limit:
                raise _ProtocolError("MessageTooBig", f"message of {size} bytes is over this "
                                     f"server's limit of {limit} bytes")
            try:
                req = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as e:
                raise _ProtocolError("BadMessage", f"not JSON ({e}); send one JSON object "
                                     'per message, like {"op": "step", "action": "..."}') from None
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise _ProtocolError("BadMessage", "a message is a JSON object with a string "
                                     f"'op' (one of {sorted(self.ops)})")
            op = req["op"]
            handler = self.ops.get(op)
            if handler is None:
                raise _ProtocolError("UnknownOp", f"unknown op {op!r}; known: {sorted(self.ops)}")
            if op not in ("open", "ping", "close") and self.env is None:
                raise _ProtocolError("NotOpen", f"send {{\"op\": \"open\"}} before {op!r}")
            reply = await handler(req)
            return {"ok": True, **reply}, op == "close"
        except _ProtocolError as e:
            return {"ok": False, "op": op, "error": {"type": e.kind, "message": str(e)}}, False
        except _OpTimeout:
            raise
        except Exception as e:  # the env's failure: reported, the session goes on
            incident = uuid.uuid4().hex[:12]
            log.warning("session %s (%s): %s failed (incident %s): %s: %s", self.id,
                        self.env_id, op, incident, type(e).__name__, e, exc_info=True)
            return {"ok": False, "op": op, "error": wire.env_error_body(op, incident)}, False

    # ------------------------------------------------------------------ ops
    async def _open(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.env is not None:
            raise _ProtocolError("AlreadyOpen", "this session already has an env; open another "
                                 "session for another env")
        kwargs = req.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise _ProtocolError("BadMessage", "'kwargs' must be a JSON object")
        self.hub.check_kwargs(kwargs)
        spec = self.hub.specs[self.env_id]
        self.env = await self.run(spec.make, **{**self.hub.env_kwargs, **kwargs})
        env = self.env.unwrapped
        log.info("session %s opened %s", self.id, self.env_id)
        return {"session": self.id, "env_id": self.env_id, "protocol": wire.PROTOCOL_VERSION,
                "system_prompt": env.system_prompt, "stop_strings": list(env.stop_strings),
                "num_tasks": len(env.tasks), "description": spec.description,
                "reference_action": self.hub.expose_reference,
                "tools": getattr(env, "tools", None),
                "env_protocol": getattr(env, "protocol", "tags")}

    async def _reset(self, req: dict[str, Any]) -> dict[str, Any]:
        seed, options = req.get("seed"), req.get("options")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < SEED_MAX):
            raise _ProtocolError("BadMessage", "'seed' must be null or an integer in "
                                 f"[0, 2**64), got {str(seed)[:40]}")
        if options is not None and not isinstance(options, dict):
            raise _ProtocolError("BadMessage", "'options' must be a JSON object or null")
        env = self.env
        assert env is not None
        options = self._checked_options(options or {}) or None
        if options and "task_id" in options:
            await self.run(self._check_task_id, env, options["task_id"])
        obs, info, question = await self.run(_reset_and_question, env, seed, options)
        u = env.unwrapped
        return {"obs": obs, "info": info, "task": wire.task_summary(getattr(u, "task", None)),
                "system_prompt": u.system_prompt, "question": question}

    def _checked_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The reset options a client may send: `task_id`, and `task` (a client-defined task,
        e.g. a Harbor task that asks for network) only where the operator allows it."""
        allowed = {"task_id", "task"} if self.hub.allow_client_tasks else {"task_id"}
        if "task" in options and not self.hub.allow_client_tasks:
            raise _ProtocolError("NotAllowed", "this server does not run client-defined tasks "
                                 "(options.task); pick one of its tasks with options.task_id "
                                 "(the operator can allow them: --allow-client-tasks)")
        extra = sorted(set(options) - allowed)
        if extra:
            raise _ProtocolError("NotAllowed", f"reset options {[k[:40] for k in extra[:10]]} "
                                 f"are not accepted here; allowed: {sorted(allowed)}")
        out = dict(options)
        if out.get("task_id") is not None and not isinstance(out["task_id"], str | int):
            raise _ProtocolError("BadMessage", "options.task_id must be a string")
        if out.get("task") is not None:
            from skyhub.task import Task

            if not isinstance(out["task"], dict) or not isinstance(out["task"].get("id"), str) \
                    or not isinstance(out["task"].get("prompt"), str):
                raise _ProtocolError("BadMessage", "options.task must be a task object "
                                     '{"id": str, "prompt": str, "answer": ..., "meta": {...}}')
            try:
                out["task"] = Task.from_dict(out["task"])
            except (TypeError, ValueError, KeyError):
                raise _ProtocolError("BadMessage", "options.task is not a valid task object; "
                                     'send {"id", "prompt", "answer", "meta"}') from None
        return out

    @staticmethod
    def _check_task_id(env: TextEnv, task_id: Any) -> None:
        """An unknown task id is the client's mistake: said here, in words of our own (the
        env's error could say more than the client should know)."""
        if task_id is None:
            return
        task_id = str(task_id)
        tasks = env.unwrapped.tasks
        get = getattr(tasks, "get", None)
        if get is not None:
            try:
                get(task_id)
                return
            except KeyError:
                pass
        elif any(t.id == task_id for t in tasks):
            return
        raise _ProtocolError("KeyError", f"no task with id {task_id[:200]!r} in this server's "
                             "env; list them with the 'tasks' op (RemoteEnv.tasks)")

    async def _step(self, req: dict[str, Any]) -> dict[str, Any]:
        action = wire.checked_action(req.get("action"))
        if action is None:
            raise _ProtocolError("BadMessage", "'action' must be a string, or a tool turn "
                                 '{"content": str, "tool_calls": [{"id", "type": "function", '
                                 '"function": {"name", "arguments"}}, ...]}')
        assert self.env is not None
        obs, reward, terminated, truncated, info = await self.run(self.env.step, action)
        return {"obs": obs, "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": info}

    async def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        name = req.get("name")
        assert self.env is not None
        env = self.env.unwrapped
        if name in wire.REFERENCE_GATED and not self.hub.expose_reference:
            raise _ProtocolError(wire.REFERENCE_NOT_EXPOSED, wire.REFERENCE_REFUSED)
        if name in wire.CALLABLE:
            return {"value": await self.run(getattr(env, name))}
        if name in wire.READABLE:
            return {"value": getattr(env, name, None)}
        raise _ProtocolError("NotAllowed", f"{name!r} cannot be called remotely; allowed: "
                             f"{sorted(wire.CALLABLE | wire.READABLE)}")

    async def _tasks(self, req: dict[str, Any]) -> dict[str, Any]:
        offset, limit = req.get("offset", 0), req.get("limit", TASK_PAGE_MAX)
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit < 1:
            raise _ProtocolError("BadMessage", "'offset' and 'limit' must be integers >= 0, >= 1")
        assert self.env is not None
        tasks = self.env.unwrapped.tasks
        end = min(len(tasks), offset + min(limit, TASK_PAGE_MAX))
        return {"total": len(tasks), "offset": offset,
                "tasks": [wire.task_summary(tasks[i]) for i in range(offset, end)]}

    async def _close(self, req: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        if env is not None:
            await self.run(env.close)
            self.env = None  # closed: not again when the session ends
        return {}

    async def _ping(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    def shutdown(self) -> concurrent.futures.Future | None:
        """Close the env in its own thread (queued after a step still running), without
        blocking the event loop. Returns the future of that close (None when nothing is
        left to do): the session's thread is busy until it is done."""
        env, self.env = self.env, None
        done: concurrent.futures.Future | None = None
        if self.thread.started():  # queued behind a call still running, if any
            done = self.thread.submit(functools.partial(_close_quietly, env, self.id))
            if done is None:  # the interpreter is exiting: close it here
                _close_quietly(env, self.id)
        else:  # never opened: no thread, nothing to close
            _close_quietly(env, self.id)
        self.thread.shutdown()
        return done


def _reset_and_question(env: TextEnv, seed: int | None, options: dict | None) -> tuple:
    """`env.reset`, and the new task's text to show (not secret), in one hop to its thread."""
    obs, info = env.reset(seed=seed, options=options)
    question = getattr(env.unwrapped, "display_question", None)
    return obs, info, question() if callable(question) else None


def _close_quietly(env: TextEnv | None, session: str) -> None:
    if env is None:
        return
    try:
        env.close()
    except Exception:
        log.warning("session %s: env close() failed", session, exc_info=True)


def _expired(hub: _Hub, which: str) -> str:
    """The close reason for the deadline `which` ("open", "idle", "max") that passed."""
    if which == "open":
        return f"no env opened within {hub.open_timeout_s:g} s of connecting; send 'open' first"
    if which == "idle":
        return f"idle for {hub.idle_ttl_s:g} s; the env was closed, open a new session"
    return (f"sessions last at most {hub.max_session_s:g} s here; the env was closed, open a "
            "new session")


async def _serve_session(hub: _Hub, ws: WebSocket, env_id: str) -> None:
    from starlette.websockets import WebSocketDisconnect

    await ws.accept()
    if SECRET_PARAM.search(ws.scope.get("query_string") or b""):
        await ws.close(wire.CLOSE_UNAUTHORIZED, "send the token in the Authorization header, "
                       "never in the URL (URLs are logged)")
        return
    if not hub.authorized(ws.headers):
        await ws.close(wire.CLOSE_UNAUTHORIZED, "missing or wrong token: pass token=... to "
                       "make_remote (or set SKYHUB_TOKEN)")
        return
    if env_id not in hub.specs:
        await ws.close(wire.CLOSE_NOT_FOUND, f"{env_id!r} is not served here; served: "
                       f"{', '.join(hub.specs)}"[:120])
        return
    if hub.in_use() >= hub.max_sessions:
        await ws.close(wire.CLOSE_CAPACITY, f"server full: {hub.max_sessions} sessions in use; "
                       "retry later or raise --max-sessions")
        return
    session = _Session(hub, env_id)
    hub.sessions[session.id] = session
    started = time.monotonic()
    open_by = started + hub.open_timeout_s
    end_by = None if hub.max_session_s is None else started + hub.max_session_s
    try:
        while True:
            now = time.monotonic()
            if session.env is None:  # not opened yet: the open timeout, not the idle TTL
                wait, why = open_by - now, "open"
            else:
                wait, why = hub.idle_ttl_s, "idle"
            if end_by is not None and end_by - now < wait:
                wait, why = end_by - now, "max"
            try:
                if wait <= 0:
                    raise TimeoutError
                # the receive runs in this task under a deadline (`wait_for` would make a
                # task of it for every message: two more loop iterations a step)
                async with asyncio.timeout(wait):
                    msg = await ws.receive()
            except TimeoutError:
                why = _expired(hub, why)
                log.info("session %s: %s", session.id, why)
                await ws.close(wire.CLOSE_IDLE, why[:120])
                return
            if msg["type"] == "websocket.disconnect":
                return
            raw = msg.get("text")
            try:
                reply, done = await session.handle(raw if raw is not None
                                                   else msg.get("bytes", b""))
            except _OpTimeout as e:
                log.warning("session %s (%s): %s ran past %ss: session closed", session.id,
                            env_id, e, hub.op_timeout_s)
                await ws.close(wire.CLOSE_OP_TIMEOUT, f"the env's call ran past "
                               f"{hub.op_timeout_s:g} s; the session was closed")
                return
            await ws.send_text(wire.dumps(reply))
            if done:
                await ws.close(1000)
                return
    except (WebSocketDisconnect, RuntimeError, OSError) as e:
        # RuntimeError: starlette's "send after close"; the client is gone either way
        log.info("session %s ended: %s", session.id, type(e).__name__)
    finally:
        hub.sessions.pop(session.id, None)
        closing = session.shutdown()
        if closing is not None and not closing.done():
            # the env's thread is still busy (a stuck call, then the close): the slot is
            # held until it is free
            hub.draining[session.id] = session
            closing.add_done_callback(lambda _: hub.draining.pop(session.id, None))
            if closing.done():  # done meanwhile: the callback may have run before the add
                hub.draining.pop(session.id, None)
        log.info("session %s (%s) closed its env", session.id, env_id)


def create_app(env_ids: Sequence[str], *, token: str | None = None, max_sessions: int = 64,
               idle_ttl_s: float = 600, open_timeout_s: float = 10,
               op_timeout_s: float | None = 300, max_session_s: float | None = None,
               max_message_bytes: int = 1_000_000, allow_kwargs: bool | Collection[str] = (),
               allow_client_tasks: bool = False,
               env_kwargs: dict[str, Any] | None = None, expose_reference: bool = False,
               allow_hosts: Collection[str] = (), allow_origins: Collection[str] = (),
               bound_to: str | None = None) -> FastAPI:
    """The FastAPI app serving `env_ids` (registered ids; `EnvNotFound` if one is not).

    `token`: required from clients when set (header only). `allow_kwargs`: the env kwargs a
    client may send in `open`, by name (none by default; True allows any, for clients you
    trust with the server's files and memory). `allow_client_tasks`: run tasks a client
    defines (`options.task`). `env_kwargs`: the operator's kwargs for every env made here (a
    client may override the allowed ones). Limits, in seconds: `open_timeout_s` from
    connecting to a successful `open`, `idle_ttl_s` between messages once open,
    `max_session_s` for a whole session (None: no limit), `op_timeout_s` for one env call.
    `expose_reference`: answer `reference_action` (the gold; off by default). Callers:
    `allow_hosts` (Host names besides loopback and `bound_to`, the address the server
    listens on) and `allow_origins` (web pages allowed to call it); see
    `skyhub.remote.guard`. Binding is `serve`'s business: the app itself makes no loopback
    check.
    """
    hub = _Hub(env_ids, token, max_sessions=max_sessions, idle_ttl_s=idle_ttl_s,
               open_timeout_s=open_timeout_s, op_timeout_s=op_timeout_s,
               max_session_s=max_session_s, max_message_bytes=max_message_bytes,
               allow_kwargs=allow_kwargs, allow_client_tasks=allow_client_tasks,
               env_kwargs=env_kwargs or {}, expose_reference=expose_reference)
    app = FastAPI(title="skyhub env server", version=str(wire.PROTOCOL_VERSION))
    app.state.hub = hub
    app.state.callers = CallerPolicy.make(allow_hosts, allow_origins, bound_to=bound_to)
    # the last added runs first: the gate scrubs tokens from the URL before anything can
    # refuse (and so log) the request
    app.add_middleware(OriginGate, policy=app.state.callers)
    app.add_middleware(TokenGate, token=hub.token)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "sessions": hub.in_use(), "capacity": hub.max_sessions,
                "protocol": wire.PROTOCOL_VERSION}

    @app.get("/v1/envs")
    def envs() -> dict[str, Any]:
        return hub.describe()  # the gate let it through: the token was right

    @app.websocket("/v1/envs/{env_id}/session")
    async def session(ws: WebSocket, env_id: str) -> None:
        await _serve_session(hub, ws, env_id)

    return app


def serve(env_ids: Sequence[str], host: str = "127.0.0.1", port: int = 8000,
          token: str | None = None, *, log_level: str = "info",
          header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int | None = None,
          **app_kwargs: Any) -> None:
    """Serve `env_ids` on `host:port` until interrupted (uvicorn). `token` defaults to
    `$SKYHUB_TOKEN`; a non-loopback `host` without one is a `UsageError`, raised before
    anything is bound. `header_timeout_s`: seconds a connection has to send its request
    head; `max_connections`: connections waiting in the HTTP phase at once (default: from
    RLIMIT_NOFILE). `app_kwargs`: `create_app`'s limits and allow-lists."""
    token = token or os.environ.get("SKYHUB_TOKEN") or None
    check_bind(host, token)
    app = create_app(env_ids, token=token, bound_to=host, **app_kwargs)
    max_bytes = app_kwargs.get("max_message_bytes", 1_000_000)
    sock = listen_socket(host, port)
    ws_server(app, host, port, max_bytes, log_level, header_timeout_s,
            max_connections).run(sockets=[sock])


class ServerThread(UvicornThread):
    """A server in a background thread of this process (tests, benchmarks, notebooks):

        with ServerThread(["toy-lookup"]) as srv:
            env = make_remote("toy-lookup", srv.url)

    `port=0` picks a free port; `url` is the WebSocket base URL once started. The loopback
    rule of `serve` applies.
    """

    def __init__(self, env_ids: Sequence[str], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, *, log_level: str = "warning",
                 header_timeout_s: float = HEADER_TIMEOUT_S,
                 max_connections: int | None = None, **app_kwargs: Any) -> None:
        check_bind(host, token)
        self.app = create_app(env_ids, token=token, bound_to=host, **app_kwargs)
        max_bytes = app_kwargs.get("max_message_bytes", 1_000_000)
        sock = listen_socket(host, port)
        super().__init__(ws_server(self.app, host, port, max_bytes, log_level,
                                  header_timeout_s, max_connections),
                         host, port, "skyhub-server", sockets=[sock])

    @property
    def hub(self) -> _Hub:
        return self.app.state.hub

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"
