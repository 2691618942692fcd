"""Forking a terminal episode on each sandbox backend: the fork check, and children whose
files and shell state are their own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import skyhub

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from fork_checks import fork_check

pytestmark = pytest.mark.slow


def test_the_fork_check_passes(backend: str) -> None:
    message = fork_check("terminal", backend=backend)
    assert "went on as the original" in message


def test_children_have_their_own_files_and_shell(backend: str) -> None:
    with skyhub.make("terminal", backend=backend, max_turns=10) as env:
        env.reset(seed=0)
        env.step("<bash>cd /tmp && export MARK=parent && echo one > shared.txt</bash>")
        left, right = env.fork(2)
        try:
            # the prefix's effects are in each child: its directory, variables and files
            for child in (left, right):
                assert child.turn == 1
                obs = child.step("<bash>echo $MARK; cat shared.txt; pwd</bash>")[0]
                assert "parent\none\n/tmp" in obs
            left.step("<bash>echo LEFTS > shared.txt && export MARK=LEFTM</bash>")
            for e in (env, right):
                obs = e.step("<bash>echo $MARK; cat shared.txt</bash>")[0]
                assert "parent\none" in obs and "LEFT" not in obs
            assert "LEFTM\nLEFTS" in left.step("<bash>echo $MARK; cat shared.txt</bash>")[0]
        finally:
            left.close()
            right.close()
