#!/bin/bash
# The three counts differ from each other and from the fourth word's, so one answer is right.
want=$'14 the\n5 river\n4 rain'
[ -f /work/top.txt ] || { echo "FAIL: /work/top.txt does not exist"; exit 1; }
got=$(cat /work/top.txt; echo .)
got=${got%.}
[ "$got" = "$want"$'\n' ] || [ "$got" = "$want" ] \
  || { echo "FAIL: /work/top.txt is not the expected three lines"; exit 1; }
