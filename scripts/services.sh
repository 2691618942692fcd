#!/usr/bin/env bash
# Install and start what the tests need, on a fresh Debian/Ubuntu machine or again (idempotent):
# bubblewrap (local sandboxes), the Docker engine with a locally seeded debian:bookworm-slim
# (Docker Hub is unreachable from our machines), and skyhub's sandbox images.
#   bash scripts/services.sh            everything
#   SKYHUB_NO_DOCKER=1 bash ...         skip Docker (tests marked `docker` then skip)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1;34m[services]\033[0m %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }
apt_install() {
  missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install bubblewrap

if [ "${SKYHUB_NO_DOCKER:-}" = 1 ]; then say "SKYHUB_NO_DOCKER=1: not starting Docker"; exit 0; fi

# 1. the engine
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || apt_install docker.io
  if ! docker info >/dev/null 2>&1; then
    say "starting dockerd (log: /tmp/skyhub-dockerd.log)"
    (as_root setsid dockerd >/tmp/skyhub-dockerd.log 2>&1 &)
    for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { say "dockerd did not start; see /tmp/skyhub-dockerd.log"; tail -20 /tmp/skyhub-dockerd.log; exit 1; }
  fi
fi

# 2. the base image, seeded locally with debootstrap (about 40 s, once per machine)
if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  apt_install debootstrap
  root=$(mktemp -d /tmp/skyhub-rootfs.XXXXXX)
  say "building debian:bookworm-slim with debootstrap in $root"
  as_root debootstrap --variant=minbase --include=python3 bookworm "$root" >/tmp/skyhub-debootstrap.log 2>&1 \
    || { tail -20 /tmp/skyhub-debootstrap.log; exit 1; }
  as_root tar -C "$root" -c . | docker import - debian:bookworm-slim >/dev/null
  as_root rm -rf "$root"
fi

# 3. skyhub's own images (cached by Docker's build cache)
if [ -x .venv/bin/skyhub ] && .venv/bin/skyhub images --help >/dev/null 2>&1; then
  .venv/bin/skyhub images build
fi
say "ready: $(docker version --format 'docker {{.Server.Version}}'), bwrap $(bwrap --version | cut -d' ' -f2)"
