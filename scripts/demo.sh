#!/usr/bin/env bash
# The Quickstart's main job: set up, then train. GRPO takes a randomly initialised model (with a
# tokenizer trained on the env's own text: nothing is downloaded) from chance to >= 0.9 on
# toy-recall in a few minutes on a CPU. Metrics, curves.png, TensorBoard logs and checkpoints
# go to runs/tiny-cpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/skyhub train --recipe tiny-cpu --out runs/tiny-cpu "$@"
