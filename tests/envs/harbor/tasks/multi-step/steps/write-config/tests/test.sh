#!/bin/bash
. /tests/common.sh || { echo 0 > /logs/verifier/reward.txt; echo "FAIL: /tests/common.sh missing"; exit 0; }
has_line "[core]" && has_line "name = demo" || finish 0 "FAIL: $CONFIG lacks [core] name = demo"
finish 1 "PASS"
