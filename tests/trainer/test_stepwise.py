"""Step-wise training: segments as samples give the gradient of the whole trajectory when
nothing was summarised, advantages are per episode (never per sample), and settings that
cannot be exact with samples are refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from skyhub.errors import UsageError
from skyhub.gateway.sessions import Record, Session
from skyhub.trainer.config import AlgoConfig, OptimConfig
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Trajectory
from skyhub.trainer.stepwise import check_algo, expand, from_segments, per_turn
from skyhub.trainer.tiny import tiny_model

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from trainer_ranks import episodes


def grads(batch, **algo):
    torch.manual_seed(0)
    model = tiny_model(300, seed=1)
    learner = Learner(model, AlgoConfig(**algo), OptimConfig(
        micro_batch_tokens=150, train_batch_size=3, mini_batch_size=3))
    learner.opt.step = lambda: None
    metrics = learner.train_step(batch, 4)
    return {n: p.grad.clone() for n, p in model.named_parameters()}, metrics


def session_of(e: Trajectory) -> Session:
    """What the gateway records when an agent plays `e` turn by turn, re-sending its history:
    one record per agent turn, its prompt the whole history before it."""
    s = Session("t")
    for k, turn in enumerate(per_turn(e)):
        done = turn.prompt_len
        s.add(Record(f"r{k}", [], None, turn.token_ids[:done], turn.token_ids[done:],
                     turn.logprobs[done:], turn.versions[done:], "stop", {}))
    return s


def close(a, b) -> bool:
    return all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)


def test_merged_segments_train_exactly_as_the_whole_trajectory():
    whole = episodes()
    merged = episodes()
    for e in merged:
        (seg,) = session_of(e).segments()  # every request extended the last: one segment
        from_segments(e, [seg], stepwise=True)
        assert e.parts == []  # one segment: the episode is its own sample
    for w, m in zip(whole, merged, strict=True):  # the same ids, less the last observation
        end = max(i for i, x in enumerate(w.loss_mask) if x) + 1
        assert m.token_ids == w.token_ids[:end] and m.loss_mask == w.loss_mask[:end]
    g_whole, _ = grads(whole)
    g_merged, _ = grads(merged)
    assert any(g.abs().max() > 1e-4 for g in g_whole.values())
    assert close(g_whole, g_merged)


def test_per_request_samples_give_the_whole_trajectorys_gradient():
    """Unmerged (each request its own sample, its prompt the history): under token-mean the
    same gradient within 1e-6, and the samples are what the learner trained."""
    whole = episodes()
    split = episodes()
    for e in split:
        e.parts = per_turn(e)
    assert sum(len(e.parts) for e in split) > len(split)
    g_whole, _ = grads(whole)
    g_split, metrics = grads(split)
    assert metrics["samples"] == sum(len(e.parts) for e in split)
    assert close(g_whole, g_split)


def test_a_summary_starts_a_second_sample_with_the_episodes_advantage():
    """A session whose third request does not extend the history (a summary): two samples,
    both carrying the episode's advantage, computed over episodes (the group's other episode
    is one sample; GRPO's mean and std are over the two episodes, not three samples)."""
    s = Session("t")
    s.add(Record("a", [], None, [5, 6], [7, 8], [-1.0, -1.0], [0, 0], "stop", {}))
    s.add(Record("b", [], None, [5, 6, 7, 8, 9], [10], [-1.0], [0], "stop", {}))
    s.add(Record("c", [], None, [5, 11], [12, 13], [-1.0, -1.0], [0, 0], "stop", {}))
    segs = s.segments()
    assert [seg.records for seg in segs] == [[0, 1], [2]]
    won = Trajectory(group=0, task_id="x", reward=1.0)
    from_segments(won, segs, stepwise=True)
    lost = Trajectory(group=0, task_id="x", reward=0.0)
    from_segments(lost, segs[1:], stepwise=True)
    assert len(won.parts) == 2 and lost.parts == []
    assert won.parts[0].token_ids == [5, 6, 7, 8, 9, 10]
    assert won.parts[0].loss_mask == [0, 0, 1, 1, 0, 1]
    learner = Learner(tiny_model(300, seed=1), AlgoConfig(), OptimConfig())
    adv = learner._episode_advantages([won, lost], 2)
    samples, per_sample = expand([won, lost], adv)
    assert samples == [*won.parts, lost]
    values = [float(per_sample[id(x)]) for x in samples]
    assert values[0] == values[1] == pytest.approx(0.7071, abs=1e-3)
    assert values[2] == pytest.approx(-0.7071, abs=1e-3)
    # without step-wise, the episode trains its last segment only
    plain = Trajectory(group=0, task_id="x")
    from_segments(plain, segs, stepwise=False)
    assert plain.parts == [] and plain.token_ids == [5, 11, 12, 13]


@pytest.mark.parametrize("algo", [{"advantage": "reinforce++"}, {"advantage": "gae"},
                                  {"kl_in_reward": True, "kl_coef": 0.1}])
def test_settings_that_need_whole_sequences_are_refused(algo):
    with pytest.raises(UsageError, match=r"rollout\.stepwise"):
        check_algo(AlgoConfig(**algo))
    split = episodes(4)
    for e in split:
        e.parts = per_turn(e)
    if algo.get("advantage") != "gae":  # (gae needs a critic the test does not build)
        with pytest.raises(UsageError, match=r"rollout\.stepwise"):
            grads(split, **algo)
