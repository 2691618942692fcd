"""Episodes as chat conversations, and the one record of an episode.

An episode is: the env's system prompt, the first observation (reset), then turns of
(agent action, env observation). `to_messages` turns that into the `[{"role", "content"}]`
list that `tokenizer.apply_chat_template` and OpenAI-compatible APIs take, and `Episode`
records one while it runs: `skyhub play`, the eval harness and the trainer's rollout (both
through `skyhub.vector.driver`) build it, and `Episode.to_record` writes the line of
episodes.jsonl that `skyhub view`, `skyhub eval compare` and `skyhub replay` read (the format:
docs/eval.md). A trainer's token record (`skyhub.trainer.rollout.Trajectory`) holds its
episode; what only a trainer knows about an episode (its policy version, its token counts)
is set on the episode's fields here, so one writer serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


def to_messages(system_prompt: str | None, first_observation: str,
                turns: Sequence[tuple[Any, str]] = (), *,
                observation_role: str = "user",
                tool_results: Sequence[Sequence[dict[str, Any]] | None] = ()
                ) -> list[Message]:
    """Chat messages for an episode.

    `turns` are (action, observation) pairs. Observations become `observation_role` messages
    (`user` by default since most chat templates know no `tool`/`environment` role without a
    tool call id). The empty observation that ends an episode adds no message.

    A structured action (tool calls: `skyhub.tools.as_tool_turn`) becomes an assistant message
    with `tool_calls`, and its turn's `tool_results` (the step's `info["tool_results"]`, the
    same position in `tool_results`) become `role: "tool"` messages instead of the observation.
    """
    from skyhub.tools import ToolResult, as_tool_turn

    messages: list[Message] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": first_observation})
    for k, (action, observation) in enumerate(turns):
        turn = as_tool_turn(action)
        results = tool_results[k] if k < len(tool_results) else None
        if turn is not None and turn[1]:
            content, calls = turn
            messages.append({"role": "assistant", "content": content,
                             "tool_calls": [c.to_openai() for c in calls]})
            messages += [ToolResult.message(r) for r in results or ()]
            continue
        messages.append({"role": "assistant", "content": action if turn is None else turn[0]})
        if observation:
            messages.append({"role": observation_role, "content": observation})
    return messages


def infra_error_info(error: str, task_id: str | None, turn: int, tb: str = "") -> dict[str, Any]:
    """The info of a step that ended an episode because the environment (or the agent's
    model server), not the agent, failed: the one builder, so `VectorEnv`, the adapters and
    the eval harness report the same keys."""
    return {"task_id": task_id, "turn": turn, "outcome": "error", "infra_error": True,
            "error": error, "traceback": tb}


@dataclass
class Episode:
    """A recorded episode: the transcript, and what a run records about it (`to_record`).

    The transcript is the first eight fields (`add` appends a turn). The rest say where the
    episode sits in its run (`index`, `seed`: its env's reset seed, `task_index`, `attempt`),
    what the agent cost (token counts, `latency_s`, `agent_s`: an evaluation's), which
    policy played it (`policy_version`: a trainer's), when the driver rather than the env
    ended it, why (`cut`: e.g. the rollout's turn cap, or an episode that outgrew the
    context), which makes its outcome a failure, and what its task was for a person reading
    it (`question`, `expected`: the env's `task_record()`, which the episode driver asks for
    after the reset; never part of `messages()`, so no agent reads them)."""

    task_id: str | None
    system_prompt: str | None
    first_observation: str
    actions: list[Any] = field(default_factory=list)  # text, or tool calls (skyhub.tools)
    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    index: int = 0
    seed: int = 0
    task_index: int = 0  # the position of its task in the run's sample (a trainer: its group)
    attempt: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    agent_s: float | None = None
    error_source: str | None = None  # "env" or "agent" for an infra error (default: "env")
    policy_version: int | None = None
    cut: str | None = None
    question: str | None = None  # the task text to show (`TextEnv.display_question`)
    expected: dict[str, Any] | None = None  # what a correct answer is (`expected_answer`)

    @classmethod
    def start(cls, env: Any, observation: str, info: dict[str, Any]) -> Episode:
        return cls(task_id=info.get("task_id"), system_prompt=getattr(env, "system_prompt", None),
                   first_observation=observation)

    def add(self, action: str, observation: str, reward: float, terminated: bool,
            truncated: bool, info: dict[str, Any]) -> None:
        self.actions.append(action)
        self.observations.append(observation)
        self.rewards.append(float(reward))
        self.infos.append(info)
        self.terminated, self.truncated = bool(terminated), bool(truncated)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def final_info(self) -> dict[str, Any]:
        return self.infos[-1] if self.infos else {}

    @property
    def outcome(self) -> str:
        if self.cut is not None and not self.infra_error:
            return "failure"
        return str(self.final_info.get("outcome", "running"))

    @property
    def infra_error(self) -> bool:
        return any(bool(i.get("infra_error")) for i in self.infos)

    def messages(self, *, observation_role: str = "user") -> list[Message]:
        return to_messages(self.system_prompt, self.first_observation,
                           list(zip(self.actions, self.observations, strict=True)),
                           observation_role=observation_role,
                           tool_results=[i.get("tool_results") for i in self.infos])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record (infos are kept as given; keep them JSON-friendly)."""
        return {
            "task_id": self.task_id,
            "reward": self.total_reward,
            "outcome": self.outcome,
            "infra_error": self.infra_error,
            "turns": len(self.actions),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "reward_breakdown": self.final_info.get("reward_breakdown", {}),
            "messages": self.messages(),
            "rewards": self.rewards,
        }

    def count(self, reply: Any) -> str:
        """Add an agent reply's token counts (a `skyhub.eval.agents.Reply`, or a plain
        string that has none); returns its text."""
        if isinstance(reply, str):
            return reply
        if reply.prompt_tokens is not None:
            self.prompt_tokens = (self.prompt_tokens or 0) + reply.prompt_tokens
        if reply.completion_tokens is not None:
            self.completion_tokens = (self.completion_tokens or 0) + reply.completion_tokens
        return str(reply.text)

    def to_record(self, env_id: str, agent: str,
                  env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """One line of episodes.jsonl (with the env's kwargs, so that the line alone is
        enough for `skyhub replay`). `question` (str or null) and `expected` (an object or
        null: null when the env has no answer to show or keeps it secret) are always there;
        `latency_s`/`agent_s` and `policy_version` are written when set (an evaluation's, a
        trainer's)."""
        error = self.final_info.get("error") if self.infra_error else None
        record = {"index": self.index, "seed": self.seed, "task_index": self.task_index,
                  "attempt": self.attempt, "env_id": env_id, "env_kwargs": env_kwargs or {},
                  "agent": agent, **self.to_dict(),
                  "error": None if error is None else str(error),
                  "error_source": (self.error_source or "env") if self.infra_error else None,
                  "meta": self.meta, "final_info": self.final_info,
                  "question": self.question, "expected": self.expected,
                  "tokens": {"prompt": self.prompt_tokens,
                             "completion": self.completion_tokens}}
        if self.latency_s is not None:
            record["latency_s"] = round(self.latency_s, 4)
            record["agent_s"] = round(self.agent_s or 0.0, 4)
        if self.policy_version is not None:
            record["policy_version"] = self.policy_version
        return record
