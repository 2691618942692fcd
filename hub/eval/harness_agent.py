"""`skyhub eval --harness NAME`: a harness (`skyhub.harness`) as the run's agent.

A harness plays whole episodes (it builds its own prompts, calls the model and acts in the
env), so it is not asked for one action at a time: the eval harness gives it an env of the run
and gets back the recorded episode (`HarnessAgent.play_episode`). Its model is either

- a `skyhub gateway` (`gateway=URL`): each episode opens its own session there (POST
  /sessions, with the gateway's token when it has one), so the gateway records the episode's
  exact tokens; the session's id is kept in the episode's `meta["gateway_session"]` for
  `GET /sessions/<id>`;
- any OpenAI-compatible endpoint (`base_url=`, `api_key=`), used as it is.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from skyhub.chat import Episode, Message
from skyhub.errors import AgentError, UsageError
from skyhub.eval.agent import Agent, ReferenceFn
from skyhub.harness import Endpoint, Harness, load_harness, run_episode


class HarnessAgent(Agent):
    parallel = True
    plays_episodes = True

    def __init__(self, harness: str | Harness, model: str, *, gateway: str | None = None,
                 gateway_token: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, **harness_kwargs: Any) -> None:
        self.harness = load_harness(harness, **harness_kwargs) if isinstance(harness, str) \
            else harness
        if gateway is None and base_url is None:
            raise UsageError(f"--harness {self.harness.name} needs a model endpoint: "
                             "--gateway URL (a `skyhub gateway`, which records each episode's "
                             "tokens) or --base-url URL (any OpenAI-compatible server)")
        self.model, self.gateway = model, gateway.rstrip("/") if gateway else None
        self.gateway_token = gateway_token or os.environ.get("SKYHUB_GATEWAY_TOKEN")
        self.base_url = base_url
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "none"
        self.name = f"{self.harness.name}:{model}"

    def act(self, messages: list[Message], reference: ReferenceFn) -> Any:
        raise UsageError("a harness plays whole episodes: the eval calls play_episode")

    def settings(self) -> dict[str, Any]:
        return {"harness": self.harness.name, "model": self.model,
                "endpoint": self.gateway or self.base_url}

    def sampling(self) -> str:
        return f"harness {self.harness.name}; the harness's own sampling settings"

    def endpoint(self) -> tuple[Endpoint, str | None]:
        """The endpoint for one episode, and its gateway session id (None without one)."""
        if self.gateway is None:
            return Endpoint(str(self.base_url), self.api_key, self.model), None
        headers = {"Content-Type": "application/json"}
        if self.gateway_token:
            headers["Authorization"] = f"Bearer {self.gateway_token}"
        req = urllib.request.Request(f"{self.gateway}/sessions", data=b"{}", headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                s = json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                raise UsageError(f"the gateway {self.gateway} refused to open a session "
                                 f"(HTTP {e.code}): pass its token with --gateway-token or "
                                 "SKYHUB_GATEWAY_TOKEN") from None
            raise AgentError(f"the gateway {self.gateway} failed to open a session: "
                             f"HTTP {e.code}") from e
        except OSError as e:
            raise AgentError(f"the gateway {self.gateway} is unreachable: {e}") from e
        return Endpoint(f"{self.gateway}/s/{s['id']}/v1", s["key"], self.model), s["id"]

    def play_episode(self, env: Any, *, seed: int, options: dict[str, Any] | None) -> Episode:
        endpoint, session = self.endpoint()
        episode = run_episode(self.harness, env, endpoint, seed=seed, options=options)
        if session is not None:
            episode.meta["gateway_session"] = session
        return episode

    def close(self) -> None:
        self.harness.close()


__all__ = ["HarnessAgent"]
