"""Choosing and creating a sandbox: `create` and the backends it picks from.

Below the package's other modules that make sandboxes (`pool`), so that they need not import
the package's `__init__`, which re-exports these.
"""

from __future__ import annotations

from typing import Any

from skyhub.errors import UsageError
from skyhub.sandbox.base import Sandbox

BACKENDS = ("docker", "local", "e2b")


def docker_available() -> bool:
    """Whether a Docker daemon answers (used by `backend="auto"`)."""
    from skyhub.sandbox.docker_client import docker_available as check

    return check()


def create(image: str | None = None, backend: str = "auto", cpus: float = 1.0,
           memory_mb: int = 1024, network: bool = False, workdir: str = "/work",
           **kwargs: Any) -> Sandbox:
    """A new sandbox. `backend="auto"` picks docker when a daemon answers, else local.

    Common kwargs: `pids` (process limit, default 256), `max_output` (bytes kept per output
    stream per exec, default 1 MiB), `pool` (a label). Backends take more (see each).
    """
    if backend == "auto":
        backend = "docker" if docker_available() else "local"
    if backend == "docker":
        from skyhub.sandbox.docker import DockerSandbox

        return DockerSandbox(image=image, cpus=cpus, memory_mb=memory_mb, network=network,
                             workdir=workdir, **kwargs)
    if backend == "local":
        from skyhub.sandbox.local import LocalSandbox

        return LocalSandbox(image=image, cpus=cpus, memory_mb=memory_mb, network=network,
                            workdir=workdir, **kwargs)
    if backend == "e2b":
        from skyhub.sandbox.e2b import E2BSandbox

        return E2BSandbox(image=image, cpus=cpus, memory_mb=memory_mb, network=network,
                          workdir=workdir, **kwargs)
    raise UsageError(f"unknown sandbox backend {backend!r}; choose one of {BACKENDS} or 'auto'")


__all__ = ["BACKENDS", "create", "docker_available"]
