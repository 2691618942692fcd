"""The weight-sync canary with the HF engine (CPU, main venv): it passes after every real sync
and fails for a sync that silently did nothing. The vLLM engine's side is in
test_vllm_engine.py (`-m vllm`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from skyhub.errors import InfraError, UsageError
from skyhub.trainer.errors import WeightSyncError
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.weight_sync import (
    check_sync,
    default_probe,
    engine_logprobs,
    learner_logprobs,
    tolerance,
)


def train_step(model: Any, seed: int, scale: float = 0.05) -> None:
    """What an optimizer step does to the learner's weights, as far as the canary can tell."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


class NoOpSync(HFEngine):
    """An engine whose update_weights bumps the version and loads nothing."""

    def update_weights(self, weights: Any, version: int) -> None:
        self.version = version


class ModelOnly:
    """An engine without `score`: the canary reads its module instead."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.version = 0


def test_canary_passes_after_every_sync(model: Any, tokenizer: Any) -> None:
    engine = HFEngine(model, tokenizer, copy_weights=True)
    assert hasattr(engine, "score")  # helper A's HFEngine.score: the path the canary takes
    model.train()
    for version in range(1, 4):
        train_step(model, seed=version)
        engine.update_weights(model.state_dict(), version)
        diff = check_sync(engine, model)
        assert 0.0 <= diff <= tolerance(torch.float32)
    assert model.training  # the probe's forward ran in eval mode and put the mode back


def test_canary_fails_for_a_sync_that_did_nothing(model: Any, tokenizer: Any) -> None:
    engine = NoOpSync(model, tokenizer, copy_weights=True)
    check_sync(engine, model)  # same weights still: nothing to see yet
    train_step(model, seed=1)
    engine.update_weights(model.state_dict(), 1)
    assert engine.version == 1  # the version says synced; the weights are the old ones
    with pytest.raises(WeightSyncError, match=r"version 1\) did not take"):
        check_sync(engine, model)


def test_canary_reads_the_module_of_an_engine_without_score(model: Any) -> None:
    engine = ModelOnly(copy.deepcopy(model))
    probe = default_probe(model.config.vocab_size)
    assert engine_logprobs(engine, probe) == pytest.approx(learner_logprobs(model, probe),
                                                           abs=1e-6)
    check_sync(engine, model)
    train_step(model, seed=2)
    with pytest.raises(WeightSyncError, match="did not take"):
        check_sync(engine, model)
    engine.model.load_state_dict(model.state_dict())
    check_sync(engine, model)


def test_probe_tolerance_and_misuse(model: Any) -> None:
    vocab = model.config.vocab_size
    probe = default_probe(vocab)
    assert probe == default_probe(vocab) and len(set(probe)) > len(probe) // 2
    assert all(0 <= t < vocab for t in probe)
    assert len(learner_logprobs(model, probe)) == len(probe) - 1
    assert tolerance(torch.bfloat16) > tolerance(torch.float16) > tolerance(torch.float32)
    with pytest.raises(UsageError, match="at least 2 tokens"):
        check_sync(ModelOnly(model), model, probe=[3])
    with pytest.raises(UsageError, match="neither score"):
        check_sync(object(), model)
    # A looser atol accepts what the default refuses (an engine known to run in bf16).
    stale = ModelOnly(copy.deepcopy(model))
    train_step(model, seed=3, scale=1e-3)
    diff = check_sync(stale, model, atol=1.0)
    assert diff > 0


def test_a_sync_that_did_not_take_is_an_infra_error_not_the_policys() -> None:
    assert issubclass(WeightSyncError, InfraError)  # the loop stops; no sample is scored
