"""Fixtures for the Python envs: a real kernel in a real sandbox, on each backend.

`backend` is parametrized over "local" (bubblewrap) and "docker"; each skips (or, with
SKYHUB_REQUIRE_BWRAP=1 / SKYHUB_REQUIRE_DOCKER=1 as in CI, fails) when its service is
missing. One session per backend is shared by a test module: a kernel's cold start is ~1-2 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest


@pytest.fixture(scope="module")
def local_backend(bwrap: str, need: Callable[[str, str, str], None]) -> str:
    """"local", when bubblewrap and a Python with ipykernel are there for it."""
    from skyhub.envs.python.kernel import local_runtime
    from skyhub.errors import SandboxUnavailable

    try:
        local_runtime()
    except SandboxUnavailable as e:
        need("a Python with ipykernel for local sandboxes", "SKYHUB_REQUIRE_BWRAP", str(e))
    return "local"


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    need = request.getfixturevalue("need")
    if request.param == "local":
        request.getfixturevalue("local_backend")
    else:
        request.getfixturevalue("docker_daemon")
        from skyhub.sandbox import images

        if not images.is_built(images.image_tag("python")):
            need("skyhub's python image", "SKYHUB_REQUIRE_DOCKER",
                 f"{images.image_tag('python')} is not built (`skyhub images build`)")
    return request.param


@pytest.fixture(scope="module")
def session(backend: str) -> Iterator[object]:
    from skyhub.envs.python.kernel import KernelSession

    with KernelSession(backend) as s:
        yield s
