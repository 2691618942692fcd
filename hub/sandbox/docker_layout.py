"""What a Docker sandbox's container is made of: its create spec (limits, isolation, no
logs), the sized tmpfs mounts of skyhub's images (or the file size bound of other images),
and the places besides the workdir that a restore puts back.

What a restore gives back (the clean state a pool hands out):
- skyhub's images, run as `sandbox`: every place that user can write is a tmpfs mount of
  `disk_mb` (the workdir, /work, /tmp, /var/tmp, /run/lock, $HOME) or docker's /dev/shm, and
  no other place in the image is writable to it. A snapshot saves them all, a restore kills
  every process of the user (one kill(-1) from the guest, which runs as that uid) and puts
  each place back, empties /dev/mqueue and removes the user's System V IPC objects.
- other images as a non-root user: the same, over the places a walk of the image finds
  writable (once per image and user, at the first sandbox). Their rootfs stays writable:
  a tmpfs over a directory would hide what the image put there.
- a root run user (root owns the image's files: it can change them all, and root without
  capabilities cannot be told apart from pid 1's tree), an image without python3, or a
  writable file or directory a restore cannot safely redo: `restore` replaces the container
  with a new one from the image, keeping the snapshots (~0.5 s instead of ~25 ms). So does a
  restore that fails in place (e.g. a tree the guest cannot remove).
`restore(kill_processes=False)` puts back the workdir only: the processes it keeps may be
using the other places.

Disk: skyhub's images bound each writable place by its tmpfs size (`disk_mb`, default half of
`memory_mb`; ENOSPC past it). tmpfs is RAM charged to the container's memory limit, so all of
them together never take more than `memory_mb`. Other images keep a writable rootfs, which
overlay2 can only bound on xfs with project quotas (`storage_opt`, used when `docker info`
reports xfs); elsewhere each file a command or stream writes is bounded by RLIMIT_FSIZE
(`disk_mb`; EFBIG or SIGXFSZ past it), not their sum.

Logs: every container logs with Docker's `none` driver, so what a root command writes to
/proc/1/fd/1 never reaches the host's disk (the default json-file log is unbounded).

Plain functions of the sandbox's settings and of what the guest found writable: `DockerSandbox`
calls them at creation and setup, so its class keeps to what a sandbox does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyhub.sandbox import seccomp

#: skyhub's images: the directories their `sandbox` user can write (besides the workdir,
#: /work and $HOME), each a tmpfs mount; /dev/shm is docker's own tmpfs
TMPFS_PLACES = ("/tmp", "/var/tmp", "/run/lock")
HOME = "/home/sandbox"
PROTECTED = ("/opt/skyhub", "/proc", "/sys")  # never a place a restore empties
#: the first interpreter >= 3.8 in a root-owned location (the PATH's is the last resort)
FIND_PYTHON = ('for p in /usr/local/bin/python3 /usr/bin/python3 /usr/local/bin/python '
               '/usr/bin/python "$(command -v python3)"; do [ -n "$p" ] && [ -x "$p" ] && '
               '"$p" -I -c "import sys; sys.exit(sys.version_info < (3, 8))" 2>/dev/null && '
               '{ echo "$p"; exit 0; }; done; exit 1')
#: runs a spawned program with RLIMIT_FSIZE (and the signals subprocess would reset), where
#: no tmpfs bounds the disk: `python -I -c WITH_FSIZE <bytes> argv...`
WITH_FSIZE = ("import os, resource, signal, sys; n = int(sys.argv[1]); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); "
              "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGPIPE, signal.SIGXFSZ)]; "
              "os.execvp(sys.argv[2], sys.argv[2:])")
#: (image id, user, workdir) -> what the guest found writable there (`image_places`)
_places_cache: dict[tuple[str, str, str], dict[str, list[str]]] = {}


def default_disk_mb(memory_mb: int) -> int:
    """`disk_mb` when none is given: half the memory (tmpfs is RAM), at least 64 MiB."""
    return max(64, int(memory_mb) // 2)


def below(path: str, top: str) -> bool:
    """Whether `path` is `top` or inside it."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def tmpfs_fits(workdir: str) -> bool:
    """Whether skyhub's tmpfs mounts can be used with `workdir` (neither inside the other)."""
    return not any(below(workdir, p) or below(p, workdir) for p in (*TMPFS_PLACES, HOME))


