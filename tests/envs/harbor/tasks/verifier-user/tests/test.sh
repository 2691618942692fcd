#!/bin/bash
reward=0
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

me=$(id -un)
[ "$me" = "grader" ] || fail "the verifier runs as '$me', [verifier] user says grader"
[ -f /shared/author.txt ] || fail "/shared/author.txt does not exist"
[ "$(cat /shared/author.txt)" = "builder" ] || fail "/shared/author.txt says '$(cat /shared/author.txt)'"
[ "$(stat -c %U /shared/author.txt)" = "builder" ] || fail "/shared/author.txt is owned by $(stat -c %U /shared/author.txt)"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
