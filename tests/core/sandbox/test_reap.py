"""A process that dies without closing its sandboxes leaves orphans; `skyhub sandbox reap`
removes them, and only them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skyhub.sandbox import create, docker_client, local

CRASHER = """
import os, sys
from skyhub.sandbox import create
keep = []   # references: a collected sandbox would be closed by __del__
for b in sys.argv[1:]:
    keep.append(create(backend=b, memory_mb=256))
    print(b, keep[-1].id, flush=True)
os._exit(0)   # a crash: nothing is closed
"""


def skyhub_cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "skyhub"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_reap_removes_orphans_of_a_crashed_process_and_spares_live_ones(
        reaping: None, bwrap: str, docker_daemon: None) -> None:
    from skyhub.sandbox import images

    images.build(quiet=True)
    with create(backend="local", memory_mb=256) as live_local, \
            create(backend="docker", memory_mb=256) as live_docker:
        out = subprocess.run([sys.executable, "-c", CRASHER, "local", "docker"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        orphans = dict(line.split() for line in out.splitlines())
        assert set(orphans) == {"local", "docker"}

        # (orphans of other processes on a shared machine may be listed too: ours by name)
        dry = skyhub_cli("sandbox", "reap", "--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f"would remove local:{orphans['local']}" in dry.stdout
        assert f"would remove docker:skyhub-{orphans['docker']}" in dry.stdout
        assert live_local.id not in dry.stdout and live_docker.id not in dry.stdout
        assert any(orphans["local"] in s["id"] for s in local.list_sandboxes())  # dry: kept

        young = skyhub_cli("sandbox", "reap", "--older-than", "3600")
        assert orphans["local"] not in young.stdout and orphans["docker"] not in young.stdout

        r = skyhub_cli("sandbox", "reap")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"removed local:{orphans['local']}" in r.stdout, r.stdout
        assert f"removed docker:skyhub-{orphans['docker']}" in r.stdout, r.stdout
        names_left = {s["id"] for s in local.list_sandboxes()}
        assert not any(orphans["local"] in str(n) for n in names_left)
        assert not any(orphans["docker"] in str(s.get("name"))
                       for s in docker_client.list_sandboxes())
        # the live sandboxes of this process are untouched
        assert live_local.exec("echo alive").stdout == "alive\n"
        assert live_docker.exec("echo alive").stdout == "alive\n"


@pytest.mark.parametrize("backend", ["local"])
def test_reap_is_a_no_op_without_orphans(reaping: None, backend: str, bwrap: str) -> None:
    with create(backend=backend, memory_mb=256) as sb:
        r = skyhub_cli("sandbox", "reap", "--dry-run")
        assert r.returncode == 0
        assert sb.id not in r.stdout
