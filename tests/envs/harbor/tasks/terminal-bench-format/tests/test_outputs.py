"""Checks for the word-count task, in pytest style, runnable without pytest."""

import sys
from pathlib import Path

POEM = Path("/app/poem.txt")
COUNT = Path("/app/count.txt")


def test_count_file_exists():
    assert COUNT.is_file(), f"{COUNT} does not exist"


def test_count_matches_poem():
    expected = len(POEM.read_text().split())
    got = COUNT.read_text().strip() if COUNT.is_file() else ""
    assert got == str(expected), f"{COUNT} says {got!r}, the poem has {expected} words"


def test_poem_unchanged():
    assert len(POEM.read_text().split()) == 13, f"{POEM} was modified"


if __name__ == "__main__":
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASSED {name}")
            except AssertionError as exc:
                failed += 1
                print(f"FAILED {name} - {exc}")
    sys.exit(1 if failed else 0)
