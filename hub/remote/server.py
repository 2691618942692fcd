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
  WebSocket without it is closed with 4401 and HTTP endpoints other than `/health` answer 401.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

# fastapi at module level: FastAPI resolves the endpoints' annotations in this module's
# globals. `import skyhub` never imports this module; `skyhub serve` does.
from fastapi import FastAPI, HTTPException, Request, WebSocket

from skyhub.errors import UsageError
from skyhub.remote import wire

if TYPE_CHECKING:
    from skyhub.env import TextEnv

log = logging.getLogger("skyhub.remote")

TASK_PAGE_MAX = 1000  # tasks per `tasks` reply


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname other than localhost may resolve to anything


def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose envs (which run agent-chosen code and queries) without a token."""
    if not token and not is_loopback(host):
        raise UsageError(
            f"refusing to serve on {host!r} without a token: anyone who can reach it could run "
            "envs. Pass --token SECRET (or set SKYHUB_TOKEN); clients pass the same token "
            "(token=... or SKYHUB_TOKEN). Without a token, bind to 127.0.0.1.")


class _Hub:
    """The server's state: what it serves, its limits and the live sessions."""

    def __init__(self, env_ids: Sequence[str], token: str | None, max_sessions: int,
                 idle_ttl_s: float, max_message_bytes: int,
                 allow_kwargs: bool | Collection[str], env_kwargs: dict[str, Any]) -> None:
        from skyhub.registry import spec

        if not env_ids:
            raise UsageError("no env to serve: name at least one env id, e.g. "
                             "`skyhub serve toy-lookup`")
        if max_sessions < 1:
            raise UsageError(f"max_sessions must be >= 1, got {max_sessions}")
        self.specs = {env_id: spec(env_id) for env_id in env_ids}  # EnvNotFound early
        self.token = token or None
        self.max_sessions, self.idle_ttl_s = max_sessions, idle_ttl_s
        self.max_message_bytes = max_message_bytes
        self.allow_kwargs = allow_kwargs
        self.env_kwargs = dict(env_kwargs)
        self.sessions: dict[str, _Session] = {}
        self.started = time.time()

    def authorized(self, headers: Any, query: Any) -> bool:
        if self.token is None:
            return True
        given = query.get("token") or ""
        auth = headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return hmac.compare_digest(given.encode(), self.token.encode())

    def check_kwargs(self, kwargs: dict[str, Any]) -> None:
        if self.allow_kwargs is True or not kwargs:
            return
        allowed = set() if self.allow_kwargs is False else set(self.allow_kwargs)
        refused = sorted(set(kwargs) - allowed)
        if refused:
            raise _ProtocolError("KwargsNotAllowed", f"this server does not accept env kwargs "
                                 f"{refused} (allowed: {sorted(allowed) or 'none'}); ask its "
                                 "operator, or serve the env yourself")

    def describe(self) -> dict[str, Any]:
        return {"envs": [{"id": s.id, "description": s.description, "tags": list(s.tags)}
                         for s in self.specs.values()],
                "sessions": len(self.sessions), "capacity": self.max_sessions,
                "idle_ttl_s": self.idle_ttl_s, "max_message_bytes": self.max_message_bytes,
                "protocol": wire.PROTOCOL_VERSION}


