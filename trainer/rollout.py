"""Rollout: multi-turn episodes over a VectorEnv, recorded token-in/token-out.

An episode's token sequence is the prompt's tokens, then for each turn the tokens the engine
sampled (loss mask 1, with the engine's logprob and the policy version of each) and the env's
observation (loss mask 0). The learner trains on exactly this sequence; nothing is
re-tokenized from decoded text.

Where the observation goes is `RolloutConfig.chat_layout` (see `skyhub.trainer.token_layout`):
`user-turns` makes it the next user turn; `assistant-message` (SkyRL-SQL's layout, skyrl-train's
`use_conversation_multi_turn=false`) appends its own tokens to the agent's message, so the
episode is one assistant message. In that layout, as skyrl-train's generator does, an EOS the
engine sampled before an observation is dropped (the message goes on), and when the episode
ends after a turn that was not cut at the token limit, an EOS closes the message. That EOS is
trained on (loss mask 1) as skyrl-train trains it; the engine did not sample it, so its
engine logprob is recorded as 0.0 (probability 1), as skyrl-train records it.

Scheduling is per episode: each episode alternates generate -> env step on its own. When its
env result arrives, its next turn is submitted to the engine at once (`Engine.submit`, one
request); when its completion arrives, its action is sent to its env at once (`send`), so no
episode waits for another's generation or env step. One thread drives it all: it waits in the
VectorEnv's `recv`, which an engine's finished request ends early (`wake()`), or on the
completions alone while no env is busy.

*In flight* means started (it holds an env) and not ended: it is either waiting for its
completion or for its env. Up to `max_in_flight` episodes (None: every episode of the call)
are in flight. Each holds an env for its whole life (an env's state is its episode's), leased
from the VectorEnv and free again when the episode ends. So all of a step's episodes in flight
need as many envs: when the VectorEnv given has fewer, the rollout makes its own, wider one
from the same env factories (`env_fns`, cycled), keeps it for later calls and closes it in
`close()`; the one given is then left idle. Set `max_in_flight` to at most `num_envs` to keep
to the given envs (sandboxed envs: containers cost more than idle ones).

With `rollout.tool_parser` set, episodes are in the model's own tool-call format
(`skyhub.trainer.tool_layout`): the prompt is rendered with the env's `tools`, the sampled text
is parsed into tool calls that the env plays, and its results follow as the template's `tool`
messages; the agent's ids are still kept as sampled.

An episode whose env reports `infra_error` is kept but flagged: the learner masks it out
instead of rewarding it 0.

The turn budget is the env's (`max_turns`: the env ends its episodes). `rollout.max_turns_cap`
is only a safety limit for envs without one; it never cuts below the env's budget
(`turn_limit`), and `norm_len` takes the loss normaliser's length from the env's budget.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from skyhub.chat import Episode
from skyhub.errors import UsageError
from skyhub.trainer.config import RolloutConfig  # one definition: a recipe's `rollout:`
from skyhub.trainer.inference import Completion, Engine, SamplingParams, submitter
from skyhub.trainer.token_layout import LAYOUTS, ChatFormat
from skyhub.trainer.tool_layout import Conversation, ToolChat, tool_parser
from skyhub.vector.driver import EpisodeDriver, Post

log = logging.getLogger(__name__)


@dataclass
class Trajectory:
    """One episode's token record (ids, loss mask, logprobs, reward), ready for the learner:
    the token part of its `episode` (`skyhub.Episode`, the transcript and the record that
    `to_record` writes). The learner reads only this part; `reward`, `outcome`,
    `infra_error`, `truncated` and `info` are the episode's, copied when it ends."""

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
    episode: Episode | None = None  # the episode as text (what the env saw and said)
    # rollout.tool_parser: the conversation as the chat template renders it (tool_layout)
    conversation: Conversation | None = None
    # step-wise samples (skyhub.trainer.stepwise): one per segment of a harness episode, each
    # with the episode's advantage; empty: the episode is one sample (its own tokens)
    parts: list[Trajectory] = field(default_factory=list, repr=False)
    # harness episodes (skyhub.trainer.turn_credit): the env reward each gateway request led
    # to, and where each request's completion lies in this sample: (request, start, end)
    turn_rewards: list[float] = field(default_factory=list)
    spans: list[tuple[int, int, int]] = field(default_factory=list)
    slot: int | None = None  # the env slot it last played on
    # tree rollouts (skyhub.trainer.tree_rollout): "prefix" (a root's turns before its fork,
    # rewarded with its children's mean) or "child"; a child's own sampling seed
    tree: str = ""
    sample_seed: int | None = None

    def to_record(self, index: int, *, env_id: str, env_kwargs: dict[str, Any],
                  agent: str) -> dict[str, Any]:
        """This episode as a line of `skyhub eval`'s episodes.jsonl (docs/eval.md), so that
        `skyhub view` shows it and `skyhub replay` plays it again (`seed` is its env's reset
        seed): its episode's record, with what only the trainer knows."""
        ep = self.episode or Episode(self.task_id, None, "")
        ep.index, ep.seed, ep.task_index = index, self.seed, self.group
        ep.prompt_tokens, ep.completion_tokens = self.prompt_len, self.agent_tokens
        ep.policy_version = self.min_version
        if self.tree:
            ep.meta["tree"] = self.tree
        return ep.to_record(env_id, agent, env_kwargs)

    def ended(self, ep: Episode) -> None:
        """Copy what the learner reads from the episode that just ended."""
        self.reward, self.outcome, self.info = ep.total_reward, ep.outcome, ep.final_info
        self.infra_error, self.truncated = ep.infra_error, ep.truncated

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


