#!/bin/bash
# Runs the script with a name, a name with spaces and no argument; stdout and stderr are exact.
check() {  # $1: expected stdout; the rest: arguments
  local want=$1 out err rc
  shift
  err=$(mktemp)
  out=$(bash /work/greet.sh "$@" 2>"$err"); rc=$?
  [ "$rc" -eq 0 ] || { echo "FAIL: greet.sh $* exited with $rc"; exit 1; }
  [ "$out" = "$want" ] || { echo "FAIL: greet.sh $* printed '$out', not '$want'"; exit 1; }
  [ ! -s "$err" ] || { echo "FAIL: greet.sh $* wrote to stderr: $(cat "$err")"; exit 1; }
}
[ -f /work/greet.sh ] || { echo "FAIL: /work/greet.sh is missing"; exit 1; }
check 'Hello, Ada!' Ada
check 'Hello, Ada Lovelace!' 'Ada Lovelace'
check 'Hello, world!'
[ "$(bash /work/greet.sh Bo | wc -l)" -eq 1 ] || { echo "FAIL: more than one line"; exit 1; }
