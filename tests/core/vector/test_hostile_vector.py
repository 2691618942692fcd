"""A worker process (or Ray actor) that the VectorEnv must kill, or that
dies on its own, leaves none of its env's sandboxes behind.

The env (tests/support/hostile_vector_envs.py) makes a docker and a local sandbox, plus a
long-running process in the local one, then hangs (or segfaults) in `step`. A hung env step
is outside the agent's reach here (the env itself hangs), so those episodes are infra errors;
what matters is that the sandboxes the dead process owned are reaped (by their owner labels).
"""

from __future__ import annotations

import functools
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import skyhub
from skyhub.sandbox import local_scratch
from skyhub.sandbox.base import pid_alive
from skyhub.vector import VectorEnv

SUPPORT = Path(__file__).parents[2] / "support"
sys.path.insert(0, str(SUPPORT))
from hostile_vector_envs import SandboxHangEnv  # noqa: E402
from polling import eventually  # noqa: E402
from proc_helpers import processes_with, unique_seconds  # noqa: E402

pytestmark = [pytest.mark.hostile, pytest.mark.docker]

ENTRY = "hostile_vector_envs:SandboxHangEnv"


@pytest.fixture(scope="module", autouse=True)
def image(docker_daemon: None) -> str:
    """skyhub's default image (the env's docker sandboxes), built if missing."""
    from skyhub.sandbox import images

    return images.build(["default"], quiet=True)[0]


def containers_of(pids: set[int]) -> list[str]:
    """Names of skyhub sandbox containers owned (on this host) by any of `pids`."""
    import docker

    out = []
    # the low-level list: one call, no per-container lookup that races other tests' removals
    for c in docker.from_env().api.containers(all=True, filters={"label": "skyhub.sandbox=1"}):
        labels = c.get("Labels") or {}
        if (labels.get("skyhub.owner_host") == socket.gethostname()
                and labels.get("skyhub.owner_pid", "").isdigit()
                and int(labels["skyhub.owner_pid"]) in pids):
            out.append(c["Names"][0].lstrip("/"))
    return out


def scratch_dirs_of(pids: set[int]) -> list[str]:
    """Local sandbox scratch dirs whose owner is any of `pids`."""
    return [s["path"] for s in local_scratch.list_sandboxes()
            if s["owner_pid"] in pids and Path(s["path"]).exists()]


def cgroups_of(pids: set[int]) -> list[str]:
    """Local sandboxes' memory cgroups (`sb-ID.PID.START`) whose owner is any of `pids`."""
    from skyhub.sandbox import local_cgroup

    found, _ = local_cgroup.hierarchy()
    if found is None or not found.parent.is_dir():
        return []
    return [n for n in os.listdir(found.parent)
            if n.startswith("sb-") and n.count(".") == 2 and n.split(".")[1].isdigit()
            and int(n.split(".")[1]) in pids]


def leftovers(pids: set[int], sleep_arg: str) -> dict[str, list]:
    return {"containers": containers_of(pids), "scratch_dirs": scratch_dirs_of(pids),
            "processes": processes_with(f"sleep {sleep_arg}"), "cgroups": cgroups_of(pids)}


def nothing_left(pids: set[int], sleep_arg: str) -> bool:
    return not any(leftovers(pids, sleep_arg).values())


def recv_all(venv: VectorEnv, n: int) -> dict[int, dict]:
    """Infos of the next `n` results, by env id."""
    got: dict[int, dict] = {}
    while len(got) < n:
        ids, _, _, _, _, infos = venv.recv()
        got.update({int(i): info for i, info in zip(ids, infos, strict=True)})
    return got


def owners(infos: tuple[dict, ...]) -> set[int]:
    pids = {int(i["pid"]) for i in infos}
    assert all(i["host"] == socket.gethostname() for i in infos)
    assert len(pids) == len(infos) and os.getpid() not in pids
    return pids


# ------------------------------------------------------------------------ processes
def test_workers_killed_at_step_timeout_leave_no_sandboxes(docker_daemon: None, bwrap: str,
                                                           tmp_env_id: str) -> None:
    sleep_arg = unique_seconds()
    skyhub.register(tmp_env_id, ENTRY, kwargs={"sleep_arg": sleep_arg})
    venv = skyhub.make_vec(tmp_env_id, 3, executor="processes", step_timeout=1.0)
    try:
        _, infos = venv.reset()
        pids = owners(infos)
        assert len(containers_of(pids)) == 3 and len(scratch_dirs_of(pids)) == 3
        assert processes_with(f"sleep {sleep_arg}")
        _, rewards, terms, truncs, infos = venv.step(["go"] * 3)  # all three hang
        assert all(i["infra_error"] and i["outcome"] == "error" for i in infos)
        assert all("step_timeout" in i["error"] for i in infos)
        assert truncs.all() and not terms.any() and rewards.tolist() == [0.0] * 3
        # reaped while the VectorEnv runs on (a long run would pile them up otherwise)
        assert eventually(lambda: nothing_left(pids, sleep_arg)), leftovers(pids, sleep_arg)
    finally:
        venv.close()
    assert leftovers(pids, sleep_arg) == {"containers": [], "scratch_dirs": [], "processes": [],
                                          "cgroups": []}


