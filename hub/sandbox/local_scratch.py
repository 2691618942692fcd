"""Where local sandboxes live and how orphans are found: scratch directories, their labels,
per-sandbox uids, and `list_sandboxes`/`reap` (what `skyhub sandbox reap` runs).

A sandbox is `<base>/sb-<id>/` with a `label.json` beside its workdir (owner pid and start
time, host, creation time, pool, uid); it is an orphan when that owner is no longer alive.
Scratch trees are removed with the guest's descriptor-based walks (no symlink followed, any
depth), and one bad entry never stops `reap`: it reports it and goes on.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from skyhub.errors import SandboxUnavailable
from skyhub.sandbox import base as _b
from skyhub.sandbox.base import start_time
from skyhub.sandbox.guest import procs, trees

log = logging.getLogger(__name__)

ENV_DIR = "SKYHUB_SANDBOX_DIR"
LABEL_FILE = "label.json"
LABEL_ID, LABEL_UID, LABEL_OWNER_START = "skyhub.id", "skyhub.uid", "skyhub.owner_start"
MARKER_ENV = "SKYHUB_SANDBOX_ID"  # in every command's environment: finds its processes
UID_BASE, UID_SPAN = 1_900_000_000, 1 << 24
UNLABELED_GRACE_S = 60.0
#: Where a sandbox without bubblewrap (but with its own uid) can leave files that outlive it.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")


def base_dir() -> Path:
    """Where scratch dirs live (per user when not root, so users never share one)."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    suffix = "" if os.geteuid() == 0 else f"-{os.geteuid()}"
    return Path(tempfile.gettempdir()) / f"skyhub-sandboxes{suffix}"


def drop_to(uid: int | None) -> None:
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def make_base() -> Path:
    base = base_dir()
    base.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = os.lstat(base)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxUnavailable(f"{base} is not a directory owned by uid {os.geteuid()}; "
                                 f"remove it or set {ENV_DIR} to a directory you own")
    if os.geteuid() == 0:  # sandbox uids must reach their workdir below it
        os.chmod(base, 0o711)
        for p in base.parents:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                raise SandboxUnavailable(f"{p} is not searchable by other users, so sandbox "
                                         f"uids cannot reach {base}; set {ENV_DIR} elsewhere "
                                         "(e.g. under /tmp)")
    return base


def proc_uids() -> dict[int, int]:
    """pid -> real uid of every live process (zombies are dead: nothing to kill, and an init
    that reaps slowly may keep them around)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                if fields["State"].split()[0] != "Z":
                    out[int(entry)] = int(fields["Uid"].split()[0])
            except (OSError, ValueError, KeyError, IndexError):
                pass
    return out


def free_uid() -> int:
    taken = set(proc_uids().values()) | {s["uid"] for s in list_sandboxes()}
    while True:
        uid = UID_BASE + random.randrange(UID_SPAN)
        if uid not in taken:
            return uid


def is_sandbox_uid(uid: int | None) -> bool:
    return uid is not None and UID_BASE <= uid < UID_BASE + UID_SPAN


def kill_sandbox(sandbox_id: str, uid: int | None) -> None:
    """Kill the processes whose environment carries the sandbox's marker (with bwrap, its
    `bwrap` parents: their death ends the namespace) and, as root, everything running as
    the sandbox's uid, via kill(-1) from that uid: atomic, so even a fork bomb goes, and so
    does a double-forked daemon that scrubbed its environment."""
    marker = f"{MARKER_ENV}={sandbox_id}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        procs.kill_tree(int(entry))
            except OSError:
                pass
    if not is_sandbox_uid(uid) or os.geteuid() != 0:
        return
    for _ in range(20):
        if uid not in proc_uids().values():
            return
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], preexec_fn=lambda: drop_to(uid),
                       capture_output=True, timeout=30)
        time.sleep(0.05)


def remove_tree(path: str | Path) -> None:
    """Remove a scratch dir whatever its depth, modes or symlinks (none is followed); OSError
    when something cannot be removed."""
    trees.remove_tree(str(path))


def rmtree(path: str | Path) -> None:
    remove_tree(path)


def remove_owned(uid: int | None, dirs: tuple[str, ...] = SHARED_WRITABLE) -> None:
    """Remove what the sandbox uid `uid` left at the top of the host's world-writable
    directories (a sandbox without bubblewrap writes its /tmp there). Its processes must be
    dead; entries deeper down, in someone else's directory, are not looked for."""
    if not is_sandbox_uid(uid):
        return
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            try:
                if os.stat(os.path.join(d, name), follow_symlinks=False).st_uid == uid:
                    trees.remove_tree(os.path.join(d, name))
            except OSError:
                pass


def _number(value: object, kind: type, default: object) -> object:
    try:
        return kind(value)
    except (TypeError, ValueError):
        return default


def list_sandboxes() -> list[dict]:
    """Every local sandbox's labels on this machine (any owner), as dicts with `id`, `path`,
    `owner_pid`, `owner_host`, `created`, `pool`, `uid`, `owner_alive`. Garbled labels count
    as missing fields (an unknown owner is a dead one), so a bad entry is still listed."""
    base = base_dir()
    out: list[dict] = []
    try:
        entries = sorted(base.glob("sb-*"))
    except OSError:
        return out
    for d in entries:
        try:
            labels = json.loads((d / LABEL_FILE).read_text())
            if not isinstance(labels, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError):
            try:
                if not d.is_dir():
                    continue
                # no label yet: maybe being created right now, so it counts as a minute younger
                labels = {_b.LABEL_CREATED: str(d.stat().st_mtime + UNLABELED_GRACE_S)}
            except OSError:
                continue
        pid = _number(labels.get(_b.LABEL_OWNER_PID, 0), int, 0)
        start = str(labels.get(LABEL_OWNER_START, "-1"))
        alive = pid > 0 and _b.pid_alive(pid) and start in ("-1", str(start_time(pid)))
        uid = _number(labels.get(LABEL_UID), int, None)
        out.append({"id": d.name, "path": str(d), "owner_pid": pid, "owner_alive": alive,
                    "owner_host": labels.get(_b.LABEL_OWNER_HOST), "labels": labels,
                    "pool": labels.get(_b.LABEL_POOL), "uid": uid,
                    "created": _number(labels.get(_b.LABEL_CREATED, 0), float, 0.0)})
    return out


def reap(older_than_s: float = 0.0, dry_run: bool = False,
         errors: list[str] | None = None) -> list[str]:
    """Remove scratch dirs (and kill the processes) of sandboxes whose owner died on this
    host more than `older_than_s` seconds after they were made; returns their ids. One that
    cannot be removed is reported in `errors` (as "local:<id>: why") and the rest go on."""
    host, now, removed = socket.gethostname(), time.time(), []
    for s in list_sandboxes():
        foreign = s["owner_host"] not in (None, host)
        if foreign or s["owner_alive"] or now - s["created"] < older_than_s:
            continue
        if not dry_run:
            try:
                kill_sandbox(s["id"], s["uid"])
                remove_owned(s["uid"])
                remove_tree(s["path"])
            except Exception as e:  # reported; the others still go
                why = f"local:{s['id']}: {type(e).__name__}: {e}"
                if errors is None:
                    log.warning("reap could not remove %s", why)
                else:
                    errors.append(why)
                continue
        removed.append(s["id"])
    from skyhub.sandbox import local_cgroup  # their memory cgroups, wherever their scratch

    local_cgroup.reap_orphans(dry_run=dry_run, errors=errors)
    return removed


__all__ = ["base_dir", "list_sandboxes", "reap", "remove_owned", "remove_tree"]
