"""The learner: packed forward passes are exact, accumulation does not change the step, and
every advantage estimator and loss option trains."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from skyhub.trainer.config import AlgoConfig, OptimConfig
from skyhub.trainer.learner import Learner
from skyhub.trainer.packing import plan_micro_batches
from skyhub.trainer.tiny import tiny_model

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from trainer_ranks import episodes


def reference_logprobs(model, ep):
    ids = torch.tensor([ep.token_ids])
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    return lp.gather(-1, ids[0, 1:, None])[:, 0]


@pytest.mark.parametrize("pack", [True, False])
def test_micro_batched_logprobs_equal_one_episode_at_a_time(pack):
    model = tiny_model(300)
    eps = episodes()
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=200), pack=pack)
    plan = plan_micro_batches(eps, 200, pack)
    assert len(plan) > 1 and sorted(id(e) for mb in plan for e in mb.episodes) == sorted(
        id(e) for e in eps)
    for ep, lp in zip(eps, learner.logprobs(eps), strict=True):
        assert torch.allclose(lp, reference_logprobs(model, ep), atol=1e-5)


def test_short_episodes_share_a_row_with_exact_logprobs():
    model = tiny_model(300)
    eps = episodes(7)
    long, short = eps[0], eps[1:]
    long.token_ids, long.loss_mask = long.token_ids * 4, long.loss_mask * 4
    long.logprobs, long.versions = long.logprobs * 4, long.versions * 4
    for e in short:
        for field in ("token_ids", "loss_mask", "logprobs", "versions"):
            setattr(e, field, getattr(e, field)[:10])
    plan = plan_micro_batches(eps, 10_000, True)
    assert len(plan) == 1 and plan[0].input_ids.shape[0] < len(eps)  # rows are shared
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=10_000))
    for ep, lp in zip(eps, learner.logprobs(eps), strict=True):
        assert torch.allclose(lp, reference_logprobs(model, ep), atol=1e-5)


def test_packing_wastes_little_on_a_mixed_length_batch():
    eps = episodes(64, seed=1)
    real = sum(len(e.token_ids) for e in eps)
    packed = sum(mb.input_ids.numel() for mb in plan_micro_batches(eps, 256, True))
    padded = sum(mb.input_ids.numel() for mb in plan_micro_batches(eps, 256, False))
    assert packed < padded and real / packed > 0.85


def step_weights(micro_batch_tokens, **algo):
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(**algo), OptimConfig(
        lr=1e-2, micro_batch_tokens=micro_batch_tokens, train_batch_size=3, mini_batch_size=3))
    metrics = learner.train_step(episodes(), 4)
    return {k: v.clone() for k, v in model.state_dict().items()}, metrics


def step_grads(micro_batch_tokens, **algo):
    """The gradient of one mini-batch (compared instead of weights: Adam's first step is
    about lr * sign(g), which turns rounding noise in a near-zero gradient into a full step)."""
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(**algo), OptimConfig(
        micro_batch_tokens=micro_batch_tokens, train_batch_size=3, mini_batch_size=3))
    learner.opt.step = lambda: None
    learner.train_step(episodes(), 4)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_gradient_accumulation_gives_the_same_gradient_as_one_big_batch(aggregation):
    big = step_grads(100_000, aggregation=aggregation)
    small = step_grads(60, aggregation=aggregation)
    assert any(g.abs().max() > 1e-4 for g in big.values())
    assert all(torch.allclose(big[k], small[k], atol=1e-6, rtol=1e-4) for k in big)


def test_gradient_checkpointing_gives_the_same_gradient():
    from skyhub.trainer.policy import enable_checkpointing

    plain = step_grads(100_000)
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    enable_checkpointing(model)
    learner = Learner(model, AlgoConfig(), OptimConfig(train_batch_size=3, mini_batch_size=3))
    learner.opt.step = lambda: None
    learner.train_step(episodes(), 4)
    assert all(torch.allclose(plain[n], p.grad, atol=1e-6, rtol=1e-4)
               for n, p in model.named_parameters())


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo", "reinforce++", "gae"])
def test_every_estimator_takes_a_step(advantage):
    before = tiny_model(300, seed=1).state_dict()
    after, metrics = step_weights(200, advantage=advantage)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert metrics["grad_norm"] > 0
    if advantage == "gae":
        assert "value_loss" in metrics


def test_kl_loss_uses_a_frozen_reference_model():
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(kl_coef=0.1), OptimConfig(
        lr=1e-2, train_batch_size=3, mini_batch_size=3))
    first = learner.train_step(episodes(), 4)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
    second = learner.train_step(episodes(), 4)
    assert second["kl"] > 0  # it has moved away; the reference has not
    assert all(not p.requires_grad for p in learner.ref.parameters())


def test_ppo_epochs_and_mini_batches_clip_against_the_old_policy():
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(), OptimConfig(
        lr=5e-2, epochs=3, train_batch_size=3, mini_batch_size=1))
    metrics = learner.train_step(episodes(), 4)
    assert metrics["clip_frac"] > 0  # later updates move past the clip range of the old policy


def test_checkpoint_round_trip_restores_weights_and_optimizer(tmp_path):
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(), OptimConfig(lr=1e-2, train_batch_size=3,
                                                       mini_batch_size=3))
    learner.train_step(episodes(), 4)
    learner.save(tmp_path / "ck")
    other = Learner(tiny_model(300, seed=5), AlgoConfig(), OptimConfig(
        lr=1e-2, train_batch_size=3, mini_batch_size=3))
    other.load(tmp_path / "ck")
    assert other.steps == 1
    for k, v in model.state_dict().items():
        assert torch.equal(v, other.model.state_dict()[k])
    a = learner.train_step(episodes(seed=2), 4)
    b = other.train_step(episodes(seed=2), 4)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for k, v in model.state_dict().items():
        assert torch.allclose(v, other.model.state_dict()[k], atol=1e-6)


def test_kl_in_the_reward_penalises_episodes_that_moved_away():
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(kl_coef=0.5, kl_in_reward=True, kl_estimator="k1"),
                      OptimConfig(lr=1e-2, train_batch_size=3, mini_batch_size=3))
    assert learner.train_step(episodes(), 4)["kl_penalty"] == pytest.approx(0.0, abs=1e-5)
    eps = episodes()
    second = learner.train_step(eps, 4)
    assert second["kl_penalty"] != pytest.approx(0.0, abs=1e-4) and "kl" not in second
    # the penalty enters the advantages: same rewards, other advantages than without it
    penalised = {id(e): torch.tensor(e.reward) - 1.0 * i for i, e in enumerate(eps)}
    plain = learner._episode_advantages(eps, 4)
    moved = learner._episode_advantages(eps, 4, penalised)
    assert any(not torch.isclose(plain[id(e)], moved[id(e)]) for e in eps)
