"""`skyhub replay` on an eval run of search-qa (the bundled corpus and index): every episode
replays identically, the retrieved passages included."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.agents import load_agent
from skyhub.eval.rundir import load_records


@pytest.mark.parametrize("agent", ["oracle", "random"])
def test_search_eval_replays_identically(tmp_path: Path, agent: str) -> None:
    out = tmp_path / "run"
    harness.run("search-qa", load_agent(agent, seed=2), n=3, concurrency=2, out=out)
    records = load_records(out)
    assert len(records) == 3 and not any(r["infra_error"] for r in records)
    if agent == "oracle":  # <search> (passages come back), then <answer>
        assert all(r["turns"] == 2 and "<information>" in r["messages"][3]["content"]
                   for r in records)
    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 identical, 0 differ, 0 could not replay (of 3 episodes)" in r.output
