"""Step-wise training: an episode made of several token sequences trains as several samples.

A harness episode reaches the trainer as the gateway session's segments
(`skyhub.gateway.Session.segments`): requests that extend the previous prompt + completion are
merged into one sequence; a request that does not (a summary that replaces the history, a
sub-agent, a history cut short) starts a new one. With `rollout.stepwise=true` each segment is
its own sample (`Trajectory.parts`): its prompt ids, then its tokens with the loss mask 1 where
the model sampled them.

Advantages stay per episode. The group statistics (GRPO's mean and std, RLOO's leave-one-out
mean) are computed over episodes, never over samples, so an episode split into five segments
does not count five times in its group's baseline; then every sample of an episode carries the
episode's advantage (SkyRL's step-wise training does the same: each step's sample gets its
trajectory's advantage).

Per-sample weighting follows `algo.aggregation`, with samples as its sequences:
- `token-mean` (the default): every sampled token weighs the same wherever it sits, so an
  episode weighs its sampled-token count whether it trains as one sequence or as segments. A
  causal model gives a token the same logprob in a segment as in the merged sequence (its
  context is the same ids), so splitting an episode into per-request samples whose prompts are
  the whole history does not change the gradient (tests/trainer/test_stepwise.py: within
  1e-6).
- `seq-mean-token-mean`, `seq-mean-token-sum(-norm)`: each sample is one sequence, so an
  episode with k segments weighs k sequences (more context resets, more weight). Use
  `token-mean` where that is unwanted.

Estimators whose statistics are over tokens or need a value per token (`reinforce++`'s batch
whitening, `gae`) and `algo.kl_in_reward` (a per-token penalty summed into the episode's
reward) are refused with step-wise samples: `check_algo`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyhub.errors import UsageError
from skyhub.trainer.config import EPISODE_ESTIMATORS
from skyhub.trainer.rollout import Trajectory


def check_algo(algo: Any) -> None:
    """Refuse the settings step-wise samples cannot train exactly (see the module doc)."""
    if algo.advantage not in EPISODE_ESTIMATORS:
        raise UsageError(f"rollout.stepwise=true needs a per-episode advantage "
                         f"(algo.advantage one of {', '.join(EPISODE_ESTIMATORS)}), not "
                         f"{algo.advantage!r}: its statistics are over tokens of whole "
                         "sequences")
    if algo.kl_in_reward:
        raise UsageError("rollout.stepwise=true does not support algo.kl_in_reward: use the KL "
                         "term in the loss (kl_in_reward=false, kl_coef>0)")


def sample(episode: Trajectory, prompt_ids: Sequence[int], token_ids: Sequence[int],
           mask: Sequence[int], logprobs: Sequence[float], versions: Sequence[int],
           spans: Sequence[tuple[int, int, int]] = ()) -> Trajectory:
    """One sample of `episode`: `prompt_ids` (not trained), then `token_ids` with their mask,
    engine logprobs and policy versions; the episode's group, reward and flags. `spans`:
    (request, start, end) of each request's completion within `token_ids`."""
    t = Trajectory(group=episode.group, task_id=episode.task_id, seed=episode.seed,
                   reward=episode.reward, outcome=episode.outcome,
                   infra_error=episode.infra_error, truncated=episode.truncated)
    t.add(list(prompt_ids), agent=False)
    t.prompt_len = len(prompt_ids)
    t.token_ids += list(token_ids)
    t.loss_mask += [int(m) for m in mask]
    t.logprobs += [float(x) if m else 0.0 for x, m in zip(logprobs, mask, strict=True)]
    t.versions += [int(v) if m else -1 for v, m in zip(versions, mask, strict=True)]
    t.spans = [(k, a + len(prompt_ids), b + len(prompt_ids)) for k, a, b in spans]
    return t


def from_segments(episode: Trajectory, segments: Sequence[Any], *, stepwise: bool) -> None:
    """Fill `episode`'s tokens from a gateway session's `segments`: its own record is the last
    segment (what it trains on without step-wise), and with `stepwise` its `parts` are every
    segment as a sample."""
    samples = [sample(episode, s.prompt_ids, s.token_ids, s.mask, s.logprobs, s.versions,
                      [(k, a, b) for k, (a, b) in zip(s.records, s.spans, strict=True)])
               for s in segments]
    episode.token_ids, episode.loss_mask, episode.logprobs, episode.versions = [], [], [], []
    episode.prompt_len, episode.spans = 0, []
    if samples:
        last = samples[-1]
        episode.token_ids, episode.loss_mask = last.token_ids, last.loss_mask
        episode.logprobs, episode.versions = last.logprobs, last.versions
        episode.prompt_len, episode.spans = last.prompt_len, last.spans
    episode.parts = samples if stepwise and len(samples) > 1 else []
    episode.info = {**episode.info, "segments": len(samples)}


def per_turn(episode: Trajectory) -> list[Trajectory]:
    """`episode` as one sample per agent turn, each with the whole history before it as its
    prompt: what an agent that re-renders its history every request (and a gateway that does
    not merge) would give. For tests and for comparing step-wise against merged training."""
    out, k, n = [], 0, len(episode.token_ids)
    while k < n:
        if not episode.loss_mask[k]:
            k += 1
            continue
        end = k
        while end < n and episode.loss_mask[end]:
            end += 1
        out.append(sample(episode, episode.token_ids[:k], episode.token_ids[k:end],
                          episode.loss_mask[k:end], episode.logprobs[k:end],
                          episode.versions[k:end]))
        k = end
    return out


def expand(episodes: Sequence[Trajectory], adv: dict[int, Any]
           ) -> tuple[list[Trajectory], dict[int, Any]]:
    """The samples to train on (each episode's `parts`, or the episode itself) and each
    sample's advantage: its episode's (`adv` is keyed by episode id)."""
    samples: list[Trajectory] = []
    out: dict[int, Any] = {}
    for e in episodes:
        for s in e.parts or [e]:
            samples.append(s)
            out[id(s)] = adv[id(e)]
    return samples, out


__all__ = ["EPISODE_ESTIMATORS", "check_algo", "expand", "from_segments", "per_turn", "sample"]
