"""Fixtures for sandbox tests: the real Docker daemon and real bubblewrap.

Without them a developer's run skips these tests with the reason; CI sets
SKYHUB_REQUIRE_DOCKER=1 and SKYHUB_REQUIRE_BWRAP=1 (in .ci/run) so that a missing service
fails instead of skipping.
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


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[None]:
    """A Docker daemon that answers, and a check after the session that no container with
    skyhub's labels and this process as owner is left behind."""
    from skyhub.sandbox.docker import docker_available

    if not docker_available():
        _need("Docker", "SKYHUB_REQUIRE_DOCKER", "no Docker daemon answers")
    yield
    import docker

    client = docker.from_env()
    left = client.containers.list(all=True, filters={
        "label": ["skyhub.sandbox=1", f"skyhub.owner_pid={os.getpid()}"]})
    names = [c.name for c in left]
    for c in left:
        c.remove(force=True)
    assert not names, f"tests left sandbox containers behind: {names}"


@pytest.fixture(scope="session")
def bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        _need("bubblewrap", "SKYHUB_REQUIRE_BWRAP", "bwrap is not on the PATH")
    return path
