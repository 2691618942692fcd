"""One turn budget: the env's `max_turns`. The rollout plays as many turns as the env grants
(`rollout.max_turns_cap` is only a safety limit, never below the env's budget), and the loss
normaliser's length comes from the env's budget."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import skyhub
from skyhub.errors import UsageError
from skyhub.trainer.config import RolloutConfig, load_config
from skyhub.trainer.rollout import env_max_turns, norm_len, turn_limit

# the tiny-cpu recipe at the smallest sizes that still train: a few seconds a step on a CPU
SMALL = ["rollout.samples_per_prompt=2", "optim.train_batch_size=2", "optim.mini_batch_size=2",
         "env.num_envs=4", "loop.eval_every=0", "loop.tensorboard=false",
         "loop.save_episodes=true", "loop.torch_threads=1"]


def test_the_help_example_trains_episodes_of_the_envs_turns(tmp_path: Path) -> None:
    # `skyhub train --env toy-lookup max_turns=3` (the --help example) on the tiny recipe,
    # whose toy-recall needs one turn: the episodes must get toy-lookup's three turns, not
    # be cut after one while the env says "(2 turns left)".
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "skyhub.cli.main", "train", "--env", "toy-lookup", "max_turns=3",
         "loop.max_steps=10", *SMALL, "--out", str(out)],
        cwd=tmp_path, env=dict(os.environ), text=True, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = sorted((out / "episodes").glob("step-*.jsonl"))
    assert len(files) == 10
    recs = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(recs) == 10 * 2 * 2 and {r["env_kwargs"]["max_turns"] for r in recs} == {3}
    # the tiny model's one-token replies are never an answer: each episode uses the budget
    assert max(r["turns"] for r in recs) == 3
    assert all(r["turns"] > 1 or r["terminated"] for r in recs)
    long = next(r for r in recs if r["turns"] > 1)
    assert "turns left" in long["messages"][3]["content"]  # the env says so
    assert not any(r["truncated"] and r["turns"] < 3 and not r["infra_error"] for r in recs)


def test_the_rollout_reads_the_budget_from_the_env() -> None:
    with skyhub.make_vec("toy-lookup", 1, autoreset_mode="disabled", max_turns=4) as venv:
        assert env_max_turns(venv) == 4
    with skyhub.make_vec("toy-recall", 1, autoreset_mode="disabled") as venv:
        assert env_max_turns(venv) == 1


def test_a_cap_below_the_envs_budget_is_raised_to_it_with_a_warning(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="skyhub.trainer.rollout"):
        assert turn_limit(1, 3) == 3
    assert "rollout.max_turns_cap=1 is below" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="skyhub.trainer.rollout"):
        assert turn_limit(8, 3) == 8 and turn_limit(5, None) == 5
        assert turn_limit(None, 3) is None
    assert not caplog.text


def test_the_loss_normaliser_takes_its_length_from_the_envs_budget() -> None:
    cfg = RolloutConfig(max_tokens_per_turn=100, max_input_tokens=4096)
    assert norm_len(cfg, 6) == 600
    capped = RolloutConfig(max_turns_cap=2, max_tokens_per_turn=100, max_input_tokens=4096)
    assert norm_len(capped, 6) == 600  # the env's budget, not the safety cap
    assert norm_len(capped, None) == 200 and norm_len(cfg, None) == 4096


def test_the_old_rollout_budget_key_says_where_the_budget_is() -> None:
    with pytest.raises(UsageError, match=r"env\.kwargs\.max_turns=N"):
        load_config("tiny-cpu", ["rollout.max_turns=3"])
    with pytest.raises(UsageError, match="max_turns_cap must be >= 1"):
        load_config("tiny-cpu", ["rollout.max_turns_cap=0"])
