"""Rollout: multi-turn episodes over a VectorEnv, recorded token-in/token-out.

An episode's token sequence is the prompt's tokens, then for each turn the tokens the engine
sampled (loss mask 1, with the engine's logprob and the policy version of each) and the env's
observation (loss mask 0). The learner trains on exactly this sequence; nothing is
re-tokenized from decoded text.

Where the observation goes is `RolloutConfig.chat_layout` (see `skyhub.trainer.chat`):
`user-turns` makes it the next user turn; `assistant-message` (SkyRL-SQL's layout, skyrl-train's
`use_conversation_multi_turn=false`) appends its own tokens to the agent's message, so the
episode is one assistant message. In that layout, as skyrl-train's generator does, an EOS the
engine sampled before an observation is dropped (the message goes on), and when the episode
ends after a turn that was not cut at the token limit, an EOS closes the message. That EOS is
trained on (loss mask 1) as skyrl-train trains it; the engine did not sample it, so its
engine logprob is recorded as 0.0 (probability 1), as skyrl-train records it.

Envs are driven with `send`/`recv`: whichever episodes are ready are batched into one
`generate` call while the others' env steps are still running, so a slow episode never stalls
the batch. An episode whose env reports `infra_error` is kept but flagged: the learner masks
it out instead of rewarding it 0.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError
from skyhub.trainer.chat import LAYOUTS, ChatFormat
from skyhub.trainer.config import RolloutConfig  # one definition: a recipe's `rollout:`
from skyhub.trainer.engines import Engine, SamplingParams


@dataclass
class Trajectory:
    """One episode's token record (ids, loss mask, logprobs, reward), ready for the learner.

    Not `skyhub.Episode`, which is an episode's chat transcript."""

    group: int  # episodes with the same group index share a prompt (GRPO's group)
    task_id: str
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1: sampled by the agent
    logprobs: list[float] = field(default_factory=list)  # engine logprob; 0.0 where mask 0
    versions: list[int] = field(default_factory=list)  # policy version; -1 where mask 0
    prompt_len: int = 0
    reward: float = 0.0
    outcome: str = "running"
    infra_error: bool = False
    truncated: bool = False  # out of turns or context, not ended by the env
    turns: int = 0
    seed: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = ""  # the engine's, for the last turn ("stop" or "length")

    def add(self, ids: Sequence[int], *, agent: bool, logprobs: Sequence[float] = (),
            versions: Sequence[int] = ()) -> None:
        self.token_ids += ids
        self.loss_mask += [int(agent)] * len(ids)
        self.logprobs += list(logprobs) if agent else [0.0] * len(ids)
        self.versions += list(versions) if agent else [-1] * len(ids)

    def drop_last(self) -> None:
        """Remove the last token (an EOS the agent's message does not end with after all)."""
        for seq in (self.token_ids, self.loss_mask, self.logprobs, self.versions):
            seq.pop()

    @property
    def agent_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def min_version(self) -> int:
        return min((v for v in self.versions if v >= 0), default=-1)


