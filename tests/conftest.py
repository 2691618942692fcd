"""Shared fixtures for the whole suite. Keep this small: fixtures a single file needs live there."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

_counter = itertools.count()


@pytest.fixture
def repo_root() -> Path:
    """The repository root (where pyproject.toml is)."""
    return REPO_ROOT


@pytest.fixture
def tmp_env_id() -> Iterator[str]:
    """A fresh env id, unregistered after the test whatever the test registered under it."""
    from skyhub.registry import unregister

    env_id = f"testtmp-env{next(_counter)}"
    yield env_id
    unregister(env_id)
