#!/bin/bash
reward=0
if [ "$(cat /root/answer.txt 2>/dev/null)" = "1060" ]; then
  reward=1
  echo "PASS"
else
  echo "FAIL: /root/answer.txt is '$(cat /root/answer.txt 2>&1)', expected 1060"
fi
echo "$reward" > /logs/verifier/reward.txt
