#!/bin/bash
set -e
mkdir -p /srv/handoff
echo "handed over" > /srv/handoff/note.txt
