#!/bin/bash
set -e
cd /app
{
  for lv in DEBUG INFO WARN ERROR; do
    echo "$lv $(grep -c "\[$lv\]" app.log || true)"
  done
  echo "TOTAL $(wc -l < app.log)"
} > summary.txt
cat summary.txt
