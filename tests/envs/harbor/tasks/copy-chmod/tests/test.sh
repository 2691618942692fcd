#!/bin/bash
reward=0
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

mode=$(stat -c %a /usr/local/bin/tool 2>/dev/null) || fail "/usr/local/bin/tool is missing"
[ "$mode" = "755" ] || fail "/usr/local/bin/tool has mode $mode, COPY --chmod=755 gives 755"
[ -f /root/stamp.txt ] || fail "/root/stamp.txt does not exist"
got=$(cat /root/stamp.txt)
[ "$got" = "tool stamp 7f3a" ] || fail "/root/stamp.txt says '$got'"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