def test_workers_that_die_have_their_sandboxes_reaped(docker_daemon: None, bwrap: str) -> None:
    """Env 0's worker is SIGKILLed from outside while it hangs, env 1's segfaults in step."""
    sleep_arg = unique_seconds()
    env_fns = [functools.partial(SandboxHangEnv, sleep_arg=sleep_arg),
               functools.partial(SandboxHangEnv, sleep_arg=sleep_arg, on_step="segfault")]
    with VectorEnv(env_fns, executor="processes") as venv:
        _, infos = venv.reset()
        pids = owners(infos)
        assert len(containers_of(pids)) == 2 and len(scratch_dirs_of(pids)) == 2
        venv.send(["go", "go"])
        os.kill(int(infos[0]["pid"]), signal.SIGKILL)
        got = recv_all(venv, 2)
        # "died" (seen while waiting for the reply), or "is gone" (killed before the step
        # was even sent)
        assert all(i["infra_error"] and i["outcome"] == "error" and "env process" in i["error"]
                   for i in got.values()), got
        # each slot is reported once what its dead worker owned is gone
        assert leftovers(pids, sleep_arg) == {"containers": [], "scratch_dirs": [],
                                              "processes": [], "cgroups": []}


def test_workers_of_a_killed_parent_close_their_envs(docker_daemon: None, bwrap: str,
                                                     tmp_path: Path) -> None:
    """The VectorEnv's own process is SIGKILLed while its env hangs in a step: the orphaned
    worker notices, unwinds the step, closes its env and exits."""
    sleep_arg = unique_seconds()
    script = tmp_path / "parent.py"
    script.write_text(PARENT_SCRIPT.format(support=str(SUPPORT), sleep_arg=sleep_arg))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([parent.stdout], [], [], 120)
        assert ready, "the parent script did not start its VectorEnv"
        pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert len(containers_of({pid})) == 1 and len(scratch_dirs_of({pid})) == 1
    finally:
        parent.kill()
        parent.wait()
    assert eventually(lambda: nothing_left({pid}, sleep_arg) and not pid_alive(pid)), \
        leftovers({pid}, sleep_arg)


PARENT_SCRIPT = """
import functools, sys, time
sys.path.insert(0, {support!r})
from hostile_vector_envs import SandboxHangEnv
from skyhub.vector import VectorEnv

venv = VectorEnv([functools.partial(SandboxHangEnv, sleep_arg={sleep_arg!r})],
                 executor="processes")
_, infos = venv.reset()
venv.send(["go"])  # hangs
print(infos[0]["pid"], flush=True)
time.sleep(600)
"""


# ------------------------------------------------------------------------ Ray
@pytest.mark.slow
def test_ray_actors_killed_or_dead_leave_no_sandboxes(docker_daemon: None, bwrap: str) -> None:
    """One actor hangs past step_timeout (killed by the VectorEnv), another is killed from
    outside (Ray's death notice can take seconds here: that one has no step_timeout)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    sleep_arg = unique_seconds()
    env_fn = functools.partial(SandboxHangEnv, sleep_arg=sleep_arg)
    hangs = VectorEnv([env_fn], executor="ray", step_timeout=1.0)
    dies = VectorEnv([env_fn], executor="ray")
    try:
        pids = owners(hangs.reset()[1] + dies.reset()[1])
        assert len(containers_of(pids)) == 2 and len(scratch_dirs_of(pids)) == 2
        hangs.send(["go"])
        # the victim is told it ran on another node: its reap goes through a Ray task pinned
        # to the actor's node (this machine, here)
        victim = dies._slots[0].runner.worker
        victim.host = "another-node"
        ray.kill(victim.actor)
        dies.send(["go"])
        hung, dead = recv_all(hangs, 1)[0], recv_all(dies, 1)[0]
        assert hung["infra_error"] and "step_timeout" in hung["error"]
        assert dead["infra_error"] and "died" in dead["error"]
        assert eventually(lambda: nothing_left(pids, sleep_arg)), leftovers(pids, sleep_arg)
    finally:
        hangs.close()
        dies.close()
        ray.shutdown()
    assert leftovers(pids, sleep_arg) == {"containers": [], "scratch_dirs": [], "processes": [],
                                          "cgroups": []}