def container_spec(*, name: str, labels: dict[str, str], workdir: str, network: bool,
                   cpus: float, memory_mb: int, pids: int, disk_mb: int, privileges: str,
                   env: dict[str, str] | None, volumes: list[str] | None,
                   entrypoint: list[str] | None, tmpfs: bool) -> dict[str, Any]:
    """The keyword arguments of `containers.create` for a sandbox (see `DockerSandbox`)."""
    spec: dict[str, Any] = dict(
        name=name, labels=labels, init=True, user="0", working_dir=workdir,
        hostname="sandbox", network_mode=None if network else "none",
        nano_cpus=int(cpus * 1e9), mem_limit=f"{int(memory_mb)}m",
        memswap_limit=f"{int(memory_mb)}m", pids_limit=int(pids),
        shm_size=f"{min(disk_mb, 64)}m",
        # nothing a command writes to pid 1's stdout (/proc/1/fd/1, as root) reaches the
        # host's disk: Docker's default json-file log is unbounded
        log_config={"type": "none", "config": {}})
    if privileges == "none":
        # ptrace and process_vm_* denied (`skyhub.sandbox.seccomp`)
        spec.update(cap_drop=["ALL"], security_opt=[
            "no-new-privileges", seccomp.docker_security_opt()])
    if env:
        spec["environment"] = {str(k): str(v) for k, v in env.items()}
    if volumes:
        spec["volumes"] = list(volumes)
    if entrypoint is not None:
        spec["entrypoint"] = list(entrypoint)
    if tmpfs:
        size = f"size={disk_mb}m,exec"
        own = f"{size},uid=1000,gid=1000,mode=0755"
        spec["tmpfs"] = {workdir: own, "/work": own, HOME: own,
                         **{p: f"{size},mode=1777" for p in TMPFS_PLACES}}
    return spec


def tmpfs_places(workdir: str) -> tuple[list[str], list[str], bool]:
    """(places a restore puts back, places it empties, in place) for skyhub's images run
    as `sandbox`: every tmpfs mount, /dev/shm and the message queues."""
    places = [p for p in ("/work", HOME, *TMPFS_PLACES, "/dev/shm") if p != workdir]
    return places, ["/dev/mqueue"], True


def image_places(key: tuple[str, str, str],
                 ask: Callable[[], dict[str, Any] | None]) -> dict[str, list[str]]:
    """What the guest's `places` request (`ask`) finds writable, walked once per image, user
    and workdir (`key`), in a container nobody used yet; cached for the process."""
    found = _places_cache.get(key)
    if found is None:
        reply = ask() or {}
        found = {k: list(reply.get(k) or []) for k in ("dirs", "files", "mqueue")}
        _places_cache[key] = found
    return found


def restore_plan(found: dict[str, list[str]],
                 workdir: str) -> tuple[list[str], list[str], bool]:
    """(places a restore puts back, places it empties, whether it can restore in place) of
    a foreign image, from what `image_places` found."""
    places: list[str] = []
    clear: list[str] = []
    in_place = True
    for d in found["dirs"]:
        if below(d, workdir):
            continue
        if d == "/" or below(workdir, d) or any(below(p, d) for p in PROTECTED):
            in_place = False  # emptying it would take the workdir or us along
        elif d in found["mqueue"]:
            clear.append(d)
        else:
            places.append(d)
    if found["files"]:  # changeable files in directories a restore cannot rewrite
        in_place = False
    return places, clear, in_place
