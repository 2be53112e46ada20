"""Rollout throughput: :class:`~rlvr_lib.rollout.KVCacheEngine` against ``model.generate``.

Both engines sample the same prompts from the shipped tiny policy (CPU,
float32) at temperature 1 with up to ``max_new_tokens`` new tokens; the
baseline is :class:`~rlvr_lib.rollout.HFEngine` (``transformers``'
``generate`` with a KV cache, plus the per-step log-prob recording every RL
engine needs). Throughput is real completion tokens (EOS included, padding
excluded) per second, from the median time over ``repeats`` after ``warmup``
calls; both engines run alternately in one process under the same thread
count, so load changes hit both.

Workloads (each a batch of ``batch`` sequences):

* ``grouped``: ``batch // group_size`` training prompts x ``group_size``
  samples -- an RL step's rollout batch (the headline);
* ``distinct``: ``batch`` different training prompts, one sample each;
* ``forced_length``: as ``distinct`` with EOS disabled, so every row decodes
  exactly ``max_new_tokens`` tokens: the pure per-token cost, without the
  savings of early exit and dropped rows.

Before timing, greedy decoding of the ``distinct`` prompts is checked to give
the same tokens on both engines (``greedy_tokens_equal``).
"""

from __future__ import annotations


import torch

from rlvr_lib.study.bench.common import check_rollout_args, machine_info, time_engines_alternating
from rlvr_lib.rollout import HFEngine, KVCacheEngine, SamplingParams
from rlvr_lib.tasks.arithmetic import family_problems

__all__ = ["WORKLOADS", "bench_rollout"]

WORKLOADS = ("grouped", "distinct", "forced_length")


def _workload_prompts(workload: str, batch: int, group_size: int) -> tuple[list[str], int]:
    if workload == "grouped":
        problems = family_problems("train", batch // group_size, seed=0)
        return [p.prompt_with(None) for p in problems], group_size
    return [p.prompt_with(None) for p in family_problems("train", batch, seed=0)], 1


def bench_rollout(
    *, batch: int = 64, max_new_tokens: int = 64, group_size: int = 8, warmup: int = 1, repeats: int = 5,
    seed: int = 0, workloads: tuple[str, ...] = WORKLOADS,
) -> dict:
    """Tokens per second of the fast engine and of ``generate`` on each workload.

    Args:
        batch: Sequences per call (``>= 1``; a multiple of ``group_size``).
        max_new_tokens: New-token budget per sequence (``>= 1``).
        group_size: Samples per prompt in the ``grouped`` workload (``>= 1``).
        warmup: Untimed calls per engine and workload (``>= 0``).
        repeats: Timed calls per engine and workload (``>= 1``).
        seed: Sampling seed (the same for every call).
        workloads: Subset of :data:`WORKLOADS`.

    Returns:
        JSON-serialisable dict: per workload, each engine's timed seconds,
        median seconds, tokens per call and tokens/s, and ``speedup`` (fast
        tokens/s over ``generate`` tokens/s); ``greedy_tokens_equal``;
        ``rollout_speedup_vs_generate`` (the ``grouped`` speedup when measured);
        the settings and the machine.

    Raises:
        ValueError: On a bad argument, naming it and what is allowed.
    """
    check_rollout_args("bench_rollout", batch=batch, group_size=group_size,
                       extra_ints={"max_new_tokens": (max_new_tokens, 1), "warmup": (warmup, 0),
                                   "repeats": (repeats, 1), "seed": (seed, 0)},
                       choices=workloads, allowed=WORKLOADS, choices_name="workloads")

    from rlvr_lib.policy import load_policy

    model, tok = load_policy(None, device="cpu", dtype=torch.float32)
    never = model.config.vocab_size  # an id no model output can take: EOS disabled
    engines = {
        "generate": (HFEngine(model, tok, batch_size=batch), HFEngine(model, tok, batch_size=batch, eos_token_id=never)),
        "kv_cache": (KVCacheEngine(model, tok, batch_size=batch),
                     KVCacheEngine(model, tok, batch_size=batch, eos_token_id=never)),
    }
    distinct, _ = _workload_prompts("distinct", batch, group_size)
    greedy = SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    reference = engines["generate"][0].generate(distinct, greedy)
    fast = engines["kv_cache"][0].generate(distinct, greedy)
    out: dict = {
        "greedy_tokens_equal": bool(torch.equal(reference.completion_ids, fast.completion_ids)),
        "workloads": {},
    }
    for workload in workloads:
        prompts, n = _workload_prompts(workload, batch, group_size)
        params = SamplingParams(n=n, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
        chosen = {name: pair[workload == "forced_length"] for name, pair in engines.items()}
        row = time_engines_alternating(chosen, prompts, params, warmup=warmup, repeats=repeats)
        row["speedup"] = row["kv_cache"]["tokens_per_s"] / row["generate"]["tokens_per_s"]
        out["workloads"][workload] = row
    if "grouped" in out["workloads"]:
        out["rollout_speedup_vs_generate"] = out["workloads"]["grouped"]["speedup"]
    out["settings"] = {"batch": batch, "max_new_tokens": max_new_tokens, "group_size": group_size,
                       "warmup": warmup, "repeats": repeats, "seed": seed, "temperature": 1.0,
                       "policy": "shipped tiny policy (rlvr_lib/policy/checkpoints/tiny-mul)"}
    out["machine"] = machine_info()
    return out
