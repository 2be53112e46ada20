"""``python -m rlvr_lib.study.bench``: run the benchmarks, print JSON, write ``results/bench/``.

Each benchmark measures our implementation against its baseline in the same
run (medians over repeats after a warm-up); none asserts a time. Files:

* ``rollout.json`` -- :func:`rlvr_lib.study.bench.rollout.bench_rollout`;
* ``step.json`` -- :func:`rlvr_lib.study.bench.step.bench_step_time` (ours on
  :class:`~rlvr_lib.rollout.KVCacheEngine` vs TRL ``GRPOTrainer``);
* ``logprob.json`` -- :func:`rlvr_lib.study.bench.logprob.bench_logprob_memory`;
* ``gradnorm.json`` -- :func:`rlvr_lib.study.bench.gradnorm.bench_gradnorm` (VIGOR's
  per-sample gradient norms: ghost norms vs the per-sample backward loop);
* ``methods.json`` -- :func:`rlvr_lib.study.bench.methods.bench_method_steps` (each
  exploration method's step time over the GRPO run it is compared with);
* ``profile.json`` -- :func:`rlvr_lib.study.bench.profile.bench_profile` (where a
  rollout and a GRPO step spend their time: per layer, per op group, the
  matmul floor, the decoder under ``torch.compile``);
* ``reproduction.json`` -- :func:`rlvr_lib.study.report.notebook_compute` (the full
  profile's wall time per notebook, summed from the committed run records:
  read, not timed);
* ``vllm_rollout.json`` -- :func:`rlvr_lib.study.bench.vllm_rollout.bench_vllm_rollout` (vLLM's CPU
  build against ``KVCacheEngine`` and ``generate``; only in ``.venv-vllm``, so not in the default
  list: ``make bench`` runs it there with ``--only vllm_rollout``, through ``make bench-vllm``);
* ``summary.json`` -- the headline ratios, each next to the raw
  medians it came from and its target; benchmarks not run this time keep
  their previous entries.

``--quick`` runs tiny sizes (a smoke run; written to ``--out`` like the
full one, so point ``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlvr_lib.study.bench.common import machine_info
from rlvr_lib.files import write_json_atomic
from rlvr_lib.study.runs import results_root

BENCHMARKS = ("rollout", "step", "logprob", "methods", "gradnorm", "profile", "reproduction")
ENV_BENCHMARKS = ("vllm_rollout",)
"""Benchmarks that need another environment (``.venv-vllm``): run only when named in ``--only``."""
TARGETS = {
    "rollout_speedup_vs_generate": (">=", 3.0),
    "step_time_ratio_vs_trl": ("<=", 0.5),
    "logprob_peak_mem_ratio": ("<=", 0.25),
    "per_sample_gradnorm_speedup": (">=", 5.0),
}
QUICK = {
    "rollout": dict(batch=16, max_new_tokens=16, group_size=4, warmup=0, repeats=1),
    "step": dict(prompts_per_step=2, group_size=4, max_new_tokens=16, warmup=0, repeats=1),
    "logprob": dict(tokens=256, vocab=8192, hidden=64, warmup=0, repeats=1),
    "methods": dict(prompts_per_step=2, group_size=4, max_new_tokens=16, warmup=0, repeats=1),
    "gradnorm": dict(models=("tiny",), completions=8, tokens=16, warmup=0, repeats=1),
    "profile": dict(batch=16, group_size=4, max_new_tokens=16, warmup=0, repeats=1, compile_decode=False),
    "reproduction": dict(),
    "vllm_rollout": dict(batch=16, max_new_tokens=16, group_size=4, warmup=0, repeats=1, larger_layers=1),
}


def _met(key: str, value: float) -> bool:
    op, bound = TARGETS[key]
    return value >= bound if op == ">=" else value <= bound


def _run(name: str, quick: bool) -> dict:
    kwargs = QUICK[name] if quick else {}
    if name == "rollout":
        from rlvr_lib.study.bench.rollout import bench_rollout

        return bench_rollout(**kwargs)
    if name == "step":
        from rlvr_lib.study.bench.step import bench_step_time

        return bench_step_time(**kwargs)  # our side: the Trainer's default engine (KVCacheEngine)
    if name == "gradnorm":
        from rlvr_lib.study.bench.gradnorm import bench_gradnorm

        return bench_gradnorm(**kwargs)
    if name == "methods":
        from rlvr_lib.study.bench.methods import bench_method_steps

        return bench_method_steps(**kwargs)
    if name == "vllm_rollout":
        from rlvr_lib.study.bench.vllm_rollout import bench_vllm_rollout

        return bench_vllm_rollout(**kwargs)
    if name == "profile":
        from rlvr_lib.study.bench.profile import bench_profile

        return bench_profile(**kwargs)
    if name == "reproduction":
        from rlvr_lib.study.report import notebook_compute

        rows = notebook_compute()
        return {"notebooks": rows, "total_hours": sum(row["hours"] for row in rows)}
    from rlvr_lib.study.bench.logprob import bench_logprob_memory

    return bench_logprob_memory(**kwargs)


def summarize(name: str, result: dict) -> dict:
    """The summary entries of one benchmark's result: the ratio, its raw medians, target and verdict."""
    if name == "methods":  # one ratio per method, each with its own reference and target
        return {"method_step_ratios": {
            method: {**r, "median_s": result["steps"][method]["median_s"],
                     "reference_median_s": result["steps"][r["reference"]]["median_s"]}
            for method, r in result["ratios"].items()}}
    if name == "profile":  # no target: what bounds the two ratios above
        decode, step = result["decode"], result["step"]
        entry = {"decode_us_per_layer_per_token": decode["us_per_layer_per_token"],
                 "decode_us_per_layer_per_step": decode["us_per_layer_per_step"],
                 "decode_matmul_floor_share": decode["matmul_replay"]["share_of_call"],
                 "decode_op_shares": decode["profile"]["shares"],
                 "step_rollout_share": step["rollout_share"],
                 "step_matmul_floor_share": step["matmul_replay"]["share_of_call"]}
        if "compiled" in decode:
            entry["compiled_decode_speedup"] = decode["compiled"]["speedup_vs_eager"]
            entry["compiled_decode_first_call_s"] = decode["compiled"]["first_call_s"]
        return {"profile": entry}
    if name == "vllm_rollout":  # no target: what vLLM's CPU build gives against the two in-process engines
        return {"vllm_rollout": {
            shape: {"vllm_vs_kv_cache": r["vllm_vs_kv_cache"], "vllm_vs_generate": r["vllm_vs_generate"],
                    **{f"{e}_tokens_per_s": r[e]["tokens_per_s"] for e in ("vllm", "kv_cache", "generate")},
                    "vllm_startup_s": r["vllm_startup_s"], "greedy_tokens_equal": r["greedy_tokens_equal"]}
            for shape, r in result["shapes"].items()} | {"vllm_version": result["vllm_version"],
                                                         "settings": result["settings"]}}
    if name == "reproduction":
        return {"reproduction_hours": {row["notebook"]: row["hours"] for row in result["notebooks"]}
                | {"total": result["total_hours"]}}
    if name == "rollout":
        key, value = "rollout_speedup_vs_generate", result["rollout_speedup_vs_generate"]
        grouped = result["workloads"]["grouped"]
        raw = {"workload": "grouped", "generate_tokens_per_s": grouped["generate"]["tokens_per_s"],
               "kv_cache_tokens_per_s": grouped["kv_cache"]["tokens_per_s"],
               "generate_median_s": grouped["generate"]["median_s"], "kv_cache_median_s": grouped["kv_cache"]["median_s"],
               "speedup_by_workload": {w: r["speedup"] for w, r in result["workloads"].items()},
               "greedy_tokens_equal": result["greedy_tokens_equal"]}
    elif name == "gradnorm":
        key, value = "per_sample_gradnorm_speedup", result["per_sample_gradnorm_speedup"]
        raw = {model: {k: r[k] for k in ("naive_median_s", "ghost_median_s", "speedup", "values_equal")}
               for model, r in result["models"].items()}
    elif name == "step":
        key, value = "step_time_ratio_vs_trl", result["step_time_ratio_vs_trl"]
        raw = {"ours_median_s": result["ours"]["median_s"], "trl_median_s": result["trl"]["median_s"],
               "ours_engine": result["ours"]["engine"], "trl_version": result["trl"]["trl_version"]}
    else:
        key, value = "logprob_peak_mem_ratio", result["logprob_peak_mem_ratio"]
        raw = {"naive_peak_bytes": result["variants"]["naive"]["peak_bytes"],
               "chunked_peak_bytes": result["variants"]["chunked"]["peak_bytes"],
               "naive_median_s": result["variants"]["naive"]["median_s"],
               "chunked_median_s": result["variants"]["chunked"]["median_s"],
               "time_ratio": result["logprob_time_ratio"], "values_equal": result["values_equal"],
               "tokens": result["settings"]["tokens"], "vocab": result["settings"]["vocab"],
               "device": result["settings"]["device"]}
    op, bound = TARGETS[key]
    return {key: value, name: {**raw, "target": f"{op} {bound}", "met": _met(key, value)}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m rlvr_lib.study.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(BENCHMARKS),
                        help=f"comma-separated subset of {','.join(BENCHMARKS + ENV_BENCHMARKS)} (default: "
                             f"{','.join(BENCHMARKS)}; {','.join(ENV_BENCHMARKS)} needs .venv-vllm)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    parser.add_argument("--out", default=None, help="output folder (default: results/bench)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS + ENV_BENCHMARKS]
    if unknown or not names:
        parser.error(f"--only: unknown benchmark(s) {unknown}; choose from {BENCHMARKS + ENV_BENCHMARKS}")
    out = Path(args.out) if args.out else results_root() / "bench"
    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for name in names:
        t0 = time.perf_counter()
        result = _run(name, args.quick)
        result["wall_s"] = round(time.perf_counter() - t0, 1)
        result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        result["quick"] = args.quick
        result.setdefault("machine", machine_info())
        write_json_atomic(out / f"{name}.json", result)
        entry = summarize(name, result)
        summary.update(entry)
        summary.setdefault("finished_at", {})[name] = result["finished_at"]
        summary["machine"] = result["machine"]
        write_json_atomic(summary_path, summary)  # after each benchmark: nothing lost on interruption
        print(json.dumps({name: entry}), flush=True)
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
