"""Tree rollouts learn: the tiny-cpu recipe on the two-turn toy-recall (the word is only in
the env's reply to the first turn), each prompt's two roots forked after turn 1 into eight
children, goes from chance to competence on 2 CPU cores in a few minutes."""

from __future__ import annotations

import pytest

from skyhub.trainer.config import load_config
from skyhub.trainer.loop import train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_tree_rollouts_take_two_turn_recall_from_chance_to_at_least_0_9(tmp_path):
    env = "hops: 2, name_key: false, n_words: 6"
    cfg = load_config("tiny-cpu", [
        f"loop.out={tmp_path}", "loop.tensorboard=false", "loop.save_every=1000",
        f"env.kwargs={{{env}, n_tasks: 2000}}",
        f"env.eval_kwargs={{{env}, n_tasks: 100, seed: 99}}",
        "rollout.samples_per_prompt=2", "rollout.branch_at=1", "rollout.branch_n=8",
        "rollout.max_in_flight=null", "loop.max_steps=90", "loop.eval_every=45"])
    s = train(cfg, live=False)
    chance = 1 / 6
    first = s.metrics[0]
    assert first["reward_mean"] < chance
    # every root forked once, into 8 children, each of which played turn 2
    assert all(r["forks"] == 32 * 2 and r["episodes"] == 32 * 2 * 8 for r in s.metrics)
    assert all(r["turns_mean"] == 2.0 and r["infra_errors"] == 0 for r in s.metrics)
    evals = [r["eval_reward_mean"] for r in s.metrics if "eval_reward_mean" in r]
    assert evals[-1] >= 0.9, evals  # greedy, on tasks it did not train on
