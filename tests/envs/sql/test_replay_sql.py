"""`skyhub replay` on eval runs of the SQL envs (real SQLite databases): every episode replays
identically, error observations and result tables included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.agents import Agent, load_agent
from skyhub.eval.rundir import load_records


class Explorer(Agent):
    """A query that fails, the gold query as an exploration turn (its result table comes
    back), then the reference solution."""

    name = "explorer"

    def act(self, messages: list[dict[str, str]], reference: Any) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return "<think>look first</think>\n<sql>SELECT * FROM no_such_table</sql>"
        solution = reference()
        if turn == 1:
            gold = re.search(r"<solution>(.*)</solution>", solution, re.S).group(1)
            return f"<think>check the rows</think>\n<sql>{gold}</sql>"
        return solution


@pytest.mark.parametrize(("env_id", "kwargs", "agent"), [
    ("sql-spider", {"split": "dev"}, "explorer"),
    ("sql-synth", {}, "explorer"),
    ("sql-spider", {"split": "dev"}, "random"),
])
def test_sql_eval_replays_identically(tmp_path: Path, env_id: str, kwargs: dict,
                                      agent: str) -> None:
    out = tmp_path / "run"
    harness.run(env_id, Explorer() if agent == "explorer" else load_agent(agent, seed=1), n=3,
                concurrency=2, env_kwargs=kwargs, out=out)
    records = load_records(out)
    assert len(records) == 3 and not any(r["infra_error"] for r in records)
    if agent == "explorer":  # the error, the table, the solution: and it scored
        assert all(r["turns"] == 3 and r["outcome"] == "success" for r in records)
        assert all("no such table" in r["messages"][3]["content"] for r in records)
    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 identical, 0 differ, 0 could not replay (of 3 episodes)" in r.output
