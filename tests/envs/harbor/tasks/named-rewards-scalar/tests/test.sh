#!/bin/bash
# "reward" is the score; correctness and style are extra named rewards beside it.
correctness=0
style=0
f=/root/words.txt
if [ -f "$f" ] && [ "$(cat "$f")" = "$(printf 'alpha\nbeta\ngamma')" ]; then
  correctness=1
  style=0.5
  [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" = '\n' ] && style=1
fi
echo "reward=$correctness correctness=$correctness style=$style"
printf '{"reward": %s, "correctness": %s, "style": %s}\n' "$correctness" "$correctness" "$style" \
  > /logs/verifier/reward.json
