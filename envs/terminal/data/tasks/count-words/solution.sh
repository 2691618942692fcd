#!/bin/bash
set -eu
tr -cs 'A-Za-z' '\n' < /work/text/poem.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c \
  | sort -rn | head -n 3 | awk '{print $1, $2}' > /work/top.txt
