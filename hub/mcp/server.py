"""`skyhub mcp ENV_ID`: an env's tools served over the Model Context Protocol.

An MCP-speaking agent (Claude Desktop, an IDE, any client of the official `mcp` SDK) acts in
a skyhub env through it. Built on the SDK's low-level `Server` (the tools are the env's own
JSON schemas, not Python signatures), over stdio or streamable HTTP bound to loopback.

What a client may rely on:
- an env with a `protocol` kwarg is made with `protocol="tools"` (its system prompt then
  describes tools) unless the kwargs say otherwise;
- one episode per MCP session: a session's env is its own (made on its first `reset`; the
  first session takes the env made at startup), runs in one thread of its own (an env is
  never called concurrently), and is closed when the session ends;
- the tools are the env's `tools` (each call goes through `env.step(ToolCall(...))`, so it is
  scored by the env's rules, a malformed call included: its result is an MCP tool error,
  `isError`, whose text says what to fix), plus two of the server's: `reset` (optional `seed`
  and `task_id`; returns the system prompt and the first observation) and `episode_status`
  (the reward so far, whether the episode is done, its outcome and `reward_breakdown`);
- an env without tools is played through one tool, `act`, whose `action` is the text action;
- a call before `reset`, or after the episode ended, is a tool error saying to call `reset`;
  an env that fails (its infrastructure) ends the episode with outcome "error".

Over ~400 lines, for a reason: one job, an env's episodes over MCP (sessions, the env's and
the server's tools, both transports), with the variant that serves a harness's running
episode (`play=`) reusing the same session logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from skyhub.errors import MissingDependency, UsageError
from skyhub.remote.env_thread import EnvThread
from skyhub.tools import ToolCall

if TYPE_CHECKING:
    from skyhub.env import TextEnv

CONTROL_TOOLS = ("reset", "episode_status")
ACT_TOOL = "act"

RESET_SCHEMA = {"type": "object", "properties": {
    "seed": {"type": "integer", "minimum": 0,
             "description": "Seed of the task choice (the same seed, the same task)."},
    "task_id": {"type": "string", "description": "Play this task (an id of the env's)."}}}
ACT_SCHEMA = {"type": "object", "properties": {"action": {
    "type": "string", "description": "Your turn, as the instructions ask."}},
    "required": ["action"]}


def _require_mcp() -> None:
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError as e:
        raise MissingDependency("`skyhub mcp` needs the Model Context Protocol SDK: pip install "
                                "'skyhub[mcp]' (the `mcp` package)") from e


class _Envs:
    """Makes each session's env; the first session gets the one made at startup (which
    checked the id and kwargs before anything was served)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        from skyhub import make
        from skyhub.env_kwargs import accepted_kwargs
        from skyhub.registry import spec

        if "protocol" not in env_kwargs and "protocol" in accepted_kwargs(spec(env_id))[0]:
            env_kwargs = {**env_kwargs, "protocol": "tools"}  # MCP clients call tools
        self.make: Callable[[], TextEnv] = lambda: make(env_id, **env_kwargs)
        self.env_id = env_id
        self._spare: TextEnv | None = self.make()
        self._lock = threading.Lock()
        self.tools: list[dict[str, Any]] | None = self._spare.tools
        self.system_prompt = self._spare.system_prompt
        clash = sorted({t["function"]["name"] for t in self.tools or ()} & set(CONTROL_TOOLS))
        if clash:
            self._spare.close()
            raise UsageError(f"{env_id} declares tools named {clash}, which `skyhub mcp` "
                             f"uses for itself ({', '.join(CONTROL_TOOLS)}); serve it with "
                             "`skyhub serve` instead, or rename its tools")

    def take(self) -> TextEnv:
        with self._lock:
            env, self._spare = self._spare, None
        return env if env is not None else self.make()

    def close(self) -> None:
        with self._lock:
            env, self._spare = self._spare, None
        if env is not None:
            env.close()


