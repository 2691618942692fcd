"""The RL maths of the trainer: advantage estimators, KL estimators, PPO policy and value losses.

Plain torch, one small function per idea, each docstring carrying its formula, in the spirit of
CleanRL and tiny-grpo. The two references are skyrl-train 0.3.1 (``utils/ppo_utils.py`` and its
worker) and OpenRLHF 0.11.2 (``models/loss.py``, ``models/utils.py`` and its experience maker);
``tests/trainer/test_reference_losses.py`` runs their own code beside ours on the same inputs.
Where they disagree we follow OpenRLHF unless said otherwise, so that numbers logged here can be
compared with numbers logged there:

* whitening (REINFORCE++, GAE) is over the batch's *tokens*, with the population variance and
  rsqrt(max(var, 1e-8)) (OpenRLHF; SkyRL's ``masked_whiten`` uses Bessel's correction and
  rsqrt(var + 1e-8), 0.5% apart on a 100-token batch);
* the KL estimate is clamped to [-10, 10] for every estimator (OpenRLHF; SkyRL clamps k3 only)
  and carries a gradient (SkyRL 0.3.1's ``compute_approx_kl`` runs under ``torch.no_grad``, so
  its KL loss adds nothing to the step);
* ``seq-mean-token-mean`` leaves sequences without a loss token out of the mean (OpenRLHF;
  SkyRL's ``sequence_mean`` counts them as 0).

Where we follow SkyRL instead, and why:

* GRPO's epsilon is 1e-6 (SkyRL) rather than OpenRLHF's 1e-9: a group whose rewards differ
  only by rounding (a spread of 2e-7) is a group without signal, and 1e-9 would blow that
  rounding up to advantages of about +-2 (1e-6 gives about +-0.2).
* ``seq-mean-token-sum-norm`` is SkyRL's ``seq_mean_token_sum_norm`` (OpenRLHF has no Dr. GRPO
  normaliser).

Where we differ from both:

* a group of one sample has GRPO / RLOO advantage 0 (SkyRL: its reward / (1 + eps) for GRPO;
  OpenRLHF: NaN), since there is nothing to compare it with;
* GAE skips masked-out tokens inside a sequence (a tool's output between two turns is not a
  step); both references walk through them with V = r = 0. On a contiguous mask, or with
  gamma = lam = 1, the results are the same.

Conventions a caller may rely on:

* Episode-level estimators take ``rewards: Tensor[n]`` (one scalar per episode) and an int
  ``group_size``: the n episodes come in contiguous groups of ``group_size`` samples of the same
  prompt (``rewards[0:k]`` is prompt 0, ``rewards[k:2k]`` prompt 1, ...), which is how a rollout
  with ``n_samples_per_prompt`` lays them out. They return ``Tensor[n]``; use
  :func:`expand_to_tokens` to put them on the token axis.
* Token-level tensors are ``[B, T]`` with a 0/1 (or bool) ``mask`` of the same shape marking the
  tokens the policy generated. Masked-out positions never contribute to a loss or a statistic,
  whatever garbage (even ``inf``) they hold.
* Every loss takes an optional ``denominator``: the whole mini-batch's normaliser
  (:func:`loss_denominator`), computed before the batch is split into micro-batches and ranks.
  With it, a micro-batch's loss is its *share* of the mini-batch's loss, and the shares of any
  split sum to the same loss and gradient (as OpenRLHF's ``batch_num_tokens`` /
  ``global_batch_size``). Without it, the tensor given is the whole batch.
* Statistics come back as detached 0-dim tensors, so logging them does not force a device sync.

Over ~400 lines, for a reason: one job, the maths of the loss, with each function's formula
and its departures from SkyRL and OpenRLHF in its docstring beside the code they describe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from skyhub.errors import UsageError

KLKind = Literal["k1", "k2", "k3"]
Aggregation = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
AGGREGATIONS: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
# Both references clamp the log-ratio to this before exp(): a token whose probability moved by
# more than e^20 since the rollout (several epochs or mini-batches) weighs e^20, not inf.
LOG_RATIO_CLAMP = 20.0

# -- masked reductions --------------------------------------------------------------------------


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set: sum(x * mask) / sum(mask).

    ``dim=None`` reduces over every element (a token-weighted mean over the batch); an int
    reduces along that axis only. A slice with no set position gives 0, not NaN, so an
    all-padding micro-batch cannot poison the gradients. Masked-out values are dropped with
    ``torch.where`` rather than multiplied by 0, so ``inf`` padding does not turn into NaN.
    """
    keep = mask.bool()
    kept = torch.where(keep, x, torch.zeros_like(x))
    if dim is None:
        return kept.sum() / keep.sum().clamp(min=1).to(kept.dtype)
    return kept.sum(dim) / keep.sum(dim).clamp(min=1).to(kept.dtype)


