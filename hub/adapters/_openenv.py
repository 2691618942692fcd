"""The implementation of `skyhub.adapters.openenv` (whose docstring says how it maps onto
the framework). It imports the framework at once: the public module loads it on first use."""

from __future__ import annotations

import functools
from typing import Any

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import create_app as _openenv_create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
    from pydantic import Field
except ImportError as e:  # pragma: no cover - exercised only without the extra
    from skyhub.errors import MissingDependency

    raise MissingDependency(f"skyhub.adapters.openenv needs openenv-core ({e.name} is "
                            "missing): pip install 'skyhub[openenv]'") from e

import skyhub
from skyhub.adapters._steps import first_messages, guarded_step, infra_info
from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.json_safe import jsonable

__all__ = ["OpenEnvServer", "SkyhubAction", "SkyhubEnvClient", "SkyhubEnvironment",
           "SkyhubObservation", "SkyhubState", "create_app", "serve"]


class SkyhubAction(Action):
    """The agent's turn: the text it wrote."""

    text: str = Field(description="The agent's reply, as the skyhub env's step takes it")


class SkyhubObservation(Observation):
    """The env's reply, with what a trainer needs to go on (or to drop the episode)."""

    text: str = Field(default="", description="The env's observation (empty at the end)")
    messages: list[dict[str, str]] = Field(
        default_factory=list, description="Chat messages to append: system + user on reset, "
                                          "then the observation as a user message")
    system_prompt: str | None = Field(default=None, description="The env's instructions")
    stop_strings: list[str] = Field(default_factory=list,
                                    description="Strings at which the agent's turn ends")
    task_id: str | None = None
    turn: int = 0
    outcome: str = Field(default="running",
                         description="running, success, failure or error")
    terminated: bool = False
    truncated: bool = False
    infra_error: bool = Field(default=False, description="The environment, not the agent, "
                                                         "failed: drop or mask the episode")
    info: dict[str, Any] = Field(default_factory=dict, description="The step's skyhub info")


class SkyhubState(State):
    """The episode so far (OpenEnv's `state`)."""

    env_id: str = ""
    task_id: str | None = None
    turn: int = 0
    outcome: str = "running"
    done: bool = False
    infra_error: bool = False
    total_reward: float = 0.0


