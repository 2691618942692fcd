#!/bin/bash
reward=0
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

[ "$(cat /opt/app/VERSION 2>/dev/null)" = "compose-context 1.0" ] \
  || fail "/opt/app/VERSION missing: the image was not built from the task root"
[ "${RELEASE_CHANNEL:-}" = "stable" ] || fail "RELEASE_CHANNEL='${RELEASE_CHANNEL:-}' (compose environment not applied)"
[ "${BANNER_STYLE:-}" = "plain" ] || fail "BANNER_STYLE='${BANNER_STYLE:-}' (compose environment not applied)"
[ -f /opt/app/banner.txt ] || fail "/opt/app/banner.txt does not exist"
got=$(cat /opt/app/banner.txt)
[ "$got" = "app from the task root, channel stable" ] || fail "banner.txt says '$got'"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
