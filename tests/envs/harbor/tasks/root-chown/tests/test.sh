#!/bin/bash
# Runs as root. Each step needs one of Docker's default capabilities; under `--cap-drop ALL`
# the first one fails and the reward is 0 (never an error: a reward file is always written).
reward=0
note=/srv/handoff/note.txt
fail() { echo "FAIL: $*"; echo "$reward" > /logs/verifier/reward.txt; exit 0; }

[ -f "$note" ] || fail "$note does not exist"
chown -R keeper:keeper /srv/handoff || fail "chown to keeper (needs CAP_CHOWN)"
chmod 0600 "$note" || fail "chmod of keeper's file (needs CAP_FOWNER)"
[ "$(stat -c %U:%a "$note")" = "keeper:600" ] || fail "owner/mode are $(stat -c %U:%a "$note")"
root_view=$(cat "$note") || fail "root reading keeper's 0600 file (needs CAP_DAC_OVERRIDE)"
keeper_view=$(setpriv --reuid=1000 --regid=1000 --clear-groups cat "$note") \
  || fail "setpriv to uid 1000 (needs CAP_SETUID/CAP_SETGID)"
if su nobody -s /bin/sh -c "cat $note" >/dev/null 2>&1; then
  fail "nobody could read a 0600 file it does not own"
fi
su nobody -s /bin/sh -c "id -un" | grep -qx nobody || fail "su to nobody (needs CAP_SETUID)"
[ "$root_view" = "handed over" ] || fail "root read '$root_view'"
[ "$keeper_view" = "handed over" ] || fail "keeper read '$keeper_view'"
reward=1
echo "PASS"
echo "$reward" > /logs/verifier/reward.txt
