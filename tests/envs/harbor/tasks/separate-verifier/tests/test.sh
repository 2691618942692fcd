#!/bin/bash
# Runs in the verifier's own container: the agent's image is not here, only its artifacts.
reward=0
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

[ ! -e /workspace/notes.txt ] || fail "/workspace/notes.txt is visible: this is the agent's container, not a separate verifier"
[ -f /workspace/report.txt ] || fail "the artifact /workspace/report.txt did not arrive"
[ "$(cat /workspace/report.txt)" = "42" ] || fail "/workspace/report.txt says '$(cat /workspace/report.txt)'"
[ "$(cat /logs/artifacts/max.txt 2>/dev/null)" = "23" ] || fail "/logs/artifacts/max.txt says '$(cat /logs/artifacts/max.txt 2>&1)'"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
