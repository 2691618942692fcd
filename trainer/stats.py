"""What a training step logs beside the learner's own statistics: the episodes' (reward,
success, turns, lengths, staleness, groups without signal: `frac_reward_zero_std`), the
learner's statistics less those that cannot move in this run, and tokens per second of
generation and training.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from skyhub.trainer.config import TrainConfig
from skyhub.trainer.learner import learner_algo


def episode_metrics(episodes: list[Any], step: int) -> dict[str, float]:
    # a tree rollout's prefix samples are parts of their children's episodes, not episodes
    episodes = [e for e in episodes if getattr(e, "tree", "") != "prefix"]
    ok = [e for e in episodes if not e.infra_error]
    n = max(len(ok), 1)
    rewards = [e.reward for e in ok]
    mean = sum(rewards) / n
    versions = [e.min_version for e in ok if e.min_version >= 0]
    groups: dict[int, list[float]] = {}
    for e in ok:
        groups.setdefault(e.group, []).append(e.reward)
    lengths = [e.agent_tokens for e in ok] or [0]
    return {"reward_mean": mean,
            "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / n),
            "success_rate": sum(e.outcome == "success" for e in ok) / n,
            "episodes": float(len(episodes)),
            "infra_errors": float(len(episodes) - len(ok)),
            "truncated_frac": sum(e.truncated for e in ok) / n,
            "turns_mean": sum(e.turns for e in ok) / n,
            "response_tokens_mean": sum(e.agent_tokens for e in ok) / n,
            "response_tokens_min": float(min(lengths)),
            "response_tokens_max": float(max(lengths)),
            "frac_reward_zero_std": frac_reward_zero_std(groups.values()),
            "seq_tokens_mean": sum(len(e.token_ids) for e in ok) / n,
            "staleness_mean": (sum(step - v for v in versions) / len(versions)
                               if versions else 0.0),
            "staleness_max": float(max((step - v for v in versions), default=0))}


#: A group's reward std at most this is zero (torch.isclose's default absolute tolerance, as
#: TRL's check): 0.1 + 0.2 and 0.3 are one reward, not a signal.
ZERO_STD = 1e-8


def frac_reward_zero_std(groups: Iterable[Sequence[float]]) -> float:
    """The fraction of groups whose rewards all agree (population std <= `ZERO_STD`): groups
    without signal for GRPO-style estimators, whose advantages are all zero. TRL's GRPO
    trainer logs the same figure as `frac_reward_zero_std` (per sample; with groups of one
    size, the same number). A group is the samples of one prompt that did not fail on
    infrastructure; 0.0 when there is no group."""
    stds = []
    for rewards in groups:
        if rewards:
            mean = sum(rewards) / len(rewards)
            stds.append(math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)))
    return sum(s <= ZERO_STD for s in stds) / len(stds) if stds else 0.0


#: Learner statistics that are exactly 1 (ratio, TIS weight) or 0 (clip fraction, approx
#: KL) unless the policy that is trained differs from the one that sampled.
OFF_POLICY_KEYS = ("ratio_mean", "clip_frac", "approx_kl", "dual_clip_frac")
TIS_KEYS = ("tis_weight_mean", "tis_capped_frac")


def informative(metrics: dict[str, float], cfg: TrainConfig) -> dict[str, float]:
    """The learner's statistics less those that cannot differ from their on-policy value in
    this run: the ratio, clip fraction and approx KL need several epochs or mini-batches
    (the policy moves between sampling and training) or an asynchronous loop; the TIS
    weight needs TIS applied (an engine whose weights can differ: `learner_algo`)."""
    o = cfg.optim
    moves = (o.epochs > 1 or o.mini_batch_size < o.train_batch_size
             or cfg.loop.mode == "async" or cfg.rollout.engine != "hf")
    drop = set(() if moves else OFF_POLICY_KEYS)
    if learner_algo(cfg).tis_cap is None:
        drop.update(TIS_KEYS)
    return {k: v for k, v in metrics.items() if k not in drop}


def throughput(episodes: list[Any], rollout_stats: dict[str, Any], train_s: float,
               epochs: int) -> dict[str, float]:
    """Tokens per second: sampled by the engine over the rollout's wall time, and trained
    (every token of every episode the learner used, each epoch) over the learner's."""
    used = [e for e in episodes if not e.infra_error and e.agent_tokens > 0]
    gen_s = float(rollout_stats.get("rollout_s") or 0.0)
    out = {}
    if gen_s > 0:
        out["gen_tokens_per_s"] = sum(e.agent_tokens for e in episodes) / gen_s
    if train_s > 0:
        out["train_tokens_per_s"] = epochs * sum(len(e.token_ids) for e in used) / train_s
    return out


__all__ = ["OFF_POLICY_KEYS", "TIS_KEYS", "ZERO_STD", "episode_metrics", "frac_reward_zero_std",
           "informative", "throughput"]
