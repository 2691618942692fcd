"""The Docker daemon as skyhub's sandboxes reach it: the process's shared client, whether a
daemon answers, what its storage driver can bound, and the sandbox containers it holds
(`list_sandboxes`, and `reap` for those whose owner died: every container carries
`base.owner_labels()`, and a process SIGKILLed before `close()` cannot remove its own).

The `docker` backend (`docker.py`), image builds (`images.py`), the orphan sweep and the
Harbor family all go through `get_client`, so one connection pool serves every sandbox of a
process. The Docker SDK is imported only when a client is first needed.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from skyhub.errors import SandboxSDKMissing, SandboxUnavailable
from skyhub.sandbox import base

log = logging.getLogger(__name__)

START_HINT = "start Docker with `bash scripts/services.sh` (or run `dockerd` as root)"
_available = False
_client: Any = None
_client_lock = threading.Lock()
_storage_opt: dict[int, bool] = {}  # id(client) -> whether the daemon bounds a rootfs's size


def docker_available(timeout: float = 3.0) -> bool:
    """Whether a Docker daemon answers a ping. A True answer is cached for the process (a
    daemon rarely goes away; `backend="auto"` asks often). Never raises."""
    global _available
    if _available:
        return True
    try:
        import docker

        client = docker.from_env(timeout=max(int(timeout), 1))
        try:
            _available = bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False
    return _available


def get_client() -> Any:
    """The process's shared Docker client (thread-safe; connection pool sized for pools)."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                import docker
            except ImportError as e:
                raise SandboxSDKMissing("the docker backend needs the Docker SDK: "
                                        "pip install 'skyhub[docker]'") from e
            try:
                client = docker.from_env(timeout=120, max_pool_size=64)
                client.ping()
            except Exception as e:
                raise SandboxUnavailable(f"no Docker daemon answers ({e}); {START_HINT}") from e
            _client = client
        return _client


def storage_opt_supported(client: Any) -> bool:
    """Whether `storage_opt={"size": ...}` can bound a container's rootfs here: overlay2 on
    xfs (which must also be mounted with pquota: a create that fails says so, and then this
    turns False for the process)."""
    key = id(client)
    if key not in _storage_opt:
        try:
            info = client.info()
            backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "")
            _storage_opt[key] = info.get("Driver") == "overlay2" and backing == "xfs"
        except Exception:
            _storage_opt[key] = False
    return _storage_opt[key]


def storage_opt_refused(client: Any) -> None:
    """The daemon refused a rootfs size (e.g. xfs without pquota): never ask it again."""
    _storage_opt[id(client)] = False


def list_sandboxes(client: Any = None) -> list[dict[str, Any]]:
    """Every container labeled as a skyhub sandbox, on this daemon, with its owner (labels
    that do not parse read as unknown: such a container is never an orphan)."""
    client = client or get_client()
    out = []
    for c in client.api.containers(all=True, filters={"label": f"{base.LABEL}=1"}):
        labels = c.get("Labels") or {}
        pid = str(labels.get(base.LABEL_OWNER_PID, ""))
        try:
            created = float(labels.get(base.LABEL_CREATED, "0"))
        except ValueError:
            created = float("inf")  # unknown age: never old enough
        names = c.get("Names") or [""]
        out.append({"id": c.get("Id", ""), "name": names[0].lstrip("/"), "labels": labels,
                    "status": c.get("State", ""),
                    "owner_pid": int(pid) if pid.isdigit() else None,
                    "owner_host": labels.get(base.LABEL_OWNER_HOST, ""), "created": created})
    return out


def reap(older_than_s: float = 0.0, dry_run: bool = False,
         errors: list[str] | None = None) -> list[str]:
    """Remove sandbox containers whose owner process (on this host) is dead and that were
    created more than `older_than_s` seconds ago; return their names. Containers owned by
    another host are left alone: their owner's liveness cannot be checked from here. A
    container that cannot be removed is skipped, never the end of the reaping: it goes to
    `errors` ("docker:name: why"), or to the log when `errors` is None."""
    import docker.errors

    client = get_client()
    host, now, removed = socket.gethostname(), time.time(), []
    for sb in list_sandboxes(client):
        pid = sb["owner_pid"]
        if sb["owner_host"] != host or pid is None or base.pid_alive(pid):
            continue
        if now - sb["created"] < older_than_s:
            continue
        if not dry_run:
            try:
                client.api.remove_container(sb["id"], force=True, v=True)
            except docker.errors.NotFound:
                continue
            except Exception as e:
                if errors is None:
                    log.warning("reap: cannot remove sandbox container %s (%s); skipped",
                                sb["name"], e)
                else:
                    errors.append(f"docker:{sb['name']}: {type(e).__name__}: {e}")
                continue
        removed.append(sb["name"])
    return removed


def get_image(client: Any, image: str, requested: str | None) -> Any:
    """The Docker image `image` (`requested`: what the caller asked for, None for skyhub's
    default); `SandboxUnavailable` saying how to get it when it is not present."""
    import docker.errors

    try:
        return client.images.get(image)
    except docker.errors.ImageNotFound:
        hint = ("run `skyhub images build` to build skyhub's images" if requested is None
                or image.startswith("skyhub/") else
                f"pull or build it first (`docker pull {image}`); skyhub's own images:"
                " `skyhub images build`")
        raise SandboxUnavailable(f"Docker image {image} is not present; {hint}") from None
