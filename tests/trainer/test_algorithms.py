"""The trainer's RL maths against numbers worked out by hand (the arithmetic is in the comments).

Expected values are never produced by the code under test: a wrong sign, a wrong std or a wrong
normaliser shows up as a plain number mismatch.
"""

from __future__ import annotations

import math

import pytest
import torch

from skyhub.trainer.algorithms import (
    dr_grpo_advantages,
    expand_to_tokens,
    gae,
    grpo_advantages,
    kl_estimate,
    masked_mean,
    masked_whiten,
    policy_loss,
    reinforce_pp_advantages,
    rloo_advantages,
    value_loss,
)


def close(actual: torch.Tensor, expected: list | float, atol: float = 1e-5) -> None:
    torch.testing.assert_close(
        actual.detach().float(),
        torch.tensor(expected, dtype=torch.float32),
        atol=atol,
        rtol=0.0,
    )


def one_token(ratio: float, adv: float, **kwargs) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """policy_loss on a single generated token whose ratio pi/pi_old is ``ratio``."""
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, stats = policy_loss(
        logp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), **kwargs
    )
    loss.backward()
    return loss, stats, logp.grad


# -- group estimators ---------------------------------------------------------------------------

# Two prompts, four samples each: [1, 0, 0, 0] and [1, 1, 0, 0].
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])


def test_grpo_normalises_by_the_bessel_corrected_group_std():
    # group 1: mean 0.25, deviations [.75, -.25, -.25, -.25],
    #   var = (.5625 + 3 * .0625) / 3 = .25, std = .5 -> [1.5, -.5, -.5, -.5]
    # group 2: mean .5, deviations ±.5, var = 4 * .25 / 3 = 1/3, std = .57735 -> ±.866025
    adv = grpo_advantages(REWARDS, group_size=4, eps=0.0)
    close(adv, [1.5, -0.5, -0.5, -0.5, 0.866025, 0.866025, -0.866025, -0.866025])
    # the default eps barely moves it: 1.5 * .5 / (.5 + 1e-6)
    close(
        grpo_advantages(REWARDS, group_size=4),
        [1.499997, -0.499999, -0.499999, -0.499999, 0.866024, 0.866024, -0.866024, -0.866024],
    )


def test_grpo_gives_zero_for_equal_rewards_and_singleton_groups():
    close(grpo_advantages(torch.tensor([2.0, 2.0, 2.0, 0.0, 0.0, 0.0]), group_size=3), [0.0] * 6)
    close(grpo_advantages(torch.tensor([3.0, 5.0]), group_size=1), [0.0, 0.0])


def test_dr_grpo_only_subtracts_the_group_mean():
    close(
        dr_grpo_advantages(REWARDS, group_size=4), [0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5]
    )
    close(dr_grpo_advantages(torch.tensor([3.0, 5.0]), group_size=1), [0.0, 0.0])
    close(dr_grpo_advantages(torch.tensor([7.0, 7.0]), group_size=2), [0.0, 0.0])


def test_rloo_compares_each_sample_with_the_others():
    # [1,0,0,0]: 1 - 0/3 = 1; 0 - 1/3 = -1/3
    # [1,1,0,0]: 1 - (1+0+0)/3 = 2/3; 0 - (1+1+0)/3 = -2/3
    close(
        rloo_advantages(REWARDS, group_size=4),
        [1.0, -1 / 3, -1 / 3, -1 / 3, 2 / 3, 2 / 3, -2 / 3, -2 / 3],
    )
    close(rloo_advantages(torch.tensor([3.0, 5.0]), group_size=1), [0.0, 0.0])
    close(rloo_advantages(torch.tensor([4.0, 4.0, 4.0]), group_size=3), [0.0, 0.0, 0.0])


def test_group_size_that_does_not_divide_the_batch_is_an_error():
    with pytest.raises(ValueError, match="group_size=3"):
        grpo_advantages(torch.zeros(4), group_size=3)


def test_reinforce_pp_whitens_over_the_whole_batch():
    # [1,2,3,4]: mean 2.5, population var (2.25+.25+.25+2.25)/4 = 1.25, std 1.118034
    # -> -1.5/1.118034 = -1.341641, -.5/1.118034 = -.447214, ...
    close(
        reinforce_pp_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0])),
        [-1.341641, -0.447214, 0.447214, 1.341641],
    )