class _ProtocolError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Session:
    """One client's env, its thread, and the handlers of its messages."""

    def __init__(self, hub: _Hub, env_id: str) -> None:
        self.hub, self.env_id = hub, env_id
        self.id = uuid.uuid4().hex[:12]
        self.env: TextEnv | None = None
        self.executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"skyhub-session-{self.id}")
        self.ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "open": self._open, "reset": self._reset, "step": self._step, "call": self._call,
            "tasks": self._tasks, "close": self._close, "ping": self._ping}

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))
        except RuntimeError as e:
            if "after shutdown" not in str(e):
                raise
            return fn(*args, **kwargs)  # the interpreter is exiting: no new threads

    async def handle(self, raw: str | bytes) -> tuple[dict[str, Any], bool]:
        """The reply to one message, and whether the session ends after it."""
        op = None
        try:
            size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8"))
            if size > self.hub.max_message_bytes:
                raise _ProtocolError("MessageTooBig", f"message of {size} bytes is over this "
                                     f"server's limit of {self.hub.max_message_bytes} bytes")
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
        except Exception as e:  # the env's failure: reported, the session goes on
            log.warning("session %s (%s): %s failed: %s: %s", self.id, self.env_id, op,
                        type(e).__name__, e, exc_info=not isinstance(e, KeyError | ValueError))
            return {"ok": False, "op": op, "error": wire.error_body(e)}, False

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
                "num_tasks": len(env.tasks), "description": spec.description}

    async def _reset(self, req: dict[str, Any]) -> dict[str, Any]:
        seed, options = req.get("seed"), req.get("options")
        if seed is not None and not isinstance(seed, int):
            raise _ProtocolError("BadMessage", f"'seed' must be an integer or null, got {seed!r}")
        if options is not None and not isinstance(options, dict):
            raise _ProtocolError("BadMessage", "'options' must be a JSON object or null")
        if options and isinstance(options.get("task"), dict):
            from skyhub.task import Task

            options = {**options, "task": Task.from_dict(options["task"])}
        env = self.env
        assert env is not None
        obs, info = await self.run(env.reset, seed=seed, options=options)
        u = env.unwrapped
        return {"obs": obs, "info": info, "task": wire.task_summary(getattr(u, "task", None)),
                "system_prompt": u.system_prompt}

    async def _step(self, req: dict[str, Any]) -> dict[str, Any]:
        action = req.get("action")
        if not isinstance(action, str):
            raise _ProtocolError("BadMessage", "'action' must be a string")
        assert self.env is not None
        obs, reward, terminated, truncated, info = await self.run(self.env.step, action)
        return {"obs": obs, "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": info}

    async def _call(self, req: dict[str, Any]) -> dict[str, Any]:
        name = req.get("name")
        assert self.env is not None
        env = self.env.unwrapped
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
        if self.env is not None:
            await self.run(self.env.close)
        return {}

    async def _ping(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"pong": True}

    def shutdown(self) -> None:
        """Close the env in its own thread (queued after a step still running), without
        blocking the event loop."""
        env, self.env = self.env, None
        if env is not None:
            try:
                self.executor.submit(_close_quietly, env, self.id)
            except RuntimeError:  # the interpreter is exiting: close it here
                _close_quietly(env, self.id)
        self.executor.shutdown(wait=False)


def _close_quietly(env: TextEnv, session: str) -> None:
    try:
        env.close()
    except Exception:
        log.warning("session %s: env close() failed", session, exc_info=True)


async def _serve_session(hub: _Hub, ws: WebSocket, env_id: str) -> None:
    from starlette.websockets import WebSocketDisconnect

    await ws.accept()
    if not hub.authorized(ws.headers, ws.query_params):
        await ws.close(wire.CLOSE_UNAUTHORIZED, "missing or wrong token: pass token=... to "
                       "make_remote (or set SKYHUB_TOKEN)")
        return
    if env_id not in hub.specs:
        await ws.close(wire.CLOSE_NOT_FOUND, f"{env_id!r} is not served here; served: "
                       f"{', '.join(hub.specs)}"[:120])
        return
    if len(hub.sessions) >= hub.max_sessions:
        await ws.close(wire.CLOSE_CAPACITY, f"server full: {hub.max_sessions} sessions in use; "
                       "retry later or raise --max-sessions")
        return
    session = _Session(hub, env_id)
    hub.sessions[session.id] = session
    try:
        while True:
            try:
                msg = await asyncio.wait_for(ws.receive(), timeout=hub.idle_ttl_s)
            except TimeoutError:
                log.info("session %s idle for %ss: closed", session.id, hub.idle_ttl_s)
                await ws.close(wire.CLOSE_IDLE, f"idle for {hub.idle_ttl_s:g} s; the env was "
                               "closed, open a new session")
                return
            if msg["type"] == "websocket.disconnect":
                return
            raw = msg.get("text")
            reply, done = await session.handle(raw if raw is not None else msg.get("bytes", b""))
            await ws.send_text(wire.dumps(reply))
            if done:
                await ws.close(1000)
                return
    except (WebSocketDisconnect, RuntimeError, OSError) as e:
        # RuntimeError: starlette's "send after close"; the client is gone either way
        log.info("session %s ended: %s", session.id, type(e).__name__)
    finally:
        hub.sessions.pop(session.id, None)
        session.shutdown()
        log.info("session %s (%s) closed its env", session.id, env_id)


