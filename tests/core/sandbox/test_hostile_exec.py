"""Attacks through `exec` that every backend must hold against: the same hostile
commands on docker and local (bubblewrap)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyhub.sandbox import Sandbox, create

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from proc_helpers import processes_with, unique_seconds

pytestmark = [pytest.mark.hostile]


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    if request.param == "docker":
        request.getfixturevalue("docker_daemon")
        from skyhub.sandbox import images

        images.build(["default"], quiet=True)
    else:
        request.getfixturevalue("bwrap")
    with create(backend=request.param, memory_mb=512) as box:
        yield box


def _still_there(sb: Sandbox, text: str) -> list[str]:
    """Processes (alive or zombie) whose command line shows `text`: seen from inside the
    container (docker), or on this host, where local sandboxes' processes run."""
    if sb.backend == "docker":
        ps = sb.exec("ps -eo stat=,args=").stdout.splitlines()
        return [line for line in ps if text in line]
    return [str(pid) for pid in processes_with(text)]


@pytest.mark.parametrize("spawn", [
    "setsid sleep {s} & sleep {s}",                 # a setsid'd child: another session
    "(setsid sleep {s} &); sleep {s}",              # double fork: re-parented out of the tree
    "for i in 1 2 3 4 5 6; do (setsid sleep {s} &); done; setsid sleep {s} & sleep {s}",
])
def test_timed_out_command_leaves_no_process_behind(sb: Sandbox, spawn: str) -> None:
    secs = unique_seconds()
    r = sb.exec(spawn.format(s=secs), timeout=1)
    assert r.timed_out and r.exit_code == 137
    assert _still_there(sb, f"sleep {secs}") == []   # at once: exec waited for the deaths
    assert sb.exec("echo alive").stdout == "alive\n"
