#!/bin/bash
mkdir -p /logs/verifier
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }

# The script must be unchanged (compared with the copy the tests ship).
cmp -s /app/check.sh /tests/check.sh.orig || fail "/app/check.sh was modified"
[ -f /app/app.conf ] || fail "/app/app.conf is missing"

out=$(bash /app/check.sh 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "check.sh exited $rc: $out"
[ "$out" = "OK" ] || fail "check.sh printed '$out', expected 'OK'"

get() { grep -E "^$1=" /app/app.conf | tail -n 1 | cut -d= -f2-; }
[ "$(get mode)" = "production" ] || fail "mode is not production"
[ "$(get name)" = "skyhub-demo" ] || fail "name changed"
[ "$(get port)" = "8080" ] || fail "port changed"
[ "$(get workers)" = "4" ] || fail "workers changed"

echo "PASS"
echo 1 > /logs/verifier/reward.txt
exit 0
