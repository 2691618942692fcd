"""Turn-level credit for harness episodes (`algo.turn_weight > 0`).

With one reward per episode, every sampled token of an episode carries the same advantage, so
a decision's own effect on the reward is diluted by every other decision of the episode: in an
episode of n independent decisions, one decision's correlation with the episode's reward is
about 1/sqrt(n). Long horizons (dozens of turns) then need many times more episodes to learn
at all. Where the env rewards turns as they happen (a `Play.step` reward before the end, e.g.
`terminal-relay`'s `progress_reward=True`), each model request can be credited with what
followed it:

- each env step's reward is attributed to the gateway request whose reply the step played
  (the last request before the step: `HarnessRollout` notes it at each step);
- request k of an episode gets the discounted return G_k = sum_{j >= k} gamma^(j-k) r_j over the
  episode's requests in order (`algo.turn_gamma`; summaries and other requests with no env step
  have r = 0 but still count as a request);
- its turn advantage is G_k standardised over every request of the episode's group,
  (G_k - mean) / (std + 1e-6), Bessel's std as GRPO's;
- each sampled token of request k trains on A_episode + turn_weight x A_turn(k), where
  A_episode is the estimator's (`algo.advantage`: grpo, dr_grpo or rloo).

This is the combination GiGPO uses (Feng et al., 2025, "Group-in-Group Policy Optimization
for LLM Agent Training": an episode-level group advantage plus a weighted step-level one from
discounted returns); GiGPO groups steps by identical environment states, which text envs
rarely repeat, so here a turn is compared with every turn of its group. With turn_weight 0
(the default) nothing here runs and training is exactly as before.

Tokens are weighted as `algo.aggregation` says, unchanged; a request whose reply was empty
trains nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from skyhub.trainer.rollout import Trajectory


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_k = sum_{j >= k} gamma^(j-k) rewards[j], for every k."""
    out, acc = [0.0] * len(rewards), 0.0
    for k in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[k]) + gamma * acc
        out[k] = acc
    return out


def turn_advantages(episodes: Sequence[Trajectory], gamma: float,
                    eps: float = 1e-6) -> dict[int, list[float]]:
    """Each episode's per-request turn advantage (by episode id), standardised within its
    group over all the group's requests."""
    returns = {id(e): discounted_returns(e.turn_rewards, gamma) for e in episodes}
    groups: dict[int, list[Trajectory]] = {}
    for e in episodes:
        groups.setdefault(e.group, []).append(e)
    out: dict[int, list[float]] = {}
    for members in groups.values():
        values = torch.tensor([g for e in members for g in returns[id(e)]], dtype=torch.float)
        if values.numel() < 2:
            for e in members:
                out[id(e)] = [0.0] * len(returns[id(e)])
            continue
        mean, std = values.mean(), values.std()
        for e in members:
            out[id(e)] = [float((g - mean) / (std + eps)) for g in returns[id(e)]]
    return out


def expand(episodes: Sequence[Trajectory], adv: dict[int, Tensor], *, weight: float,
           gamma: float) -> tuple[list[Trajectory], dict[int, Tensor]]:
    """The samples to train on (each episode's step-wise `parts`, or the episode itself) and
    each sample's per-token advantage (aligned with `loss_mask[1:]`, as the learner takes it):
    its episode's advantage `adv[id(episode)]`, plus `weight` x the turn advantage of the
    request each sampled token belongs to (its `spans`)."""
    turns = turn_advantages(episodes, gamma)
    samples: list[Trajectory] = []
    out: dict[int, Tensor] = {}
    for e in episodes:
        per_turn = turns[id(e)]
        for s in e.parts or [e]:
            a = torch.full((max(len(s.loss_mask) - 1, 0),), float(adv[id(e)]))
            for record, start, end in s.spans:
                if record < len(per_turn) and start >= 1:
                    a[start - 1:end - 1] += weight * per_turn[record]
            samples.append(s)
            out[id(s)] = a
    return samples, out


def attribute(step_rewards: Sequence[float], step_requests: Sequence[int],
              n_requests: int) -> list[float]:
    """Per request, the sum of the rewards of the env steps it led to: step i's reward goes to
    request `step_requests[i]` (a step before any request, -1, is credited to none)."""
    out = [0.0] * n_requests
    for reward, k in zip(step_rewards, step_requests, strict=False):
        if 0 <= k < n_requests:
            out[k] += float(reward)
    return out


__all__ = ["attribute", "discounted_returns", "expand", "turn_advantages"]
