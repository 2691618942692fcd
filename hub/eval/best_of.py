"""Best-of-N from a mid-episode state (`skyhub eval run ENV --best-of N --branch-at T`):
each task's episode is played by the agent for T turns, forked into N branches (`env.fork`:
the original and N-1 copies in its exact state), and each branch is played to its end by
the same agent. A task succeeds when its best branch does.

What it measures: how much a policy gains from several tries at the rest of an episode once
a shared start is fixed (the value of the state at turn T under the policy, estimated by N
samples), the quantity tree search and branching rollouts act on. The first branch is the
original episode, so `single` (the share of tasks whose first branch succeeded) is what one
episode per task would have scored, in the same run.

Episodes that end before turn T are not forked: every branch is that episode. Episodes run one
task after another; an agent marked `parallel` plays up to `concurrency` tasks at a time, each
in its own env. Text actions only (a tools run is `skyhub eval run` without `--best-of`).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.chat import Episode
from skyhub.errors import InfraError, UsageError
from skyhub.eval.agent import Agent


@dataclass
class TaskResult:
    """One task's branches: each one's total reward and outcome; `forked_at` is the turn of
    the fork (None where the episode ended before turn T)."""

    task_id: str | None
    forked_at: int | None
    rewards: list[float]
    outcomes: list[str]
    infra_error: bool = False
    error: str = ""

    @property
    def best(self) -> float:
        return max(self.rewards) if self.rewards else 0.0

    @property
    def success(self) -> bool:
        return "success" in self.outcomes

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "forked_at": self.forked_at, "rewards": self.rewards,
                "outcomes": self.outcomes, "best": self.best, "success": self.success,
                "infra_error": self.infra_error, "error": self.error or None}


@dataclass
class BestOfSummary:
    env_id: str
    agent: str
    n: int
    branch_at: int
    tasks: list[TaskResult] = field(default_factory=list)

    def _scored(self) -> list[TaskResult]:
        return [t for t in self.tasks if not t.infra_error]

    @property
    def best_success(self) -> float:
        """The share of tasks whose best branch succeeded (infra errors left out)."""
        scored = self._scored()
        return sum(t.success for t in scored) / len(scored) if scored else 0.0

    @property
    def single_success(self) -> float:
        """The share of tasks whose first branch (the original episode) succeeded."""
        scored = self._scored()
        return sum(t.outcomes[0] == "success" for t in scored) / len(scored) if scored else 0.0

    @property
    def mean_best_reward(self) -> float:
        scored = self._scored()
        return sum(t.best for t in scored) / len(scored) if scored else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "agent": self.agent, "best_of": self.n,
                "branch_at": self.branch_at, "tasks": len(self.tasks),
                "infra_errors": sum(t.infra_error for t in self.tasks),
                "best_success": self.best_success, "single_success": self.single_success,
                "mean_best_reward": self.mean_best_reward,
                "results": [t.to_dict() for t in self.tasks]}


class _Reference:
    """The `reference` an agent's `act` gets, for one env (as the harness's `_EnvCalls`)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self) -> str | None:
        return self.env.reference_action()

    def sample_action(self, seed: int) -> str:
        return self.env.sample_action(seed)


def _play(env: Any, ep: Episode, agent: Agent, turns: int) -> None:
    """Up to `turns` agent turns of `ep` on `env` (fewer if it ends)."""
    from skyhub.eval.harness import as_action

    for _ in range(turns):
        if ep.done:
            return
        action = as_action(ep, agent.act(ep.messages(), _Reference(env)))
        ep.add(action, *env.step(action))


def play_task(make_env: Callable[[], Any], agent: Agent, task_id: str | None, *, seed: int,
              n: int,
              branch_at: int, max_steps: int = 100) -> tuple[TaskResult, list[Episode]]:
    """One task's best-of-n: its branches' result and episodes (the original first)."""
    env = make_env()
    envs = [env]
    try:
        obs, info = env.reset(seed=seed, options=None if task_id is None else
                              {"task_id": task_id})
        ep = Episode.start(env, obs, info)
        ep.seed = seed
        _play(env, ep, agent, branch_at)
        episodes = [ep]
        forked_at = None
        if not ep.done:
            forked_at = env.turn
            children = env.fork(n - 1) if n > 1 else []
            envs += children
            episodes += [copy.deepcopy(ep) for _ in children]
        for e, branch in zip(envs, episodes, strict=True):
            _play(e, branch, agent, max_steps)
        if forked_at is None:  # it ended before the fork: every branch is this episode
            episodes = [ep, *(copy.deepcopy(ep) for _ in range(n - 1))]
        result = TaskResult(task_id, forked_at, [b.total_reward for b in episodes],
                            [b.outcome if b.done else "failure" for b in episodes],
                            infra_error=any(b.infra_error for b in episodes))
        return result, episodes
    finally:
        for e in envs:
            e.close()


def run(env_id: str, agent: Agent, *, n: int, branch_at: int, tasks: int | None = None,
        seed: int = 0, env_kwargs: dict[str, Any] | None = None, concurrency: int = 8,
        out: str | Path | None = None, max_steps: int = 100,
        on_plan: Callable[[int], None] | None = None,
        on_task: Callable[[TaskResult], None] | None = None) -> BestOfSummary:
    """Best-of-`n` at turn `branch_at` on `tasks` tasks of `env_id` (default: all; a seeded
    sample spread as `skyhub eval` spreads it); `on_plan` gets the number of tasks, `on_task`
    each task's result as it ends. With `out`, writes `best_of.json` there and
    each branch's episode to `episodes.jsonl` (`branch` and `forked_at` in its `meta`)."""
    from skyhub import make
    from skyhub.eval.harness import task_order

    if n < 2 or branch_at < 0:
        raise UsageError(f"--best-of needs N >= 2 and --branch-at T >= 0 (got N={n}, "
                         f"T={branch_at})")
    env_kwargs = dict(env_kwargs or {})
    make_env = functools.partial(make, env_id, **env_kwargs)
    probe = make_env()  # a bad kwarg or missing data fails here, before anything runs
    try:
        order, _ = task_order(env_id, probe.tasks, tasks, seed, probe.slice_key)
        # (an env that generates its tasks: each episode's seed picks one)
        task_ids = [probe.tasks[k].id if len(probe.tasks) else None for k in order]
        agent.use_stop_strings(tuple(probe.stop_strings))
    finally:
        probe.close()
    if on_plan is not None:
        on_plan(len(task_ids))
    summary = BestOfSummary(env_id, agent.name, n, branch_at)
    records: list[dict[str, Any]] = []

    def one(k: int) -> tuple[TaskResult, list[Episode]]:
        try:
            return play_task(make_env, agent, task_ids[k], seed=seed + k, n=n,
                             branch_at=branch_at, max_steps=max_steps)
        except (InfraError, OSError) as e:
            return TaskResult(task_ids[k], None, [], [], infra_error=True,
                              error=f"{type(e).__name__}: {e}"), []

    workers = concurrency if agent.parallel else 1
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for k, (result, episodes) in enumerate(pool.map(one, range(len(task_ids)))):
            summary.tasks.append(result)
            for b, ep in enumerate(episodes):
                ep.index, ep.task_index = k * n + b, k
                ep.meta.update(branch=b, forked_at=result.forked_at)
                records.append(ep.to_record(env_id, agent.name, env_kwargs))
            if on_task is not None:
                on_task(result)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "best_of.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
        with open(out / "episodes.jsonl", "w") as f:
            for r in records:
                f.write(json.dumps(r, default=str) + "\n")
    return summary


__all__ = ["BestOfSummary", "TaskResult", "play_task", "run"]
