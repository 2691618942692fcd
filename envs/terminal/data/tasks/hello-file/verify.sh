#!/bin/bash
# Solved when hello.txt holds exactly "Hello, skyhub!\n" and README.txt is untouched.
f=/work/greeting/hello.txt
[ -f "$f" ] || { echo "FAIL: $f does not exist"; exit 1; }
printf 'Hello, skyhub!\n' | cmp -s - "$f" \
  || { echo "FAIL: $f must contain exactly the line 'Hello, skyhub!' and a newline"; exit 1; }
printf 'Put hello.txt next to this file.\n' | cmp -s - /work/greeting/README.txt \
  || { echo "FAIL: /work/greeting/README.txt was changed"; exit 1; }
