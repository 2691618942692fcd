"""A Harbor task's Docker image: built from `environment/`, cached by a content hash.

The tag is `skyhub-harbor/<task>:<12 hex digits of the environment's files>`, so a task is
built once per content (by any process on the daemon) and an edited Dockerfile or context
yields a new image. Builds never pull: Docker Hub may be unreachable, so base images must be
present locally (`bash scripts/services.sh` seeds debian:bookworm-slim).
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path
from typing import Any

from skyhub.errors import SandboxUnavailable

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def context_hash(env_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(env_dir.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(env_dir).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_tag(task_dir: Path) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", task_dir.name.lower()).strip("-.") or "task"
    return f"skyhub-harbor/{slug}:{context_hash(task_dir / 'environment')}"


def task_image(task_dir: str | Path, config: dict[str, Any], client: Any = None) -> str:
    """The image to run the task in: `docker_image` as given (it must be present), else the
    cached build of `environment/` (built now if missing). `SandboxUnavailable` says why not."""
    import docker.errors

    from skyhub.sandbox.docker import get_client

    client = client or get_client()
    if config.get("docker_image"):
        ref = str(config["docker_image"])
        try:
            client.images.get(ref)
        except docker.errors.ImageNotFound:
            raise SandboxUnavailable(f"the task's docker_image {ref} is not present; pull it "
                                     f"first (`docker pull {ref}`)") from None
        return ref
    task_dir = Path(task_dir)
    tag = image_tag(task_dir)
    with _locks_guard:
        lock = _locks.setdefault(tag, threading.Lock())
    with lock:
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        log: list[str] = []
        try:
            for chunk in client.api.build(path=str(task_dir / "environment"), tag=tag, rm=True,
                                          forcerm=True, pull=False, decode=True,
                                          timeout=int(config.get("build_timeout_s") or 600),
                                          labels={"skyhub.harbor": task_dir.name}):
                if "error" in chunk:
                    raise SandboxUnavailable(
                        f"building Harbor task {task_dir.name} failed: {chunk['error'].strip()}"
                        f"\n{''.join(log[-15:])}(base images must be present locally: Docker "
                        "Hub may be unreachable)")
                line = chunk.get("stream") or ""
                if line.strip():
                    log.append(line if line.endswith("\n") else line + "\n")
        except docker.errors.DockerException as e:
            raise SandboxUnavailable(f"building Harbor task {task_dir.name} failed: {e}") from e
    return tag


__all__ = ["context_hash", "image_tag", "task_image"]
