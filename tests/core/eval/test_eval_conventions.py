"""Evaluation conventions: a required agent, attempts and pass@k, a spread
sample, package folders, what run.json records, hf:PATH and the random agent's source."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.errors import UsageError
from skyhub.eval import harness
from skyhub.eval.agents import Agent, RandomAgent
from skyhub.eval.metrics import pass_at_k, pass_at_k_one
from skyhub.share.scaffold import scaffold
from skyhub.task import Task, spread_sample

runner = CliRunner()


class Coin(Agent):
    """Answers right (the env's reference) with probability `p`, from a seeded draw per call;
    wrong otherwise."""

    name = "coin"

    def __init__(self, p: float, seed: int = 0) -> None:
        self.p, self.rng = p, random.Random(seed)

    def act(self, messages, reference):  # type: ignore[no-untyped-def]
        return reference() if self.rng.random() < self.p else "<answer>wrong</answer>"


def test_pass_at_k_of_an_agent_with_a_known_success_rate() -> None:
    """200 tasks x 6 attempts at p = 0.3: pass@k is 1 - 0.7**k within a few standard errors,
    and each task's estimate is the unbiased one (not 'any of the first k')."""
    summary, episodes = harness.run("toy-arith", Coin(0.3, seed=11), n=200, attempts=6,
                                    concurrency=1, seed=3)
    assert summary.n == 1200 and summary.attempts == 6
    assert {e.attempt for e in episodes} == set(range(6))
    assert len({e.task_index for e in episodes}) == 200
    for k in (1, 2, 4, 6):
        expected = 1 - 0.7 ** k
        se = math.sqrt(expected * (1 - expected) / 200) + 0.01
        assert abs(summary.pass_at_k[f"pass@{k}"] - expected) < 4 * se, (k, summary.pass_at_k)
    assert summary.pass_at_k["pass@1"] == pytest.approx(summary.accuracy)


def test_the_unbiased_estimator_by_hand() -> None:
    assert pass_at_k_one(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k_one(4, 0, 3) == 0.0 and pass_at_k_one(4, 2, 3) == 1.0
    recs = ([{"task_index": 0, "outcome": "success"}] + [{"task_index": 0, "outcome": "failure"}]
            * 3 + [{"task_index": 1, "outcome": "failure", "infra_error": True}])
    out = pass_at_k(recs, [1, 2, 5])
    assert out["tasks"] == 1 and out["pass@1"] == 0.25 and out["pass@2"] == 0.5
    assert math.isnan(out["pass@5"])  # no task with 5 scored attempts: no figure


def test_a_sample_is_spread_over_the_slices_and_extends_as_a_prefix() -> None:
    tasks = [Task(f"t{i}", "q", "a", meta={"db_id": f"db{i % 7}"}) for i in range(70)]
    sample = spread_sample(tasks, 14, seed=5)
    assert len(set(sample)) == 14
    assert sorted([tasks[i].meta["db_id"] for i in sample].count(f"db{d}") for d in
                  range(7)) == [2] * 7
    assert spread_sample(tasks, 30, seed=5)[:14] == sample  # a larger --n extends the sample
    assert sample != list(range(14)) and spread_sample(tasks, 14, seed=6) != sample


def test_eval_cli_needs_an_agent_takes_a_model_and_says_which_tasks(tmp_path: Path) -> None:
    r = runner.invoke(app, ["eval", "toy-lookup", "--n", "2"])
    assert r.exit_code != 0 and "--agent" in r.output
    r = runner.invoke(app, ["eval", "toy-lookup", "-a", "oracle", "-m", "x", "--n", "1"])
    assert r.exit_code != 0 and "takes no model" in r.output
    r = runner.invoke(app, ["eval", "sql-spider", "-a", "oracle", "--n", "6", "--attempts", "2",
                            "--out", str(tmp_path / "run"), "--no-report"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "a seeded sample of 6 of" in r.output and "db_id" in r.output
    assert "pass@2" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["sample"]["kind"] == "sample" and run["sample"]["by"] == "db_id"
    assert run["attempts"] == 2 and run["agent"] == "oracle"


def test_openai_agent_from_a_kind_and_a_model() -> None:
    from skyhub.cli.eval_cmds import agent_spec

    assert agent_spec("openai", "gpt-4o") == "openai:gpt-4o"
    assert agent_spec("hf", "./ckpt") == "hf:./ckpt"
    assert agent_spec("openai:gpt-4o", None) == "openai:gpt-4o"


def test_eval_takes_an_env_package_folder(tmp_path: Path) -> None:
    """`skyhub eval FOLDER` as `skyhub check FOLDER`: the package's env, from disk (in a fresh
    process, so this one's registry stays clean)."""
    pkg = scaffold("conv-capitals", tmp_path)
    out = subprocess.run([str(Path(sys.executable).parent / "skyhub"), "eval", str(pkg),
                          "-a", "oracle", "--out", str(tmp_path / "run"), "--no-report"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stdout[-1500:] + out.stderr[-1500:]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["env_id"] == "conv-capitals"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["accuracy"] == 1.0


def test_random_agent_draws_from_the_envs_own_sample_action() -> None:
    _, episodes = harness.run("toy-lookup", RandomAgent(seed=4), n=30, concurrency=3)
    actions = [a for e in episodes for a in e.actions]
    # toy envs draw protocol-shaped actions: their own tags, and the malformed turns
    assert any(a.startswith("<lookup>") for a in actions)
    assert any(a.startswith("<answer>") and a.endswith("</answer>") for a in actions)
    assert "" in actions
    # an env without its own: its action space (arbitrary text), seeded
    import skyhub

    with skyhub.make("sql-spider") as env:
        env.reset(seed=0)
        a, b = env.sample_action(seed=9), env.sample_action(seed=9)
        assert a == b and env.action_space.contains(a) and not a.startswith("<sql>")


def test_hf_agent_path_that_is_neither_a_directory_nor_a_hub_id(tmp_path: Path) -> None:
    from skyhub.trainer.hf_agent import resolve_model_dir, weights_sha256

    for bad in ("my/nested/model", "not a model", str(tmp_path / "missing")):
        with pytest.raises(UsageError, match=r"not a hub id|no such directory"):
            resolve_model_dir(bad)
    assert resolve_model_dir("Qwen/Qwen2.5-0.5B-Instruct")[0] == "Qwen/Qwen2.5-0.5B-Instruct"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"weights")
    expected = hashlib.sha256(b"model.safetensors\0weights").hexdigest()
    assert weights_sha256(tmp_path / "m") == expected
    (tmp_path / "m" / "model.safetensors").write_bytes(b"other")
    assert weights_sha256(tmp_path / "m") != expected
    with pytest.raises(UsageError, match="attempts"):
        harness.run("toy-arith", RandomAgent(), n=2, attempts=0)
