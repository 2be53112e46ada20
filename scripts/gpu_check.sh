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
#   2. tests/test_kernels.py as a whole (the Triton interpreter test included);
#   3. a one-GPU smoke run of the TRL backend with vLLM colocated (`train --backend trl --engine vllm
#      --trl-set vllm_mode=colocate`): `grpo` and `b3po` (3PO's perturbed weights are pushed to vLLM before
#      each draw), 2 RL steps each on the embedded tiny policy and the offline `math_sample` task; passes
#      when each run exits 0 and writes its run record with 2 steps. Like the rest of this script it has
#      never been run (no GPU in the sessions that wrote it): expect to fix it on its first run.
# Fails when CUDA, vllm or triton is missing, when a test fails, when a test is skipped, or when a smoke run fails.
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

smoke="$(mktemp -d)"
trap 'rm -f "$log"; rm -rf "$smoke"' EXIT
for method in grpo b3po; do
  "$PY" -m rlvr_lib train --backend trl --method "$method" --task math_sample --engine vllm --dtype bfloat16 \
    --steps 2 --set prompts_per_step=2 --set group_size=4 --set max_new_tokens=32 \
    --trl-set vllm_mode=colocate --trl-set vllm_gpu_memory_utilization=0.3 --out "$smoke/$method"
  "$PY" - "$smoke/$method" <<'PYEOF'
import json, pathlib, sys
records = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
if len(records) != 1:
    sys.exit(f"gpu_check: expected one run record in {sys.argv[1]}, found {[r.name for r in records]}")
record = json.loads(records[0].read_text())
if len(record["history"]) != 2 or record["extra"].get("backend") != "trl":
    sys.exit(f"gpu_check: {records[0]}: {len(record['history'])} steps, backend {record['extra'].get('backend')!r}")
print(f"gpu_check: TRL backend + vLLM colocate: {record['config']['method']} trained 2 steps, "
      f"last reward_mean {record['history'][-1].get('reward_mean')}")
PYEOF
done
echo "gpu_check: all GPU checks passed"
