#!/bin/bash
set -e
awk '{ s += $1 } END { print s }' /workspace/notes.txt > /workspace/report.txt
sort -n /workspace/notes.txt | tail -n 1 > /logs/artifacts/max.txt
