"""Sandbox tests use the `docker_daemon` and `bwrap` fixtures of tests/conftest.py, and
`reaping` (below) where they reap or leave orphans on purpose."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def reaping() -> Iterator[None]:
    """A lock across the workers of a parallel run (scripts/test.sh), held by every test that
    reaps or makes an orphan on purpose. A reap is machine-wide (it removes every sandbox,
    container and memory cgroup whose owner died), so one test's reap would otherwise take
    another test's orphan before that test looks at it. Ask for it first, before the fixtures
    that make sandboxes."""
    with open(Path(tempfile.gettempdir()) / "skyhub-tests-reaping.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
