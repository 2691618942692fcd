"""Sandboxes for untrusted agent actions: one interface over `docker`, `local` and `e2b`.

    sb = skyhub.sandbox.create(image=None, backend="auto", cpus=1.0, memory_mb=1024,
                               network=False, workdir="/work")
    sb.exec("echo hi")                     # ExecResult(exit_code, stdout, stderr, timed_out, ...)
    snap = sb.snapshot(); ...; sb.restore(snap)
    with skyhub.sandbox.Pool(size=8) as pool, pool.lease() as sb: ...
    skyhub.sandbox.reap()                  # remove what crashed processes left behind
    skyhub.sandbox.reap_owner(pid)         # ... at once, for one process known to be dead

Backends import their SDKs lazily: importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

from skyhub.sandbox.backends import BACKENDS, create, docker_available
from skyhub.sandbox.base import ExecResult, Sandbox, Snapshot

# eager (reap.py is stdlib only): a lazy export would be shadowed by the submodule of the same
# name the first time anything imports `skyhub.sandbox.reap`
from skyhub.sandbox.orphans import reap_owner
from skyhub.sandbox.reap import reap


def owner_start_time(pid: int) -> int:
    """Process `pid`'s start time in clock ticks (-1 when it is gone), as sandboxes record
    their owner's: with the pid it names an owner exactly (`reap_owner(pid, start=...)`)."""
    from skyhub.sandbox.base import start_time

    return start_time(pid)


def __getattr__(name: str) -> Any:
    if name == "Pool":
        from skyhub.sandbox.pool import Pool

        return Pool
    raise AttributeError(f"module 'skyhub.sandbox' has no attribute {name!r}")


__all__ = ["BACKENDS", "ExecResult", "Pool", "Sandbox", "Snapshot", "create", "docker_available",
           "owner_start_time", "reap", "reap_owner"]
