"""Rollout through a harness (`rollout.harness`): each episode is played by an agent loop of
`skyhub.harness` (builtin, terminus, mini-swe-agent, a command) against a `skyhub gateway` in
front of the trainer's engine, and trained from what the gateway recorded.

The gateway runs in this process (a loopback thread, `skyhub.gateway.start`) over the
engine (`EngineBackend`: the tokenizer's chat template, the model family's tool parser). Each
episode gets its own keyed session; when the harness is done, the session's segments become
the episode's tokens (`skyhub.trainer.stepwise.from_segments`): the ids the engine sampled,
their logprobs and policy versions, never a re-tokenization of the agent's text. The env
gives the reward, as in `Rollout`.

Harnesses act on env objects directly (a sandbox, a tmux pane), so the envs are made here from
the VectorEnv's env factories (`env_fns`), one per episode in flight, kept across steps and
closed in `close()`. Episodes run on a thread each, up to `rollout.max_in_flight` at once.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skyhub.errors import UsageError
from skyhub.trainer.config import RolloutConfig
from skyhub.trainer.rollout import Rollout, Trajectory, plan_episodes
from skyhub.trainer.stepwise import from_segments
from skyhub.trainer.token_layout import ChatFormat
from skyhub.trainer.turn_credit import attribute


def make_rollout(venv: Any, engine: Any, chat: ChatFormat, cfg: RolloutConfig) -> Any:
    """The rollout `cfg` asks for: the built-in loop (`Rollout`), or a harness's
    (`HarnessRollout`) when `rollout.harness` is set."""
    if cfg.harness is None:
        if cfg.stepwise:
            raise UsageError("rollout.stepwise=true trains a harness episode's segments: set "
                             "rollout.harness (e.g. builtin) too")
        if cfg.branch_at is not None:
            from skyhub.trainer.tree_rollout import TreeRollout

            return TreeRollout(venv, engine, chat, cfg)
        return Rollout(venv, engine, chat, cfg)
    if cfg.branch_at is not None:
        raise UsageError("rollout.branch_at (tree rollouts) forks episodes the built-in loop "
                         "plays: it does not combine with rollout.harness")
    return HarnessRollout(venv, engine, chat, cfg)


class HarnessRollout:
    """Plays groups of episodes with `rollout.harness` (see the module doc); `run`, `stats`
    and `close` as `Rollout`'s."""

    def __init__(self, venv: Any, engine: Any, chat: ChatFormat, cfg: RolloutConfig) -> None:
        from skyhub.gateway import Gateway, start
        from skyhub.harness import load_harness
        from skyhub.trainer.gateway_backend import EngineBackend

        if cfg.chat_layout != "user-turns":
            raise UsageError("rollout.harness needs rollout.chat_layout=user-turns: a "
                             "harness's messages are rendered by the chat template")
        if not hasattr(venv, "env_fns"):
            raise UsageError("rollout.harness needs a VectorEnv made from env factories "
                             "(skyhub.make_vec): harnesses act on env objects")
        self.venv, self.engine, self.chat, self.cfg = venv, engine, chat, cfg
        kwargs = {"max_tokens": cfg.max_tokens_per_turn, "temperature": cfg.temperature,
                  **cfg.harness_kwargs} if cfg.harness == "builtin" else dict(cfg.harness_kwargs)
        self.harness = load_harness(cfg.harness, **kwargs)
        self.gateway = Gateway(EngineBackend(engine, chat.tokenizer, model="policy",
                                             tool_parser=cfg.tool_parser or "auto",
                                             max_tokens=cfg.max_tokens_per_turn))
        self.server: Any = start(self.gateway)
        self.envs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._made: list[Any] = []
        self.stats: dict[str, float] = {}

    def close(self) -> None:
        for env in self._made:
            env.close()
        self._made = []
        self.harness.close()
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _env(self) -> Any:
        try:
            return self.envs.get_nowait()
        except queue.Empty:
            fns = self.venv.env_fns
            env = fns[len(self._made) % len(fns)]()
            self._made.append(env)
            self.harness.check(env)
            return env

    def run(self, task_ids: Sequence[str], group_size: int, *, seed: int = 0
            ) -> list[Trajectory]:
        from skyhub.harness import Endpoint, run_episode

        episodes = plan_episodes(task_ids, group_size, seed)
        t0 = time.perf_counter()
        requests: list[int] = []

        def play(t: Trajectory) -> None:
            env = self._env()
            session = self.gateway.open_session()
            try:
                endpoint = Endpoint(f"{self.server.http_url}/s/{session.id}/v1", session.key,
                                    "policy")
                marks: list[int] = []  # per env step: the request whose reply it played
                ep = run_episode(self.harness, env, endpoint, seed=t.seed,
                                 options={"task_id": t.task_id},
                                 on_step=lambda: marks.append(len(session.records) - 1))
                ep.task_index = t.group
                t.episode, t.turns = ep, len(ep.actions)
                t.ended(ep)
                from_segments(t, session.segments(), stepwise=self.cfg.stepwise)
                t.turn_rewards = attribute(ep.rewards, marks, len(session.records))
                requests.append(len(session.records))
                if session.records:
                    t.finish_reason = session.records[-1].finish_reason
            finally:
                self.gateway.sessions.close(session.id)
                self.envs.put(env)

        width = min(len(episodes), self.cfg.max_in_flight or len(episodes)) or 1
        with ThreadPoolExecutor(width, thread_name_prefix="skyhub-harness") as pool:
            for f in [pool.submit(play, t) for t in episodes]:
                f.result()  # a harness's bug ends the rollout
        self.stats = {"rollout_s": time.perf_counter() - t0, "peak_in_flight": float(width),
                      "requests": float(sum(requests)),
                      "envs": float(len(self._made))}
        return episodes


__all__ = ["HarnessRollout", "make_rollout"]
