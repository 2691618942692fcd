"""The search tests' shared corpus fixture (data in tests/support/search_data.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))

from search_data import write_corpus


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path)
