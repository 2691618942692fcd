"""skyhub's RL maths against the references' own code (skyrl-train 0.3.1's `ppo_utils.py`,
OpenRLHF 0.11.2's `models/loss.py`, `models/utils.py` and experience maker; loaded by
`tests/support/reference_rl.py`), on the same generated inputs: values and gradients within
1e-6, or, where skyhub differs on purpose (`skyhub.trainer.algorithms`' docstring), the
documented difference itself, asserted as a formula that maps the reference's output onto ours.

Every test id ends in `agree` (equal within 1e-6) or `documented` (equal after the documented
difference is applied, and the difference shown to be there), so the counts come from
`pytest --collect-only -q tests/trainer/test_reference_losses.py | grep -c agree`.

The inputs: 8 prompts x 5 samples, ragged masks, and per case one edge case: a group whose
rewards are all equal, ties, rewards in {-1, 0, 1}, a group with a 2e-7 spread, ratios far
outside the clip range, TIS weights above the cap, log-ratios above 20, an empty sequence.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from skyhub.trainer import algorithms as A

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
import reference_rl

PROMPTS, K, T = 8, 5, 16
N = PROMPTS * K
NORM_LEN = 24  # seq-mean-token-sum-norm's budget (SkyRL's max_seq_len)
CLIP_LOW, CLIP_HIGH, DUAL, CAP = 0.2, 0.28, 3.0, 2.0
CASES = ("ragged", "all-equal-group", "ties", "rewards-pm1", "spread-2e-7",
         "ratio-far-outside-clip", "tis-above-cap", "log-ratio-above-20", "empty-sequence")


@pytest.fixture(scope="module")
def ref() -> reference_rl.References:
    return reference_rl.load()  # raises, saying how to install them, when they are missing


@dataclass
class Batch:
    rewards: Tensor  # [N]
    mask: Tensor  # [N, T] float, ragged, right-padded
    logp: Tensor  # [N, T] the policy's
    old: Tensor  # the rollout policy's (PPO's old)
    ref: Tensor  # the reference model's
    engine: Tensor  # the inference engine's
    values: Tensor  # the critic's
    adv: Tensor  # token-level advantages for the loss tests


def batch(case: str) -> Batch:
    g = torch.Generator().manual_seed(29 + CASES.index(case))

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g)

    lengths = torch.randint(1, T + 1, (N,), generator=g)
    lengths[0], lengths[1] = T, 1
    mask = (torch.arange(T) < lengths[:, None]).float()
    rewards = torch.rand(N, generator=g)
    logp = -torch.rand(N, T, generator=g) * 3
    old = logp + 0.1 * randn(N, T)
    b = Batch(rewards, mask, logp, old, logp + 0.3 * randn(N, T), old + 0.2 * randn(N, T),
              0.5 * randn(N, T), randn(N, T))
    if case == "all-equal-group":
        b.rewards[5:10] = 0.7
        b.rewards[10:15] = 1.0
    elif case == "ties":
        b.rewards = torch.randint(0, 2, (N,), generator=g).float()
        b.rewards[20:25] = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5])
    elif case == "rewards-pm1":
        b.rewards = torch.randint(-1, 2, (N,), generator=g).float()
    elif case == "spread-2e-7":
        b.rewards[15:20] = torch.tensor([0.0, 2e-7, 0.0, 2e-7, 1e-7])
    elif case == "ratio-far-outside-clip":
        b.old = b.logp + 3 * (2 * torch.rand(N, T, generator=g) - 1)
    elif case == "tis-above-cap":
        b.engine = b.old - 3 * torch.rand(N, T, generator=g)  # weights up to e^3 > cap 2
    elif case == "log-ratio-above-20":
        b.old[:, ::3] = b.logp[:, ::3] - 25.0  # ratio e^25
        b.old[:, 1::5] = b.logp[:, 1::5] + 24.0  # ratio e^-24
        b.ref[:, ::4] = b.logp[:, ::4] - 23.0
        b.ref[:, 2::4] = b.logp[:, 2::4] + 22.0
        b.engine[:, ::2] = b.old[:, ::2] - 21.0
    elif case == "empty-sequence":
        b.mask[7] = 0.0
        b.mask[23] = 0.0
    return b


def close(ours: Tensor, theirs: Tensor, mask: Tensor | None = None) -> None:
    """Within 1e-6 (absolute, or relative for large values: a ratio of e^20 makes losses of
    1e8, where float32 itself rounds at 1e-7 relative)."""
    ours, theirs = ours.detach().double(), theirs.detach().double()
    if mask is not None:
        ours, theirs = ours[mask.bool()], theirs[mask.bool()]
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def grad_of(fn, x: Tensor) -> tuple[Tensor, Tensor]:
    """fn(x) and d fn(x) / dx."""
    x = x.clone().requires_grad_(True)
    out = fn(x)
    (grad,) = torch.autograd.grad(out, x, allow_unused=True)
    return out.detach(), torch.zeros_like(x) if grad is None else grad


def cfg(**kw) -> types.SimpleNamespace:
    """SkyRL's algorithm config (an omegaconf DictConfig there; attribute access only)."""
    return types.SimpleNamespace(**kw)


