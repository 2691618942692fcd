"""Reproducible benchmarks: `python -m benchmarks.NAME` writes `benchmarks/results/NAME.json`
and `python -m benchmarks.readme` regenerates the README's performance table from them."""
