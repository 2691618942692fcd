#!/bin/bash
reward=0
got=$(cat /root/greeting.txt 2>/dev/null)
if [ "$got" = "hello, world!" ]; then
  reward=1
  echo "PASS"
else
  echo "FAIL: /root/greeting.txt says '$got', expected 'hello, world!'"
fi
echo "$reward" > /logs/verifier/reward.txt
