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


# what a shell holds besides its files; each child of a fork must show it exactly
STATE = ("<bash>mkdir -p /tmp/dir/sub && cd /tmp/dir && cd sub && echo data > /tmp/dir/f && "
         "A=plain; export EXP='exported value'; ARR=(one 'two words' three); "
         "declare -A ASSOC=([k]=v [x]=y); declare -i NUM=41+1; "
         "MULTI=$'line1\\nline2\\r\\x1b[31mred\\ttab'; readonly FIXED=1; unset PAGER; "
         "greet() { echo \"hello $1\"; }; alias ll='ls -la'; set -o pipefail -o noclobber; "
         "shopt -s extglob nullglob; umask 027; trap 'echo caught' USR1</bash>")
PROBE = ("<bash>pwd; echo \"old=$OLDPWD\"; declare -p A EXP ARR ASSOC NUM MULTI FIXED; "
         "echo \"pager=${PAGER-unset}\"; declare -f greet; greet you; alias; "
         "set -o | grep -E '^(pipefail|noclobber|nounset) '; shopt extglob nullglob; umask; "
         "trap -p USR1; ls -la /tmp/dir | tail -n +2 | awk '{print $1, $NF}'; "
         "cat /tmp/dir/f</bash>")
# the shell's variables but those bash keeps for itself, and its other state
SHELL_DUMP = ("<bash>( for n in $(compgen -v); do case $n in BASH*|RANDOM|SRANDOM|SECONDS|"
              "LINENO|EPOCH*|_|PIPESTATUS|HISTCMD|n) ;; *) declare -p $n;; esac; done; "
              "declare -f; alias; set +o; shopt -p; umask; trap -p; jobs ) | md5sum</bash>")


def test_children_copy_the_sandbox_and_the_whole_shell(backend: str) -> None:
    with skyhub.make("terminal", backend=backend, max_turns=10) as env:
        env.reset(seed=0)
        env.step(STATE)
        children = env.fork(2)
        try:
            assert [c.forked_by for c in children] == ["sandbox copy"] * 2
            assert len({id(c._sandbox) for c in (env, *children)}) == 3
            expected = env.step(PROBE)[0]
            for name in ("A=\"plain\"", "hello you", "pager=unset", "extglob", "0027",
                         "caught", "data", "old=/tmp/dir", "line1"):
                assert name in expected, name
            for child in children:
                assert child.step(PROBE)[0] == expected
        finally:
            for child in children:
                child.close()


def test_children_and_parent_are_independent_after_a_sandbox_fork(backend: str) -> None:
    with skyhub.make("terminal", backend=backend, max_turns=10) as env:
        env.reset(seed=0)
        env.step(STATE)
        left, right = env.fork(2)
        try:
            left.step("<bash>echo changed > /tmp/dir/f; echo new > /work/new; A=left; "
                      "unalias ll; greet() { echo bye; }; cd /</bash>")
            for e in (env, right):
                obs = e.step("<bash>cat /tmp/dir/f; ls /work; echo $A; alias; greet x; "
                             "pwd</bash>")[0]
                assert "data\n" in obs and "new" not in obs and "plain" in obs
                assert "ll=" in obs and "hello x" in obs and "/tmp/dir/sub" in obs
        finally:
            left.close()
            right.close()


def test_a_fork_leaves_the_parents_shell_as_it_was(backend: str) -> None:
    with skyhub.make("terminal", backend=backend, max_turns=10) as env:
        env.reset(seed=0)
        env.step(STATE)
        before = env.step(SHELL_DUMP)[0].split("</output>")[0]
        for child in env.fork(1):
            child.close()
        assert env.step(SHELL_DUMP)[0].split("</output>")[0] == before


def test_a_shell_with_a_background_job_forks_by_replay(backend: str) -> None:
    with skyhub.make("terminal", backend=backend, max_turns=10) as env:
        env.reset(seed=0)
        env.step("<bash>{ sleep 60 & } 2>/dev/null; echo started</bash>")
        (child,) = env.fork(1)
        try:
            assert child.forked_by == "replay"
            assert "background job" in env.fork_note
            assert "sleep 60" in child.step("<bash>jobs</bash>")[0]
        finally:
            child.close()


def _ours(backend: str) -> set[str]:
    """The sandboxes this process owns now."""
    import os

    if backend == "local":
        from skyhub.sandbox.local_scratch import list_sandboxes

        return {s["id"] for s in list_sandboxes() if s["owner_pid"] == os.getpid()}
    from skyhub.sandbox.docker_client import get_client

    return {c.id for c in get_client().containers.list(
        all=True, ignore_removed=True,
        filters={"label": f"skyhub.owner_pid={os.getpid()}"})}


def test_forks_and_their_spares_leave_no_sandbox_behind(backend: str) -> None:
    before = _ours(backend)
    with skyhub.make("terminal", backend=backend, max_turns=10) as env:
        env.reset(seed=0)
        env.step("<bash>echo hi > f</bash>")
        children = env.fork(3)
        assert env.spares().wait_ready(timeout=120) == 3  # kept ready for the next fork
        grandchildren = children[0].fork(1)
        for child in (*children, *grandchildren):
            assert "hi" in child.step("<bash>cat f</bash>")[0]
            child.close()
    assert _ours(backend) == before


def test_an_unchanged_shell_forks_with_one_line(backend: str) -> None:
    """The script a fork sends is what differs from a fresh shell: nothing but the `cd`."""
    from skyhub.shell.fork import export_shell, script_for
    from skyhub.shell.session import ShellSession

    with skyhub.sandbox.create(backend=backend) as sb, ShellSession(sb) as one, \
            ShellSession(sb) as two:
        assert script_for(export_shell(one), export_shell(two)) == \
            f"\\builtin cd -- {sb.workdir}"
        one.run("X=1; cd /tmp")
        assert script_for(export_shell(one), export_shell(two)).splitlines() == [
            "\\builtin cd -- /tmp", 'declare -- X="1"']
