#!/bin/bash
reward=0
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

[ -f /run/service/started ] || fail "/run/service/started missing: the image's ENTRYPOINT did not run"
[ -s /run/service/token ] || fail "/run/service/token missing: the service is not up yet"
[ -f /root/token.txt ] || fail "/root/token.txt does not exist (did the agent start before the healthcheck passed?)"
[ "$(cat /root/token.txt)" = "$(cat /run/service/token)" ] || fail "/root/token.txt does not hold the service's token"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