def plan_episodes(task_ids: Sequence[str], group_size: int, seed: int) -> list[Trajectory]:
    """`group_size` episodes of each task, in group order; episode k's seed (its env's reset
    seed and its sampling seeds) derives from `seed` and k only."""
    return [Trajectory(group=g, task_id=t, seed=seed * 1_000_003 + g * group_size + j)
            for g, t in enumerate(task_ids) for j in range(group_size)]


def env_max_turns(venv: Any, env_id: int = 0) -> int | None:
    """The turn budget (`max_turns`) of env `env_id` of `venv`; None when it declares none."""
    value = venv.get_attr("max_turns", env_ids=[env_id])[0]
    return value if isinstance(value, int) and value >= 1 else None


def turn_limit(cap: int | None, env_turns: int | None, env_id: str = "the env") -> int | None:
    """Turns after which the rollout cuts an episode (None: never; the env's budget ends it).

    The env's `max_turns` is the budget; `cap` (`rollout.max_turns_cap`) only bounds envs
    without one. A cap below the env's budget would cut episodes the env says go on ("(2
    turns left)"), so it is raised to the budget, with a warning."""
    if cap is None:
        return None
    if env_turns is not None and cap < env_turns:
        log.warning("rollout.max_turns_cap=%d is below %s's turn budget (max_turns=%d): the "
                    "rollout plays the env's %d turns (the cap is only a safety limit for envs "
                    "without a budget; set the env's max_turns to change the budget)", cap,
                    env_id, env_turns, env_turns)
        return env_turns
    return cap


def norm_len(cfg: RolloutConfig, env_turns: int | None) -> int:
    """The generation budget of one episode, the loss normaliser's length
    (`seq-mean-token-sum-norm`): the env's turn budget (else the safety cap) times
    `max_tokens_per_turn`; with neither, `max_input_tokens` (the most an episode holds)."""
    turns = env_turns if env_turns is not None else cfg.max_turns_cap
    return cfg.max_input_tokens if turns is None else turns * cfg.max_tokens_per_turn


