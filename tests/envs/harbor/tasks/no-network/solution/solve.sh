#!/bin/bash
# Records what the agent's commands can reach; the verifier only reads the record.
state=offline
for target in deb.debian.org/80 1.1.1.1/443; do
  if timeout 5 bash -c "exec 3<>/dev/tcp/$target" 2>/dev/null; then
    state=online
    echo "reached $target"
  fi
done
echo "$state" > /root/network.txt
