"""Moved to skyhub.eval.compare; kept so old imports (`skyhub.compare`) work. No logic here."""

from __future__ import annotations

from skyhub.eval.compare import (
    BOOTSTRAP_RESAMPLES,
    EXACT_PERMUTATION_MAX,
    PERMUTATION_SAMPLES,
    SEED,
    Comparison,
    PairedStats,
    RunStats,
    compare_runs,
    mcnemar_exact,
    paired_bootstrap_ci,
    sign_flip_p,
)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "EXACT_PERMUTATION_MAX",
    "PERMUTATION_SAMPLES",
    "SEED",
    "Comparison",
    "PairedStats",
    "RunStats",
    "compare_runs",
    "mcnemar_exact",
    "paired_bootstrap_ci",
    "sign_flip_p",
]
