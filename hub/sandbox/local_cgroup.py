"""Memory cgroups for local sandboxes: `memory_mb` counted the way the kernel counts it.

RLIMIT_AS bounds one process's address space, which misses what a sandbox can hold without
mapping it: pages of a tmpfs it mounts or writes, memfds filled with write(), pipes, page cache.
A memory cgroup charges every page a task allocates, shared memory and tmpfs included, to the
cgroup the task is in, and reclaims or OOM-kills inside it past its limit. So every local
sandbox gets its own cgroup, `<parent>/<sandbox id>.<owner pid>.<owner start time>`, with
the limit at `memory_mb` and no swap; each command's process enters it before it becomes
bwrap (the preexec hook writes to `cgroup.procs`), so all it starts is charged there.

Where (`SKYHUB_CGROUP_PARENT` overrides the parent directory):
- cgroup v2 with the memory controller: `<mount>/skyhub`, with `+memory` enabled in the
  root's and in skyhub's `cgroup.subtree_control` (skyhub holds no process itself, as v2's
  no-internal-process rule wants). Limits: `memory.max`, `memory.swap.max = 0`.
- cgroup v1 (hybrid hosts, where the memory controller sits on its own hierarchy; Debian 12's
  CI machines with Docker's cgroupfs driver): `<memory mount>/skyhub`. Limits:
  `memory.limit_in_bytes` and, where swap is accounted, `memory.memsw.limit_in_bytes`.
Creating cgroups there needs root (or a parent delegated to this user). Where none can be
made, `LocalSandbox(memory_cgroup=...)` decides: "auto" warns once and goes on with RLIMIT_AS
only, "require" refuses (SandboxUnavailable), "off" never tries; the default comes from
`$SKYHUB_MEMORY_CGROUP` (else "auto").

The owner's pid and start time in the name let `reap_orphans` find the cgroups of owners that
died (whatever scratch directory their sandboxes used), kill what runs in them, and remove them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from skyhub.errors import SandboxUnavailable

log = logging.getLogger(__name__)

ENV_PARENT = "SKYHUB_CGROUP_PARENT"
ENV_MODE = "SKYHUB_MEMORY_CGROUP"
MODES = ("auto", "require", "off")
_NAME = re.compile(r"^(sb-[0-9a-z-]+)\.(\d+)\.(-?\d+)$")
_lock = threading.Lock()
_found: tuple[Hierarchy | None, str] | None = None


@dataclass(frozen=True)
class Hierarchy:
    """The skyhub parent cgroup: its directory and the cgroup version it belongs to."""

    version: int
    parent: Path


def default_mode() -> str:
    mode = os.environ.get(ENV_MODE, "auto") or "auto"
    if mode not in MODES:
        raise SandboxUnavailable(f"${ENV_MODE} must be one of {MODES}, not {mode!r}")
    return mode


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, super options) of every cgroup mount, from mountinfo."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            point = fields[4].replace("\\040", " ")
            out.append((point, tail[0], tail[2]))
    return out


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _locate() -> tuple[Hierarchy | None, str]:
    """Find (and make) the skyhub parent cgroup; (None, why not) where there is none."""
    override = os.environ.get(ENV_PARENT)
    if override:
        parent = Path(override)
        version = 2 if (parent.parent / "cgroup.controllers").exists() else 1
    else:
        mounts = _mounts()
        v2 = [p for p, kind, _ in mounts if kind == "cgroup2"
              and "memory" in _read(Path(p) / "cgroup.controllers").split()]
        v1 = [p for p, kind, opts in mounts if kind == "cgroup" and "memory" in opts.split(",")]
        if v2:
            version, parent = 2, Path(v2[0]) / "skyhub"
        elif v1:
            version, parent = 1, Path(v1[0]) / "skyhub"
        else:
            return None, "no cgroup hierarchy with the memory controller is mounted"
    try:
        if version == 2:
            top = parent.parent
            if "memory" not in _read(top / "cgroup.subtree_control").split():
                _write(top / "cgroup.subtree_control", "+memory")
        parent.mkdir(mode=0o755, exist_ok=True)
        if not (parent / "cgroup.procs").exists():
            return None, f"{parent} is not a directory of a cgroup file system"
        if version == 2 and "memory" not in _read(parent / "cgroup.subtree_control").split():
            _write(parent / "cgroup.subtree_control", "+memory")
    except OSError as e:
        return None, f"cannot set up the memory cgroup {parent} ({e.strerror or e})"
    return Hierarchy(version, parent), ""


def hierarchy() -> tuple[Hierarchy | None, str]:
    """The skyhub parent cgroup, or (None, why there is none); looked up once per process."""
    global _found
    with _lock:
        if _found is None or _found[0] is None:  # a failure is retried: cgroups may appear
            _found = _locate()
        return _found


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _owner_tag(pid: int | None = None) -> str:
    from skyhub.sandbox.base import start_time

    pid = os.getpid() if pid is None else pid
    return f"{pid}.{start_time(pid)}"


class MemoryCgroup:
    """One sandbox's memory cgroup (see the module docstring)."""

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version
        self.procs = str(path / "cgroup.procs")  # what a command's preexec hook writes to

    @classmethod
    def create(cls, sandbox_id: str, limit_mb: int) -> MemoryCgroup:
        """A new cgroup limited to `limit_mb` MiB without swap; OSError or SandboxUnavailable
        (with why) when it cannot be made."""
        found, why = hierarchy()
        if found is None:
            raise SandboxUnavailable(why)
        path = found.parent / f"{sandbox_id}.{_owner_tag()}"
        path.mkdir(mode=0o755)
        cg = cls(path, found.version)
        try:
            limit = str(int(limit_mb) << 20)
            if found.version == 2:
                _write(path / "memory.max", limit)
                if (path / "memory.swap.max").exists():
                    _write(path / "memory.swap.max", "0")
            else:
                _write(path / "memory.limit_in_bytes", limit)
                if (path / "memory.memsw.limit_in_bytes").exists():  # swap accounted
                    _write(path / "memory.memsw.limit_in_bytes", limit)
                with contextlib.suppress(OSError):
                    _write(path / "memory.swappiness", "0")
        except BaseException:
            cg.remove()
            raise
        return cg

    def enter(self) -> None:
        """Move the calling process into the cgroup (from a preexec hook, before it drops
        to the sandbox's uid); what it forks stays there."""
        fd = os.open(self.procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def _number(self, *names: str) -> int | None:
        for name in names:
            text = _read(self.path / name).strip()
            if text.isdigit():
                return int(text)
        return None

    def usage(self) -> int:
        """Bytes charged now (memory.current / memory.usage_in_bytes)."""
        return self._number("memory.current", "memory.usage_in_bytes") or 0

    def peak(self) -> int | None:
        """The most bytes ever charged (memory.peak on kernels >= 5.19, or v1's max usage)."""
        return self._number("memory.peak", "memory.max_usage_in_bytes")

    def limit(self) -> int | None:
        return self._number("memory.max", "memory.limit_in_bytes")

    def oom_kills(self) -> int:
        """How many processes the cgroup's OOM killer has killed."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in _read(self.path / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.path / "cgroup.procs").split() if p.isdigit()]

    def kill(self, within_s: float = 10.0) -> None:
        """SIGKILL every process in the cgroup and wait until none is left (a fork racing
        the kill is caught by the next round)."""
        deadline = time.monotonic() + within_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                return
            if self.version == 2 and (self.path / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(self.path / "cgroup.kill", "1")
            else:
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left in the cgroup and remove it; gone already is fine."""
        if not self.path.exists():
            return
        self.kill()
        deadline = time.monotonic() + 10.0
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as e:  # EBUSY while the last killed task is still exiting
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                self.kill(within_s=1.0)
                time.sleep(0.01)


def reap_orphans(dry_run: bool = False, errors: list[str] | None = None, *,
                 owner: int | None = None, start: int | None = None) -> list[str]:
    """Remove the cgroups of sandboxes whose owner process is dead (killing what still runs
    in them); returns their names. One that cannot be removed goes to `errors`. `owner`: only
    those of that pid, which the caller knows to be dead though it may still be a zombie
    (`skyhub.sandbox.orphans`; `start`, its start time, tells it from a later process with
    the same pid)."""
    from skyhub.sandbox.base import pid_alive

    found, _ = hierarchy()
    if found is None:
        return []
    try:
        names = sorted(os.listdir(found.parent))
    except OSError:
        return []
    removed = []
    for name in names:
        m = _NAME.match(name)
        if m is None:
            continue
        pid = int(m.group(2))
        if owner is not None:
            if pid != owner or (start is not None and m.group(3) not in ("-1", str(start))):
                continue
        elif pid_alive(pid) and _owner_tag(pid) == f"{pid}.{m.group(3)}":
            continue
        if not dry_run:
            try:
                MemoryCgroup(found.parent / name, found.version).remove()
            except OSError as e:
                why = f"local:cgroup {name}: {e}"
                if errors is None:
                    log.warning("reap could not remove %s", why)
                else:
                    errors.append(why)
                continue
        removed.append(name)
    return removed


__all__ = ["ENV_MODE", "ENV_PARENT", "Hierarchy", "MemoryCgroup", "default_mode", "hierarchy",
           "reap_orphans"]
