"""`import skyhub`, `skyhub.adapters` and an adapter module load none of its framework (nor
the adapter's implementation module): each framework is imported when a name is first used."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = {
    "trl": ("trl", "datasets", "transformers", "torch"),
    "verifiers": ("verifiers", "datasets", "openai"),
    "openenv": ("openenv", "fastmcp", "fastapi", "skyhub.adapters._openenv"),
    "skyrl_gym": ("skyrl_gym", "omegaconf", "skyhub.adapters._skyrl_gym"),
    "tinker_cookbook": ("tinker_cookbook", "tinker", "chz", "transformers", "torch",
                        "skyhub.adapters._tinker_cookbook"),
}


@pytest.mark.parametrize("adapter", sorted(FRAMEWORKS))
def test_importing_an_adapter_imports_no_framework(adapter: str) -> None:
    code = (f"import sys, skyhub, skyhub.adapters, skyhub.adapters.{adapter}\n"
            f"print([m for m in {FRAMEWORKS[adapter]!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"