class Rollout:
    """Plays groups of episodes on a VectorEnv (created with `autoreset_mode="disabled"`).

    `stats` after `run`: `rollout_s` (wall), `generate_s` (wall time with a generation in
    flight), `env_wait_s` (wall time with an env reset or step in flight), `peak_in_flight`
    (episodes at once), `peak_requests` (generation requests at once), `requests`, `envs`
    (the envs the episodes were leased from)."""

    #: whether `run` plays tree rollouts (`skyhub.trainer.tree_rollout.TreeRollout`)
    branches = False

    def __init__(self, venv: Any, engine: Engine, chat: ChatFormat,
                 cfg: RolloutConfig) -> None:
        self.venv, self.engine, self.chat, self.cfg = venv, engine, chat, cfg
        self.stats: dict[str, float] = {}
        if cfg.chat_layout not in LAYOUTS:
            raise UsageError(f"chat_layout must be one of {', '.join(LAYOUTS)}, not "
                             f"{cfg.chat_layout!r}")
        if cfg.max_in_flight is not None and cfg.max_in_flight < 1:
            raise UsageError(f"rollout.max_in_flight must be >= 1 (or null for every episode "
                             f"of a step), not {cfg.max_in_flight}")
        self.one_message = cfg.chat_layout == "assistant-message"
        if self.one_message:
            chat.check_inline()
        #: the model's own tool-call format (None: the env's text protocol)
        self.tools: ToolChat | None = None
        if cfg.tool_parser is not None:
            if self.one_message:
                raise UsageError("rollout.tool_parser needs rollout.chat_layout=user-turns: "
                                 "tool results are messages of their own, not text inside "
                                 "the agent's message")
            self.tools = ToolChat(chat, tool_parser(cfg.tool_parser, chat.tokenizer))
        #: turns after which an episode is cut (None: only the env's budget ends it)
        self.turn_limit = turn_limit(cfg.max_turns_cap, env_max_turns(venv))
        #: a tree rollout's first phase: episodes are cut ("branch") after this many turns,
        #: their envs kept for the fork (skyhub.trainer.tree_rollout)
        self.branch_cut: int | None = None
        if cfg.branch_at is not None and not self.branches:
            raise UsageError("rollout.branch_at asks for tree rollouts: make the rollout with "
                             "skyhub.trainer.harness_rollout.make_rollout (or "
                             "skyhub.trainer.tree_rollout.TreeRollout)")
        self._own: Any = None  # a wider VectorEnv this rollout made (see the module's doc)
        self._own_closer: Any = None

    def close(self) -> None:
        """Close the envs this rollout made itself (never the VectorEnv it was given)."""
        if self._own_closer is not None:
            self._own_closer()
            self._own = self._own_closer = None

    def run(self, task_ids: Sequence[str], group_size: int, *, seed: int = 0
            ) -> list[Trajectory]:
        """`group_size` episodes of each task, in group order (`group_size` contiguous
        episodes per task, as the advantage estimators expect). Episode k's sampling seeds
        derive from `seed` and k, so a run is reproducible whatever order envs finish in."""
        episodes = plan_episodes(task_ids, group_size, seed)
        if not episodes:
            self.stats = {"rollout_s": 0.0, "generate_s": 0.0, "env_wait_s": 0.0}
            return episodes
        target = min(len(episodes), self.cfg.max_in_flight or len(episodes))
        venv = self._envs(target)
        for t in episodes:
            # the episode's seed is its env's reset seed too (so `skyhub replay` can play a
            # saved episode again exactly)
            t.episode = Episode(t.task_id, None, "", seed=t.seed, task_index=t.group)
        self.stats = self.play(venv, episodes, in_flight=target)
        return episodes

    def play(self, venv: Any, episodes: list[Trajectory], *, in_flight: int,
             running: dict[int, Trajectory] | None = None) -> dict[str, float]:
        """Drive `episodes` (new: each reset on a leased env) and `running` (slot ->
        episode already under way there, e.g. forked) to their ends; returns the stats."""
        running = running or {}
        actor = _Play(self, [*episodes, *running.values()], venv)
        actor.slot.update(running)
        driver = EpisodeDriver(venv, actor, in_flight=in_flight)
        driver.run([t.episode for t in episodes if t.episode is not None],
                   running={s: t.episode for s, t in running.items() if t.episode is not None})
        st = driver.stats
        return {"rollout_s": st["rollout_s"], "generate_s": st["act_s"],
                "env_wait_s": st["env_wait_s"], "peak_in_flight": st["peak_in_flight"],
                "peak_requests": st["peak_requests"], "requests": st["requests"],
                "envs": float(venv.num_envs)}

    def _envs(self, target: int) -> Any:
        """The VectorEnv to lease `target` envs from: the one given, or a wider one made
        from its factories (kept for later calls)."""
        if target <= self.venv.num_envs or not hasattr(self.venv, "env_fns"):
            return self.venv
        if self._own is not None and self._own.num_envs >= target:
            return self._own
        from skyhub.vector import VectorEnv

        self.close()
        fns = list(self.venv.env_fns)
        executor = getattr(getattr(self.venv, "_executor", None), "name", "threads")
        log.info("rollout: %d episodes in flight need %d envs, the VectorEnv has %d: making "
                 "%d from its env factories (rollout.max_in_flight caps this)", target, target,
                 self.venv.num_envs, target)
        self._own = VectorEnv([fns[k % len(fns)] for k in range(target)], executor=executor,
                              autoreset_mode="disabled",
                              step_timeout=getattr(self.venv, "step_timeout", None))
        self._own_closer = weakref.finalize(self, self._own.close)
        return self._own

    def _params(self, ep: Trajectory) -> SamplingParams:
        # An episode near max_input_tokens gets a shorter turn.
        limit = max(1, min(self.cfg.max_tokens_per_turn,
                           self.cfg.max_input_tokens - len(ep.token_ids)))
        return SamplingParams(max_tokens=limit, temperature=self.cfg.temperature,
                              top_p=self.cfg.top_p, stop=tuple(self.cfg.stop),
                              stop_token_ids=self.chat.stop_token_ids)

    @staticmethod
    def _record(ep: Trajectory, c: Completion) -> None:
        ep.add(c.token_ids, agent=True, logprobs=c.logprobs, versions=c.versions)
        ep.turns += 1
        ep.finish_reason = c.finish_reason

    def _observe(self, ep: Trajectory, obs: str, info: dict[str, Any] | None = None
                 ) -> str | None:
        """An env result that did not end the episode: the observation's tokens, or why the
        episode is cut instead (out of turns: the safety cap; out of context)."""
        if self.turn_limit is not None and ep.turns >= self.turn_limit:
            return "max_turns_cap"
        last = ep.token_ids[-1]
        if ep.conversation is not None and self.tools is not None:
            replies = self.tools.replies(ep.conversation, obs, (info or {}).get("tool_results"))
            ep.add(self.tools.reply_ids(ep.conversation, replies,
                                        last in self.chat.stop_token_ids), agent=False)
        elif self.one_message:
            eos = self.chat.tokenizer.eos_token_id
            if last == eos and ep.loss_mask[-1]:  # the message goes on: the EOS is dropped
                ep.drop_last()
            ep.add(self.chat.inline_ids(obs), agent=False)
        else:
            ep.add(self.chat.observation_ids(obs, last in self.chat.stop_token_ids),
                   agent=False)
        if len(ep.token_ids) >= self.cfg.max_input_tokens:
            return "overlong"
        if self.branch_cut is not None and ep.turns >= self.branch_cut:
            return "branch"
        return None

    def _close_message(self, ep: Trajectory) -> None:
        """`assistant-message`: end the episode's one message with EOS, as skyrl-train does
        unless the last turn was cut at the token limit (then the message stays open)."""
        eos = self.chat.tokenizer.eos_token_id
        if (not self.one_message or eos is None or ep.finish_reason == "length"
                or ep.token_ids[-1] == eos):
            return
        ep.add([eos], agent=True, logprobs=[0.0], versions=[ep.versions[-1]])


