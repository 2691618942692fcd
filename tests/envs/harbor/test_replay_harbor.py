"""`skyhub replay` on an eval run of harbor-examples (each task's image and container, its
tests/test.sh writing the reward): every episode replays identically. The oracle's action
names a one-time token, so its replay sends the replaying env's own reference action; the
shell-typed actions of other agents replay as terminal's do (tests/envs/terminal)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.agents import load_agent
from skyhub.eval.rundir import load_records

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from fork_checks import fork_check

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_harbor_examples_oracle_eval_replays_identically(tmp_path: Path,
                                                         docker_daemon: None) -> None:
    out = tmp_path / "run"
    harness.run("harbor-examples", load_agent("oracle"), n=2, concurrency=2, out=out)
    records = load_records(out)
    assert len(records) == 2 and not any(r["infra_error"] for r in records)
    # solve.sh, then <done/>: the verifier ran and passed
    assert all(r["turns"] == 2 and r["outcome"] == "success" for r in records)
    r = CliRunner().invoke(app, ["replay", str(out), "--all"])
    assert r.exit_code == 0, r.output
    assert "2 identical, 0 differ, 0 could not replay (of 2 episodes)" in r.output


def test_the_fork_check_passes_on_harbor_examples(docker_daemon: None) -> None:
    """A Harbor episode forked mid-way (by replay: a fresh container of the task's image,
    the prefix's commands run again) goes on as the original, the oracle's one-time token
    included (each env sends its own)."""
    message = fork_check("harbor-examples")
    assert "by replay" in message and "went on as the original" in message
