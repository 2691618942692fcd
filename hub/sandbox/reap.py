"""`reap`: remove sandboxes whose owner process died without closing them.

Every sandbox carries labels (owner pid, host, creation time, pool): Docker labels on
containers, a label file beside local scratch directories. A sandbox is an orphan when its
owner pid is no longer alive on this host. Sandboxes owned by other hosts are never touched.
One backend failing (or one orphan that cannot be removed) never stops the others.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)


def reap(older_than_s: float = 0.0, *, dry_run: bool = False,
         backends: tuple[str, ...] = ("docker", "local", "e2b"),
         errors: list[str] | None = None) -> list[str]:
    """Remove orphaned sandboxes created more than `older_than_s` seconds ago.

    Returns what was removed (or, with `dry_run`, would be) as `backend:name`. A backend that
    is unavailable (no Docker daemon, no `E2B_API_KEY`) is skipped. What could not be removed
    goes to `errors` ("backend:name: why", or "backend: why" when a whole backend failed;
    logged as warnings when `errors` is None) and the rest is reaped all the same.
    """
    problems: list[str] = []
    removed: list[str] = []

    def run(backend: str, fn: Callable[[], list[str]]) -> None:
        try:
            removed.extend(f"{backend}:{n}" for n in fn())
        except Exception as e:  # one backend's failure must not keep the others' orphans
            problems.append(f"{backend}: {type(e).__name__}: {e}")

    def local_orphans() -> list[str]:
        from skyhub.sandbox import local_scratch

        return local_scratch.reap(older_than_s=older_than_s, dry_run=dry_run, errors=problems)

    def docker_orphans() -> list[str]:
        from skyhub.sandbox import docker_client

        if not docker_client.docker_available():
            return []
        return docker_client.reap(older_than_s=older_than_s, dry_run=dry_run)

    def e2b_orphans() -> list[str]:
        from skyhub.sandbox import e2b

        return e2b.reap(older_than_s=older_than_s, dry_run=dry_run)

    if "local" in backends:
        run("local", local_orphans)
    if "docker" in backends:
        run("docker", docker_orphans)
    if "e2b" in backends and os.environ.get("E2B_API_KEY"):
        run("e2b", e2b_orphans)
    if errors is None:
        for p in problems:
            log.warning("reap could not remove %s", p)
    else:
        errors.extend(problems)
    return removed
