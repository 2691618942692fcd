"""How a mini-batch is split does not change the learner's step: one
micro-batch, many packed 60-token micro-batches, padded micro-batches and 2 FSDP ranks give the
same gradient within 1e-6, for every aggregation with the KL term on (k1 and k3), TIS and dual
clip on, and for the critic's value loss (GAE, single rank: the critic is not sharded).

Before the fix the KL term was a token mean per micro-batch times a sequence share, so under
the per-sequence aggregations its gradient moved with the split (a relative 0.56 with k1)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from skyhub.trainer import algorithms as A
from skyhub.trainer import dist as D

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
import loss_ranks as L

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CONFIGS = [L.run_config(aggregation, kl) for aggregation in A.AGGREGATIONS
           for kl in ("k1", "k3")]
IDS = [f"{c['aggregation']}-{c['kl']}" for c in CONFIGS]
MANY = 60  # tokens per micro-batch: every episode of the batch in a micro-batch of its own


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def two_ranks() -> list[dict]:
    return D.launch(L.two_rank_gradients, (CONFIGS, MANY), ranks=2)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run: the same reduction order in matmuls
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("index", range(len(CONFIGS)), ids=IDS)
def test_one_micro_batch_many_padded_and_two_ranks_give_the_same_gradient(two_ranks, index):
    config = CONFIGS[index]
    one = L.step_gradient(config, sharded=False, micro_batch_tokens=100_000)
    many = L.step_gradient(config, sharded=False, micro_batch_tokens=MANY)
    padded = L.step_gradient(config, sharded=False, micro_batch_tokens=MANY, pack=False)
    ranks = two_ranks[index]
    assert abs(many["metrics"]["kl"]) > 1e-5  # the KL term is there to be split
    assert max(float(g.abs().max()) for g in one["grads"].values()) > 1e-3
    for other in (many, padded, ranks):
        assert max_diff(one["before"], other["before"]) < 1e-6
        assert max_diff(one["grads"], other["grads"]) < 1e-6
        for key in ("loss", "kl", "entropy"):
            assert other["metrics"][key] == pytest.approx(one["metrics"][key], rel=1e-5,
                                                          abs=1e-7)


def test_the_value_loss_does_not_depend_on_the_split():
    config = L.run_config("seq-mean-token-mean", "k3", advantage="gae")
    one = L.step_gradient(config, sharded=False, micro_batch_tokens=100_000)
    many = L.step_gradient(config, sharded=False, micro_batch_tokens=MANY)
    assert one["metrics"]["value_loss"] > 1e-3
    assert many["metrics"]["value_loss"] == pytest.approx(one["metrics"]["value_loss"],
                                                          rel=1e-5)
    assert max_diff(one["grads"], many["grads"]) < 1e-6
    assert max_diff(one["critic"], many["critic"]) < 1e-6
