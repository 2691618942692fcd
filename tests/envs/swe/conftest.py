"""Fixtures for the swe family: on Docker, its episodes run in skyhub's `swe` image (Debian's
Python, pytest and git), which `skyhub images build` makes; locally, in bubblewrap with the
host's Debian Python and pytest (scripts/services.sh installs them)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture(scope="module")
def docker_backend(docker_backend: str, need: Callable[[str, str, str], None]) -> str:
    """"docker", when skyhub's swe image is built."""
    from skyhub.sandbox import images

    if not images.is_built(images.image_tag("swe")):
        need("skyhub's swe image", "SKYHUB_REQUIRE_DOCKER",
             f"{images.image_tag('swe')} is not built (`skyhub images build`)")
    return docker_backend
