#!/bin/bash
reward=0
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

[ "${EXPECTED-}" = "hello" ] || fail "EXPECTED='${EXPECTED-}' ([verifier.env] template not resolved to its default)"
[ "${GREETING_FORMAT-}" = "plain text, no templating" ] || fail "GREETING_FORMAT='${GREETING_FORMAT-}'"
[ -z "${ANSWER_WORD+set}" ] || fail "the verifier sees ANSWER_WORD from [solution.env]"
[ -f /root/word.txt ] || fail "/root/word.txt does not exist"
[ "$(cat /root/word.txt)" = "$EXPECTED" ] || fail "/root/word.txt says '$(cat /root/word.txt)'"
saw=$(cat /root/oracle-saw-expected.txt 2>/dev/null || echo unset)
[ "$saw" = "unset" ] || fail "the solution saw EXPECTED='$saw' from [verifier.env]"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
