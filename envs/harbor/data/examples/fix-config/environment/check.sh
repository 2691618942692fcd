#!/bin/bash
# Reads /app/app.conf and prints OK when the configuration is valid.
conf=/app/app.conf
[ -f "$conf" ] || { echo "ERROR: $conf not found"; exit 1; }
get() { grep -E "^$1=" "$conf" | tail -n 1 | cut -d= -f2-; }
name=$(get name); port=$(get port); mode=$(get mode); workers=$(get workers)
[ -n "$name" ] || { echo "ERROR: name is missing"; exit 1; }
[[ "$port" =~ ^[0-9]+$ ]] || { echo "ERROR: port must be a number"; exit 1; }
case "$mode" in
  production|development) ;;
  *) echo "ERROR: mode must be production or development, got '$mode'"; exit 1 ;;
esac
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "ERROR: workers must be a positive integer"; exit 1; }
echo OK
