#!/bin/bash
mkdir -p /logs/verifier
fail() { echo "FAIL: $*"; echo 0 > /logs/verifier/reward.txt; exit 0; }

ARCHIVE=/app/out/data.tar.gz
[ -f "$ARCHIVE" ] || fail "$ARCHIVE not found"
gzip -t "$ARCHIVE" 2>/dev/null || fail "$ARCHIVE is not valid gzip"

expected=$(printf '%s\n' .hidden.txt "notes/meeting notes.txt" notes/old/2023.txt notes/todo.txt readme.txt | LC_ALL=C sort)
# Regular-file members only (skip directory entries), strip a leading ./
listing=$(tar -tzvf "$ARCHIVE" 2>/dev/null) || fail "cannot list archive"
got=$(tar -tzf "$ARCHIVE" | grep -v '/$' | sed 's#^\./##' | LC_ALL=C sort)
[ "$got" = "$expected" ] || fail "members differ; expected:
$expected
got:
$got"
# No member may have a leading ./ or / (instruction says relative, no ./)
if tar -tzf "$ARCHIVE" | grep -qE '^(\./|/)'; then fail "member paths must not start with ./ or /"; fi

# Contents must match the originals
tmp=$(mktemp -d)
tar -xzf "$ARCHIVE" -C "$tmp" || fail "cannot extract archive"
while IFS= read -r f; do
  cmp -s "$tmp/$f" "/app/data/$f" || fail "content of $f differs"
done <<< "$expected"
rm -rf "$tmp"

# Source tree must be intact
[ "$(cat /app/data/settings.conf 2>/dev/null)" = "key=value" ] || fail "/app/data was modified"
[ -f /app/data/tmp/cache.tmp ] || fail "/app/data was modified"

echo PASS
echo 1 > /logs/verifier/reward.txt
exit 0
