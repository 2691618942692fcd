"""Fixtures for the Python envs: a real kernel in a real sandbox, on each backend.

`backend` is parametrized over "local" (bubblewrap) and "docker"; each skips (or, with
SKYHUB_REQUIRE_BWRAP=1 / SKYHUB_REQUIRE_DOCKER=1 as in CI, fails) when its service is
missing. One session per backend is shared by a test module: a kernel's cold start is ~1-2 s.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


def _need(what: str, env_var: str, reason: str) -> None:
    if os.environ.get(env_var) == "1":
        pytest.fail(f"{what} is required here ({env_var}=1) but {reason}")
    pytest.skip(f"{what}: {reason} (bash scripts/services.sh installs and starts it)")


def require_backend(backend: str) -> None:
    if backend == "local":
        if shutil.which("bwrap") is None:
            _need("bubblewrap", "SKYHUB_REQUIRE_BWRAP", "bwrap is not on the PATH")
        from skyhub.envs.python.kernel import local_runtime
        from skyhub.errors import SandboxUnavailable

        try:
            local_runtime()
        except SandboxUnavailable as e:
            _need("a Python with ipykernel for local sandboxes", "SKYHUB_REQUIRE_BWRAP", str(e))
    else:
        from skyhub.sandbox import images
        from skyhub.sandbox.docker import docker_available

        if not docker_available():
            _need("Docker", "SKYHUB_REQUIRE_DOCKER", "no Docker daemon answers")
        if not images.is_built(images.image_tag("python")):
            _need("skyhub's python image", "SKYHUB_REQUIRE_DOCKER",
                  f"{images.image_tag('python')} is not built (`skyhub images build`)")


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="module")
def session(backend: str) -> Iterator[object]:
    from skyhub.envs.python.kernel import KernelSession

    with KernelSession(backend) as s:
        yield s
