"""`skyhub replay` on eval runs of the terminal envs (a bash session in a Docker container,
the task's verifier): every episode replays identically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.agents import Agent, load_agent
from skyhub.eval.rundir import load_records

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class Explorer(Agent):
    """Looks around (a listing, a failing command), then the reference solution and
    `<done/>`."""

    name = "explorer"

    def act(self, messages: list[dict[str, str]], reference: Any) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return "<bash>pwd; ls -A; whoami</bash>"
        if turn == 1:
            return "<bash>cat no-such-file; echo status=$?</bash>"
        return reference()


@pytest.mark.parametrize(("env_id", "agent"), [("terminal", "explorer"),
                                               ("terminal-synth", "oracle")])
def test_terminal_eval_replays_identically(tmp_path: Path, env_id: str, agent: str,
                                           docker_daemon: None) -> None:
    out = tmp_path / "run"
    harness.run(env_id, Explorer() if agent == "explorer" else load_agent(agent), n=3,
                concurrency=2, env_kwargs={"backend": "docker"}, out=out)
    records = load_records(out)
    assert not any(r["infra_error"] for r in records)
    assert all(r["outcome"] == "success" and r["turns"] >= 2 for r in records)
    if agent == "explorer":
        assert all("status=1" in r["messages"][5]["content"] for r in records)
    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 identical, 0 differ, 0 could not replay (of 3 episodes)" in r.output
