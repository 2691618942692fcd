"""Evaluation runner, agents and `skyhub eval`: reproducible, concurrent, infra errors apart."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.eval import harness, metrics
from skyhub.eval.agents import OracleAgent, RandomAgent, ScriptAgent, load_agent
from skyhub.registry import unregister

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))


@pytest.fixture
def count_env_id() -> str:
    skyhub.register("test-count", "skyhub_testenvs:CountEnv", override=True)
    yield "test-count"
    unregister("test-count")


def test_oracle_solves_every_toy_lookup_episode() -> None:
    summary, episodes = harness.run("toy-lookup", OracleAgent(), n=30, concurrency=4)
    assert summary.n == 30 and summary.mean_reward == 1.0 and summary.accuracy == 1.0
    assert summary.infra_errors == 0 and summary.mean_turns == 2.0
    assert all(e.messages()[-1]["role"] == "assistant" for e in episodes)


def test_results_do_not_depend_on_concurrency() -> None:
    a = harness.run("toy-lookup", RandomAgent(seed=3), n=20, concurrency=1, seed=5)[1]
    b = harness.run("toy-lookup", OracleAgent(), n=20, concurrency=7, seed=5)[1]
    assert [e.task_id for e in a] == [e.task_id for e in b]
    assert len({e.task_id for e in a}) > 10


def test_random_agent_is_a_floor_and_never_breaks_the_env() -> None:
    summary, _ = harness.run("toy-lookup", RandomAgent(seed=0), n=60, concurrency=8)
    assert summary.n == 60 and summary.infra_errors == 0
    assert summary.mean_reward < 0.3


def test_infra_errors_are_counted_apart_not_scored_zero(count_env_id: str) -> None:
    agent = ScriptAgent(lambda messages: "ab")
    summary, episodes = harness.run(count_env_id, agent, n=30, concurrency=4,
                                     env_kwargs={"crash_task": "t1"})
    crashed = [e for e in episodes if e.task_id == "t1"]
    fine = [e for e in episodes if e.task_id != "t1"]
    assert crashed and fine
    assert summary.infra_errors == len(crashed)
    assert all(e.infra_error and e.outcome == "error" for e in crashed)
    # CountEnv: task tK lasts K+1 steps, reward len(action) = 2 per step
    expected = sum(2.0 * (int(e.task_id[1]) + 1) for e in fine) / len(fine)
    assert summary.mean_reward == pytest.approx(expected)


def test_episode_that_never_ends_is_cut_as_infra_error(count_env_id: str) -> None:
    summary, episodes = harness.run(count_env_id, ScriptAgent(lambda m: "a"), n=12,
                                     concurrency=3, max_steps=2)
    cut = [e for e in episodes if e.task_id == "t2"]  # t2 needs 3 steps
    assert cut and all(e.infra_error for e in cut)
    assert "max_steps" in cut[0].final_info["error"]
    assert summary.infra_errors == len(cut)


def test_wilson_interval_for_binary_rewards() -> None:
    lo, hi = metrics.ci95([1.0] * 50)
    assert lo == pytest.approx(50 / (50 + 1.96**2), abs=1e-9) and hi == pytest.approx(1.0)
    lo, hi = metrics.ci95([0.0, 1.0] * 50)
    assert lo < 0.5 < hi and lo >= 0 and hi <= 1
    lo, hi = metrics.ci95([0.5, 1.5, 2.5])
    assert lo < 1.5 < hi
    assert all(math.isnan(x) for x in metrics.ci95([]))


def test_script_agent_loads_from_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_agents.py").write_text("def lookup_then_guess(messages):\n"
                                           "    return '<answer>amber</answer>'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = load_agent("script:my_agents:lookup_then_guess")
    assert agent.act([{"role": "user", "content": "q"}], lambda: None) == "<answer>amber</answer>"
    with pytest.raises(ValueError, match="script:module:function"):
        load_agent("script:nomodule")
    with pytest.raises(ValueError, match="cannot load"):
        load_agent("script:my_agents:missing")
    with pytest.raises(ValueError, match="unknown agent"):
        load_agent("gpt-17")


def test_nop_agent_does_nothing_and_scores_zero() -> None:
    agent = load_agent("nop")
    assert agent.name == "nop" and agent.act([], lambda: "<answer>gold</answer>") == ""
    summary, _ = harness.run("toy-lookup", agent, n=4, concurrency=2)
    assert summary.mean_reward == 0.0 and summary.infra_errors == 0


def test_eval_command_writes_episodes_and_a_summary_that_agree(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "toy-lookup", "max_turns=4", "--agent", "random",
                                      "--n", "25", "--concurrency", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(lines) == summary["n"] == 25
    assert summary["mean_reward"] == pytest.approx(sum(x["reward"] for x in lines) / 25)
    assert {"accuracy", "ci95", "infra_errors"} <= set(summary)
    assert "toy-lookup: random" in result.output
    assert all(x["messages"][0]["content"].endswith("You have 4 turns.") for x in lines)


def test_eval_command_rejects_unknown_agent_and_env() -> None:
    r = CliRunner().invoke(app, ["eval", "toy-lookup", "--agent", "nonsense"])
    assert r.exit_code == 2 and "unknown agent" in r.output
    r = CliRunner().invoke(app, ["eval", "toy-lookp", "--agent", "oracle"])
    assert r.exit_code == 2 and "toy-lookup" in r.output


def test_n_equal_to_the_task_count_covers_every_task_once() -> None:
    _, episodes = harness.run("toy-lookup", OracleAgent(), n=100, concurrency=9,
                               env_kwargs={"split": "dev"})
    with skyhub.make("toy-lookup", split="dev") as env:
        assert sorted(e.task_id for e in episodes) == sorted(env.tasks.ids())
