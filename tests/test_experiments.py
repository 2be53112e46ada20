"""Tests for rlvr_lib.experiments: cached runs, atomic writes, seed statistics, claims tables."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import rlvr_lib
from rlvr_lib.config import ConfigBase
from rlvr_lib.experiments import (
    RESULTS_ENV,
    RunRecord,
    aggregate_seeds,
    cached_run,
    claims_table,
    git_commit,
    jsonable,
    load_runs,
    render_markdown,
    results_root,
    run_dir,
    runs_frame,
)


@dataclass(frozen=True)
class Cfg(ConfigBase):
    lr: float = 0.1
    steps: int = 3


class Counter:
    """A run function that counts its calls."""

    def __init__(self, final=None):
        self.calls = 0
        self.final = final if final is not None else {"pass@1": 0.25}

    def __call__(self):
        self.calls += 1
        return [{"step": i, "loss": 1.0 / (i + 1)} for i in range(3)], dict(self.final)


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


def test_fn_raising_leaves_no_file(tmp_path):
    def boom():
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        cached_run("exp", "run", Cfg(), 0, boom, root=tmp_path)
    d = tmp_path / "exp"
    assert not d.exists() or list(d.iterdir()) == []


def test_unserialisable_result_leaves_no_partial_file(tmp_path):
    fn = Counter(final={"obj": object()})
    with pytest.raises(TypeError, match="cannot serialise"):
        cached_run("exp", "run", Cfg(), 0, fn, root=tmp_path)
    d = tmp_path / "exp"
    assert not d.exists() or list(d.iterdir()) == []


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
    assert data["extra"] == {"tag": "x", "note": ["a", "b"]}
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
    assert all(type(v) in (int, float) for v in agg.values())


def test_aggregate_seeds_single_value_and_errors():
    assert aggregate_seeds([0.7]) == {"mean": 0.7, "ci_low": 0.7, "ci_high": 0.7, "n": 1, "std": 0.0}
    with pytest.raises(ValueError, match="no values"):
        aggregate_seeds([])
    with pytest.raises(ValueError, match="non-finite"):
        aggregate_seeds([1.0, float("nan")])
    with pytest.raises(ValueError, match="non-finite"):
        aggregate_seeds([1.0, None])  # type: ignore[list-item]


# ------------------------------------------------------------- claims table
def test_claims_table_columns_holds_and_markdown():
    rows = [
        {"claim": "NudgeRL@8 > GRPO@32", "paper": ".489 vs .487", "ours": [0.01, 0.02, 0.03], "expect": ">"},
        {"claim": "C3PO beats GRPO", "paper": "+1.05", "ours": aggregate_seeds([-0.1, 0.0]), "expect": ">"},
        {"claim": "Malformed rate below 5%", "paper": "<5%", "ours": [0.02], "expect": "<", "than": 0.05},
        {"claim": "Given", "paper": 1.0, "ours": 0.5, "holds": False, "note": "n/a at this scale"},
        {"claim": "Clear gain", "paper": "+2", "ours": [0.10, 0.12, 0.11], "expect": ">"},
    ]
    df = claims_table(rows)
    assert list(df.columns) == ["claim", "paper", "ours", "holds", "ci_clears", "note"]
    assert df["holds"].tolist() == [True, False, True, False, True]
    # mean above 0 but the interval spans it; one seed has no interval; given rows have none
    assert df["ci_clears"].tolist() == [False, False, False, None, True]
    assert df["holds"].dtype == bool
    assert df.loc[0, "ours"] == "0.020 [-0.005, 0.045]"  # half = 4.302653 * 0.01 / sqrt(3) = 0.02484
    assert df.loc[2, "ours"] == "0.020 (n=1)"
    md = render_markdown(df)
    assert md.splitlines()[0].startswith("| claim")
    assert "NudgeRL@8 > GRPO@32" in md


def test_claims_table_errors():
    with pytest.raises(ValueError, match="lacks"):
        claims_table([{"claim": "x", "ours": [1.0]}])
    with pytest.raises(ValueError, match="needs 'holds' or 'expect'"):
        claims_table([{"claim": "x", "paper": 1, "ours": [1.0]}])
    with pytest.raises(ValueError, match=r"^claims_table row 0: expect='>=' is invalid: must be one of \['>', '<'\]$"):
        claims_table([{"claim": "x", "paper": 1, "ours": [1.0], "expect": ">="}])


def test_jsonable_rejects_unknown_objects():
    with pytest.raises(TypeError):
        jsonable({"x": object()})
