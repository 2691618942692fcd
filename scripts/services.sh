#!/usr/bin/env bash
# Install and start the services the tests need. Idempotent. The core needs none yet; the
# sandbox and SQL families add the Docker engine and PostgreSQL here.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[services] nothing to start for the core test suite"
