#!/usr/bin/env bash
# Install and start what the tests need, on a fresh Debian/Ubuntu machine or again (idempotent):
# bubblewrap and Debian's python3-ipykernel (local sandboxes and their kernels) and python3-pytest
# (a project's tests in a local sandbox: swe-synth), PostgreSQL on
# 127.0.0.1:55432 (the sql envs' engine="postgres"),
# the Docker engine with a locally seeded debian:bookworm-slim (Docker Hub is unreachable from
# our machines), and skyhub's sandbox images.
#   bash scripts/services.sh            everything
#   SKYHUB_NO_POSTGRES=1 bash ...       skip PostgreSQL (tests marked `postgres` then skip)
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

# bubblewrap for local sandboxes; Debian's Jupyter stack for kernels in local sandboxes (they
# run as their own uid, which cannot read a virtualenv under /root)
apt_install bubblewrap python3-ipykernel python3-jupyter-client python3-numpy python3-sympy python3-pytest
# headless Chromium and its WebDriver: the `skyhub view` browser test (Selenium drives the
# system browser; nothing is downloaded)
command -v chromedriver >/dev/null || apt_install chromium chromium-driver

# PostgreSQL: a throwaway server for tests and engine="postgres" (trust auth on loopback only;
# fsync=off because every database in it can be rebuilt from the canonical SQLite files).
if [ "${SKYHUB_NO_POSTGRES:-}" = 1 ]; then
  say "SKYHUB_NO_POSTGRES=1: not starting PostgreSQL"
else
  pg_port=${SKYHUB_PG_PORT:-55432}; pg_data=${SKYHUB_PG_DATA:-/tmp/skyhub-pgdata}
  pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
  [ -n "$(pg_bin)" ] || apt_install postgresql
  bin=$(pg_bin)
  # the server refuses to run as root: as root, run it as the `postgres` user the package made
  as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port"; then
    if [ ! -s "$pg_data/PG_VERSION" ]; then
      say "initdb $pg_data"
      mkdir -p "$pg_data"; chmod 700 "$pg_data"
      if [ "$(id -u)" = 0 ]; then chown postgres: "$pg_data"; fi
      as_pg "$bin/initdb" -D "$pg_data" -U postgres --auth=trust -E UTF8 --no-locale >/tmp/skyhub-initdb.log 2>&1 \
        || { tail -20 /tmp/skyhub-initdb.log; exit 1; }
    fi
    say "starting PostgreSQL on 127.0.0.1:$pg_port (log: $pg_data/log)"
    as_pg "$bin/pg_ctl" -D "$pg_data" -l "$pg_data/log" -w -t 60 start \
      -o "-p $pg_port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=200" \
      >/dev/null || { tail -20 "$pg_data/log"; exit 1; }
  fi
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" || { say "PostgreSQL does not answer on port $pg_port"; exit 1; }
  say "PostgreSQL ready: SKYHUB_POSTGRES_DSN='host=127.0.0.1 port=$pg_port user=postgres dbname=postgres'"
fi

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
