"""The Tinker loss functions, per datum, as sums over tokens (Tinker's convention: the client
scales with `weights` or `advantages`; the server never averages).

Every loss gets the model's logprobs of `target_tokens` (one per input position) and the
datum's named inputs, and returns (loss, extra outputs). The logprobs are always returned
to the client, so an RL loop can compare them with its sampler's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from skyhub.trainer.tinker.exceptions import Unsupported

LossFn = Callable[[Tensor, dict[str, Tensor], dict[str, float | str]], Tensor]


def cross_entropy(logp: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    """-sum(weights * logp); weights default to 1 on every token."""
    weights = inputs.get("weights")
    return -(logp if weights is None else logp * weights).sum()


def importance_sampling(logp: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    """-sum(p/q * advantages): the policy gradient for samples drawn from q (the sampler's
    `logprobs`), unbiased when the sampler lags the learner."""
    ratio = torch.exp(logp - inputs["logprobs"])
    return -(ratio * inputs["advantages"]).sum()


def ppo(logp: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    """PPO's clipped surrogate, summed: -sum(min(r*A, clip(r, low, high)*A))."""
    low = float(config.get("clip_low_threshold", 0.8))
    high = float(config.get("clip_high_threshold", 1.2))
    ratio = torch.exp(logp - inputs["logprobs"])
    adv = inputs["advantages"]
    return -torch.minimum(ratio * adv, ratio.clamp(low, high) * adv).sum()


LOSSES: dict[str, tuple[LossFn, tuple[str, ...]]] = {
    "cross_entropy": (cross_entropy, ()),
    "importance_sampling": (importance_sampling, ("logprobs", "advantages")),
    "ppo": (ppo, ("logprobs", "advantages")),
}
KNOWN_CONFIG = {"ppo": {"clip_low_threshold", "clip_high_threshold"}}


def get_loss(name: str, config: dict[str, float | str]) -> tuple[LossFn, tuple[str, ...]]:
    """The loss called `name`, after checking its config keys."""
    if name not in LOSSES:
        raise Unsupported(f"loss_fn {name!r} is not supported by skyhub's Tinker server; "
                          f"use one of {', '.join(LOSSES)}")
    extra = set(config) - KNOWN_CONFIG.get(name, set())
    if extra:
        raise Unsupported(f"loss_fn_config keys {sorted(extra)} are not understood by "
                          f"{name!r} (known: {sorted(KNOWN_CONFIG.get(name, set())) or 'none'})")
    return LOSSES[name]