def test_reinforce_baseline_subtracts_the_group_mean_first():
    # groups [1,2], [3,4] -> [-.5, .5, -.5, .5]; batch mean 0, var .25, std .5 -> [-1, 1, -1, 1]
    adv = reinforce_pp_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0]), 2, baseline=True)
    close(adv, [-1.0, 1.0, -1.0, 1.0])


def test_reinforce_pp_with_a_mask_weights_episodes_by_their_length():
    # episode 0 has 3 tokens, episode 1 has 1: token values [1,1,1,3], mean 1.5,
    # var (3 * .25 + 2.25) / 4 = .75, std .866025 -> [-.5/.866025, 1.5/.866025]
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    close(reinforce_pp_advantages(torch.tensor([1.0, 3.0]), mask=mask), [-0.577350, 1.732051])


def test_reinforce_pp_is_zero_without_spread():
    close(reinforce_pp_advantages(torch.tensor([0.5, 0.5, 0.5])), [0.0, 0.0, 0.0])
    close(reinforce_pp_advantages(torch.tensor([2.0])), [0.0])
    close(reinforce_pp_advantages(torch.tensor([1.0, 1.0, 5.0, 5.0]), 2, baseline=True), [0.0] * 4)


def test_expand_to_tokens_broadcasts_and_zeroes_padding():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    close(expand_to_tokens(torch.tensor([2.0, -1.0]), mask), [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]])


