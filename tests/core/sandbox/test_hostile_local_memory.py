"""A hostile agent against the local (bubblewrap) backend's memory bound:
memory RLIMIT_AS does not count (memfds filled with write(), tmpfs pages, a tmpfs mounted in a
nested user namespace) must not let a sandbox with `memory_mb=256` hold more than that of the
host's memory. Each attack reports how many MiB it holds after every step and says HELD when
it got everything; the sandbox's memory cgroup must stop it first (the attacker is OOM-killed:
its own failure, an ExecResult, never an exception), and the cgroup goes with the sandbox."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import skyhub.sandbox
from skyhub.errors import SandboxUnavailable
from skyhub.sandbox import local, local_cgroup
from skyhub.sandbox.local import LocalSandbox

pytestmark = pytest.mark.hostile

MEMORY_MB = 256
MIB = 1 << 20

# 12 memfds x 127 MiB, filled with write(): no mapping, so RLIMIT_AS never sees them
MEMFDS = r"""
import os
fds, held, chunk = [], 0, b"\1" * (1 << 20)
for i in range(12):
    fd = os.memfd_create(f"hold{i}")
    for _ in range(127):
        os.write(fd, chunk)
    fds.append(fd)
    held += 127
    print(held, flush=True)
print("HELD", flush=True)
"""
# the attack that got past: a nested user namespace, an unsized tmpfs in it, 12 files of 127 MiB
NESTED_TMPFS = ("unshare -Urm sh -c 'mount -t tmpfs none /tmp || exit 3; for i in $(seq 12); "
                "do head -c 127M /dev/zero > /tmp/f$i || exit 4; echo $((i * 127)); done; "
                "echo HELD'")
# the sandbox's own sized tmpfs mounts, sized here above memory_mb (disk_mb=1024): their pages
# are RAM all the same
OWN_TMPFS = r"""
held = 0
for i in range(24):
    where = "/tmp" if i % 2 else "/dev/shm"
    with open(f"{where}/f{i}", "wb") as f:
        f.write(bytes(16 << 20))
    held += 16
    print(held, flush=True)
