"""`skyhub train --env ID`: the user's own env in one flag; a run directory is never mixed
with another run; data errors name the train override."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.errors import DataNotFound, UsageError
from skyhub.registry import unregister
from skyhub.trainer.config import load_config
from skyhub.trainer.loop import train

SMALL = ["rollout.samples_per_prompt=4", "optim.train_batch_size=4", "optim.mini_batch_size=4",
         "env.num_envs=4", "loop.eval_every=2", "loop.eval_tasks=4", "loop.tensorboard=false",
         "loop.max_steps=2"]


@pytest.fixture
def guess_env():
    """A user's env the recipe knows nothing of (a three-word recall game under its own id)."""
    skyhub.register("guess-like-test-env", "skyhub.envs.toy.recall:RecallEnv",
                    kwargs={"n_tasks": 50}, override=True)
    yield "guess-like-test-env"
    unregister("guess-like-test-env")


def test_train_env_trains_and_evaluates_on_that_env(tmp_path: Path, guess_env: str) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--env", guess_env, "n_words=3", *SMALL,
                                 "--out", str(out)], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    cfg = (out / "config.yaml").read_text()
    assert "id: guess-like-test-env" in cfg and "n_words: 3" in cfg
    assert "n_tasks: 2000" not in cfg  # the recipe's toy-recall kwargs were cleared
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["eval_env"] == guess_env and "eval_reward_mean" in rows[-1]
    assert f"evaluated on {guess_env} n_words=3" in r.output


def test_a_run_directory_holds_one_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    train(load_config("tiny-cpu", [*SMALL, "loop.max_steps=1", "loop.eval_every=0",
                                   f"loop.out={out}"]), live=False)
    (out / "notes.txt").write_text("mine")  # not the run's: --overwrite leaves it
    with pytest.raises(UsageError, match="--resume to continue it, --overwrite"):
        train(load_config("tiny-cpu", [*SMALL, f"loop.out={out}"]), live=False)
    s = train(load_config("tiny-cpu", [*SMALL, "loop.max_steps=1", "loop.eval_every=0",
                                       f"loop.out={out}", "loop.overwrite=true"]), live=False)
    assert s.steps == 1 and (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_000001"]


def test_a_data_error_names_the_train_override(tmp_path: Path) -> None:
    cfg = load_config("tiny-cpu", [*SMALL, f"loop.out={tmp_path / 'run'}"],
                      env_id="sql-spider", env_kwargs={"data_dir": str(tmp_path / "nowhere")})
    with pytest.raises(DataNotFound, match=r"env\.kwargs\.data_dir="):
        train(cfg, live=False)
