"""Waiting on a condition, for tests: they poll for what they expect, never sleep a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(check: Callable[[], object], within_s: float = 60.0,
               every_s: float = 0.02) -> bool:
    """Whether `check()` turns true within `within_s` seconds, asked every `every_s`. The
    deadline is generous on purpose: it is reached only when the test fails anyway, and a
    loaded machine must not fail a test that would pass."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True
