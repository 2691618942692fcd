#!/bin/bash
# Writes /logs/verifier/reward.json with one entry per check (bash + coreutils only).
mkdir -p /logs/verifier
LOG=/app/app.log
OUT=/app/summary.txt

log_unchanged=0; summary_exists=0; format_ok=0; counts_correct=0

want_sha=$(cut -d' ' -f1 /tests/app.log.sha256)
if [ -f "$LOG" ] && [ "$(sha256sum < "$LOG" | cut -d' ' -f1)" = "$want_sha" ]; then
  log_unchanged=1
fi

[ -f "$OUT" ] && summary_exists=1

if [ "$summary_exists" = 1 ]; then
  # Exactly five lines of the required shape, in order, file ending with a newline.
  if [ "$(wc -l < "$OUT")" -eq 5 ] && [ "$(tail -c 1 "$OUT" | od -An -c | tr -d ' ')" = '\n' ] \
     && grep -Exq 'DEBUG [0-9]+' <(sed -n 1p "$OUT") \
     && grep -Exq 'INFO [0-9]+'  <(sed -n 2p "$OUT") \
     && grep -Exq 'WARN [0-9]+'  <(sed -n 3p "$OUT") \
     && grep -Exq 'ERROR [0-9]+' <(sed -n 4p "$OUT") \
     && grep -Exq 'TOTAL [0-9]+' <(sed -n 5p "$OUT"); then
    format_ok=1
  fi
fi

if [ "$log_unchanged" = 1 ] && [ "$format_ok" = 1 ]; then
  expected=$(for lv in DEBUG INFO WARN ERROR; do
      echo "$lv $(grep -c "\[$lv\]" "$LOG")"
    done; echo "TOTAL $(wc -l < "$LOG")")
  [ "$(cat "$OUT")" = "$expected" ] && counts_correct=1
fi

passed=$((log_unchanged + summary_exists + format_ok + counts_correct))
total=4
reward=0.0; [ "$passed" -eq "$total" ] && reward=1.0
printf '{"reward": %s, "checks_passed": %d, "checks_total": %d, "check_log_unchanged": %d, "check_summary_exists": %d, "check_format_ok": %d, "check_counts_correct": %d}\n' \
  "$reward" "$passed" "$total" "$log_unchanged" "$summary_exists" "$format_ok" "$counts_correct" \
  | tee /logs/verifier/reward.json
exit 0
