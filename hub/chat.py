"""Episodes as chat conversations.

An episode is: the env's system prompt, the first observation (reset), then turns of
(agent action, env observation). `to_messages` turns that into the `[{"role", "content"}]`
list that `tokenizer.apply_chat_template` and OpenAI-compatible APIs take, and `Episode`
records one while it runs (the `play` and `eval` commands and the trainer's rollout use it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, str]


def to_messages(system_prompt: str | None, first_observation: str,
                turns: Sequence[tuple[str, str]] = (), *,
                observation_role: str = "user") -> list[Message]:
    """Chat messages for an episode.

    `turns` are (action, observation) pairs. Observations become `observation_role` messages
    (`user` by default since most chat templates know no `tool`/`environment` role without a
    tool call id). The empty observation that ends an episode adds no message.
    """
    messages: list[Message] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": first_observation})
    for action, observation in turns:
        messages.append({"role": "assistant", "content": action})
        if observation:
            messages.append({"role": observation_role, "content": observation})
    return messages


@dataclass
class Episode:
    """A recorded episode: what an evaluation writes and what a trainer's rollout builds on."""

    task_id: str | None
    system_prompt: str | None
    first_observation: str
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False

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
        return str(self.final_info.get("outcome", "running"))

    @property
    def infra_error(self) -> bool:
        return any(bool(i.get("infra_error")) for i in self.infos)

    def messages(self, *, observation_role: str = "user") -> list[Message]:
        return to_messages(self.system_prompt, self.first_observation,
                           list(zip(self.actions, self.observations, strict=True)),
                           observation_role=observation_role)

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