def test_masked_helpers_ignore_padding_even_when_it_is_inf():
    x = torch.tensor([[1.0, 3.0, float("inf")], [5.0, float("-inf"), float("nan")]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    close(masked_mean(x, mask), 3.0)  # (1 + 3 + 5) / 3
    close(masked_mean(x, mask, dim=-1), [2.0, 5.0])
    close(masked_mean(x, torch.zeros_like(mask)), 0.0)
    # [1, 3, 5]: mean 3, population var 8/3, std 1.632993 -> [-1.224745, 0, 1.224745]
    close(masked_whiten(x, mask), [[-1.224745, 0.0, 0.0], [1.224745, 0.0, 0.0]])


# -- GAE ----------------------------------------------------------------------------------------


def test_gae_with_gamma_1_lambda_1_is_return_minus_value():
    # reward 1 at the end, so every return is 1: A = 1 - V
    adv, ret = gae(
        torch.tensor([0.0, 0.0, 1.0]),
        torch.tensor([0.5, 0.6, 0.7]),
        torch.ones(3),
        gamma=1.0,
        lam=1.0,
    )
    close(adv, [0.5, 0.4, 0.3])
    close(ret, [1.0, 1.0, 1.0])


def test_gae_hand_unrolled_with_discounting():
    # gamma=.9, lam=.95, gamma*lam = .855, V after the end = 0
    # t2: delta = 1 + .9*0 - .7 = .3                  A2 = .3
    # t1: delta = 0 + .9*.7 - .6 = .03                A1 = .03 + .855*.3 = .2865
    # t0: delta = 0 + .9*.6 - .5 = .04                A0 = .04 + .855*.2865 = .2849575
    # returns = A + V = [.7849575, .8865, 1.0]
    adv, ret = gae(
        torch.tensor([0.0, 0.0, 1.0]),
        torch.tensor([0.5, 0.6, 0.7]),
        torch.ones(3),
        gamma=0.9,
        lam=0.95,
    )
    close(adv, [0.2849575, 0.2865, 0.3])
    close(ret, [0.7849575, 0.8865, 1.0])


def test_gae_stops_at_the_end_of_each_sequence_in_a_batch():
    # row 1 ends after two tokens: the padded reward 99 and value 42 are ignored.
    # A1 = 1 + 0 - .6 = .4, A0 = 0 + .6 - .5 + .4 = .5
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 99.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [0.5, 0.6, 42.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    close(adv, [[0.5, 0.4, 0.3], [0.5, 0.4, 0.0]])
    close(ret, [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_gae_skips_masked_tokens_inside_a_sequence():
    # the middle token (a tool's output) is not a step: t0's next value is V2 = .7
    # t2: A2 = 1 - .7 = .3; t0: delta = .9*.7 - .5 = .13, A0 = .13 + .855*.3 = .3865
    adv, ret = gae(
        torch.tensor([0.0, 5.0, 1.0]),
        torch.tensor([0.5, 9.0, 0.7]),
        torch.tensor([1, 0, 1]),
        gamma=0.9,
        lam=0.95,
    )
    close(adv, [0.3865, 0.0, 0.3])
    close(ret, [0.8865, 0.0, 1.0])


# -- KL -----------------------------------------------------------------------------------------


def test_kl_estimators_at_hand_computed_points():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])  # log_ratio = [.5, -1]
    close(kl_estimate(logp, ref, "k1"), [0.5, -1.0])
    close(kl_estimate(logp, ref, "k2"), [0.125, 0.5])  # .5**2/2, (-1)**2/2
    # k3 = exp(-lr) - 1 + lr: exp(-.5) - .5 = .1065307, exp(1) - 2 = .7182818
    close(kl_estimate(logp, ref, "k3"), [0.1065307, 0.7182818])
    close(kl_estimate(logp, logp, "k3"), [0.0, 0.0])


def test_kl_estimate_is_clamped_to_ten_with_finite_gradients():
    logp = torch.tensor([0.0, -30.0], requires_grad=True)
    ref = torch.tensor([-30.0, 0.0])  # log_ratio = [30, -30]
    close(kl_estimate(logp, ref, "k1"), [10.0, -10.0])
    close(kl_estimate(logp, ref, "k2"), [10.0, 10.0])  # 450 clamped
    k3 = kl_estimate(logp, ref, "k3")  # 29 and exp(30) - 31, both clamped
    close(k3, [10.0, 10.0])
    k3.sum().backward()
    assert torch.isfinite(logp.grad).all()
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(logp, ref, "k4")  # type: ignore[arg-type]


# -- policy loss --------------------------------------------------------------------------------


def test_ratio_inside_the_clip_range_is_the_plain_surrogate():
    loss, stats, grad = one_token(1.1, 2.0)
    close(loss, -2.2)  # -(1.1 * 2)
    close(grad, [[-2.2]])  # d(-ratio*A)/dlogp = -ratio*A
    close(stats["clip_frac"], 0.0)
    close(stats["approx_kl"], -math.log(1.1))  # old_logp - logp
    close(stats["ratio_mean"], 1.1)


def test_ratio_above_one_plus_clip_high_with_positive_advantage_is_clipped():
    loss, stats, grad = one_token(1.5, 1.0)
    close(loss, -1.2)  # -min(1.5, 1.2)
    close(grad, [[0.0]])
    close(stats["clip_frac"], 1.0)
    loss, _, _ = one_token(1.5, 1.0, clip_low=0.2, clip_high=0.28)
    close(loss, -1.28)  # clip-higher
    loss, stats, _ = one_token(0.7, 1.0)  # below 1-clip_low with A > 0: min(.7, .8) = .7
    close(loss, -0.7)
    close(stats["clip_frac"], 0.0)


def test_ratio_below_one_minus_clip_low_with_negative_advantage_is_clipped():
    loss, stats, grad = one_token(0.5, -1.0)
    close(loss, 0.8)  # -min(.5 * -1, .8 * -1) = -(-.8)
    close(grad, [[0.0]])
    close(stats["clip_frac"], 1.0)
    loss, _, _ = one_token(0.5, -1.0, clip_low=0.1)
    close(loss, 0.9)


def test_dual_clip_bounds_the_loss_of_a_large_ratio_with_negative_advantage():
    loss, _, _ = one_token(5.0, -1.0)
    close(loss, 5.0)  # -min(-5, -1.2): PPO alone leaves it unbounded
    loss, stats, grad = one_token(5.0, -1.0, dual_clip=3.0)
    close(loss, 3.0)  # min(5, 3 * 1)
    close(grad, [[0.0]])
    close(stats["dual_clip_frac"], 1.0)
    loss, stats, _ = one_token(2.0, -1.0, dual_clip=3.0)  # 2 < 3: untouched
    close(loss, 2.0)
    close(stats["dual_clip_frac"], 0.0)
    loss, _, _ = one_token(5.0, 1.0, dual_clip=3.0)  # positive A: usual clip only
    close(loss, -1.2)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        one_token(1.0, 1.0, dual_clip=1.0)


# Two sequences of 3 and 2 tokens, ratio 1, so the per-token loss is -A:
# [[-1, -2, -3], [-4, -6, (pad)]]
AGG_ADV = torch.tensor([[1.0, 2.0, 3.0], [4.0, 6.0, 99.0]])
AGG_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


@pytest.mark.parametrize(
    ("aggregation", "norm_len", "expected"),
    [
        ("token-mean", None, -3.2),  # -(1+2+3+4+6) / 5
        ("seq-mean-token-mean", None, -3.5),  # mean(-6/3, -10/2) = mean(-2, -5)
        ("seq-mean-token-sum", None, -8.0),  # mean(-6, -10)
        ("seq-mean-token-sum-norm", None, -16 / 6),  # -16 / (B=2 * T=3)
        ("seq-mean-token-sum-norm", 8, -1.0),  # -16 / (2 * 8)
    ],
)
def test_aggregations_on_sequences_of_different_lengths(aggregation, norm_len, expected):
    logp = torch.zeros(2, 3)
    loss, _ = policy_loss(logp, logp, AGG_ADV, AGG_MASK, aggregation=aggregation, norm_len=norm_len)
    close(loss, expected)


def test_unknown_aggregation_is_an_error():
    with pytest.raises(ValueError, match="token-mean"):
        policy_loss(
            torch.zeros(1, 1),
            torch.zeros(1, 1),
            torch.ones(1, 1),
            torch.ones(1, 1),
            aggregation="sum",
        )  # type: ignore[arg-type]


def test_per_sequence_advantages_broadcast_over_tokens():
    logp = torch.zeros(2, 3)
    loss, _ = policy_loss(logp, logp, torch.tensor([1.0, -2.0]), AGG_MASK)
    close(loss, 0.2)  # -(1 + 1 + 1 - 2 - 2) / 5


def test_truncated_importance_weights_are_capped_and_detached():
    # old_logp = 0; engine_logp = [-ln2, ln2, -ln10] -> w = exp(old - engine) = [2, .5, 10]
    logp = torch.zeros(1, 3, requires_grad=True)
    old = torch.zeros(1, 3)
    engine = torch.tensor([[-math.log(2), math.log(2), -math.log(10)]])
    adv, mask = torch.ones(1, 3), torch.ones(1, 3)
    loss, stats = policy_loss(logp, old, adv, mask, engine_logp=engine, tis_cap=3.0)
    close(loss, -5.5 / 3)  # -(2 + .5 + 3) / 3, the 10 capped at 3
    close(stats["tis_capped_frac"], 1 / 3)
    close(stats["tis_weight_mean"], 5.5 / 3)
    loss.backward()
    close(logp.grad, [[-2 / 3, -0.5 / 3, -1.0]])  # -w * ratio * A / 3, w a constant
    loss, _ = policy_loss(logp, old, adv, mask, engine_logp=engine)
    close(loss, -12.5 / 3)  # untruncated: -(2 + .5 + 10) / 3


def test_masked_tokens_do_not_change_the_loss_or_its_gradient():
    # token 2 is padding with garbage: -inf logprob, a huge advantage
    logp = torch.tensor([[math.log(1.1), float("-inf")]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0]])
    adv = torch.tensor([[2.0, 1e9]])
    loss, stats = policy_loss(
        logp,
        old,
        adv,
        torch.tensor([[1, 0]]),
        dual_clip=3.0,
        engine_logp=torch.tensor([[0.0, float("nan")]]),
        tis_cap=2.0,
    )
    close(loss, -2.2)
    close(stats["ratio_mean"], 1.1)
    loss.backward()
    close(logp.grad, [[-2.2, 0.0]])
    empty, _ = policy_loss(logp.detach(), old, adv, torch.zeros(1, 2))
    close(empty, 0.0)


# -- value loss ---------------------------------------------------------------------------------


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_error():
    # old values 1, returns 2, clip .2:
    #   v=1.5: (1.5-2)^2 = .25, v_clip=1.2 -> (1.2-2)^2 = .64  -> .64 (clip active)
    #   v=1.1: .81, v_clip=1.1 -> .81                           -> .81
    #   v=.5:  2.25, v_clip=.8 -> 1.44                          -> 2.25
    #   padding ignored; loss = .5 * (.64 + .81 + 2.25) / 3 = .6166667
    values = torch.tensor([[1.5, 1.1], [0.5, 7.0]])
    old, returns = torch.ones(2, 2), torch.full((2, 2), 2.0)
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, stats = value_loss(values, old, returns, mask, clip=0.2)
    close(loss, 0.6166667)
    close(stats["vf_clip_frac"], 1 / 3)
    unclipped, _ = value_loss(values, old, returns, mask, clip=None)
    close(unclipped, 0.5 * 3.31 / 3)  # .5 * (.25 + .81 + 2.25) / 3


# Parity with the references' own code (skyrl-train, OpenRLHF), every option and edge case:
# tests/trainer/test_reference_losses.py.