class _Episode:
    """One MCP session's env and episode. Its methods run in the session's env thread."""

    def __init__(self, envs: _Envs) -> None:
        self.envs = envs
        self.env: TextEnv | None = None
        self.thread = EnvThread("skyhub-mcp-session")
        self.started = self.done = False
        self.total = 0.0
        self.info: dict[str, Any] = {}
        self.flags = (False, False)
        self.calls = 0

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        fut = self.thread.submit_async(asyncio.get_running_loop(), lambda: fn(*args))
        return fn(*args) if fut is None else await fut

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None and self.thread.submit(env.close) is None:
            env.close()
        self.thread.shutdown()

    # ------------------------------------------------------------------ in the env thread
    def reset(self, arguments: dict[str, Any]) -> Any:
        seed, task_id = arguments.get("seed"), arguments.get("task_id")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or seed < 0):
            return _error(f"seed must be an integer >= 0, got {seed!r:.40}")
        if self.env is None:
            self.env = self.envs.take()
        options = None if task_id is None else {"task_id": str(task_id)}
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except KeyError as e:
            return _error(f"{e.args[0] if e.args else e}; call reset without task_id for a "
                          "task of the env's choice")
        self.started, self.done, self.total, self.calls = True, False, 0.0, 0
        self.info, self.flags = dict(info), (False, False)
        prompt = self.env.system_prompt or ""
        return _result([prompt, obs] if prompt else [obs],
                       {"system_prompt": prompt, "observation": obs,
                        "task_id": info.get("task_id")})

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        if not self.started or self.env is None:
            return _error("no episode yet: call `reset` first (it returns the task and the "
                          "instructions)")
        if self.done:
            return _error(f"the episode has ended ({self._ending()}); call `reset` to start "
                          "another")
        self.calls += 1
        call = ToolCall(f"mcp_{self.calls}", name, arguments)
        tools = self.env.tools
        try:
            if tools:
                action: Any = call
            elif name == ACT_TOOL and isinstance(arguments.get("action"), str):
                action = arguments["action"]
            else:
                return _error(f"this environment takes its turns through `{ACT_TOOL}` "
                              "({\"action\": \"your turn as text\"})")
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:  # the env's infrastructure failed: the episode ends
            self.done, self.flags = True, (False, True)
            self.info = {**self.info, "outcome": "error", "infra_error": True}
            return _error(f"the environment failed ({type(e).__name__}: {e}); the episode "
                          "ended as an infra error: call `reset` to start another")
        self.total += float(reward)
        self.info, self.flags = dict(info), (bool(terminated), bool(truncated))
        self.done = bool(terminated or truncated)
        result = next((r for r in info.get("tool_results") or () if r.get("call_id") == call.id),
                      None)
        text, is_error = (obs, False) if result is None else (result["content"],
                                                              bool(result.get("error")))
        if self.done:
            text = (text + "\n\n" if text else "") + f"The episode has ended: {self._ending()}."
        return _result([text], None, is_error=is_error)

    def status(self) -> dict[str, Any]:
        info = self.info
        return {"started": self.started, "task_id": info.get("task_id"),
                "turn": info.get("turn", 0), "reward": self.total, "done": self.done,
                "terminated": self.flags[0], "truncated": self.flags[1],
                "outcome": info.get("outcome", "running"),
                "infra_error": bool(info.get("infra_error", False)),
                "reward_breakdown": info.get("reward_breakdown", {})}

    def _ending(self) -> str:
        return f"reward {self.total:g}, outcome {self.info.get('outcome', 'running')!r}"


class _PlayEnv:
    """The env of a harness's episode as an MCP session sees it: its steps go through the
    harness's `Play` (so they are recorded in its episode); everything else is the env's."""

    def __init__(self, play: Any) -> None:
        self._play = play

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return tuple(self._play.step(action))  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._play.env, name)


class _HarnessEpisode(_Episode):
    """The MCP session of a `command` harness: the episode is already running (the harness
    reset the env), so `reset` returns its instructions and task instead of starting another,
    and closing the session leaves the env to the harness."""

    def __init__(self, envs: Any, play: Any) -> None:
        super().__init__(envs)
        self.play = play

    def reset(self, arguments: dict[str, Any]) -> Any:
        if self.started:
            return _error("this episode is run by a harness: it cannot be reset; end it with "
                          "the environment's own tools")
        self.env = _PlayEnv(self.play)  # type: ignore[assignment]
        self.started = True
        prompt = self.play.system_prompt or ""
        obs = self.play.observation
        return _result([prompt, obs] if prompt else [obs],
                       {"system_prompt": prompt, "observation": obs,
                        "task_id": self.play.episode.task_id})

    def close(self) -> None:
        self.env = None
        self.thread.shutdown()


class _OneEpisode:
    """What `build_server` needs of its envs, for one harness episode (`play=`)."""

    def __init__(self, play: Any) -> None:
        self.play, self.env_id = play, "episode"
        self.tools: list[dict[str, Any]] | None = getattr(play.env, "tools", None)
        self.system_prompt = play.system_prompt

    def close(self) -> None:
        return None


def _result(texts: list[str], structured: dict[str, Any] | None, *,
            is_error: bool = False) -> Any:
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=t) for t in texts],
                                structuredContent=structured, isError=is_error)


def _error(text: str) -> Any:
    return _result([text], None, is_error=True)