print("HELD", flush=True)
"""


@pytest.fixture
def cgroups(bwrap: str, need: Callable[[str, str, str], None]) -> local_cgroup.Hierarchy:
    found, why = local_cgroup.hierarchy()
    if found is None:
        need("memory cgroups", "SKYHUB_REQUIRE_CGROUPS", why)
    return found


@pytest.fixture
def make(cgroups: local_cgroup.Hierarchy) -> Iterator[Callable[..., LocalSandbox]]:
    made: list[LocalSandbox] = []

    def new(**kwargs: object) -> LocalSandbox:
        kwargs.setdefault("isolation", "bwrap")
        kwargs.setdefault("memory_mb", MEMORY_MB)
        kwargs.setdefault("memory_cgroup", "require")
        sb = LocalSandbox(**kwargs)
        made.append(sb)
        return sb

    yield new
    for sb in made:
        sb.close()
    left = [sb._cgroup.path for sb in made if sb._cgroup and sb._cgroup.path.exists()]
    assert not left, f"memory cgroups left behind: {left}"


def held_mib(stdout: str) -> int:
    """The last amount the attacker reported holding."""
    numbers = [int(w) for w in stdout.split() if w.isdigit()]
    return numbers[-1] if numbers else 0


@pytest.mark.parametrize("attack", [["python3", "-c", MEMFDS], NESTED_TMPFS],
                         ids=["memfds", "nested-userns-tmpfs"])
def test_an_attack_outside_rlimit_as_cannot_hold_more_than_memory_mb(
        make: Callable[..., LocalSandbox], attack: str | list[str]) -> None:
    sb = make()
    r = sb.exec(attack, timeout=120)  # an ExecResult: the attacker's failure, not ours
    assert "HELD" not in r.stdout, r
    assert not r.ok and not r.timed_out, r
    assert held_mib(r.stdout) <= MEMORY_MB, r
    peak = sb._cgroup.peak()
    assert peak is None or peak <= MEMORY_MB * MIB, peak  # what the host gave it, at most
    assert sb.exec("echo still usable").stdout == "still usable\n"


def test_the_sandboxes_own_tmpfs_pages_count_against_memory_mb(
        make: Callable[..., LocalSandbox]) -> None:
    sb = make(disk_mb=1024)  # /tmp 1 GiB, /dev/shm 512 MiB: only the cgroup can stop it
    r = sb.exec(["python3", "-c", OWN_TMPFS], timeout=120)
    assert "HELD" not in r.stdout, r
    assert r.exit_code == 137 and held_mib(r.stdout) <= MEMORY_MB, r
    assert sb._cgroup.oom_kills() >= 1
    assert sb.exec("echo still usable").stdout == "still usable\n"


def test_a_sandbox_cannot_make_a_nested_user_namespace(make: Callable[..., LocalSandbox]
                                                         ) -> None:
    sb = make()
    for cmd in ("unshare -U true", "unshare -Urm true", "unshare -Ur unshare -m true"):
        r = sb.exec(cmd)
        assert r.exit_code != 0, (cmd, r)
    assert sb.exec("echo still usable").stdout == "still usable\n"


def test_memory_within_the_limit_still_works(make: Callable[..., LocalSandbox]) -> None:
    sb = make()
    r = sb.exec(["python3", "-c", "import os\nfd = os.memfd_create('x')\n"
                 "os.write(fd, bytes(100 << 20))\nprint(os.fstat(fd).st_size >> 20)"])
    assert r.ok and r.stdout == "100\n", r
    assert sb._cgroup.limit() == MEMORY_MB * MIB


def test_a_spawned_process_is_in_the_cgroup_and_close_removes_it(
        make: Callable[..., LocalSandbox]) -> None:
    sb = make()
    stream = sb.open_stream(["sh", "-c", "cat"])  # runs until its stdin closes
    path = sb._cgroup.path
    deadline = time.monotonic() + 10
    while not sb._cgroup.pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = sb._cgroup.pids()
    assert pids, "the spawned process is not in the sandbox's cgroup"
    sb.close()
    stream.close()
    assert not path.exists()
    assert not [p for p in pids if Path(f"/proc/{p}").exists()
                and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1][:3]]


ORPHAN = r"""
import os, sys, time
from skyhub.sandbox.local import LocalSandbox
sb = LocalSandbox(isolation="bwrap", memory_mb=64, memory_cgroup="require")
stream = sb.open_stream(["sh", "-c", "cat"])
while not sb._cgroup.pids():
    time.sleep(0.02)
print(sb._cgroup.path, flush=True)
os.kill(os.getpid(), 9)
"""


def test_reap_removes_the_cgroup_of_a_dead_owner(reaping: None,
                                                 cgroups: local_cgroup.Hierarchy,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    base = tempfile.mkdtemp(prefix="skyhub-cg-")
    os.chmod(base, 0o711)
    monkeypatch.setenv(local.ENV_DIR, base)
    out = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True,
                         timeout=120, env={**os.environ, local.ENV_DIR: base})
    assert out.returncode == -signal.SIGKILL, out.stderr
    path = Path(out.stdout.strip())
    assert path.parent == cgroups.parent and path.exists()
    assert local_cgroup.MemoryCgroup(path, cgroups.version).pids(), "its process died with it"
    errors: list[str] = []
    skyhub.sandbox.reap(backends=("local",), errors=errors)
    assert not errors, errors
    assert not path.exists()
    subprocess.run(["rm", "-rf", base], check=False)


def test_require_refuses_where_no_cgroup_can_be_made(
        bwrap: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(local_cgroup.ENV_PARENT, str(tmp_path / "skyhub"))  # not a cgroup fs
    monkeypatch.setattr(local_cgroup, "_found", None)
    with pytest.raises(SandboxUnavailable, match="memory_cgroup='require'"):
        LocalSandbox(isolation="bwrap", memory_mb=64, memory_cgroup="require")
    monkeypatch.setattr(local, "_warned_no_cgroup", False)
    with pytest.warns(RuntimeWarning, match="without a memory cgroup"):
        sb = LocalSandbox(isolation="bwrap", memory_mb=64)  # "auto": RLIMIT_AS alone
    with sb:
        assert sb._cgroup is None and sb.exec("echo ok").stdout == "ok\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with LocalSandbox(isolation="bwrap", memory_mb=64, memory_cgroup="off") as sb:
            assert sb._cgroup is None
