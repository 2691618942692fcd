"""Fixtures for the terminal envs: one shell session per backend, shared by a test module
(`backend` itself is tests/conftest.py's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from skyhub.shell.session import ShellSession


@pytest.fixture(scope="module")
def shell(backend: str) -> Iterator[ShellSession]:
    """A live shell in a fresh sandbox of `backend`."""
    import skyhub.sandbox

    with skyhub.sandbox.create(backend=backend) as sb, ShellSession(sb) as s:
        yield s
