"""`reap_owner`: remove the sandboxes that one dead worker process owned (for skyhub.vector).

An executor kills a worker whose env hangs (`step_timeout`), and a worker may die on its own
(a segfault, the OOM killer, `kill -9`). Either way its env never ran `close()`, so the
sandboxes it made (containers, scratch dirs, their processes) would outlive it. Every sandbox
carries its owner's pid and host (`skyhub.sandbox.base.owner_labels`), so once a worker is
dead the executor removes exactly those whose owner it was, at once and without touching
anyone else's (`skyhub sandbox reap` removes every orphan, later, when someone runs it).

Pid reuse: the caller says who the owner was beyond its pid. The process executor reaps while
the dead worker is still an unreaped zombie (its pid cannot be reused yet); a Ray actor's
process is reaped by Ray, so its caller passes the owner's start time (local scratch dirs
record it) and `before`, the time it saw the process gone (a container made later belongs to
someone else).
"""

from __future__ import annotations

import contextlib
import logging
import socket

log = logging.getLogger(__name__)


def reap_owner(pid: int, *, start: int | None = None, before: float | None = None) -> list[str]:
    """Remove every sandbox made on this host by process `pid`, which the caller knows to be
    dead (or a zombie); returns what was removed as `backend:name`. Never raises: a backend
    that fails is logged and the others are still reaped.

    `start`: the owner's start time in clock ticks (`skyhub.sandbox.owner_start_time`), to tell it
    from a later process with the same pid; `before`: only sandboxes created before then.
    """
    removed: list[str] = []
    for backend in (_reap_local, _reap_docker):
        try:
            removed += backend(pid, start, before)
        except Exception as e:  # a cleanup must not take the VectorEnv down
            _warn(backend.__name__.removeprefix("_reap_") + " sandboxes", pid, e)
    return removed


def _reap_local(pid: int, start: int | None, before: float | None) -> list[str]:
    from skyhub.sandbox import local_scratch
    from skyhub.sandbox.base import LABEL_OWNER_HOST

    host, removed = socket.gethostname(), []
    for s in local_scratch.list_sandboxes():
        labels = s["labels"]
        if s["owner_pid"] != pid or labels.get(LABEL_OWNER_HOST, host) != host:
            continue
        if start is not None and labels.get(local_scratch.LABEL_OWNER_START, "-1") not in (
                "-1", str(start)):
            continue
        if before is not None and s["created"] > before:
            continue
        try:  # as local_scratch.reap removes an orphan
            local_scratch.kill_sandbox(s["id"], s["uid"])
            local_scratch.remove_owned(s["uid"])
            local_scratch.remove_tree(s["path"])
        except Exception as e:  # one bad entry must not keep the others
            _warn(f"local:{s['id']}", pid, e)
        else:
            removed.append(f"local:{s['id']}")
    from skyhub.sandbox import local_cgroup  # their memory cgroups, named by owner pid

    errors: list[str] = []
    removed += [f"local:cgroup {name}" for name in
                local_cgroup.reap_orphans(errors=errors, owner=pid, start=start)]
    for why in errors:
        log.warning("could not reap the memory cgroup of dead worker %d: %s", pid, why)
    return removed


def _reap_docker(pid: int, start: int | None, before: float | None) -> list[str]:
    import importlib.util

    if importlib.util.find_spec("docker") is None:  # no Docker SDK: no docker sandboxes
        return []
    import docker.errors

    from skyhub.sandbox import base
    from skyhub.sandbox.docker_client import docker_available, get_client

    if not docker_available():
        return []
    api = get_client().api
    # the daemon filters on the labels themselves (one call, however many containers exist)
    wanted = [f"{base.LABEL}=1", f"{base.LABEL_OWNER_PID}={pid}",
              f"{base.LABEL_OWNER_HOST}={socket.gethostname()}"]
    removed = []
    for c in api.containers(all=True, filters={"label": wanted}):
        labels = c.get("Labels") or {}
        if before is not None:
            with contextlib.suppress(ValueError):
                if float(labels.get(base.LABEL_CREATED, "0")) > before:
                    continue
        name = f"docker:{(c.get('Names') or [c['Id']])[0].lstrip('/')}"
        try:
            api.remove_container(c["Id"], force=True)
        except docker.errors.NotFound:
            continue  # removed meanwhile (its owner's close, `skyhub sandbox reap`)
        except Exception as e:
            _warn(name, pid, e)
        else:
            removed.append(name)
    return removed


def _warn(what: str, pid: int, e: BaseException) -> None:
    log.warning("could not reap %s of dead worker %d: %s: %s", what, pid, type(e).__name__, e)


__all__ = ["reap_owner"]
