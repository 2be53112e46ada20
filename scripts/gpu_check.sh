#!/usr/bin/env bash
# GPU check of rlvr_lib: what the CPU test suite cannot exercise.
#
# Run from anywhere on a fresh CUDA machine after `make install EXTRAS=dev,notebooks,gpu`
# (with a CUDA torch build, e.g. TORCH_SPEC='torch==2.13.0 --index-url .../cu128'; see the Makefile):
#   1. every test marked `gpu` (pytest -m gpu):
#      - the rollout engines on CUDA (tests/test_rollout.py);
#      - VLLMEngine on the shipped tiny policy (tests/test_vllm_engine.py): greedy tokens, masks,
#        texts and log-probs equal KVCacheEngine's, also after the weights move (weight sync);
#        sampled log-probs equal log softmax(z / T) recomputed by the trainer; per-row seeds;
#      - the compiled Triton kernels against the torch reference, values and gradients, fp32 and
#        bf16 (tests/test_kernels.py);
#   2. tests/test_kernels.py as a whole (the Triton interpreter test included).
# Fails when CUDA, vllm or triton is missing, when a test fails, or when a test is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"

"$PY" - <<'PYEOF'
import importlib.util, sys
import torch
missing = [m for m in ("vllm", "triton") if importlib.util.find_spec(m) is None]
if not torch.cuda.is_available() or missing:
    sys.exit(f"gpu_check: needs CUDA and the gpu extra (CUDA available: {torch.cuda.is_available()}, missing: {missing})")
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
PYEOF

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$PY" -m pytest -q -rs -m gpu tests | tee "$log"
"$PY" -m pytest -q -rs tests/test_kernels.py | tee -a "$log"
if grep -q "skipped" "$log"; then
  echo "gpu_check: some tests were skipped (reasons above)" >&2
  exit 1
fi
echo "gpu_check: all GPU checks passed"
