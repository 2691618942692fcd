"""The harness contract: what an agent loop gets (an env already reset, a model endpoint)
and what it gives back (the episode, recorded as it plays).

A harness reaches the model only through an OpenAI-compatible `Endpoint` (in skyhub, a
session of `skyhub gateway`, so every token the model produced is recorded there) and acts
only through `Play.step`, which steps the env and records the turn in the episode. The env
computes the reward, whatever the harness believes about its own success. `run_episode` is
the one place that resets the env, runs a harness and turns a harness's failure into an
`infra_error` (a model server that stopped answering) or a cut episode (a harness that
returned before the env ended the episode).
"""

from __future__ import annotations

import abc
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from skyhub.chat import Episode, infra_error_info

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """Where a harness's model answers: an OpenAI-compatible base URL (ending in `/v1`), the
    API key to send, and the model id to ask for."""

    base_url: str
    api_key: str
    model: str

    def client(self, **kwargs: Any) -> Any:
        """The official `openai` client for this endpoint (imported here: it is optional)."""
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def environ(self) -> dict[str, str]:
        """The variables an OpenAI-client program reads to reach this endpoint (what
        `command` harnesses and installed agents get)."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key,
                "OPENAI_API_BASE": self.base_url, "OPENAI_MODEL": self.model}


class Step(NamedTuple):
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Play:
    """One episode as a harness plays it: the env (reset by `run_episode`), its first
    observation, and `step`, which plays an action in the env and records it in `episode`
    (then calls `on_step`, if given: the trainer notes there which model request the step's
    reward belongs to)."""

    def __init__(self, env: Any, episode: Episode,
                 on_step: Callable[[], None] | None = None) -> None:
        self.env, self.episode, self.on_step = env, episode, on_step

    @property
    def observation(self) -> str:
        """The task as the env states it (its first observation)."""
        return self.episode.first_observation

    @property
    def system_prompt(self) -> str | None:
        return self.episode.system_prompt

    @property
    def done(self) -> bool:
        return self.episode.done

    def step(self, action: Any) -> Step:
        """Play `action` (the env's text protocol, a `ToolCall` or a list of them) and record
        the turn. Stepping an episode that has ended is a harness bug: `UsageError`."""
        if self.episode.done:
            from skyhub.errors import UsageError

            raise UsageError("the episode has ended: a harness must stop stepping once "
                             "`play.done` is true")
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:  # the env's infrastructure: the episode ends, not the run
            from skyhub.errors import InfraError

            self.episode.add(action, "", 0.0, False, True, infra_error_info(
                f"env failed: {type(exc).__name__}: {exc}", self.episode.task_id,
                len(self.episode.actions) + 1, traceback.format_exc()))
            self.episode.error_source = "env"
            raise InfraError(f"the env failed ({type(exc).__name__}: {exc}); the episode "
                             "ended as an infra error") from exc
        self.episode.add(action, obs, reward, terminated, truncated, info)
        if self.on_step is not None:
            self.on_step()
        return Step(obs, float(reward), bool(terminated), bool(truncated), info)


class Harness(abc.ABC):
    """An agent loop. Subclasses set `name` and implement `play`; `families` (None: any)
    lists the env families whose envs it can act in, checked by `check`."""

    name: ClassVar[str] = ""
    families: ClassVar[tuple[str, ...] | None] = None

    def check(self, env: Any) -> None:
        """Raise `UsageError` (saying which harness fits) when this harness cannot play
        `env`."""
        if self.families is None:
            return
        module = type(getattr(env, "unwrapped", env)).__module__
        if not any(f".envs.{f}." in module for f in self.families):
            from skyhub.errors import UsageError

            raise UsageError(f"harness {self.name!r} plays envs of the families "
                             f"{', '.join(self.families)}, not {type(env).__name__}; use "
                             "--harness builtin for any env")

    @abc.abstractmethod
    def play(self, play: Play, endpoint: Endpoint) -> None:
        """Play one episode to its end (or give up: `run_episode` then cuts it)."""

    def corpus(self) -> list[str]:
        """The fixed text this harness sends the model (its prompts), for training the tiny
        model's tokenizer (`model.name_or_path: tiny`) so that its prompts encode as words,
        not characters. Default: none."""
        return []

    def close(self) -> None:  # noqa: B027 - optional: most harnesses hold nothing
        """Free what the harness holds across episodes (default: nothing)."""


def run_episode(harness: Harness, env: Any, endpoint: Endpoint, *, seed: int | None = None,
                options: dict[str, Any] | None = None,
                on_step: Callable[[], None] | None = None) -> Episode:
    """Reset `env` (with `seed` and `options`, e.g. `{"task_id": ...}`), let `harness` play it
    against `endpoint`, and return the recorded episode. The model server failing (an
    `openai` connection or server error, `AgentError`) ends the episode as an infra error with
    `error_source="agent"`, the env failing in `play.step` with `error_source="env"`; a request
    the model's server refuses (HTTP 400: e.g. a context
    overflow) cuts the episode (`cut="model_rejected"`, a failure: the agent's doing), as does a
    harness that returns before the env ended the episode (`cut="harness"`). Anything else a
    harness raises is a bug and propagates. `on_step` is called after each step is
    recorded."""
    obs, info = env.reset(seed=seed, options=options)
    episode = Episode.start(env, obs, info)
    if seed is not None:
        episode.seed = seed
    play = Play(env, episode, on_step)
    try:
        harness.play(play, endpoint)
    except Exception as exc:
        if episode.infra_error:  # the env failed under `play.step` (recorded there)
            return episode
        if _rejected(exc):  # e.g. the conversation outgrew the model's context: the agent's
            log.info("harness %s: the model refused a request: %s", harness.name, exc)
            if not episode.done:
                episode.truncated, episode.cut = True, "model_rejected"
            episode.meta["model_rejected"] = str(exc)[:500]
            return episode
        if not _model_failure(exc):
            raise
        log.warning("harness %s: the model endpoint failed: %s", harness.name, exc)
        episode.add("", "", 0.0, False, True,
                    infra_error_info(f"model endpoint: {exc}", episode.task_id,
                                     len(episode.actions), traceback.format_exc()))
        episode.error_source = "agent"
        return episode
    if not episode.done:
        episode.truncated, episode.cut = True, "harness"
    return episode


def _rejected(exc: BaseException) -> bool:
    """A 400 from the model's server (the request, not the server, is at fault: a context
    overflow, a prompt the server refuses); `openai`'s error or one derived from it (litellm's
    subclasses it)."""
    try:
        import openai
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, openai.BadRequestError)


def _model_failure(exc: BaseException) -> bool:
    from skyhub.errors import AgentError

    if isinstance(exc, AgentError):
        return True
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a dependency of the harnesses
        return False
    return isinstance(exc, (openai.APIConnectionError, openai.InternalServerError,
                            openai.APITimeoutError))
