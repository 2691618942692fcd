#!/bin/bash
reward=0
if [ "$(cat /root/answer.txt 2>/dev/null)" = "patience" ]; then
  reward=1
  echo "PASS"
else
  echo "FAIL: /root/answer.txt is '$(cat /root/answer.txt 2>&1)'"
fi
echo "$reward" > /logs/verifier/reward.txt
