"""Tests for rlvr_lib.study.runs: cached runs, atomic writes, run records, provenance; seed statistics."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import rlvr_lib
from rlvr_lib.config import ConfigBase
from counting_run import CountingRun as Counter
from rlvr_lib.study.runs import (CACHE_ONLY_ENV, RESULTS_ENV, RESUMED, CacheMiss, RunRecord, cached_run, cpu_model, current_testbed, git_commit,
                                 jsonable, load_runs, measured_on, results_root, run_dir, runs_frame)
from rlvr_lib.study.stats import aggregate_seeds, format_ci


@dataclass(frozen=True)
class Cfg(ConfigBase):
    lr: float = 0.1
    steps: int = 3


# ---------------------------------------------------------------- locations
def test_results_root_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv(RESULTS_ENV, raising=False)
    assert results_root().name == "results"
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "env"))
    assert results_root() == tmp_path / "env"
    assert run_dir("exp") == tmp_path / "env" / "exp"
    assert results_root(tmp_path / "arg") == tmp_path / "arg"
    assert not (tmp_path / "env" / "exp").exists()
    assert run_dir("exp", create=True).is_dir()


@pytest.mark.parametrize("bad", ["", "../x", "a/b", " x", "x y"])
def test_run_dir_rejects_unsafe_names(bad, tmp_path):
    with pytest.raises(ValueError, match="experiment="):
        run_dir(bad, tmp_path)


def test_git_commit_never_raises():
    sha = git_commit()
    assert sha is None or (isinstance(sha, str) and len(sha) >= 40)


# -------------------------------------------------------------- cached_run
def test_cached_run_writes_record_then_hits_cache(tmp_path):
    fn = Counter()
    rec = cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path)
    assert fn.calls == 1
    path = tmp_path / "exp" / f"grpo-g8-{Cfg().config_hash()}-s0.json"
    assert path.exists()
    assert rec.run_id == path.stem
    data = json.loads(path.read_text())
    assert data["status"] == "finished" and data["seed"] == 0
    assert data["config"] == {"lr": 0.1, "steps": 3} and data["config_type"] == "Cfg"
    assert data["version"] == rlvr_lib.__version__
    assert len(data["history"]) == 3 and data["final"] == {"pass@1": 0.25}
    assert data["started"] and data["finished"] and "git_commit" in data

    again = cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path)
    assert fn.calls == 1  # cache hit: fn not called
    assert again == rec

    cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path, force=True)
    assert fn.calls == 2


def test_cache_only_serves_records_and_refuses_to_compute(tmp_path, monkeypatch):
    fn = Counter()
    rec = cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path)
    monkeypatch.setenv(CACHE_ONLY_ENV, "1")
    assert cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path) == rec and fn.calls == 1
    with pytest.raises(CacheMiss, match=r"grpo-g8-.*-s1\.json does not exist.*seed 1"):
        cached_run("exp", "grpo-g8", Cfg(), 1, fn, root=tmp_path)
    with pytest.raises(CacheMiss, match="does not exist"):
        cached_run("exp", "grpo-g8", Cfg(lr=0.2), 0, fn, root=tmp_path)
    with pytest.raises(CacheMiss, match=r"would be recomputed \(force=True\)"):
        cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path, force=True)
    path = tmp_path / "exp" / f"{rec.run_id}.json"
    path.write_text(path.read_text()[:40])  # truncated: would be recomputed
    with pytest.raises(CacheMiss, match="stale or unreadable"):
        cached_run("exp", "grpo-g8", Cfg(), 0, fn, root=tmp_path)
    assert fn.calls == 1  # no refused run took a lock either: only the first run's is there
    assert [p.name for p in (tmp_path / "exp").glob(".*.lock")] == [f".{rec.run_id}.lock"]


def test_different_seed_or_config_is_a_different_run(tmp_path):
    fn = Counter()
    r0 = cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    r1 = cached_run("exp", "run", Cfg(), 1, fn, root=tmp_path)
    r2 = cached_run("exp", "run", Cfg(lr=0.2), 0, fn, root=tmp_path)
    r3 = cached_run("exp", "run", {"lr": 0.1, "steps": 3, "x": 1}, 0, fn, root=tmp_path)
    assert fn.calls == 4
    assert len({r.run_id for r in (r0, r1, r2, r3)}) == 4
    loaded = load_runs("exp", tmp_path)
    assert {r.run_id for r in loaded} == {r.run_id for r in (r0, r1, r2, r3)}
    assert [r.seed for r in loaded] == [0, 0, 0, 1]  # sorted by (name, seed, run_id)


def test_dict_config_hashes_like_the_dataclass(tmp_path):
    fn = Counter()
    cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    cached_run("exp", "run", {"steps": 3, "lr": 0.1}, 0, fn, root=tmp_path)
    assert fn.calls == 1


def test_a_resumed_run_counts_the_earlier_processes_time(tmp_path):
    resumed = cached_run("exp", "a", Cfg(), 0, lambda: ([], {}, {RESUMED: {"at_step": 3, "earlier_s": 100.0}}),
                         root=tmp_path)
    assert 100.0 <= resumed.wall_time_s < 160.0
    assert resumed.extra[RESUMED] == {"at_step": 3, "earlier_s": 100.0}
    fresh = cached_run("exp", "b", Cfg(), 0, lambda: ([], {}, {RESUMED: None}), root=tmp_path)
    assert fresh.wall_time_s < 60.0 and RESUMED not in fresh.extra  # not resumed: nothing kept


def test_fn_raising_leaves_no_file(tmp_path):
    def boom():
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        cached_run("exp", "run", Cfg(), 0, boom, root=tmp_path)
    d = tmp_path / "exp"
    assert not d.exists() or [p.name for p in d.iterdir() if p.suffix != ".lock"] == []  # the run lock stays


def test_unserialisable_result_leaves_no_partial_file(tmp_path):
    fn = Counter(final={"obj": object()})
    with pytest.raises(TypeError, match="cannot serialise"):
        cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    d = tmp_path / "exp"
    assert not d.exists() or [p.name for p in d.iterdir() if p.suffix != ".lock"] == []  # the run lock stays


def test_stale_or_unfinished_record_is_recomputed(tmp_path):
    fn = Counter()
    rec = cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    path = run_dir("exp", tmp_path) / f"{rec.run_id}.json"
    data = json.loads(path.read_text())
    data["status"] = "running"
    path.write_text(json.dumps(data))
    cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    assert fn.calls == 2
    path.write_text('{"truncated": ')  # corrupt file -> recompute, not crash
    cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    assert fn.calls == 3
    assert json.loads(path.read_text())["status"] == "finished"


def test_numpy_torch_and_nan_are_converted(tmp_path):
    def fn():
        history = [{"loss": torch.tensor(0.5), "ent": np.float32(1.5), "n": np.int64(3)}]
        final = {
            "acc": np.float64(0.25),
            "per_problem": np.array([1, 0, 1]),
            "logits": torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16),
            "nan": float("nan"),
            "inf": np.float64("inf"),
            "ok": np.bool_(True),
        }
        return history, final, {"note": ("a", "b")}

    rec = cached_run("exp", "conv", {"a": 1}, 0, fn, root=tmp_path, extra={"tag": "x"})
    data = json.loads((tmp_path / "exp" / f"{rec.run_id}.json").read_text())
    assert data["history"] == [{"loss": 0.5, "ent": 1.5, "n": 3}]
    assert data["final"] == {
        "acc": 0.25, "per_problem": [1, 0, 1], "logits": [[1.0, 2.0]], "nan": None, "inf": None, "ok": True,
    }
    machine = data["extra"].pop("machine")  # where it ran: float rounding depends on the processor
    assert data["extra"] == {"tag": "x", "note": ["a", "b"]}
    assert machine["cpu_model"] == cpu_model() and machine["cpu_count"] == os.cpu_count()
    assert rec.final["nan"] is None  # the returned record is what was stored


def test_bad_fn_return_and_seed(tmp_path):
    with pytest.raises(TypeError, match="fn must return"):
        cached_run("exp", "run", {}, 0, lambda: {"x": 1}, root=tmp_path)
    with pytest.raises(ValueError, match=r"^seed=1.5 is invalid: must be an integer$"):
        cached_run("exp", "run", {}, 1.5, Counter(), root=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name="):
        cached_run("exp", "a/b", {}, 0, Counter(), root=tmp_path)


def test_load_runs_filters_and_skips_non_records(tmp_path):
    assert load_runs("missing", tmp_path) == []
    cached_run("exp", "a", {}, 1, Counter(), root=tmp_path)
    cached_run("exp", "a", {}, 0, Counter(), root=tmp_path)
    cached_run("exp", "b", {}, 0, Counter({"pass@1": 0.5}), root=tmp_path)
    (tmp_path / "exp" / "summary.json").write_text('{"table": []}')
    recs = load_runs("exp", tmp_path)
    assert [(r.name, r.seed) for r in recs] == [("a", 0), ("a", 1), ("b", 0)]
    assert all(isinstance(r, RunRecord) for r in recs)
    assert [r.seed for r in load_runs("exp", tmp_path, name="a")] == [0, 1]
    df = runs_frame(recs)
    assert list(df.columns[:4]) == ["name", "seed", "config_hash", "run_id"]
    assert df["pass@1"].tolist() == [0.25, 0.25, 0.5]


def test_load_runs_current_keeps_the_shipped_policy_and_testbeds_runs(tmp_path):
    sha, version = current_testbed()
    cached_run("exp", "a", {"policy_sha": sha, "task_version": version}, 0, Counter(), root=tmp_path)
    cached_run("exp", "a", {"policy_sha": "older", "task_version": version}, 0, Counter(), root=tmp_path)
    cached_run("exp", "a", {"policy_sha": sha, "task_version": "older"}, 0, Counter(), root=tmp_path)
    assert len(load_runs("exp", tmp_path)) == 3
    assert [measured_on(r) for r in load_runs("exp", tmp_path, current=True)] == [(sha, version)]


def test_env_var_root_used_by_cached_run(tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    cached_run("exp", "run", {}, 0, Counter())
    assert len(load_runs("exp")) == 1


# --------------------------------------------------------------- statistics
def test_aggregate_seeds_hand_worked():
    # [1, 2, 3]: mean 2, sd 1, t_{0.975, 2} = 4.302653, half = 4.302653 / sqrt(3) = 2.484138
    agg = aggregate_seeds([1, 2, 3])
    assert agg["n"] == 3
    assert agg["mean"] == pytest.approx(2.0)
    assert agg["std"] == pytest.approx(1.0)
    assert agg["ci_low"] == pytest.approx(2.0 - 2.484138, abs=1e-5)
    assert agg["ci_high"] == pytest.approx(2.0 + 2.484138, abs=1e-5)


def test_aggregate_seeds_two_values_and_inputs():
    # [0.2, 0.4]: mean 0.3, sd 0.141421, t_{0.975, 1} = 12.706205, half = 12.706205 * 0.1 = 1.2706205
    agg = aggregate_seeds(np.array([0.2, 0.4]))
    assert agg["mean"] == pytest.approx(0.3)
    assert agg["std"] == pytest.approx(math.sqrt(0.02))
    assert agg["ci_high"] - agg["mean"] == pytest.approx(1.2706205, abs=1e-6)
    # 90% interval with 5 values: [1..5] mean 3, sd 1.581139, t_{0.95, 4} = 2.131847, half = 1.507443
    agg90 = aggregate_seeds(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), confidence=0.90)
    assert agg90["ci_high"] - 3.0 == pytest.approx(1.507443, abs=1e-5)
    assert all(type(v) in (int, float) for k, v in agg.items() if k != "method")
    assert agg["method"] == "Student-t over seeds"


def test_aggregate_seeds_single_value_and_errors():
    assert aggregate_seeds([0.7]) == {"mean": 0.7, "ci_low": 0.7, "ci_high": 0.7, "n": 1, "std": 0.0,
                                      "method": "single value: no interval (n=1)"}
    with pytest.raises(ValueError, match="no values"):
        aggregate_seeds([])
    with pytest.raises(ValueError, match="non-finite"):
        aggregate_seeds([1.0, float("nan")])
    with pytest.raises(ValueError, match="non-finite"):
        aggregate_seeds([1.0, None])  # type: ignore[list-item]


def test_format_ci_takes_new_dicts():
    assert format_ci(aggregate_seeds([0.7])) == "0.700 (n=1)"
    assert format_ci({"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 1, "n_problems": 200}) == "0.500 [0.400, 0.600]"
    assert format_ci({"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1, "method": "single"}) == "0.500 (n=1)"
    assert format_ci({"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 3, "method": "m"}, ".2f") == "0.50 [0.40, 0.60]"


def test_jsonable_rejects_unknown_objects():
    with pytest.raises(TypeError):
        jsonable({"x": object()})


def _compute_once_in_a_process(root, log, started, release):
    """A process's cached_run of the shared run: its fn logs a line and, when ``started``/``release`` are
    given, says it has begun and holds the run until released."""

    def fn():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        if started is not None:
            started.set()
            release.wait(30)
        return [{"step": 0}], {"pass@1": 0.5}

    return cached_run("exp", "shared", {"lr": 0.1}, 0, fn, root=root).run_id


def test_two_processes_compute_a_shared_run_once(tmp_path):
    """A second process asking for a run that another is computing waits for its lock and loads its record."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    log = tmp_path / "calls.log"
    started, release = ctx.Event(), ctx.Event()
    first = ctx.Process(target=_compute_once_in_a_process, args=(tmp_path, log, started, release))
    first.start()
    assert started.wait(30)  # the first process holds the run's lock, inside fn
    with ctx.Pool(1) as pool:
        second = pool.apply_async(_compute_once_in_a_process, (tmp_path, log, None, None))
        with pytest.raises(multiprocessing.TimeoutError):
            second.get(timeout=1.0)  # blocked on the lock, not computing
        release.set()
        run_id = second.get(timeout=30)
    first.join(30)
    assert first.exitcode == 0
    assert log.read_text().splitlines() == [str(first.pid)]  # fn ran once, in the first process
    assert [r.run_id for r in load_runs("exp", tmp_path)] == [run_id]
    assert (tmp_path / "exp" / f".{run_id}.lock").exists()  # hidden, next to the record it guards


def test_a_run_made_again_with_one_more_evaluation_counts_once():
    """A notebook that trains another's arm again only to add an evaluation makes the same run twice: a table reads
    one record per seed of it, and keeps runs that differ otherwise (another seed, another training setting)."""
    from types import SimpleNamespace

    from rlvr_lib.study.runs import one_run_per_seed

    def rec(run_id, seed, lr, extra=None):
        config = {"train": {"method": "pope", "lr": lr}, "eval": {"samples": 32}}
        return SimpleNamespace(name="pope", seed=seed, run_id=run_id,
                               config={**config, **({"extra_evals": extra} if extra else {})})

    first, again = rec("pope-a-s0", 0, 1e-4), rec("pope-b-s0", 0, 1e-4, {"protocol-nudgerl": {"samples": 32}})
    other_seed, other_lr = rec("pope-c-s1", 1, 1e-4), rec("pope-d-s0", 0, 3e-4)
    assert one_run_per_seed([first, again, other_seed, other_lr]) == [first, other_seed, other_lr]
    assert one_run_per_seed([again, first]) == [again]