def masked_whiten(x: Tensor, mask: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """Normalise ``x`` over its masked positions: (x - mean) * rsqrt(max(var, eps)).

    ``var`` is the population variance (no Bessel correction) over all set positions of the
    whole batch, exactly as OpenRLHF whitens advantages for GAE / REINFORCE++. Masked-out
    positions come back as 0. A constant input (var 0) comes back as zeros, not NaN.
    """
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    keep = mask.bool()
    mean = masked_mean(x, keep)
    centered = torch.where(keep, x - mean, torch.zeros_like(x))
    var = masked_mean(centered**2, keep)
    return centered * var.clamp(min=eps).rsqrt()


# -- episode-level advantage estimators ---------------------------------------------------------


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """View ``rewards[n]`` as ``[n // group_size, group_size]``, one row per prompt."""
    if rewards.dim() != 1:
        raise UsageError(
            f"rewards must be 1-D (one scalar per episode), got shape {tuple(rewards.shape)}; "
            "flatten the batch so that each prompt's samples are contiguous"
        )
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise UsageError(
            f"{rewards.numel()} rewards do not split into groups of group_size={group_size}; "
            "pass the number of samples per prompt and keep each prompt's samples contiguous"
        )
    return rewards.reshape(-1, group_size)


def grpo_advantages(rewards: Tensor, group_size: int, eps: float = 1e-6) -> Tensor:
    """GRPO (DeepSeekMath) advantage: A_i = (r_i - mean(r_group)) / (std(r_group) + eps).

    ``std`` is ``torch.std``'s default, with Bessel's correction (divide by k-1), as both
    references use. ``eps`` is SkyRL's 1e-6, not OpenRLHF's 1e-9 (see the module docstring: a
    group with a 2e-7 spread gets about +-0.2, not +-2). A group of size 1 has no spread to
    normalise by, and its advantage is 0 (not NaN); a group whose rewards are all equal also
    gets 0.
    """
    groups = _grouped(rewards, group_size).float()
    if group_size == 1:
        return torch.zeros_like(rewards, dtype=groups.dtype)
    centered = groups - groups.mean(-1, keepdim=True)
    return (centered / (groups.std(-1, keepdim=True) + eps)).reshape(-1)


def dr_grpo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """Dr. GRPO advantage: A_i = r_i - mean(r_group), with no division by the group std.

    Liu et al. (2025, "Understanding R1-Zero-Like Training") drop the std because it up-weights
    prompts that are too easy or too hard. Pair it with the ``seq-mean-token-sum-norm``
    aggregation to also remove GRPO's length bias.
    """
    groups = _grouped(rewards, group_size).float()
    return (groups - groups.mean(-1, keepdim=True)).reshape(-1)


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """RLOO advantage: A_i = r_i - (sum(r_group) - r_i) / (k - 1), the leave-one-out baseline.

    Each sample is compared with the mean of the *other* k-1 samples of its prompt, which keeps
    the baseline independent of the sample it scores (Ahmadian et al., 2024). A group of size 1
    has no other sample, and its advantage is 0.
    """
    groups = _grouped(rewards, group_size).float()
    if group_size == 1:
        return torch.zeros_like(rewards, dtype=groups.dtype)
    baseline = (groups.sum(-1, keepdim=True) - groups) / (group_size - 1)
    return (groups - baseline).reshape(-1)


def reinforce_pp_advantages(
    rewards: Tensor,
    group_size: int | None = None,
    *,
    baseline: bool = False,
    mask: Tensor | None = None,
    eps: float = 1e-8,
) -> Tensor:
    """REINFORCE++ advantage (Hu, 2025), as OpenRLHF computes it for scalar episode rewards.

    x_i = r_i, or r_i - mean(r_group) with ``baseline=True`` (OpenRLHF's ``reinforce_baseline``,
    which needs ``group_size``); then one normalisation over the whole batch:
    A_i = (x_i - mean(x)) * rsqrt(max(var(x), eps)), population variance. That is
    (x - mean) / std for any batch with spread, and 0 for a batch without.

    OpenRLHF whitens the *token-level* returns (with gamma = 1 every generated token of episode i
    carries x_i), so the mean and variance are over tokens and long answers weigh more: pass the
    ``[n, T]`` action ``mask`` to get exactly that (the result stays one scalar per episode; an
    episode without tokens takes no part in the statistics). The learner always passes it.
    Without ``mask`` every episode counts once. SkyRL's ``reinforce++`` whitens the same token
    returns with Bessel's correction (see the module docstring). The per-token KL penalty that
    REINFORCE++ can fold into the reward is applied by the learner to the episode's scalar
    reward (``algo.kl_in_reward``), not token by token.
    """
    if rewards.dim() != 1:
        raise UsageError(
            f"rewards must be 1-D (one scalar per episode), got shape {tuple(rewards.shape)}"
        )
    x = rewards.float()
    if baseline:
        if group_size is None:
            raise UsageError("reinforce_pp_advantages(baseline=True) needs group_size=")
        x = dr_grpo_advantages(x, group_size)
    if mask is None:
        return masked_whiten(x)
    tokens = expand_to_tokens(x, mask)
    keep = mask.bool()
    mean = masked_mean(tokens, keep)
    var = masked_mean((tokens - mean) ** 2, keep)
    return (x - mean) * var.clamp(min=eps).rsqrt()


def expand_to_tokens(adv_per_seq: Tensor, mask: Tensor) -> Tensor:
    """Broadcast one advantage per sequence ``[B]`` onto its tokens ``[B, T]``; 0 where masked."""
    adv = adv_per_seq.float().unsqueeze(-1).expand(mask.shape)
    return torch.where(mask.bool(), adv, torch.zeros_like(adv))


# -- token-level advantage estimator ------------------------------------------------------------


@torch.no_grad()
def gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al., 2016) over the masked tokens.

    Walking backwards over the tokens where ``mask`` is set:
    delta_t = r_t + gamma * V_{t'} - V_t and A_t = delta_t + gamma * lam * A_{t'}, where t' is the
    next *masked-in* token (tokens masked out, such as a tool's output between two turns, are
    skipped rather than treated as steps). After the last token V = 0 and A = 0: the episode has
    ended. Returns (advantages, returns = advantages + values), both 0 where masked. Rewards on
    masked-out positions are ignored; put a turn's reward on one of its generated tokens.

    Accepts ``[T]`` or ``[B, T]`` tensors. Runs without grad: the results are targets.
    """
    squeeze = rewards.dim() == 1
    if squeeze:
        rewards, values, mask = rewards.unsqueeze(0), values.unsqueeze(0), mask.unsqueeze(0)
    keep = mask.bool()
    rewards = torch.where(keep, rewards.float(), 0.0)
    values = torch.where(keep, values.float(), 0.0)
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_adv = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        advantages[:, t] = torch.where(keep[:, t], adv_t, 0.0)
        next_value = torch.where(keep[:, t], values[:, t], next_value)
        next_adv = torch.where(keep[:, t], adv_t, next_adv)
    returns = advantages + values
    if squeeze:
        return advantages.squeeze(0), returns.squeeze(0)
    return advantages, returns


# -- KL -----------------------------------------------------------------------------------------


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: KLKind = "k3") -> Tensor:
    """Per-token estimate of KL(pi || ref) from sampled-token logprobs (Schulman, "Approximating
    KL divergence", 2020), with OpenRLHF's ``compute_approx_kl`` definitions.

    With log_ratio = logp - ref_logp (= log pi/ref at the sampled token):

    * k1 = log_ratio                               unbiased, can be negative
    * k2 = log_ratio**2 / 2                        biased, non-negative
    * k3 = exp(-log_ratio) - 1 + log_ratio         = ref/pi - 1 - log(ref/pi); unbiased, >= 0

    The *estimate* is clamped to [-10, 10] for every estimator, as OpenRLHF does (SkyRL clamps
    k3 only, so its k1 and k2 go past 10). We also clamp log_ratio itself to [-20, 20] first (as
    SkyRL's k3 does): that changes no value (every estimator is already past the ±10 clamp there)
    but keeps exp() finite, so a far-off token cannot produce inf * 0 = NaN in the backward pass.
    The gradient flows through the estimate (OpenRLHF's ``unbiased_gradient=False``).
    """
    log_ratio = (logp.float() - ref_logp.float()).clamp(-20.0, 20.0)
    if kind == "k1":
        kl = log_ratio
    elif kind == "k2":
        kl = log_ratio**2 / 2.0
    elif kind == "k3":
        kl = torch.exp(-log_ratio) - 1.0 + log_ratio
    else:
        raise UsageError(f"unknown KL estimator kind={kind!r}; use 'k1', 'k2' or 'k3'")
    return kl.clamp(-10.0, 10.0)


# -- losses -------------------------------------------------------------------------------------


def loss_denominator(
    lengths: Sequence[int] | Tensor, aggregation: Aggregation = "token-mean",
    norm_len: int | None = None,
) -> float:
    """The normaliser of ``aggregation`` for a whole mini-batch whose sequences have ``lengths``
    loss tokens each (0 for a sequence without any).

    * token-mean: the number of loss tokens;
    * seq-mean-token-mean: the number of sequences with at least one loss token;
    * seq-mean-token-sum: the number of sequences;
    * seq-mean-token-sum-norm: the number of sequences x ``norm_len``.

    Computed once, before the mini-batch is split over micro-batches and ranks, and passed as
    ``denominator=`` to every micro-batch's loss, so that the split does not change the step.
    Never below 1 (a batch without tokens has loss 0, not NaN).
    """
    n = [int(x) for x in lengths]
    if aggregation == "token-mean":
        count = sum(n)
    elif aggregation == "seq-mean-token-mean":
        count = sum(1 for x in n if x > 0)
    elif aggregation == "seq-mean-token-sum":
        count = len(n)
    elif aggregation == "seq-mean-token-sum-norm":
        if norm_len is None or norm_len < 1:
            raise UsageError("seq-mean-token-sum-norm needs norm_len= (the generation budget, "
                             f"a positive int), got {norm_len!r}")
        return float(max(len(n), 1) * norm_len)
    else:
        raise UsageError(
            f"unknown aggregation={aggregation!r}; use one of {', '.join(AGGREGATIONS)}")
    return float(max(count, 1))


def aggregate(
    loss: Tensor, mask: Tensor, aggregation: Aggregation = "token-mean",
    norm_len: int | None = None, denominator: float | None = None,
) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar, over the tokens where ``mask`` is set.

    * token-mean:              sum(loss) / sum(mask): every token of the batch weighs the same
      (DAPO; OpenRLHF's default, SkyRL's ``token_mean``).
    * seq-mean-token-mean:     mean over sequences of each sequence's token mean (original
      GRPO; SkyRL's ``sequence_mean``, OpenRLHF's ``token_level_loss=False``): every sequence
      weighs the same, so tokens of short ones weigh more. Sequences with no token are left out
      of the mean.
    * seq-mean-token-sum:      mean over sequences of each sequence's token sum.
    * seq-mean-token-sum-norm: sum(loss) / (B * norm_len), a constant normaliser (Dr. GRPO;
      SkyRL's ``seq_mean_token_sum_norm``), so the gradient of a token does not depend on the
      length of its answer. ``norm_len`` defaults to ``T`` (mask.shape[-1]); pass the
      generation budget to keep it constant across batches padded to different lengths.

    Each is a sum of per-token (token-mean, the token-sum ones) or per-sequence
    (seq-mean-token-mean) terms divided by a count. ``denominator`` (see
    :func:`loss_denominator`) replaces the count of this tensor by the whole mini-batch's, which
    makes the result this micro-batch's share of the mini-batch's loss.
    """
    keep = mask.bool()
    masked = torch.where(keep, loss, torch.zeros_like(loss))
    if aggregation == "seq-mean-token-mean":
        numerator = (masked.sum(-1) / keep.sum(-1).clamp(min=1).to(masked.dtype)).sum()
    elif aggregation in AGGREGATIONS:
        numerator = masked.sum()
    else:
        raise UsageError(
            f"unknown aggregation={aggregation!r}; use one of {', '.join(AGGREGATIONS)}")
    if denominator is not None:
        return numerator / denominator
    # this tensor is the whole batch: its own counts (as tensors: no device sync)
    rows = keep.reshape(-1, keep.shape[-1]) if keep.dim() else keep.reshape(1, 1)
    if aggregation == "token-mean":
        count = rows.sum().clamp(min=1).to(masked.dtype)
    elif aggregation == "seq-mean-token-mean":
        count = rows.any(-1).sum().clamp(min=1).to(masked.dtype)
    else:
        count = torch.tensor(float(max(rows.shape[0], 1)), dtype=masked.dtype)
        if aggregation == "seq-mean-token-sum-norm":
            count = count * (mask.shape[-1] if norm_len is None else norm_len)
    return numerator / count.to(masked.device)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: Aggregation = "token-mean",
    norm_len: int | None = None,
    engine_logp: Tensor | None = None,
    tis_cap: float | None = None,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss, per token, then aggregated (see :func:`aggregate`; pass the
    whole mini-batch's ``denominator`` when this is one micro-batch of it).

    With ratio = exp(clamp(logp - old_logp, -20, 20)) and advantage A:

        loss = -min(ratio * A, clamp(ratio, 1 - clip_low, 1 + clip_high) * A)

    ``clip_high > clip_low`` is DAPO's clip-higher. ``dual_clip`` = c > 1 (Ye et al., 2020, as in
    OpenRLHF) bounds the loss of tokens with A < 0, whose ratio the PPO clip leaves unbounded:
    loss = min(loss, c * -A) for A < 0; tokens with A >= 0 are unchanged. The log-ratio is
    clamped to +-20 before exp() as both references do: without it, a token whose probability
    rose by more than e^20 since the rollout (reachable with several epochs or mini-batches)
    makes the loss 1e6 times larger, or inf.

    Truncated importance sampling: the rollout engine (vLLM, SGLang, ...) samples with its own
    kernels and, in async training, with stale weights, so its logprobs ``engine_logp`` differ
    from the learner's ``old_logp`` for the same tokens. Each token's loss is then multiplied by
    w = min(exp(clamp(old_logp - engine_logp, -20, 20)), tis_cap), detached, which re-weights
    samples towards the learner's policy while the cap bounds the variance (Yao et al., 2025,
    "Your efficient RL framework secretly brings you off-policy RL training"; SkyRL's
    ``use_tis``, OpenRLHF's token-level ``clip`` correction with a lower bound of 0).
    ``tis_cap=None`` leaves the weights untruncated.

    ``advantages`` may be ``[B, T]`` or one per sequence ``[B]`` (broadcast over its tokens).
    Returns (loss, stats) with stats: ``clip_frac`` (tokens where the PPO clip is active),
    ``approx_kl`` (mean of old_logp - logp), ``ratio_mean``, plus ``dual_clip_frac`` and
    ``tis_weight_mean`` / ``tis_capped_frac`` when those are on; all token means, detached.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise UsageError(f"dual_clip must be > 1 (it bounds the loss at c * -A), got {dual_clip}")
    keep = mask.bool()
    if advantages.dim() == logp.dim() - 1:
        advantages = advantages.unsqueeze(-1).expand_as(logp)
    advantages = torch.where(keep, advantages.float(), 0.0)
    # Zero the log-ratio of padding before exp(), so padded -inf logprobs give neither inf nor NaN.
    log_ratio = torch.where(keep, logp.float() - old_logp.float(), 0.0)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))

    surr1 = ratio * advantages
    surr2 = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.min(surr1, surr2)
    stats: dict[str, Tensor] = {}
    if dual_clip is not None:
        bounded = torch.min(loss, dual_clip * -advantages)
        dual_active = (advantages < 0) & (bounded < loss)
        loss = torch.where(advantages < 0, bounded, loss)
        stats["dual_clip_frac"] = masked_mean(dual_active.float(), keep).detach()

    if engine_logp is not None:
        is_log_ratio = torch.where(keep, old_logp.float() - engine_logp.float(), 0.0)
        weight = torch.exp(is_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).detach()
        if tis_cap is not None:
            stats["tis_capped_frac"] = masked_mean((weight > tis_cap).float(), keep)
            weight = weight.clamp(max=tis_cap)
        loss = loss * weight
        stats["tis_weight_mean"] = masked_mean(weight, keep)

    stats["clip_frac"] = masked_mean((surr2 < surr1).float(), keep).detach()
    stats["approx_kl"] = masked_mean(-log_ratio, keep).detach()
    stats["ratio_mean"] = masked_mean(ratio, keep).detach()
    return aggregate(loss, keep, aggregation, norm_len, denominator), stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip: float | None = 0.2,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped value loss, token-mean over the masked tokens (``denominator``: the whole
    mini-batch's token count, when this is one micro-batch of it):

        v_clip = old_v + clamp(v - old_v, -clip, clip)
        loss   = 0.5 * max((v - R)^2, (v_clip - R)^2)

    Taking the max means the critic gains nothing from moving more than ``clip`` away from the
    values it had at rollout time (OpenRLHF's ``ValueLoss``). ``clip=None`` gives the plain
    0.5 * (v - R)^2. Returns (loss, stats) with ``vf_clip_frac``: the share of tokens where the
    clipped term is the larger one.
    """
    keep = mask.bool()
    values, returns = values.float(), returns.float()
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * aggregate(unclipped, keep, "token-mean", denominator=denominator), {}
    v_clip = old_values.float() + (values - old_values.float()).clamp(-clip, clip)
    clipped = (v_clip - returns) ** 2
    loss = 0.5 * aggregate(torch.max(unclipped, clipped), keep, "token-mean",
                           denominator=denominator)
    return loss, {"vf_clip_frac": masked_mean((clipped > unclipped).float(), keep).detach()}
