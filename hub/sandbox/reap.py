"""`reap`: remove sandboxes whose owner process died without closing them.

Every sandbox carries labels (owner pid, host, creation time, pool): Docker labels on
containers, a label file beside local scratch directories. A sandbox is an orphan when its
owner pid is no longer alive on this host. Sandboxes owned by other hosts are never touched.
"""

from __future__ import annotations

import os


def reap(older_than_s: float = 0.0, *, dry_run: bool = False,
         backends: tuple[str, ...] = ("docker", "local", "e2b")) -> list[str]:
    """Remove orphaned sandboxes created more than `older_than_s` seconds ago.

    Returns what was removed (or, with `dry_run`, would be) as `backend:name`. A backend that
    is unavailable (no Docker daemon, no `E2B_API_KEY`) is skipped.
    """
    removed: list[str] = []
    if "local" in backends:
        from skyhub.sandbox import local

        removed += [f"local:{n}" for n in local.reap(older_than_s=older_than_s, dry_run=dry_run)]
    if "docker" in backends:
        from skyhub.sandbox import docker

        if docker.docker_available():
            removed += [f"docker:{n}"
                        for n in docker.reap(older_than_s=older_than_s, dry_run=dry_run)]
    if "e2b" in backends and os.environ.get("E2B_API_KEY"):
        from skyhub.sandbox import e2b

        removed += [f"e2b:{n}" for n in e2b.reap(older_than_s=older_than_s, dry_run=dry_run)]
    return removed