def group_std(rewards: Tensor) -> Tensor:
    return rewards.reshape(-1, K).std(-1, keepdim=True).expand(-1, K).reshape(-1)


def token_population_var(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(population variance, number of tokens) of the token values x over the mask."""
    keep = mask.bool()
    n = keep.sum()
    mean = x[keep].mean()
    return ((x[keep] - mean) ** 2).sum() / n, n


def bessel_to_population(theirs: Tensor, x: Tensor, mask: Tensor) -> Tensor:
    """SkyRL's whitening, (x - m) * rsqrt(var * n/(n-1) + 1e-8), mapped onto OpenRLHF's and
    ours, (x - m) * rsqrt(max(var, 1e-8)): the documented difference, as a formula."""
    var, n = token_population_var(x, mask)
    return theirs * torch.sqrt(var * n / (n - 1) + 1e-8) / torch.sqrt(var.clamp(min=1e-8))


# -- advantage estimators ---------------------------------------------------------------------

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce++", "reinforce++-baseline", "gae")
GAMMA, LAM = 0.99, 0.95


def last_token_rewards(b: Batch) -> Tensor:
    """The episode reward on its last generated token (position 0 for an empty sequence,
    where SkyRL's outcome estimators still sum it)."""
    last = (b.mask.sum(-1).long() - 1).clamp(min=0)
    return torch.zeros(N, T).scatter(1, last[:, None], b.rewards[:, None])


def ours_advantages(option: str, b: Batch) -> tuple[Tensor, Tensor | None]:
    """(token advantages, returns or None), as the learner computes them."""
    if option == "gae":
        adv, ret = A.gae(last_token_rewards(b) * b.mask, b.values, b.mask, GAMMA, LAM)
        return A.masked_whiten(adv, b.mask), ret
    per_episode = {
        "grpo": lambda: A.grpo_advantages(b.rewards, K),
        "dr_grpo": lambda: A.dr_grpo_advantages(b.rewards, K),
        "rloo": lambda: A.rloo_advantages(b.rewards, K),
        "reinforce++": lambda: A.reinforce_pp_advantages(b.rewards, mask=b.mask),
        "reinforce++-baseline": lambda: A.reinforce_pp_advantages(b.rewards, K, baseline=True,
                                                                  mask=b.mask),
    }[option]()
    return A.expand_to_tokens(per_episode, b.mask), None


OPENRLHF_ESTIMATOR = {"grpo": "group_norm", "dr_grpo": "dr_grpo", "rloo": "rloo",
                      "reinforce++": "reinforce", "reinforce++-baseline": "reinforce_baseline",
                      "gae": "gae"}


def advantage_params():
    for option in ESTIMATORS:
        for case in CASES:
            # OpenRLHF's group_norm divides by std + 1e-9, ours (SkyRL's) by std + 1e-6
            yield pytest.param(option, case, "openrlhf",
                               id=f"{option}-{case}-openrlhf-"
                                  f"{'documented' if option == 'grpo' else 'agree'}")
            if option != "reinforce++-baseline":  # SkyRL has no reinforce_baseline
                # SkyRL whitens reinforce++ and GAE with Bessel's correction
                documented = option in ("reinforce++", "gae")
                yield pytest.param(option, case, "skyrl",
                                   id=f"{option}-{case}-skyrl-"
                                      f"{'documented' if documented else 'agree'}")


@pytest.mark.parametrize(("option", "case", "reference"), list(advantage_params()))
def test_advantage_estimator(ref, option, case, reference):
    b = batch(case)
    ours, ours_ret = ours_advantages(option, b)
    if reference == "openrlhf":
        theirs, returns = ref.openrlhf_advantages(
            OPENRLHF_ESTIMATOR[option], b.rewards, b.mask, K,
            values=b.values if option == "gae" else None, gamma=GAMMA if option == "gae" else 1,
            lambd=LAM)
        if option == "grpo":
            std = group_std(b.rewards)[:, None]
            mapped = theirs * (std + 1e-9) / (std + 1e-6)
            close(ours, mapped, b.mask)
            if case == "spread-2e-7":  # and the difference is there, where it matters
                group = slice(15, 20)
                # OpenRLHF: +-1 out of a 1e-7 rounding spread; ours: less than a tenth of it
                assert theirs[group][b.mask[group].bool()].abs().max() > 0.9
                assert ours[group][b.mask[group].bool()].abs().max() < 0.1
        else:
            close(ours, theirs, b.mask)
        if option == "gae":
            close(ours_ret, returns, b.mask)
        return
    sk = ref.skyrl
    index = np.repeat(np.arange(PROMPTS), K)
    if option in ("grpo", "dr_grpo"):
        theirs, _ = sk.compute_grpo_outcome_advantage(
            last_token_rewards(b), b.mask, index, grpo_norm_by_std=option == "grpo")
        close(ours, theirs, b.mask)
    elif option == "rloo":
        theirs, _ = sk.compute_rloo_outcome_advantage(last_token_rewards(b), b.mask, index)
        close(ours, theirs, b.mask)
    elif option == "reinforce++":
        theirs, returns = sk.compute_reinforce_plus_plus_outcome_advantage(
            last_token_rewards(b) * b.mask, b.mask, 1.0)
        mapped = bessel_to_population(theirs, returns, b.mask)
        close(ours, mapped, b.mask)
        assert not torch.allclose(theirs, mapped)
    else:  # gae: SkyRL reads the critic's values on padding too, so they are 0 there
        values = b.values * b.mask
        theirs, returns = sk.compute_gae_advantage_return(
            last_token_rewards(b) * b.mask, values, b.mask, GAMMA, LAM)
        raw, _ = A.gae(last_token_rewards(b) * b.mask, b.values, b.mask, GAMMA, LAM)
        mapped = bessel_to_population(theirs, raw, b.mask)
        close(ours, mapped, b.mask)
        assert not torch.allclose(theirs, mapped)
        close(ours_ret, returns, b.mask)


def test_gae_skips_a_masked_gap_where_the_references_walk_through_it_documented(ref):
    """A tool's output between two turns (masked out inside the sequence) is not a step for
    skyhub: its GAE equals the references' on the sequence with the gap cut out."""
    b = batch("ragged")
    mask = b.mask.clone()
    rows = [i for i in range(N) if mask[i].sum() >= 8]
    for i in rows:
        mask[i, 3:6] = 0.0  # a 3-token observation after the third agent token
    rewards = last_token_rewards(b) * mask
    ours, _ = A.gae(rewards, b.values, mask, GAMMA, LAM)
    theirs, _ = ref.openrlhf_advantages("gae", b.rewards, mask, K, values=b.values,
                                        gamma=GAMMA, lambd=LAM)
    # OpenRLHF whitens: undo nothing, compare ours whitened with theirs on the gap-free rows
    ours_white = A.masked_whiten(ours, mask)
    assert not torch.allclose(ours_white[mask.bool()], theirs[mask.bool()], atol=1e-3)
    for i in rows:  # the documented equivalence: cut the gap out and walk through it
        keep = mask[i].bool()
        cut_rewards, cut_values = rewards[i][keep][None], b.values[i][keep][None]
        cut_mask = torch.ones_like(cut_rewards)
        cut = ref.openrlhf_maker.RemoteExperienceMaker.get_advantages_and_returns(
            None, cut_values, cut_rewards, cut_mask, GAMMA, LAM)[0][0]
        close(ours[i][keep], cut)


# -- aggregations -----------------------------------------------------------------------------

AGGREGATIONS = A.AGGREGATIONS
SKYRL_REDUCTION = {"token-mean": ("token_mean", None),
                   "seq-mean-token-mean": ("sequence_mean", None),
                   # SkyRL's Dr. GRPO reduction with a budget of 1 is the mean of the token sums
                   "seq-mean-token-sum": ("seq_mean_token_sum_norm", 1),
                   "seq-mean-token-sum-norm": ("seq_mean_token_sum_norm", NORM_LEN)}
OPENRLHF_LEVEL = {"token-mean": True, "seq-mean-token-mean": False}


def skyrl_documented(aggregation: str, case: str) -> bool:
    """SkyRL's sequence_mean counts a sequence without tokens as a 0 in the mean."""
    return aggregation == "seq-mean-token-mean" and case == "empty-sequence"


def sequence_share(mask: Tensor) -> float:
    return float((mask.sum(-1) > 0).sum()) / mask.shape[0]


def aggregation_params():
    for aggregation in AGGREGATIONS:
        for case in CASES:
            kind = "documented" if skyrl_documented(aggregation, case) else "agree"
            yield pytest.param(aggregation, case, "skyrl", id=f"{aggregation}-{case}-skyrl-{kind}")
            if aggregation in OPENRLHF_LEVEL:
                yield pytest.param(aggregation, case, "openrlhf",
                                   id=f"{aggregation}-{case}-openrlhf-agree")


def theirs_aggregate(ref, reference: str, aggregation: str, loss: Tensor, mask: Tensor,
                     case: str) -> Tensor:
    """The reference's reduction of a per-token loss, mapped onto ours where documented."""
    if reference == "openrlhf":
        return ref.openrlhf_loss.aggregate_loss(loss, mask,
                                                token_level_loss=OPENRLHF_LEVEL[aggregation])
    reduction, max_len = SKYRL_REDUCTION[aggregation]
    out = ref.skyrl.reduce_loss(loss, mask, reduction, max_len)
    return out / sequence_share(mask) if skyrl_documented(aggregation, case) else out


@pytest.mark.parametrize(("aggregation", "case", "reference"), list(aggregation_params()))
def test_aggregation(ref, aggregation, case, reference):
    b = batch(case)
    per_token = b.adv * b.logp.exp()  # any differentiable per-token loss

    def ours(x: Tensor) -> Tensor:
        return A.aggregate(b.adv * x.exp(), b.mask, aggregation, NORM_LEN)

    def theirs(x: Tensor) -> Tensor:
        return theirs_aggregate(ref, reference, aggregation, b.adv * x.exp(), b.mask, case)

    value, grad = grad_of(ours, b.logp)
    ref_value, ref_grad = grad_of(theirs, b.logp)
    close(value, ref_value)
    close(grad, ref_grad, b.mask)
    if skyrl_documented(aggregation, case) and reference == "skyrl":
        raw = ref.skyrl.reduce_loss(per_token, b.mask, "sequence_mean")
        assert not torch.isclose(raw, value)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_split_shares_equal_openrlhf_global_denominators_agree(ref, aggregation):
    """The micro-batch shares: ours with the whole batch's denominator, summed over any split,
    is the whole batch's loss; per micro-batch it equals OpenRLHF's `aggregate_loss` given the
    global token / sample count (`batch_num_tokens`, `global_batch_size`) where it has one."""
    b = batch("empty-sequence")
    loss = b.adv * b.logp.exp()
    whole = A.aggregate(loss, b.mask, aggregation, NORM_LEN)
    denom = A.loss_denominator(b.mask.sum(-1).tolist(), aggregation, NORM_LEN)
    for split in ([N], [1] * N, [3, 17, 9, 11], [20, 20]):
        parts = []
        for lo, hi in zip(np.cumsum([0, *split[:-1]]), np.cumsum(split), strict=True):
            part = A.aggregate(loss[lo:hi], b.mask[lo:hi], aggregation, NORM_LEN, denom)
            parts.append(part)
            if aggregation in OPENRLHF_LEVEL:
                theirs = ref.openrlhf_loss.aggregate_loss(
                    loss[lo:hi], b.mask[lo:hi], token_level_loss=OPENRLHF_LEVEL[aggregation],
                    batch_num_tokens=float(b.mask.sum()),
                    global_batch_size=float((b.mask.sum(-1) > 0).sum()))
                close(part, theirs)
        close(torch.stack(parts).sum(), whole)


# -- policy loss ------------------------------------------------------------------------------

def policy_options():
    for aggregation in AGGREGATIONS:
        for dual in (None, DUAL):
            for tis in (None, CAP):
                yield aggregation, dual, tis


def policy_params():
    for aggregation, dual, tis in policy_options():
        name = f"{aggregation}-dual{dual}-tis{tis}"
        for case in CASES:
            kind = "documented" if skyrl_documented(aggregation, case) else "agree"
            yield pytest.param(aggregation, dual, tis, case, "skyrl",
                               id=f"{name}-{case}-skyrl-{kind}")
            if aggregation in OPENRLHF_LEVEL:
                yield pytest.param(aggregation, dual, tis, case, "openrlhf",
                                   id=f"{name}-{case}-openrlhf-agree")


@pytest.mark.parametrize(("aggregation", "dual", "tis", "case", "reference"),
                         list(policy_params()))
def test_policy_loss(ref, aggregation, dual, tis, case, reference):
    b = batch(case)

    def ours(logp: Tensor) -> Tensor:
        loss, _ = A.policy_loss(logp, b.old, b.adv, b.mask, clip_low=CLIP_LOW,
                                clip_high=CLIP_HIGH, dual_clip=dual, aggregation=aggregation,
                                norm_len=NORM_LEN, engine_logp=b.engine if tis else None,
                                tis_cap=tis)
        return loss

    def theirs(logp: Tensor) -> Tensor:
        if reference == "openrlhf":
            fn = ref.openrlhf_loss.PolicyLoss(
                clip_eps_low=CLIP_LOW, clip_eps_high=CLIP_HIGH, dual_clip=dual,
                token_level_loss=OPENRLHF_LEVEL[aggregation],
                is_correction_level="token" if tis else "off", is_correction_mode="clip",
                is_correction_threshold=(0.0, tis or 1.0))
            return fn(logp, b.old, b.adv, action_mask=b.mask,
                      rollout_log_probs=b.engine if tis else None)[0]
        reduction, max_len = SKYRL_REDUCTION[aggregation]
        config = cfg(policy_loss_type="dual_clip" if dual else "regular",
                     loss_reduction=reduction, eps_clip_low=CLIP_LOW, eps_clip_high=CLIP_HIGH,
                     clip_ratio_c=dual, use_tis=tis is not None, tis_imp_ratio_cap=tis,
                     max_seq_len=max_len)
        loss, _ = ref.skyrl.ppo_policy_loss(logp, b.old, b.adv, config, b.mask,
                                            b.engine if tis else None)
        return loss / sequence_share(b.mask) if skyrl_documented(aggregation, case) else loss

    value, grad = grad_of(ours, b.logp)
    ref_value, ref_grad = grad_of(theirs, b.logp)
    close(value, ref_value)
    close(grad, ref_grad, b.mask)
    assert grad.abs().max() > 0


def test_log_ratio_clamp_is_what_the_references_do(ref):
    """The log-ratio clamp: above a log-ratio of 20 without dual clip the unclamped loss is
    e^(log-ratio - 20) times the references'; the clamped one equals theirs (tested above)."""
    b = batch("log-ratio-above-20")
    loss, _ = A.policy_loss(b.logp, b.old, -b.adv.abs(), b.mask)
    ratio = torch.exp(b.logp - b.old)
    unclamped = A.aggregate(-torch.min(ratio * -b.adv.abs(),
                                       ratio.clamp(0.8, 1.2) * -b.adv.abs()), b.mask)
    assert unclamped / loss > 100  # the e^25 tokens dominate: about e^(25 - 20) = 148


# -- KL ---------------------------------------------------------------------------------------

KL_KINDS = ("k1", "k2", "k3")


def kl_skyrl_documented(kind: str, case: str) -> bool:
    """SkyRL clamps k3 only: its k1 / k2 pass 10 where the log-ratio is large."""
    return kind in ("k1", "k2") and case == "log-ratio-above-20"


def kl_params():
    for kind in KL_KINDS:
        for case in CASES:
            yield pytest.param(kind, case, "openrlhf", id=f"{kind}-{case}-openrlhf-agree")
            # SkyRL 0.3.1's compute_approx_kl runs under torch.no_grad: no gradient
            yield pytest.param(kind, case, "skyrl", id=f"{kind}-{case}-skyrl-documented")


@pytest.mark.parametrize(("kind", "case", "reference"), list(kl_params()))
def test_kl_estimator(ref, kind, case, reference):
    b = batch(case)
    _, grad = grad_of(lambda x: A.kl_estimate(x, b.ref, kind).sum(), b.logp)
    ours = A.kl_estimate(b.logp, b.ref, kind)
    if reference == "openrlhf":
        theirs = ref.openrlhf_utils.compute_approx_kl(b.logp, b.ref, kl_estimator=kind)
        _, their_grad = grad_of(lambda x: ref.openrlhf_utils.compute_approx_kl(
            x, b.ref, kl_estimator=kind).sum(), b.logp)
        close(ours, theirs)
        close(grad, their_grad)
        return
    x = b.logp.clone().requires_grad_(True)
    theirs = ref.skyrl.compute_approx_kl(x, b.ref, kl_estimator_type=kind)
    assert not theirs.requires_grad  # no gradient from SkyRL's KL loss
    assert grad.abs().max() > 0  # ours has one
    close(ours, theirs.clamp(-10, 10))
    if kl_skyrl_documented(kind, case):
        assert theirs.abs().max() > 10


def kl_loss_params():
    for kind in KL_KINDS:
        for aggregation in AGGREGATIONS:
            for case in CASES:
                yield pytest.param(kind, aggregation, case, id=f"{kind}-{aggregation}-{case}-agree")


@pytest.mark.parametrize(("kind", "aggregation", "case"), list(kl_loss_params()))
def test_kl_loss_is_aggregated_as_the_policy_loss(ref, kind, aggregation, case):
    """The KL term as the learner builds it (estimate, then the same aggregation as the
    policy loss) against OpenRLHF's actor (`aggregate_loss(compute_approx_kl(...))`) for its two
    reductions and SkyRL's `reduce_loss` of OpenRLHF's estimate for the others."""
    b = batch(case)

    def ours(x: Tensor) -> Tensor:
        return A.aggregate(A.kl_estimate(x, b.ref, kind), b.mask, aggregation, NORM_LEN)

    def theirs(x: Tensor) -> Tensor:
        kl = ref.openrlhf_utils.compute_approx_kl(x, b.ref, kl_estimator=kind)
        reference = "openrlhf" if aggregation in OPENRLHF_LEVEL else "skyrl"
        return theirs_aggregate(ref, reference, aggregation, kl, b.mask, case)

    value, grad = grad_of(ours, b.logp)
    ref_value, ref_grad = grad_of(theirs, b.logp)
    close(value, ref_value)
    close(grad, ref_grad, b.mask)


# -- value loss -------------------------------------------------------------------------------

@pytest.mark.parametrize(("clip", "case"), [
    pytest.param(clip, case, id=f"clip{clip}-{case}-openrlhf-agree")
    for clip in (None, 0.2) for case in CASES])
def test_value_loss(ref, clip, case):
    """OpenRLHF's ValueLoss (token level). SkyRL's critic loss is a per-sequence token mean
    whatever the policy's reduction; skyhub's value loss is a token mean, as OpenRLHF's."""
    b = batch(case)
    returns = b.values + b.adv
    old = b.values + 0.3 * torch.tanh(b.adv * 3)

    def ours(v: Tensor) -> Tensor:
        return A.value_loss(v, old, returns, b.mask, clip=clip)[0]

    def theirs(v: Tensor) -> Tensor:
        return ref.openrlhf_loss.ValueLoss(clip_eps=clip)(v, old, returns, action_mask=b.mask)

    value, grad = grad_of(ours, b.values + 0.4 * torch.sin(b.adv))
    ref_value, ref_grad = grad_of(theirs, b.values + 0.4 * torch.sin(b.adv))
    close(value, ref_value)
    close(grad, ref_grad, b.mask)


# -- a whole learner step ---------------------------------------------------------------------
# The learner (packed 60-token micro-batches, one rank and two FSDP ranks) against the
# references' losses on the same episodes unpacked and padded, one forward for the batch: the
# advantages from the references' estimators, SkyRL's ppo_policy_loss (every reduction, dual
# clip, TIS) and OpenRLHF's compute_approx_kl aggregated as the policy loss.

KL_COEF = 0.5  # tests/support/loss_ranks.py's


def learner_configs() -> list[dict]:
    import loss_ranks as L

    return [*(L.run_config(aggregation, "k3") for aggregation in AGGREGATIONS),
            L.run_config("token-mean", "k1", advantage="reinforce++", tis_cap=None),
            L.run_config("seq-mean-token-mean", "k2", advantage="reinforce++",
                         reinforce_baseline=True),
            L.run_config("seq-mean-token-sum-norm", "k1", advantage="dr_grpo", dual_clip=None),
            L.run_config("token-mean", "k3", advantage="rloo", dual_clip=None, tis_cap=None)]


def learner_ids() -> list[str]:
    return [f"{c['advantage']}{'-baseline' if c['reinforce_baseline'] else ''}-"
            f"{c['aggregation']}-{c['kl']}-dual{c['dual_clip']}-tis{c['tis_cap']}"
            for c in learner_configs()]


@pytest.fixture(scope="module")
def learner_runs() -> dict[str, list[dict]]:
    import loss_ranks as L

    from skyhub.trainer import dist as D

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        configs = learner_configs()
        one_rank = [L.step_gradient(c, sharded=False, micro_batch_tokens=60) for c in configs]
        two_ranks = D.launch(L.two_rank_gradients, (configs, 60), ranks=2)
    finally:
        torch.set_num_threads(threads)
    return {"one rank": one_rank, "two ranks": two_ranks}


def reference_step_gradient(ref, config: dict, before: dict[str, Tensor]
                            ) -> tuple[dict[str, Tensor], float]:
    """The gradient of the references' loss at weights `before`, on the learner's second batch
    padded into one [B, L] tensor; and that loss."""
    import loss_ranks as L
    from trainer_ranks import episodes

    from skyhub.trainer.tiny import tiny_model

    model = tiny_model(300, seed=1)
    model.load_state_dict(before)
    initial = tiny_model(300, seed=1)  # the frozen reference model: the weights before step 1
    eps = episodes(seed=2)
    width = max(len(e.token_ids) for e in eps)

    def padded(rows, value=0):
        return torch.tensor([r + [value] * (width - len(r)) for r in rows])

    ids = padded([e.token_ids for e in eps])
    attention = padded([[1] * len(e.token_ids) for e in eps])

    def token_logprobs(lm) -> Tensor:
        logits = lm(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    logp = token_logprobs(model)
    with torch.no_grad():
        base = token_logprobs(initial)
    mask = padded([e.loss_mask for e in eps])[:, 1:].float()
    engine = padded([e.logprobs for e in eps], 0.0)[:, 1:].float()
    rewards = torch.tensor([float(e.reward) for e in eps])
    groups = np.array([e.group for e in eps])
    on_first = torch.zeros_like(mask)
    on_first[:, 0] = rewards  # SkyRL's outcome estimators sum the token rewards
    advantage = config["advantage"]
    if advantage in ("grpo", "dr_grpo"):
        adv, _ = ref.skyrl.compute_grpo_outcome_advantage(
            on_first, mask, groups, grpo_norm_by_std=advantage == "grpo")
    else:
        estimator = {"rloo": "rloo", "reinforce++": "reinforce"}[advantage]
        if config["reinforce_baseline"]:
            estimator = "reinforce_baseline"
        adv, _ = ref.openrlhf_advantages(estimator, rewards, mask, L.GROUP)
    reduction, max_len = SKYRL_REDUCTION[config["aggregation"]]
    if config["aggregation"] == "seq-mean-token-sum-norm":
        max_len = width - 1  # the learner's budget without one: the longest episode
    dual, tis = config["dual_clip"], config["tis_cap"]
    policy, _ = ref.skyrl.ppo_policy_loss(
        logp, logp.detach(), adv, cfg(
            policy_loss_type="dual_clip" if dual else "regular", loss_reduction=reduction,
            eps_clip_low=0.2, eps_clip_high=0.2, clip_ratio_c=dual, use_tis=tis is not None,
            tis_imp_ratio_cap=tis, max_seq_len=max_len), mask, engine)
    kl = ref.openrlhf_utils.compute_approx_kl(logp, base, kl_estimator=config["kl"])
    if config["aggregation"] in OPENRLHF_LEVEL:
        kl_term = ref.openrlhf_loss.aggregate_loss(
            kl, mask, token_level_loss=OPENRLHF_LEVEL[config["aggregation"]])
    else:
        kl_term = ref.skyrl.reduce_loss(kl, mask, reduction, max_len)
    loss = policy + KL_COEF * kl_term
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}, float(loss)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("split", ["one rank", "two ranks"])
@pytest.mark.parametrize("index", range(len(learner_configs())), ids=learner_ids())
def test_a_learner_step_equals_the_reference_losses_on_padded_episodes(ref, learner_runs,
                                                                      split, index):
    run = learner_runs[split][index]
    grads, loss = reference_step_gradient(ref, learner_configs()[index], run["before"])
    assert run["metrics"]["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert grads.keys() == run["grads"].keys()
    scale = max(float(g.abs().max()) for g in grads.values())
    assert scale > 1e-3
    diff = max(float((grads[k] - run["grads"][k]).abs().max()) for k in grads)
    assert diff < 1e-6, f"max |gradient difference| {diff:.2e} (largest gradient {scale:.2e})"


def test_the_learner_whitens_reinforce_pp_over_tokens_as_openrlhf(ref):
    """REINFORCE++ advantages are whitened over the masked tokens: without the mask the
    learner whitened over episodes (0.24 from OpenRLHF on episodes of different lengths)."""
    from trainer_ranks import episodes

    from skyhub.trainer.config import AlgoConfig, OptimConfig
    from skyhub.trainer.learner import Learner
    from skyhub.trainer.tiny import tiny_model

    eps = episodes(seed=3)
    width = max(len(e.loss_mask) for e in eps)
    mask = torch.tensor([e.loss_mask[1:] + [0] * (width - len(e.loss_mask)) for e in eps]).float()
    rewards = torch.tensor([float(e.reward) for e in eps])
    for baseline in (False, True):
        learner = Learner(tiny_model(300), AlgoConfig(advantage="reinforce++",
                                                      reinforce_baseline=baseline),
                          OptimConfig())
        ours = learner._episode_advantages(eps, 4)
        theirs, _ = ref.openrlhf_advantages("reinforce_baseline" if baseline else "reinforce",
                                            rewards, mask, 4)
        close(A.expand_to_tokens(torch.stack([ours[id(e)] for e in eps]), mask), theirs, mask)


def test_the_learner_whitens_gae_as_openrlhf(ref):
    """The learner's GAE (its critic's values, the reward on the last agent token) whitened
    over the batch's agent tokens with the population variance, as OpenRLHF's experience maker
    does given the same values (single-turn episodes: a contiguous mask, where skipping and
    walking through masked tokens agree)."""
    from skyhub.trainer.config import AlgoConfig, OptimConfig
    from skyhub.trainer.learner import Learner
    from skyhub.trainer.rollout import Trajectory
    from skyhub.trainer.tiny import tiny_model

    gen = torch.Generator().manual_seed(5)
    eps = []
    for i in range(12):
        e = Trajectory(group=i // 4, task_id=str(i), reward=float(i % 3 - 1))
        e.add(torch.randint(6, 300, (int(torch.randint(3, 9, (1,), generator=gen)),),
                            generator=gen).tolist(), agent=False)
        k = int(torch.randint(1, 14, (1,), generator=gen))
        e.add(torch.randint(6, 300, (k,), generator=gen).tolist(), agent=True,
              logprobs=[-1.0] * k, versions=[0] * k)
        eps.append(e)
    learner = Learner(tiny_model(300), AlgoConfig(advantage="gae", gamma=0.99, lam=0.95),
                      OptimConfig())
    torch.nn.init.normal_(learner.critic.head.weight, std=0.5, generator=gen)  # values != 0
    extra = {id(e): {} for e in eps}
    learner._gae(eps, extra, {})
    width = max(len(e.token_ids) for e in eps) - 1

    def padded(key: str) -> Tensor:
        return torch.stack([torch.nn.functional.pad(extra[id(e)][key], (0, width - len(
            extra[id(e)][key]))) for e in eps])

    mask = torch.tensor([e.loss_mask[1:] + [0] * (width + 1 - len(e.loss_mask))
                         for e in eps]).float()
    values = padded("old_v")
    assert values[mask.bool()].abs().max() > 0.1
    theirs, returns = ref.openrlhf_advantages(
        "gae", torch.tensor([e.reward for e in eps]), mask, 4, values=values, gamma=0.99,
        lambd=0.95)
    close(padded("adv"), theirs, mask)
    close(padded("ret"), returns, mask)
