"""Reproducible benchmarks: `python -m benchmarks.NAME` writes `benchmarks/results/NAME.json`
and `python -m benchmarks` regenerates the README's performance table from them."""
