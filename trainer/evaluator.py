"""Greedy evaluation during training (`loop.eval_every`, `loop.eval_before_train`): one
episode per task of `env.eval_id` (or the training env), the tasks `loop.eval_tasks` picks,
in batches of `loop.eval_batch_size`, through the training run's own rollout engine.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import skyhub
from skyhub.task import spread_sample
from skyhub.trainer.config import TrainConfig
from skyhub.trainer.harness_rollout import make_rollout
from skyhub.trainer.stats import episode_metrics


class Evaluator:
    """Greedy evaluation on `env.eval_id` (or the training env), one episode per task."""

    def __init__(self, cfg: TrainConfig, chat: Any, engine: Any, rollout_cfg: Any) -> None:
        self.cfg, self.engine = cfg, engine
        self.env_id = cfg.env.eval_id or cfg.env.id
        self.kwargs = cfg.env.eval_kwargs if cfg.env.eval_id else cfg.env.kwargs
        self.rollout_cfg = replace(rollout_cfg, temperature=0.0)
        self.chat = chat
        self._rollout: Any = None
        self._tasks: list[str] = []
        self._episodes: list[Any] = []

    def describe(self) -> str:
        """`toy-recall n_words=6`: what the evaluations ran on, for the summary and logs."""
        return " ".join([self.env_id, *(f"{k}={v}" for k, v in self.kwargs.items())])

    def enabled(self) -> bool:
        return self.cfg.loop.eval_every > 0 and self.cfg.loop.eval_tasks != 0

    def due(self, step: int, total: int) -> bool:
        return self.enabled() and (step % self.cfg.loop.eval_every == 0 or step == total)

    def run(self) -> dict[str, float]:
        if self._rollout is None:
            self._tasks = self.task_ids()
            n = len(self._tasks)  # one env per eval episode, up to rollout.max_in_flight
            venv = skyhub.make_vec(self.env_id, max(1, min(n, self.rollout_cfg.max_in_flight
                                                           or n)),
                                   autoreset_mode="disabled", **self.kwargs)
            self._rollout = make_rollout(venv, self.engine, self.chat, self.rollout_cfg)
        size = self.cfg.loop.eval_batch_size or len(self._tasks)
        episodes = self._episodes = [  # batch after batch, each finished before the next
            e for k in range(0, len(self._tasks), size)
            for e in self._rollout.run(self._tasks[k:k + size], 1, seed=k // size)]
        m = episode_metrics(episodes, 0)
        return {"eval_reward_mean": m["reward_mean"], "eval_success_rate": m["success_rate"],
                "eval_infra_errors": m["infra_errors"], "eval_turns_mean": m["turns_mean"],
                "eval_env": self.env_id}

    def task_ids(self) -> list[str]:
        """The eval env's tasks that every evaluation plays (`loop.eval_tasks`)."""
        with skyhub.make(self.env_id, **self.kwargs) as env:
            return eval_task_ids(env.unwrapped.tasks, self.cfg.loop.eval_tasks,
                                 self.cfg.loop.seed)

    def records(self, limit: int = 3) -> list[dict[str, Any]]:
        """The last evaluation's first episodes as eval records (TensorBoard's text tab)."""
        return [e.to_record(k, env_id=self.env_id, env_kwargs=self.kwargs, agent="policy")
                for k, e in enumerate(self._episodes[:limit])]

    def close(self) -> None:
        if self._rollout is not None:
            self._rollout.close()
            self._rollout.venv.close()


def eval_task_ids(tasks: Any, n: int | None, seed: int) -> list[str]:
    """The tasks an evaluation plays: all of them (`n` None or >= their number), else `n`
    drawn with `seed` and spread over the tasks' databases (`skyhub.task.spread_sample`, the
    sample `skyhub eval --n` takes too), in the task set's order."""
    if n is None or n >= len(tasks):
        return [t.id for t in tasks]
    return [tasks[i].id for i in sorted(spread_sample(tasks, n, seed, "db_id"))]


__all__ = ["Evaluator", "eval_task_ids"]
