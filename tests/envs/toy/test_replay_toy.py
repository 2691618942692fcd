"""`skyhub replay` on eval runs of the toy envs: every episode replays identically."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.agents import load_agent
from skyhub.eval.rundir import load_records


@pytest.mark.parametrize(("env_id", "kwargs", "agent", "min_turns"), [
    ("toy-lookup", {}, "oracle", 2),               # <lookup> then <answer>
    ("toy-recall", {"hops": 2}, "oracle", 2),      # the key, then the word it maps to
    ("toy-lookup", {}, "random", 1),               # malformed actions until the budget ends
    ("toy-arith", {}, "random", 1),
])
def test_toy_eval_replays_identically(tmp_path: Path, env_id: str, kwargs: dict, agent: str,
                                      min_turns: int) -> None:
    out = tmp_path / "run"
    harness.run(env_id, load_agent(agent, seed=3), n=3, concurrency=2, env_kwargs=kwargs,
                out=out)
    records = load_records(out)
    assert len(records) == 3 and all(r["turns"] >= min_turns for r in records)
    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 identical, 0 differ, 0 could not replay (of 3 episodes)" in r.output
