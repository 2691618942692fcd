"""Copying a Docker sandbox's places into another sandbox of the same image: what a fork of a
running episode does (`Sandbox.export_places` / `import_places`, bound as `DockerSandbox`
methods).

The export is one request to the guest (`tars`: the workdir and every other place a restore
puts back, as it does for a snapshot); the import is one request to the other container's
guest, the tars sent along, which restores every place from them and leaves its processes
alone: a spare's shell, started before, goes on in the copy. (Docker's own `put_archive`
would add tens of milliseconds.)

Where restores replace the container (commands run as root, so any path may have changed:
Harbor's tasks), the copy is of the whole container instead: what changed in its writable
layer, read from its overlay2 upper directory on this host where this process can (under a
millisecond), else Docker's own `container.diff()` (about half a second), packed by the
guest (added trees whole, other entries alone) with the deleted paths, and made so in the
other container, which must be a fresh one of the same image and settings. What is not in
that layer is not copied: mounts (tmpfs, volumes) and processes. With no guest (an image
without python3), a copy is refused with `SandboxUnavailable` and the caller falls back to
replay.
"""

from __future__ import annotations

import base64
import os
import posixpath
import stat
from typing import TYPE_CHECKING

from skyhub.errors import SandboxUnavailable
from skyhub.sandbox.base import Places

if TYPE_CHECKING:
    from skyhub.sandbox.docker import DockerSandbox


#: Never copied from a container's changes: the kernel's, Docker's own files bound into
#: every container (each container has its own), and skyhub's (the guest, and the
#: snapshots, which name the sandbox that took them). The container's mounts are added.
NOT_COPIED = ("/proc", "/sys", "/dev", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
              "/sbin/docker-init", "/usr/sbin/docker-init", "/opt/skyhub")


def places_kind(sb: DockerSandbox) -> str:
    """What two sandboxes must share for one to take the other's places."""
    how = "places" if sb._in_place else "layer"
    return f"docker-{how}:{sb._image_id}:{sb.user}:{sb.workdir}"


def export_places(sb: DockerSandbox) -> Places:
    """The sandbox's places as they are now, as tars."""
    sb._check_open()
    _check_copyable(sb)
    if not sb._in_place:
        return _export_layer(sb)
    paths = [sb.workdir, *sb._places]
    reply = sb._request({"op": "tars", "paths": paths, "max_bytes": sb.max_transfer}, 600,
                        max_bytes=sb.max_transfer)
    assert reply is not None  # an idempotent request: retried, never None
    return Places(places_kind(sb), tuple(
        (path, base64.b64decode(data))
        for path, data in zip(paths, reply["data"], strict=True) if data is not None))


def import_places(sb: DockerSandbox, places: Places) -> None:
    """Make the sandbox's places those of `places`, its processes left running."""
    sb._check_open()
    sb._check_kind(places)
    _check_copyable(sb)
    if not sb._in_place:
        (_, data), = places.tars
        sb._request({"op": "unpack", "data": base64.b64encode(data).decode(),
                     "delete": list(places.deleted)}, 600)
        return
    sb._request({"op": "restore", "places": [[path, {"data": base64.b64encode(data).decode()}]
                                             for path, data in places.tars],
                 "clear": [], "ipc": False, "kill_processes": False, "keep": sb._keep}, 600)


ADDED, CHANGED, DELETED, REPLACED = 1, 0, 2, 3  # Docker's diff kinds, and an opaque dir


def _export_layer(sb: DockerSandbox) -> Places:
    """The container's changes to its image (module docstring)."""
    attrs = sb.container.attrs or {}
    skip = (*NOT_COPIED, *(m.get("Destination", "") for m in attrs.get("Mounts") or ()),
            *((attrs.get("HostConfig") or {}).get("Tmpfs") or {}))
    kinds = {path: kind for path, kind in _changes(sb).items()
             if not any(path == p or path.startswith(p.rstrip("/") + "/") for p in skip if p)}
    entries = [[path, kind == ADDED] for path, kind in sorted(kinds.items())
               # an added tree is packed whole from its top
               if kind != DELETED and kinds.get(posixpath.dirname(path)) != ADDED]
    reply = sb._request({"op": "pack", "entries": entries, "max_bytes": sb.max_transfer}, 600,
                        max_bytes=sb.max_transfer)
    assert reply is not None
    return Places(places_kind(sb), (("/", base64.b64decode(reply["data"])),),
                  deleted=tuple(path for path, kind in sorted(kinds.items())
                                if kind in (DELETED, REPLACED)
                                and kinds.get(posixpath.dirname(path)) not in (DELETED, ADDED)))


def _changes(sb: DockerSandbox) -> dict[str, int]:
    """What changed in the container's layer, path -> kind: read from its overlay2 upper
    directory where this process can (milliseconds), else Docker's diff (which compares
    the container with its image: about half a second)."""
    import docker.errors

    found = _upper_changes(sb)
    if found is not None:
        return found
    try:
        return {c["Path"]: int(c["Kind"]) for c in sb.container.diff() or []}
    except docker.errors.DockerException as e:
        sb._check_container()
        raise SandboxUnavailable(f"Docker cannot list what changed in {sb.name}: {e}") from e


def _upper_changes(sb: DockerSandbox) -> dict[str, int] | None:
    """The container's changes from its overlay2 upper directory: every entry there is a
    change (copied up or made; packed alone, none recursively), a 0/0 character device is a
    deletion, an opaque directory replaced its image's. None where that is not all (another
    storage driver, no access to Docker's directories, a redirected or metadata-only copy,
    whose data stays in the image's layers)."""
    graph = (sb.container.attrs or {}).get("GraphDriver") or {}
    upper = (graph.get("Data") or {}).get("UpperDir")
    if graph.get("Name") != "overlay2" or not upper or not os.access(upper, os.R_OK | os.X_OK):
        return None
    kinds: dict[str, int] = {}
    todo = [("", upper)]
    try:
        while todo:
            rel, path = todo.pop()
            with os.scandir(path) as entries:
                for entry in entries:
                    name, st = f"{rel}/{entry.name}", entry.stat(follow_symlinks=False)
                    if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                        kinds[name] = DELETED
                        continue
                    marks = os.listxattr(entry.path, follow_symlinks=False)
                    if any(m.endswith((".overlay.redirect", ".overlay.metacopy")) for m in marks):
                        return None
                    kinds[name] = CHANGED
                    if stat.S_ISDIR(st.st_mode):
                        if any(m.endswith(".overlay.opaque") and os.getxattr(
                                entry.path, m, follow_symlinks=False) == b"y" for m in marks):
                            kinds[name] = REPLACED
                        todo.append((name, entry.path))
    except OSError:
        return None
    return kinds


def _check_copyable(sb: DockerSandbox) -> None:
    if sb._fallback is not None:
        raise SandboxUnavailable(f"sandbox {sb.name} cannot copy its places to another "
                                 "sandbox: its image has no python3 for skyhub's guest")


__all__ = ["export_places", "import_places", "places_kind"]
