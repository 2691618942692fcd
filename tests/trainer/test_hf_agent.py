"""`--agent hf:PATH`: a saved transformers model evaluated through the trainer's engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.errors import UsageError
from skyhub.eval import harness as evaluate
from skyhub.eval.agents import load_agent


@pytest.fixture
def model_dir(tmp_path: Path, model, tokenizer) -> Path:
    d = tmp_path / "policy"
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d


def test_hf_agent_batches_episodes_and_reports_tokens(model_dir: Path, chat) -> None:
    agent = load_agent(f"hf:{model_dir}", max_tokens=6)
    batches: list[int] = []
    generate = agent.engine.generate

    def spy(prompts, params, seeds=None):
        batches.append(len(prompts))
        return generate(prompts, params, seeds)

    agent.engine.generate = spy
    try:
        summary, episodes = evaluate.run("toy-recall", agent, n=8, concurrency=4)
    finally:
        agent.close()
    assert summary.n == 8 and summary.infra_errors == 0
    assert max(batches) > 1  # replies of concurrent episodes share a generate call
    for ep in episodes:
        assert ep.completion_tokens and 0 < ep.completion_tokens <= 6 * len(ep.actions)
        assert ep.prompt_tokens and ep.prompt_tokens > ep.completion_tokens
        assert all(chat.tokenizer.eos_token not in a for a in ep.actions)


def test_hf_agent_is_greedy_and_deterministic(model_dir: Path) -> None:
    runs = []
    for concurrency in (1, 5):
        agent = load_agent(f"hf:{model_dir}", max_tokens=4)
        try:
            runs.append([e.actions for e in evaluate.run("toy-recall", agent, n=5,
                                                         concurrency=concurrency)[1]])
        finally:
            agent.close()
    assert runs[0] == runs[1]


def test_hf_agent_finds_a_training_runs_newest_checkpoint(tmp_path: Path, model,
                                                          tokenizer) -> None:
    from skyhub.trainer.hf_agent import resolve_model_dir

    run = tmp_path / "run"
    tokenizer.save_pretrained(run / "tokenizer")
    for step in (5, 10):
        model.save_pretrained(run / "checkpoints" / f"step_{step:06d}" / "model")
    model_path, tok_path = resolve_model_dir(str(run))
    assert model_path.endswith("step_000010/model") and tok_path == str(run / "tokenizer")
    with pytest.raises(UsageError, match="no such directory"):
        resolve_model_dir(str(tmp_path / "missing"))
    with pytest.raises(UsageError, match=r"config\.json"):
        resolve_model_dir(str(run / "tokenizer"))


def test_eval_command_with_an_hf_model(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    r = CliRunner().invoke(app, ["eval", "toy-recall", "--agent", f"hf:{model_dir}", "--n", "4",
                                 "--max-tokens", "3", "--out", str(out), "--no-report"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(x["tokens"]["completion"] for x in lines)
    assert json.loads((out / "run.json").read_text())["agent"] == f"hf:{model_dir}"


def test_hf_agent_ends_turns_at_the_envs_stop_strings(model_dir: Path) -> None:
    agent = load_agent(f"hf:{model_dir}", max_tokens=8)
    seen = []
    generate = agent.engine.generate

    def spy(prompts, params, seeds=None):
        seen.append(params.stop)
        return generate(prompts, params, seeds)

    agent.engine.generate = spy
    try:
        evaluate.run("toy-lookup", agent, n=2, concurrency=2)
    finally:
        agent.close()
    assert seen and all(stop == ("</lookup>", "</answer>") for stop in seen)
