#!/usr/bin/env bash
# The Quickstart's main job: set up, then evaluate two agents on a bundled multi-turn env.
# The oracle follows the env's reference actions (an upper bound that checks env and reward
# end to end); the random agent is the floor. Results go to runs/demo-*/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for agent in oracle random; do
  .venv/bin/skyhub eval toy-lookup split=dev --agent "$agent" --n 100 --concurrency 16 --seed 0 \
    --out "runs/demo-$agent"
done
