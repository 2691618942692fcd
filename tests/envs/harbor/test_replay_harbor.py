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
    """A Harbor episode forked mid-way (by sandbox copy: the container's changes copied into
    a spare container of the task's image, the shell's state into its shell) goes on as the
    original and as a fresh replay, the oracle's one-time token included (each env sends
    its own)."""
    message = fork_check("harbor-examples")
    assert "by sandbox copy" in message and "went on as the original" in message


def test_harbor_children_copy_the_whole_container_and_are_independent(
        docker_daemon: None) -> None:
    """The agent is root in a Harbor task: a fork copies every change of its container
    (files made, changed and deleted anywhere), and the copies go their own ways."""
    import skyhub

    with skyhub.make("harbor-examples", max_turns=10) as env:
        env.reset(seed=0)
        env.step("<bash>echo made > /etc/made.txt && echo changed >> /etc/debian_version && "
                 "rm /etc/shells && mkdir -p /srv/tree/deep && echo leaf > /srv/tree/deep/f && "
                 "cd /srv/tree && export MARK=parent</bash>")
        left, right = env.fork(2)
        try:
            assert (left.forked_by, right.forked_by) == ("sandbox copy", "sandbox copy")
            probe = ("<bash>cat /etc/made.txt; tail -1 /etc/debian_version; "
                     "ls /etc/shells 2>&1 | grep -c 'No such'; cat deep/f; pwd; "
                     "echo $MARK</bash>")
            expected = env.step(probe)[0]
            assert "made\nchanged\n1\nleaf\n/srv/tree\nparent" in expected
            assert left.step(probe)[0] == right.step(probe)[0] == expected
            left.step("<bash>echo LEFT > /etc/made.txt; rm -r /srv/tree/deep</bash>")
            for e in (env, right):
                obs = e.step("<bash>cat /etc/made.txt; ls /srv/tree</bash>")[0]
                assert "made\ndeep" in obs and "LEFT" not in obs
        finally:
            left.close()
            right.close()


def test_a_harbor_container_running_a_service_forks_by_replay(docker_daemon: None) -> None:
    """A process left running (a service) is not in a copy: the fork replays, which starts
    it again."""
    import skyhub

    with skyhub.make("harbor-examples", max_turns=10) as env:
        env.reset(seed=0)
        env.step("<bash>(setsid sleep 300 > /dev/null 2>&1 < /dev/null &); echo started</bash>")
        (child,) = env.fork(1)
        try:
            assert child.forked_by == "replay" and "sleep 300" in env.fork_note
        finally:
            child.close()
