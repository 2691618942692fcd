"""`loop.save_episodes`: a training run's episodes in the eval schema, which `skyhub replay`
plays again identically and `skyhub view` reads."""

from __future__ import annotations

import json
from pathlib import Path

from skyhub.eval.replay import IDENTICAL, replay_file
from skyhub.trainer.config import load_config
from skyhub.trainer.loop import train

SMALL = ["rollout.samples_per_prompt=4", "optim.train_batch_size=4", "optim.mini_batch_size=4",
         "env.num_envs=4", "loop.eval_every=0", "loop.tensorboard=false", "loop.max_steps=2",
         "loop.save_episodes=true"]


def test_saved_training_episodes_replay_identically(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # toy-lookup: two turns with a tool call, so observations between actions are compared
    train(load_config("tiny-cpu", [*SMALL, f"loop.out={out}",
                                   "rollout.max_tokens_per_turn=4"], env_id="toy-lookup",
                      env_kwargs={"max_turns": 3}), live=False)
    files = sorted((out / "episodes").glob("step-*.jsonl"))
    assert [f.name for f in files] == ["step-000001.jsonl", "step-000002.jsonl"]
    recs = [json.loads(x) for x in files[0].read_text().splitlines()]
    assert len(recs) == 16 and recs[0]["env_id"] == "toy-lookup"
    assert recs[0]["env_kwargs"] == {"max_turns": 3} and recs[0]["agent"] == "policy@1"
    assert all(r["messages"][0]["role"] == "system" and r["turns"] >= 1 for r in recs)
    assert all(r["tokens"]["completion"] > 0 for r in recs)
    report = replay_file(files[0])
    assert report.counts[IDENTICAL] == 16, [str(r) for r in report.results][:3]