class _Play:
    """The rollout as the episode driver's actor: the engine acts (one request per turn,
    finished in the engine's threads), and each episode's tokens are recorded beside its
    transcript."""

    def __init__(self, rollout: Rollout, episodes: list[Trajectory], venv: Any) -> None:
        self.rollout, self.submit, self.venv = rollout, submitter(rollout.engine), venv
        self.of = {id(t.episode): t for t in episodes}
        self.slot: dict[int, Trajectory] = {}

    def leased(self, slot: int, ep: Episode) -> None:
        self.slot[slot] = self.of[id(ep)]

    def started(self, slot: int, ep: Episode) -> bool:
        t, tools = self.slot[slot], self.rollout.tools
        if tools is None:
            t.add(self.rollout.chat.prompt_ids(ep.first_observation, ep.system_prompt),
                  agent=False)
        else:  # the env's tools, read after its reset (a task may change them)
            schemas = self.venv.get_attr("tools", env_ids=[slot])[0]
            t.conversation, ids = tools.start(ep.first_observation, ep.system_prompt, schemas)
            t.add(ids, agent=False)
        t.prompt_len = len(t.token_ids)
        return False

    def request(self, slot: int, ep: Episode, post: Post) -> None:
        t = self.slot[slot]
        seed = t.seed if t.sample_seed is None else t.sample_seed
        future = self.submit(list(t.token_ids), self.rollout._params(t), seed * 64 + t.turns)
        future.add_done_callback(lambda f: post(f, 0.0))  # an engine's thread

    def action(self, slot: int, ep: Episode, result: Future[Completion], seconds: float
               ) -> Any:
        completion = result.result()  # an engine error ends the rollout
        t, tools = self.slot[slot], self.rollout.tools
        self.rollout._record(t, completion)
        if tools is None or t.conversation is None:
            return completion.text
        ids = completion.token_ids  # the model's text as it wrote it, less its end of turn
        if ids and ids[-1] in self.rollout.chat.stop_token_ids:
            ids = ids[:-1]
        raw = self.rollout.chat.tokenizer.decode(ids, skip_special_tokens=False)
        return tools.turn(t.conversation, completion.text, raw).action

    def observed(self, slot: int, ep: Episode) -> bool:
        cut = self.rollout._observe(self.slot[slot], ep.observations[-1], ep.infos[-1])
        if cut is None:
            return False
        ep.cut, ep.truncated = cut, True
        if cut == "overlong":
            ep.infos[-1] = {**ep.infos[-1], "overlong": True}
        return True

    def finished(self, slot: int, ep: Episode) -> None:
        t = self.slot.pop(slot)
        t.slot = slot  # where its env is (a tree rollout forks it)
        if not ep.infra_error and ep.cut not in ("overlong", "branch"):
            self.rollout._close_message(t)
        t.ended(ep)
