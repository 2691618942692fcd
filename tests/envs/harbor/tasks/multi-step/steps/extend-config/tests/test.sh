#!/bin/bash
# Passes only if step 1's file is still there: the steps share one container.
. /tests/common.sh || { echo 0 > /logs/verifier/reward.txt; echo "FAIL: /tests/common.sh missing"; exit 0; }
has_line "name = demo" || finish 0 "FAIL: step 1's [core] section is gone from $CONFIG"
has_line "[extra]" && has_line "level = 2" || finish 0 "FAIL: $CONFIG lacks [extra] level = 2"
[ "$(grep -c '^\[' "$CONFIG")" = 2 ] || finish 0 "FAIL: $CONFIG should have exactly two sections"
finish 1 "PASS"
