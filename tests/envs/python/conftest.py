"""Fixtures for the Python envs: a real kernel in a real sandbox, on each backend.

`backend` (tests/conftest.py) is parametrized over "local" (bubblewrap) and "docker"; each
skips (or, with SKYHUB_REQUIRE_BWRAP=1 / SKYHUB_REQUIRE_DOCKER=1 as in CI, fails) when its
service is missing; the two overrides below add what the kernel needs on each. One session per
backend is shared by a test module: a kernel's cold start is ~1-2 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def local_backend(local_backend: str, need: Callable[[str, str, str], None]) -> str:
    """"local", when bubblewrap and a Python with ipykernel are there for it."""
    from skyhub.envs.python.kernel import local_runtime
    from skyhub.errors import SandboxUnavailable

    try:
        local_runtime()
    except SandboxUnavailable as e:
        need("a Python with ipykernel for local sandboxes", "SKYHUB_REQUIRE_BWRAP", str(e))
    return local_backend


@pytest.fixture(scope="module")
def docker_backend(docker_backend: str, need: Callable[[str, str, str], None]) -> str:
    """"docker", when skyhub's python image is built."""
    from skyhub.sandbox import images

    if not images.is_built(images.image_tag("python")):
        need("skyhub's python image", "SKYHUB_REQUIRE_DOCKER",
             f"{images.image_tag('python')} is not built (`skyhub images build`)")
    return docker_backend


@pytest.fixture(scope="module")
def session(backend: str) -> Iterator[object]:
    from skyhub.envs.python.kernel import KernelSession

    with KernelSession(backend) as s:
        yield s


@pytest.fixture(scope="module")
def grader(backend: str) -> Iterator[Callable[[], tuple[Any, str]]]:
    """A grading sandbox like python-code's, restored before each use: `grader()` gives it
    and the python to run in it."""
    from skyhub.envs.python.runtime import make_sandbox

    sb, argv = make_sandbox(backend, pool="python-grader")
    clean = sb.snapshot()

    def restored() -> tuple[Any, str]:
        sb.restore(clean, kill_processes=True)
        return sb, argv[0]

    try:
        yield restored
    finally:
        sb.close()
