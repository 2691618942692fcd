#!/bin/bash
set -e
mkdir -p /app/out
cd /app/data
find . -type f -name '*.txt' -printf '%P\0' | LC_ALL=C sort -z \
  | tar -czf /app/out/data.tar.gz --null --no-recursion -T -
tar -tzf /app/out/data.tar.gz