def build_server(env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                 play: Any = None) -> tuple[Any, Any]:
    """The MCP server (the SDK's low-level `Server`) for `env_id`, and its env maker (close
    it when done serving). Makes one env now: an unknown id or kwarg fails before serving.

    With `play` (a `skyhub.harness.Play`), the server serves that running episode instead
    (what the `command` harness gives its program): `reset` returns its task, and every tool
    call is a step of it."""
    _require_mcp()
    from mcp import types
    from mcp.server.lowlevel import Server

    from skyhub import __version__

    envs: Any = _Envs(env_id, dict(env_kwargs or {})) if play is None else _OneEpisode(play)

    @contextlib.asynccontextmanager
    async def session_lifespan(_: Any) -> AsyncIterator[_Episode]:
        # the SDK enters this once per MCP session
        episode = _Episode(envs) if play is None else _HarnessEpisode(envs, play)
        try:
            yield episode
        finally:
            episode.close()

    instructions = (f"A skyhub environment ({env_id}). Call `reset` to start an episode: it "
                    "returns the instructions and the task. "
                    + ("Then call the environment's tools. " if envs.tools else
                       f"Then play each turn with `{ACT_TOOL}`. ")
                    + "`episode_status` reads the reward so far and whether the episode is "
                    "done.")
    server: Any = Server(f"skyhub-{env_id}", version=__version__, instructions=instructions,
                         lifespan=session_lifespan)
    own = [types.Tool(name="reset", description="Start a new episode (a task of the "
                      "environment); returns the instructions and the first observation.",
                      inputSchema=RESET_SCHEMA),
           types.Tool(name="episode_status", description="The episode's reward so far, "
                      "whether it is done, its outcome and reward breakdown.",
                      inputSchema={"type": "object", "properties": {}})]
    if envs.tools:
        env_tools = [types.Tool(name=t["function"]["name"],
                                description=t["function"].get("description"),
                                inputSchema=t["function"].get("parameters")
                                or {"type": "object", "properties": {}})
                     for t in envs.tools]
    else:
        env_tools = [types.Tool(name=ACT_TOOL, description="Take your turn: the text action "
                                "the instructions ask for. Returns the environment's reply.",
                                inputSchema=ACT_SCHEMA)]

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return env_tools + own

    # Input is not validated by the SDK: a malformed call is the env's to answer (its turn
    # count and format penalty apply), as it is for any other caller.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        episode: _Episode = server.request_context.lifespan_context
        if name == "reset":
            return await episode.run(episode.reset, arguments)
        if name == "episode_status":
            status = episode.status()
            return _result([json.dumps(status)], status)
        return await episode.run(episode.call, name, arguments)

    return server, envs


def serve_stdio(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Serve one MCP session over this process's stdin/stdout until the client closes it.
    Whatever the env prints goes to stderr: stdout carries the protocol only."""
    import anyio

    # the protocol gets its own copy of fd 1; fd 1 and sys.stdout then point at stderr, so
    # neither a print nor a child process (the env's, made next) can write into the
    # protocol's stream
    sys.stdout.flush()
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    server, envs = build_server(env_id, env_kwargs)

    async def main() -> None:
        from io import TextIOWrapper

        from mcp.server.stdio import stdio_server

        out = anyio.wrap_file(TextIOWrapper(protocol_out, encoding="utf-8"))
        async with stdio_server(stdout=out) as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        envs.close()


def http_app(server: Any) -> Any:
    """A Starlette app serving `server` over streamable HTTP at `/mcp` (stateful: one MCP
    session, one episode), answering only loopback Host names and Origins (DNS rebinding)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    loopback = ("127.0.0.1", "localhost", "[::1]")
    manager = StreamableHTTPSessionManager(app=server, security_settings=(
        TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:*" for h in loopback] + list(loopback),
            allowed_origins=[f"http://{h}:*" for h in loopback])))

    class Endpoint:  # an ASGI app (not a function): Starlette routes every method to it
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    logging.getLogger("mcp.server.streamable_http").addFilter(_quiet_session_end)
    return Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)


def _quiet_session_end(record: logging.LogRecord) -> bool:
    """Drop the SDK's traceback for a session's stream closing under its SSE writer when the
    client ends the session (anyio's ClosedResourceError): the normal end, not an error."""
    import anyio

    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, anyio.ClosedResourceError)


def serve_http(env_id: str, env_kwargs: dict[str, Any] | None = None, port: int = 8765, *,
               log_level: str = "warning",
               on_listen: Callable[[str], None] | None = None) -> None:
    """Serve MCP over streamable HTTP on 127.0.0.1:`port` (0: a free one) until interrupted;
    `on_listen(url)` is called once the socket is bound (the URL ends in `/mcp`)."""
    from skyhub.remote.guard import listen_socket
    from skyhub.remote.http_server import uvicorn_config

    server, envs = build_server(env_id, env_kwargs)
    try:
        import uvicorn

        sock = listen_socket("127.0.0.1", port)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        if on_listen is not None:
            on_listen(url)
        uvicorn.Server(uvicorn_config(http_app(server), "127.0.0.1", port,
                                      log_level=log_level)).run(sockets=[sock])
    finally:
        envs.close()


__all__ = ["CONTROL_TOOLS", "build_server", "http_app", "serve_http", "serve_stdio"]