class SkyhubEnvironment(Environment[SkyhubAction, SkyhubObservation, SkyhubState]):
    """OpenEnv's server-side `Environment` over one skyhub env, made from `env_id` and the
    operator's `env_kwargs`. One per OpenEnv session, never shared, so sessions run at once."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, **env_kwargs: Any) -> None:
        super().__init__()
        self.env_id = env_id
        self.env = skyhub.make(env_id, **env_kwargs)
        self.stop_strings = list(getattr(self.env, "stop_strings", ()) or ())
        self._state = SkyhubState(env_id=env_id)
        self._started = False

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task_id: str | None = None, **kwargs: Any) -> SkyhubObservation:
        if kwargs:
            raise UsageError(f"reset() takes seed, task_id and episode_id; "
                             f"{', '.join(sorted(kwargs))} are not accepted (env kwargs are "
                             "set by whoever starts the server)")
        self._state = SkyhubState(env_id=self.env_id, episode_id=episode_id)
        self._started = True
        options = {"task_id": str(task_id)} if task_id is not None else None
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except (InfraError, SandboxUnavailable) as e:
            return self._observe("", 0.0, False, True,
                                 infra_info(self.env, f"{type(e).__name__}: {e}"))
        self._state.task_id = info.get("task_id")
        return SkyhubObservation(
            text=obs, messages=first_messages(self.env, obs),
            system_prompt=getattr(self.env, "system_prompt", None),
            stop_strings=self.stop_strings, task_id=info.get("task_id"),
            turn=int(info.get("turn", 0)), outcome=str(info.get("outcome", "running")),
            infra_error=bool(info.get("infra_error")), info=jsonable(info),
            done=False, reward=None)

    def step(self, action: SkyhubAction, timeout_s: float | None = None,
             **kwargs: Any) -> SkyhubObservation:
        if not self._started:
            raise UsageError("step() before reset(): reset the session first")
        if self._state.done:
            raise UsageError("step() after the episode ended: reset() to play another")
        return self._observe(*guarded_step(self.env, action.text))

    def _observe(self, obs: str, reward: float, terminated: bool, truncated: bool,
                 info: dict[str, Any]) -> SkyhubObservation:
        infra = bool(info.get("infra_error"))
        reward = 0.0 if infra else reward
        done = infra or terminated or truncated
        s = self._state
        s.step_count += 1
        s.task_id = info.get("task_id", s.task_id)
        s.turn = int(info.get("turn", s.turn) or 0)
        s.outcome = "error" if infra else str(info.get("outcome", "running"))
        s.done, s.infra_error = done, infra
        s.total_reward += reward
        return SkyhubObservation(
            text=obs, messages=[{"role": "user", "content": obs}] if obs and not done else [],
            stop_strings=self.stop_strings, task_id=s.task_id, turn=s.turn, outcome=s.outcome,
            terminated=terminated and not infra, truncated=truncated or infra,
            infra_error=infra, info=jsonable(info), done=done, reward=reward)

    @property
    def state(self) -> SkyhubState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        spec = skyhub.spec(self.env_id)
        return EnvironmentMetadata(name=self.env_id, description=spec.description or self.env_id,
                                   version=skyhub.__version__)

    def close(self) -> None:
        self.env.close()


class _QuietDisconnect:
    """ASGI middleware: a WebSocket client that has gone is the end of its session, not a
    server error. (OpenEnv 0.3 closes the socket once more after the client's `close`
    message; with starlette 1.x that raises `WebSocketDisconnect`, which uvicorn would log
    as "Exception in ASGI application" for every session.)"""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


def create_app(env_id: str, *, max_concurrent_envs: int = 8, **env_kwargs: Any) -> Any:
    """OpenEnv's FastAPI app serving `env_id` (made with `env_kwargs`), at most
    `max_concurrent_envs` WebSocket sessions at once."""
    skyhub.spec(env_id)  # EnvNotFound now, with suggestions, not at the first session
    factory = functools.partial(SkyhubEnvironment, env_id, **env_kwargs)
    app = _openenv_create_app(factory, SkyhubAction, SkyhubObservation, env_name=env_id,
                              max_concurrent_envs=max_concurrent_envs)
    app.add_middleware(_QuietDisconnect)
    return app


def _check_host(host: str, public: bool) -> None:
    from skyhub.remote.guard import is_loopback

    if not public and not is_loopback(host):
        raise UsageError(f"refusing to serve on {host!r}: OpenEnv's protocol has no "
                         "authentication and envs run agent-chosen actions. Bind to "
                         "127.0.0.1, or pass public=True behind a proxy that authenticates")


def serve(env_id: str, *, host: str = "127.0.0.1", port: int = 8000, public: bool = False,
          max_concurrent_envs: int = 8, log_level: str = "info", **env_kwargs: Any) -> None:
    """Serve `env_id` over OpenEnv's protocol until interrupted."""
    import uvicorn

    _check_host(host, public)
    uvicorn.run(create_app(env_id, max_concurrent_envs=max_concurrent_envs, **env_kwargs),
                host=host, port=port, log_level=log_level)


def _server_thread_base() -> type:
    from skyhub.remote.http_server import UvicornThread

    return UvicornThread


class OpenEnvServer(_server_thread_base()):  # type: ignore[misc]
    """The OpenEnv server in a background thread of this process (tests, notebooks):
    `port=0` picks a free port; `url` is its base URL once started."""

    def __init__(self, env_id: str, *, host: str = "127.0.0.1", port: int = 0,
                 public: bool = False, max_concurrent_envs: int = 8,
                 **env_kwargs: Any) -> None:
        import uvicorn

        _check_host(host, public)
        self.app = create_app(env_id, max_concurrent_envs=max_concurrent_envs, **env_kwargs)
        config = uvicorn.Config(self.app, host=host, port=port, log_level="warning")
        super().__init__(uvicorn.Server(config), host, port, "skyhub-openenv")

    @property
    def url(self) -> str:
        return self.http_url


class SkyhubEnvClient(EnvClient[SkyhubAction, SkyhubObservation, SkyhubState]):
    """OpenEnv's WebSocket client for a served skyhub env (async; `.sync()` for a blocking
    one). `step` takes a `SkyhubAction` or the agent's text."""

    def _step_payload(self, action: SkyhubAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            action = SkyhubAction(text=action)
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SkyhubObservation]:
        obs = SkyhubObservation(**payload.get("observation", {}),
                                reward=payload.get("reward"), done=bool(payload.get("done")))
        return StepResult(observation=obs, reward=payload.get("reward"), done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> SkyhubState:
        return SkyhubState(**payload)
