#!/usr/bin/env bash
# Set up skyhub for development in ./.venv. Idempotent: a second run only checks.
#   bash scripts/setup.sh [EXTRAS]      EXTRAS defaults to what the tests use (e.g. "dev,sql")
# Never installs a CUDA build of torch: extras that need torch get the CPU wheel pinned first.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev,docker,e2b,sql,python,search,terminal,swe,train,eval,serve,tinker,publish,ray,harness}"

say() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }
apt_install() {
  command -v apt-get >/dev/null || { say "please install: $*"; return 1; }
  if [ -z "${_apt_updated:-}" ]; then as_root apt-get update -qq; _apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

# 1. a Python >= 3.11
py=""
for c in python3.13 python3.12 python3.11 python3; do
  # (stderr dropped: pyenv's shim for a version that is not selected complains aloud)
  if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    py=$(command -v "$c"); break
  fi
done
if [ -z "$py" ]; then
  say "no Python >= 3.11 found; installing python3 from the system packages"
  apt_install python3 python3-venv python3-pip
  py=$(command -v python3)
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { say "python3 is older than 3.11"; exit 1; }
fi

# 2. the virtualenv (Debian's python3 needs python3-venv for ensurepip)
if [ ! -x .venv/bin/python ]; then
  if ! "$py" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    say "installing python${ver}-venv"
    apt_install "python${ver}-venv" || apt_install python3-venv
    "$py" -m venv .venv
  fi
  say "created .venv with $("$py" --version)"
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)

# 3. the package, skipped when nothing changed since the last successful install
stamp=".venv/.skyhub-installed"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $extras"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "skyhub[$extras] is up to date in .venv"
  exit 0
fi
"${pip[@]}" install --upgrade pip setuptools wheel
case ",$extras," in
  *,train,*|*,all,*) say "installing the CPU build of torch first"; "${pip[@]}" install "torch==2.13.0" ;;
esac
say "installing skyhub[$extras] (editable)"
# (without setuptools' notice that an editable install imports from this folder: it is meant to)
PYTHONWARNINGS="ignore:Editable installation" "${pip[@]}" install -e ".[${extras}]"
# 4. with the test extras: the frameworks skyhub.adapters is tested against, pinned. verifiers,
# prime-sandboxes, openenv-core and tinker-cookbook go in without their declared dependencies
# (which conflict with e2b's connectrpc and pillow, or are not on this index): first what they
# import, then they themselves with --no-deps. In that order pip's resolver never sees them
# with a requirement unmet (an install that resolves checks the installed packages that depend
# on what it installs, and prints a red ERROR for theirs; --no-deps checks nothing).
case ",$extras," in
  *,dev,*)
    say "installing the adapters' frameworks (trl, verifiers, openenv-core, tinker-cookbook)"
    "${pip[@]}" install "torch==2.13.0" "trl==1.16.0"
    "${pip[@]}" install "torch==2.13.0" "aiofiles==25.1.0" "aiolimiter==1.3.0" \
      "anthropic==2.15.0" "gepa==0.1.4" "loguru==0.7.3" "math-verify==0.9.0" "openai==3.57.0" \
      "prime-pydantic-config[toml]==0.4.3" "prime-tunnel==0.1.15" "renderers==0.1.12" \
      "setproctitle==1.3.8" "tenacity==9.2.1" "tomli-w==1.2.0" "uvloop==0.23.0" \
      "fastmcp==3.4.11" "mcp==1.30.0" "chz==0.4.0" "blobfile==3.3.0" "pyrage==1.4.0" \
      "termcolor==3.3.0" "tiktoken==0.14.0" "datasets==5.2.0" "aiohttp==3.14.5"
    "${pip[@]}" install --no-deps "verifiers==0.3.1" "prime-sandboxes==0.5.1" \
      "openenv-core==0.3.0" "tinker-cookbook==0.6.1"
    # the RL references the trainer's losses are tested against (tests/support/reference_rl.py
    # runs their source files): their dependencies need CUDA, skyrl-train says Python 3.12
    say "installing the trainer's reference implementations (skyrl-train, openrlhf)"
    "${pip[@]}" install --no-deps --ignore-requires-python "skyrl-train==0.3.1" \
      "openrlhf==0.11.2" ;;
esac
echo "$want" > "$stamp"
say "done: $(.venv/bin/skyhub --version)"
