#!/usr/bin/env bash
# The Quickstart's test command: set up everything the tests need, then run the whole suite.
# Extra pytest arguments pass through (e.g. `bash scripts/test.sh -m "not slow" -x`).
#
# The suite runs in parallel (pytest-xdist), one file per worker at a time so that a file's
# module fixtures (sandboxes, kernels, images) are made once. Most tests wait on sandboxes,
# containers and kernels rather than compute (about 45% of two cores busy when run one at a
# time), so it takes one worker more than there are cores. SKYHUB_TEST_WORKERS=0 runs it in
# this process, one test at a time.
# Files go out in collection order (not xdist's default, the files with the most tests
# first), so tests/conftest.py's longest files start first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
workers=${SKYHUB_TEST_WORKERS:-$(($(nproc) + 1))}
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
