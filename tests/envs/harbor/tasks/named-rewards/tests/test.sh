#!/bin/bash
# Two named rewards and no "reward" key: whoever reads this picks which one is the score.
correctness=0
style=0
f=/root/words.txt
if [ -f "$f" ] && [ "$(cat "$f")" = "$(printf 'alpha\nbeta\ngamma')" ]; then
  correctness=1
  # style: the last line ends in a newline and no line has trailing blanks
  if [ "$(tail -c 1 "$f" | od -An -c | tr -d ' ')" = '\n' ] && ! grep -q '[[:blank:]]$' "$f"; then
    style=1
  fi
fi
echo "correctness=$correctness style=$style"
printf '{"correctness": %s, "style": %s}\n' "$correctness" "$style" > /logs/verifier/reward.json
