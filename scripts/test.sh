#!/usr/bin/env bash
# The Quickstart's test command: set up everything the tests need, then run the whole suite.
# Extra pytest arguments pass through (e.g. `bash scripts/test.sh -m "not slow" -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
exec .venv/bin/python -m pytest "$@"
