"""The benchmark suite's plumbing: summaries hold the ratios of the raw medians, files are written,
earlier entries survive a partial run, and the memory benchmark measures what it claims.

No test asserts a time: times are measured, compared in the same run and reported.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlvr_lib.study.bench.__main__ import TARGETS, main
from rlvr_lib.study.bench.logprob import bench_logprob_memory
from rlvr_lib.study.bench.rollout import bench_rollout


def test_cli_writes_results_and_summary_with_ratios_of_the_raw_medians(tmp_path):
    summary = main(["--quick", "--only", "rollout,logprob", "--out", str(tmp_path)])
    assert {p.name for p in tmp_path.iterdir()} == {"rollout.json", "logprob.json", "summary.json"}
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    r = summary["rollout"]
    assert summary["rollout_speedup_vs_generate"] == pytest.approx(r["kv_cache_tokens_per_s"] / r["generate_tokens_per_s"])
    assert r["greedy_tokens_equal"] is True
    m = summary["logprob"]
    assert summary["logprob_peak_mem_ratio"] == pytest.approx(m["chunked_peak_bytes"] / m["naive_peak_bytes"])
    assert m["values_equal"] is True
    for key, name in (("rollout_speedup_vs_generate", "rollout"), ("logprob_peak_mem_ratio", "logprob")):
        op, bound = TARGETS[key]
        assert summary[name]["target"] == f"{op} {bound}"
        assert summary[name]["met"] == (summary[key] >= bound if op == ">=" else summary[key] <= bound)
    # a later partial run adds its entry and keeps the others
    before = dict(summary)
    after = main(["--quick", "--only", "step", "--out", str(tmp_path)])
    assert after["rollout"] == before["rollout"] and after["logprob"] == before["logprob"]
    s = after["step"]
    assert after["step_time_ratio_vs_trl"] == pytest.approx(s["ours_median_s"] / s["trl_median_s"])
    assert s["ours_engine"] == "KVCacheEngine"


def test_cli_rejects_unknown_benchmark(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--only", "rollout,speed", "--out", str(tmp_path)])
    assert "unknown benchmark" in capsys.readouterr().err


def test_chunked_kernel_peak_memory_is_a_fraction_of_naive():
    """Vocabulary 16x the chunk: the naive path holds several (N, V) float32 tensors, the kernel one (N, chunk)."""
    r = bench_logprob_memory(tokens=512, vocab=32768, hidden=64, chunk_size=2048, warmup=0, repeats=1)
    naive, chunked = r["variants"]["naive"]["peak_bytes"], r["variants"]["chunked"]["peak_bytes"]
    logits_bytes = 512 * 32768 * 4
    assert naive >= 2 * logits_bytes  # at least the logits and the log-softmax
    assert r["logprob_peak_mem_ratio"] < 0.25
    assert r["values_equal"], r["diffs"]


@pytest.mark.parametrize("kw, match", [
    (dict(batch=10, group_size=4), "multiple of group_size"),
    (dict(repeats=0), r"^bench_rollout: repeats=0 is invalid: must be an integer >= 1$"),
    (dict(workloads=("grouped", "huge")), "workloads="),
])
def test_rollout_bench_validates_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        bench_rollout(**kw)


def test_method_step_bench_times_each_method_and_its_reference_and_reports_their_ratio(tmp_path):
    from rlvr_lib.study.report import _bench_section

    summary = main(["--quick", "--only", "methods", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "methods.json").read_text())
    assert set(result["steps"]) == {"grpo", "nudgerl", "sage", "b3po", "m3po", "c3po", "vigor"}
    for name, steps in result["steps"].items():
        assert len(steps["step_seconds"]) == 1 and steps["median_s"] > 0
    entry = summary["method_step_ratios"]["nudgerl"]
    assert entry["reference"] == "grpo" and entry["target"] == 1.3
    assert entry["ratio"] == pytest.approx(entry["median_s"] / entry["reference_median_s"])
    assert entry["met"] == (entry["ratio"] <= 1.3)
    assert any(line.startswith(f"| nudgerl_step_time_vs_grpo | {entry['ratio']:.2f} | <= 1.3 |")
               for line in _bench_section(_as_root(tmp_path)))
    vigor = summary["method_step_ratios"]["vigor"]  # no target in its issue: reported, not judged
    assert vigor["reference"] == "grpo" and vigor["target"] is None and vigor["met"] is None
    assert any(line.startswith(f"| vigor_step_time_vs_grpo | {vigor['ratio']:.2f} | - | - |")
               for line in _bench_section(_as_root(tmp_path)))


def _as_root(bench_dir):
    """A results root whose ``bench/`` is ``bench_dir`` (the report reads ``<root>/bench/summary.json``)."""
    root = bench_dir.parent / "root"
    (root / "bench").mkdir(parents=True, exist_ok=True)
    (root / "bench" / "summary.json").write_text((bench_dir / "summary.json").read_text())
    return root


def test_method_step_bench_rejects_unknown_methods():
    from rlvr_lib.study.bench.methods import bench_method_steps

    with pytest.raises(ValueError, match="registered method names"):
        bench_method_steps({"nudgerl": "gpro"})
    with pytest.raises(ValueError, match="repeats=0 is invalid"):
        bench_method_steps(repeats=0)


def test_gradnorm_bench_times_both_implementations_on_equal_values(tmp_path):
    from rlvr_lib.study.report import _bench_section

    summary = main(["--quick", "--only", "gradnorm", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "gradnorm.json").read_text())
    tiny = result["models"]["tiny"]
    assert tiny["values_equal"] and tiny["max_rel_diff"] <= 1e-4 and tiny["rows"] == 8
    assert summary["per_sample_gradnorm_speedup"] == pytest.approx(tiny["naive_median_s"] / tiny["ghost_median_s"])
    assert summary["gradnorm"]["target"] == ">= 5.0"
    assert summary["gradnorm"]["met"] == (summary["per_sample_gradnorm_speedup"] >= 5.0)
    assert any(line.startswith("| per_sample_gradnorm_speedup |") for line in _bench_section(_as_root(tmp_path)))
    with pytest.raises(ValueError, match="bench_gradnorm: models"):
        from rlvr_lib.study.bench.gradnorm import bench_gradnorm

        bench_gradnorm(models=("huge",))


def test_matmul_replay_counts_every_product_and_its_flops():
    """The dispatch log sees mm, addmm (F.linear with a bias, forward and backward) and bmm with their shapes."""
    from rlvr_lib.study.bench.profile import matmul_replay

    x = torch.randn(4, 5, requires_grad=True)
    w, b = torch.randn(6, 5), torch.randn(6)
    a, c = torch.randn(2, 3, 4), torch.randn(2, 4, 5)

    def work():
        torch.nn.functional.linear(x, w, b).sum().backward()  # addmm forward, one mm backward (x's gradient)
        torch.bmm(a, c)

    out = matmul_replay(work, repeats=2)
    # addmm 4x5 @ 5x6, backward mm 4x6 @ 6x5, bmm 2 x (3x4 @ 4x5)
    assert out["products"] == 3
    assert out["gflop"] * 1e9 == pytest.approx(2 * 4 * 5 * 6 + 2 * 4 * 6 * 5 + 2 * 2 * 3 * 4 * 5)
    assert out["median_s"] > 0


def test_op_group_shares_sum_to_one_and_name_the_groups():
    from types import SimpleNamespace

    from rlvr_lib.study.bench.profile import OP_GROUPS, op_group_shares

    events = [SimpleNamespace(key="aten::mm", self_cpu_time_total=60.0, count=3),
              SimpleNamespace(key="aten::index_select", self_cpu_time_total=20.0, count=2),
              SimpleNamespace(key="aten::mul", self_cpu_time_total=20.0, count=10),
              SimpleNamespace(key="Optimizer.step#AdamW.step", self_cpu_time_total=500.0, count=1)]  # not an op
    out = op_group_shares(events)
    assert set(out["shares"]) == {*OP_GROUPS, "elementwise_and_other"}
    assert out["shares"]["matmul"] == pytest.approx(0.6) and out["shares"]["copies"] == pytest.approx(0.2)
    assert out["shares"]["elementwise_and_other"] == pytest.approx(0.2) and out["shares"]["sampling"] == 0
    assert out["op_calls"] == 15 and out["top_ops"][0] == {"op": "aten::mm", "share": 0.6, "calls": 3, "mean_us": 20.0}


def test_profile_bench_splits_the_step_and_bounds_the_rollout(tmp_path):
    summary = main(["--quick", "--only", "profile,reproduction", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "profile.json").read_text())
    decode, step = result["decode"], result["step"]
    assert decode["lean_decoder"] is True and "compiled" not in decode  # quick: no compilation
    layers = result["settings"]["layers"]
    assert decode["us_per_layer_per_token"] == pytest.approx(decode["median_s"] / (decode["tokens"] * layers) * 1e6)
    assert 0 < decode["matmul_replay"]["share_of_call"] < 1 and 0 < step["matmul_replay"]["share_of_call"] < 1
    assert step["matmul_replay"]["gflop"] > decode["matmul_replay"]["gflop"]  # the step's update adds products
    assert 0 < step["rollout_share"] < 1
    assert sum(decode["profile"]["shares"].values()) == pytest.approx(1.0)
    p = summary["profile"]
    assert p["decode_matmul_floor_share"] == decode["matmul_replay"]["share_of_call"]
    # the reproduction entry is read from the committed run records, one row per notebook
    from rlvr_lib.study.report import SECTIONS, notebook_compute

    rows = notebook_compute()
    assert [r["notebook"] for r in rows] == [notebook for _, _, notebook, _ in SECTIONS]
    assert summary["reproduction_hours"]["total"] == pytest.approx(sum(r["hours"] for r in rows))


@pytest.mark.parametrize("kw, match", [
    (dict(batch=10, group_size=4), "multiple of group_size"),
    (dict(larger_layers=0), r"^bench_vllm_rollout: larger_layers=0 is invalid: must be an integer >= 1$"),
    (dict(shapes=("policy-3x32", "llama-70b")), "shapes="),
])
def test_vllm_rollout_bench_validates_arguments_before_it_needs_vllm(kw, match):
    from rlvr_lib.study.bench.vllm_rollout import bench_vllm_rollout

    with pytest.raises(ValueError, match=match):
        bench_vllm_rollout(**kw)


def test_vllm_rollout_summary_holds_the_ratios_of_the_raw_throughputs():
    """The vLLM benchmark runs in .venv-vllm (tests/test_vllm_real.py's environment); its summary entry is plumbing."""
    from rlvr_lib.study.bench.__main__ import summarize

    engines = {"vllm": 300.0, "kv_cache": 200.0, "generate": 100.0}
    row = {name: {"tokens_per_s": v, "median_s": 1.0} for name, v in engines.items()}
    row.update(vllm_vs_kv_cache=1.5, vllm_vs_generate=3.0, vllm_startup_s=40.0, greedy_tokens_equal=True)
    entry = summarize("vllm_rollout", {"shapes": {"policy-3x32": row}, "vllm_version": "0.32.0",
                                       "settings": {"batch": 64}})["vllm_rollout"]
    shape = entry["policy-3x32"]
    assert shape["vllm_vs_kv_cache"] == shape["vllm_tokens_per_s"] / shape["kv_cache_tokens_per_s"]
    assert shape["vllm_vs_generate"] == shape["vllm_tokens_per_s"] / shape["generate_tokens_per_s"]
    assert entry["vllm_version"] == "0.32.0" and shape["greedy_tokens_equal"] is True
    # README's benchmark table (rlvr_lib.study.report) renders one row per shape from the summary.
    import tempfile
    from pathlib import Path

    from rlvr_lib.study.report import _bench_section

    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "bench").mkdir()
        (Path(root) / "bench" / "summary.json").write_text(json.dumps({"vllm_rollout": entry, "finished_at": {}}))
        (line,) = [x for x in _bench_section(Path(root)) if "vllm_cpu" in x]
    assert line.startswith("| vllm_cpu_rollout_vs_kv_cache (policy-3x32) | 1.50 | - | - | vLLM 0.32.0 CPU build")
    assert "300 vs KVCacheEngine 200 vs generate 100 tokens/s (vs generate 3.00x" in line