def create_app(env_ids: Sequence[str], *, token: str | None = None, max_sessions: int = 64,
               idle_ttl_s: float = 600, max_message_bytes: int = 1_000_000,
               allow_kwargs: bool | Collection[str] = True,
               env_kwargs: dict[str, Any] | None = None) -> FastAPI:
    """The FastAPI app serving `env_ids` (registered ids; `EnvNotFound` if one is not).

    `token`: required from clients when set. `allow_kwargs`: True honours the env kwargs a
    client sends in `open`, False refuses any, a collection allows those names only.
    `env_kwargs`: defaults for every env made here (a client's kwargs override them).
    Binding is `serve`'s business: the app itself makes no loopback check.
    """
    hub = _Hub(env_ids, token, max_sessions, idle_ttl_s, max_message_bytes, allow_kwargs,
               env_kwargs or {})
    app = FastAPI(title="skyhub env server", version=str(wire.PROTOCOL_VERSION))
    app.state.hub = hub

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "sessions": len(hub.sessions), "capacity": hub.max_sessions,
                "protocol": wire.PROTOCOL_VERSION}

    @app.get("/v1/envs")
    def envs(request: Request) -> dict[str, Any]:
        if not hub.authorized(request.headers, request.query_params):
            raise HTTPException(401, "missing or wrong token: send 'Authorization: Bearer "
                                "TOKEN' or ?token=TOKEN")
        return hub.describe()

    @app.websocket("/v1/envs/{env_id}/session")
    async def session(ws: WebSocket, env_id: str) -> None:
        await _serve_session(hub, ws, env_id)

    return app


def _uvicorn_config(app: Any, host: str, port: int, max_message_bytes: int,
                    log_level: str) -> Any:
    import uvicorn

    # The transport limit sits above ours so that an oversized message gets a clear error
    # reply rather than a bare 1009 close.
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          ws_max_size=max(4 * max_message_bytes, 1 << 20),
                          ws_ping_interval=20.0, ws_ping_timeout=20.0)


def serve(env_ids: Sequence[str], host: str = "127.0.0.1", port: int = 8000,
          token: str | None = None, *, max_sessions: int = 64, idle_ttl_s: float = 600,
          max_message_bytes: int = 1_000_000, allow_kwargs: bool | Collection[str] = True,
          env_kwargs: dict[str, Any] | None = None, log_level: str = "info") -> None:
    """Serve `env_ids` on `host:port` until interrupted (uvicorn). `token` defaults to
    `$SKYHUB_TOKEN`; a non-loopback `host` without one is a `UsageError`, raised before
    anything is bound."""
    import uvicorn

    token = token or os.environ.get("SKYHUB_TOKEN") or None
    check_bind(host, token)
    app = create_app(env_ids, token=token, max_sessions=max_sessions, idle_ttl_s=idle_ttl_s,
                     max_message_bytes=max_message_bytes, allow_kwargs=allow_kwargs,
                     env_kwargs=env_kwargs)
    uvicorn.Server(_uvicorn_config(app, host, port, max_message_bytes, log_level)).run()


class UvicornThread:
    """A uvicorn server in a daemon thread of this process: `start` returns once it listens
    (with `port=0`, `port` is then the one it got); `stop` ends it. A context manager."""

    def __init__(self, server: Any, host: str, port: int, name: str) -> None:
        self.server, self.host, self.port = server, host, port
        self.thread = threading.Thread(target=self.server.run, daemon=True, name=name)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Any:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.host}:{self.port} did not start "
                                   "(port in use? see the log above)")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerThread(UvicornThread):
    """A server in a background thread of this process (tests, benchmarks, notebooks):

        with ServerThread(["toy-lookup"]) as srv:
            env = make_remote("toy-lookup", srv.url)

    `port=0` picks a free port; `url` is the WebSocket base URL once started. The loopback
    rule of `serve` applies.
    """

    def __init__(self, env_ids: Sequence[str], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, *, log_level: str = "warning",
                 **app_kwargs: Any) -> None:
        import uvicorn

        check_bind(host, token)
        self.app = create_app(env_ids, token=token, **app_kwargs)
        max_bytes = app_kwargs.get("max_message_bytes", 1_000_000)
        super().__init__(uvicorn.Server(_uvicorn_config(self.app, host, port, max_bytes,
                                                        log_level)),
                         host, port, "skyhub-server")

    @property
    def hub(self) -> _Hub:
        return self.app.state.hub

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"