class Rollout:
    """Plays groups of episodes on a VectorEnv (created with `autoreset_mode="disabled"`)."""

    def __init__(self, venv: Any, engine: Engine, chat: ChatFormat,
                 cfg: RolloutConfig) -> None:
        self.venv, self.engine, self.chat, self.cfg = venv, engine, chat, cfg
        self.stats: dict[str, float] = {}
        if cfg.chat_layout not in LAYOUTS:
            raise UsageError(f"chat_layout must be one of {', '.join(LAYOUTS)}, not "
                             f"{cfg.chat_layout!r}")
        self.one_message = cfg.chat_layout == "assistant-message"
        if self.one_message:
            chat.check_inline()

    def run(self, task_ids: Sequence[str], group_size: int, *, seed: int = 0
            ) -> list[Trajectory]:
        """`group_size` episodes of each task, in group order (`group_size` contiguous
        episodes per task, as the advantage estimators expect). Episode k's sampling seeds
        derive from `seed` and k, so a run is reproducible whatever order envs finish in."""
        todo = deque(Trajectory(group=g, task_id=t, seed=seed * 1_000_003 + g * group_size + j)
                     for g, t in enumerate(task_ids) for j in range(group_size))
        episodes = list(todo)
        free = deque(range(self.venv.num_envs))
        live: dict[int, Trajectory] = {}  # env id -> its episode
        waiting: list[int] = []  # env ids whose episode needs the agent's next turn
        in_flight = 0
        t0, gen_s, env_wait_s = time.perf_counter(), 0.0, 0.0
        while todo or live:
            while free and todo:  # start episodes on free envs
                i, ep = free.popleft(), todo.popleft()
                live[i] = ep
                self.venv.async_reset([i], options=[{"task_id": ep.task_id}])
                in_flight += 1
            if waiting:
                t = time.perf_counter()
                self._act(waiting, live)
                gen_s += time.perf_counter() - t
                in_flight += len(waiting)
                waiting = []
            if in_flight:
                t = time.perf_counter()
                ids, obs, rewards, terms, truncs, infos = self.venv.recv(min_ready=1)
                env_wait_s += time.perf_counter() - t
                in_flight -= len(ids)
                for i, o, r, te, tr, info in zip(ids, obs, rewards, terms, truncs, infos,
                                                 strict=True):
                    ep = live[int(i)]
                    if self._observe(int(i), ep, o, float(r), bool(te), bool(tr), info):
                        del live[int(i)]
                        free.append(int(i))
                    else:
                        waiting.append(int(i))
        self.stats = {"rollout_s": time.perf_counter() - t0, "generate_s": gen_s,
                      "env_wait_s": env_wait_s}
        return episodes

    def _observe(self, i: int, ep: Trajectory, obs: str, reward: float, terminated: bool,
                 truncated: bool, info: dict[str, Any]) -> bool:
        """Record an env result; True when the episode is over."""
        if info.get("infra_error"):
            ep.infra_error, ep.outcome, ep.info = True, "error", info
            return True
        if not ep.token_ids:  # the reset: the prompt
            system = self.venv.get_attr("system_prompt", env_ids=[i])[0]
            ep.add(self.chat.prompt_ids(obs, system), agent=False)
            ep.prompt_len = len(ep.token_ids)
            return False
        ep.reward += reward
        if terminated or truncated:
            ep.outcome, ep.truncated, ep.info = info.get("outcome", "failure"), truncated, info
            self._close_message(ep)
            return True
        if ep.turns >= self.cfg.max_turns:
            ep.outcome, ep.truncated, ep.info = "failure", True, info
            self._close_message(ep)
            return True
        last = ep.token_ids[-1]
        if self.one_message:
            eos = self.chat.tokenizer.eos_token_id
            if last == eos and ep.loss_mask[-1]:  # the message goes on: the EOS is dropped
                ep.drop_last()
            ep.add(self.chat.inline_ids(obs), agent=False)
        else:
            ep.add(self.chat.observation_ids(obs, last in self.chat.stop_token_ids),
                   agent=False)
        if len(ep.token_ids) >= self.cfg.max_input_tokens:
            ep.outcome, ep.truncated, ep.info = "failure", True, {**info, "overlong": True}
            return True
        return False

    def _close_message(self, ep: Trajectory) -> None:
        """`assistant-message`: end the episode's one message with EOS, as skyrl-train does
        unless the last turn was cut at the token limit (then the message stays open)."""
        eos = self.chat.tokenizer.eos_token_id
        if (not self.one_message or eos is None or ep.finish_reason == "length"
                or ep.token_ids[-1] == eos):
            return
        ep.add([eos], agent=True, logprobs=[0.0], versions=[ep.versions[-1]])

    def _act(self, env_ids: list[int], live: dict[int, Trajectory]) -> None:
        """One generate call for every waiting episode, then send the actions."""
        eps = [live[i] for i in env_ids]
        # An episode near max_input_tokens gets a shorter turn; batch those on their own.
        budget = [max(1, min(self.cfg.max_tokens_per_turn,
                             self.cfg.max_input_tokens - len(e.token_ids))) for e in eps]
        texts: list[str] = [""] * len(eps)
        for limit in sorted(set(budget)):
            idx = [k for k, b in enumerate(budget) if b == limit]
            params = SamplingParams(max_tokens=limit, temperature=self.cfg.temperature,
                                    top_p=self.cfg.top_p, stop=tuple(self.cfg.stop),
                                    stop_token_ids=self.chat.stop_token_ids)
            batch = [eps[k] for k in idx]
            outs = self.engine.generate([e.token_ids for e in batch], params,
                                        seeds=[e.seed * 64 + e.turns for e in batch])
            for k, e, c in zip(idx, batch, outs, strict=True):
                e.add(c.token_ids, agent=True, logprobs=c.logprobs, versions=c.versions)
                e.turns += 1
                e.finish_reason = c.finish_reason
                texts[k] = c.text
        self.venv.send(texts, env_ids)


#: The old name of `Trajectory` (a token record, not a `skyhub.Episode` transcript), kept so old
#: imports work.
Episode = Trajectory
