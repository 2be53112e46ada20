"""Peak memory and time of log-prob + entropy (forward and backward): chunked kernel vs naive.

At real scale the LM head's float32 ``(tokens, vocab)`` logits and
log-softmax dominate a policy-gradient step's memory (4,096 tokens x
152,064 vocabulary = 2.5 GB per copy, and autograd keeps several). This
benchmark runs ``logp.sum() + entropy.sum()`` forward and backward, from
hidden states ``(tokens, hidden)`` and an LM head ``(vocab, hidden)``, with

* ``naive``: :func:`rlvr_lib.kernels.naive_logprob_entropy` (full
  log-softmax, plain autograd), and
* ``chunked``: :func:`rlvr_lib.kernels.logprob_entropy` (``backend="auto"``:
  the torch chunked kernel on CPU, the Triton kernel on CUDA),

each in its own subprocess so that one's allocations cannot hide the
other's (with a fixed glibc mmap threshold, so that freed memory leaves the
resident set). Peak memory is the process's peak resident set (``VmHWM``, reset
through ``/proc/self/clear_refs`` once the inputs exist) minus the resident
set at that point, i.e. what the computation itself added; on CUDA,
``torch.cuda.max_memory_allocated`` minus the allocated bytes before. Each
child also returns its outputs so that the parent can check the two agree:
log-probs, entropies and the hidden-state gradient in full, the weight
gradient through its norm and its first rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from rlvr_lib.study.bench.common import machine_info, median
from rlvr_lib.validation import check_choice, check_int

__all__ = ["VARIANTS", "bench_logprob_memory"]

VARIANTS = ("naive", "chunked")
_CHECK_ROWS = 512  # leading rows of the weight gradient compared in full
# A fixed glibc mmap threshold: every block >= 64 KiB is mapped on allocation and unmapped on
# free, so the resident set follows live tensors (glibc's adaptive threshold would otherwise
# keep freed blocks in the heap, and a repeat that reuses them would show no growth).
_CHILD_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}


def _rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def run_variant(variant: str, tokens: int, vocab: int, hidden: int, warmup: int, repeats: int,
                chunk_size: int, device: str, out_path: str) -> dict:
    """One variant, in this process: time and peak memory of forward + backward; outputs saved to ``out_path``."""
    from rlvr_lib.study.bench.common import time_repeats
    from rlvr_lib.kernels import logprob_entropy, naive_logprob_entropy

    torch.manual_seed(0)
    dev = torch.device(device)
    h = (torch.randn(tokens, hidden, device=dev) * 2.0).requires_grad_(True)
    w = (torch.randn(vocab, hidden, device=dev) / hidden**0.5).requires_grad_(True)
    targets = torch.randint(0, vocab, (tokens,), device=dev)

    def step():
        h.grad = w.grad = None
        if variant == "naive":
            logp, ent = naive_logprob_entropy(h, w, targets)
        else:
            logp, ent = logprob_entropy(h, w, targets, chunk_size=chunk_size)
        (logp.sum() + ent.sum()).backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return logp.detach(), ent.detach()

    peaks = []

    def measured():
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            _reset_peak()
            before = _rss_bytes("VmRSS")
        result = step()
        peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else _rss_bytes("VmHWM")
        peaks.append(peak - before)
        return result

    seconds, results = time_repeats(measured, warmup=warmup, repeats=repeats)
    logp, ent = results[-1]
    torch.save({"logp": logp.cpu(), "entropy": ent.cpu(), "grad_hidden": h.grad.cpu(),
                "grad_weight_rows": w.grad[:_CHECK_ROWS].cpu(), "grad_weight_norm": float(w.grad.norm())}, out_path)
    return {"seconds": seconds, "median_s": median(seconds), "peak_bytes": max(peaks[warmup:] or peaks),
            "peak_bytes_per_repeat": peaks[warmup:]}


def _compare(a: dict, b: dict) -> dict:
    def rel(x, y):
        return float((x - y).abs().max() / y.abs().max().clamp(min=1e-30))
    return {
        "logp_max_rel_diff": rel(a["logp"], b["logp"]),
        "entropy_max_rel_diff": rel(a["entropy"], b["entropy"]),
        "grad_hidden_max_rel_diff": rel(a["grad_hidden"], b["grad_hidden"]),
        "grad_weight_rows_max_rel_diff": rel(a["grad_weight_rows"], b["grad_weight_rows"]),
        "grad_weight_norm_rel_diff": abs(a["grad_weight_norm"] - b["grad_weight_norm"]) / max(b["grad_weight_norm"], 1e-30),
    }


def bench_logprob_memory(
    *, tokens: int = 4096, vocab: int = 152_064, hidden: int = 896, warmup: int = 1, repeats: int = 3,
    chunk_size: int = 4096, device: str | None = None, tolerance: float = 1e-4,
) -> dict:
    """Peak memory and median time of log-prob + entropy forward/backward, chunked vs naive.

    Args:
        tokens, vocab, hidden: Problem size (defaults: 4,096 tokens, Qwen2.5's
            152,064 vocabulary, Qwen2.5-0.5B's hidden size 896).
        warmup, repeats: Untimed and timed runs per variant (in its subprocess).
        chunk_size: Vocabulary chunk of the chunked kernel.
        device: ``"cpu"`` or ``"cuda"``; default CUDA when available.
        tolerance: Largest relative difference for ``values_equal``.

    Returns:
        JSON-serialisable dict: per variant its seconds, median, peak bytes;
        ``logprob_peak_mem_ratio`` (chunked peak / naive peak),
        ``logprob_time_ratio`` (chunked median / naive median), the
        differences between the two variants' outputs and ``values_equal``,
        the settings and the machine.

    Raises:
        ValueError: On a bad argument. RuntimeError: if a child process fails.
    """
    for name, value, lo in (("tokens", tokens, 1), ("vocab", vocab, 2), ("hidden", hidden, 1),
                            ("warmup", warmup, 0), ("repeats", repeats, 1), ("chunk_size", chunk_size, 1)):
        check_int(f"bench_logprob_memory: {name}", value, lo)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_choice("bench_logprob_memory: device", device, ("cpu", "cuda"))
    if device == "cpu" and not Path("/proc/self/clear_refs").exists():
        raise RuntimeError("bench_logprob_memory on CPU reads peak RSS from /proc (Linux only)")
    out: dict = {"variants": {}}
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in VARIANTS:
            path = os.path.join(tmp, f"{variant}.pt")
            args = [variant, tokens, vocab, hidden, warmup, repeats, chunk_size, device, path]
            proc = subprocess.run([sys.executable, "-m", "rlvr_lib.study.bench.logprob", json.dumps(args)],
                                  capture_output=True, text=True, env=_CHILD_ENV)
            if proc.returncode != 0:
                raise RuntimeError(f"bench_logprob_memory: the {variant} child failed:\n{proc.stderr[-3000:]}")
            out["variants"][variant] = json.loads(proc.stdout.strip().splitlines()[-1])
            outputs[variant] = torch.load(path)
    naive, chunked = out["variants"]["naive"], out["variants"]["chunked"]
    out["logprob_peak_mem_ratio"] = chunked["peak_bytes"] / naive["peak_bytes"]
    out["logprob_time_ratio"] = chunked["median_s"] / naive["median_s"]
    out["diffs"] = _compare(outputs["chunked"], outputs["naive"])
    out["values_equal"] = all(v <= tolerance for v in out["diffs"].values())
    out["settings"] = {"tokens": tokens, "vocab": vocab, "hidden": hidden, "warmup": warmup, "repeats": repeats,
                       "chunk_size": chunk_size, "device": device, "tolerance": tolerance,
                       "loss": "logp.sum() + entropy.sum(), forward and backward, float32"}
    out["machine"] = machine_info()
    return out


if __name__ == "__main__":  # child process: python -m rlvr_lib.study.bench.logprob '<json args>'
    print(json.dumps(run_variant(*json.loads(sys.argv[1]))))
