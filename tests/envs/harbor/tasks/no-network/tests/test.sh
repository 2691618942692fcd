#!/bin/bash
# On a host that has no internet anyway this cannot tell the modes apart; where the host has
# it, a runtime that reads "no-network" as "public" scores 0.
reward=0
got=$(cat /root/network.txt 2>/dev/null)
if [ "$got" = "offline" ]; then
  reward=1
  echo "PASS"
else
  echo "FAIL: /root/network.txt says '$got'; network_mode = \"no-network\" should leave the agent offline"
fi
echo "$reward" > /logs/verifier/reward.txt
