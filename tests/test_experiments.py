"""Tests for rlvr_lib.experiments: cached runs, atomic writes, seed statistics, claims tables."""

from __future__ import annotations

import json
import math
import os
import pickle
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import torch

import rlvr_lib
from rlvr_lib.config import ConfigBase
from rlvr_lib.study.stats import hierarchical_bootstrap_ci, paired_difference_ci
from rlvr_lib.experiments import (
    CLAIMS_COLUMNS,
    EFFECT_FRACTION,
    MEASUREMENT_COLUMNS,
    RESULTS_ENV,
    RunRecord,
    aggregate_seeds,
    cached_run,
    claims_summary,
    claims_table,
    cpu_model,
    find_claims_counts,
    find_claims_headline,
    instrument_checks,
    measurements_summary,
    measurements_table,
    min_effect,
    format_ci,
    git_commit,
    jsonable,
    load_runs,
    render_markdown,
    results_root,
    run_dir,
    runs_frame,
    verdict,
    verdict_counts,
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


# ------------------------------------------------------------- claims table
def _ci(lo, hi, n=5, method="m"):
    return {"mean": (lo + hi) / 2, "ci_low": lo, "ci_high": hi, "n": n, "method": method}


def _row(rid="c", ours=None, **kw):
    row = dict(id=rid, claim=f"claim {rid}", source="SAGE", paper="T1", paper_effect="no number",
               ours=_ci(0.01, 0.03) if ours is None else ours, expect=">", against="grpo")
    row.update(kw)
    return row


def test_verdict_one_sided_three_ways():
    assert verdict(_ci(0.01, 0.03), ">") == "reproduced"
    assert verdict(_ci(-0.03, -0.01), ">") == "contradicted"
    assert verdict(_ci(-0.01, 0.03), ">") == "unresolved"
    assert verdict(_ci(0.0, 0.03), ">") == "unresolved"  # touching the threshold is not clearing it
    assert verdict(_ci(0.51, 0.53), "<", than=0.54) == "reproduced"
    assert verdict(_ci(0.55, 0.6), "<", than=0.54) == "contradicted"
    assert verdict({"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1}, ">") == "unresolved"  # no interval


def test_equivalence_row_straddling_the_margin_is_unresolved_and_far_outside_contradicted():
    rows = [_row("inside", _ci(-0.004, 0.006), expect="within", margin=0.01),
            _row("straddles", _ci(0.002, 0.02), expect="within", margin=0.01),
            _row("far-below", _ci(-0.13, -0.09), expect="within", margin=0.01),
            _row("far-above", _ci(0.02, 0.05), expect="within", margin=0.01)]
    df = claims_table(rows)
    assert df["verdict"].tolist() == ["reproduced", "unresolved", "contradicted", "contradicted"]
    assert df.loc[0, "threshold"] == "within 0.000 +- 0.010"
    # the old one-sided half "B3PO <= .01 above GRPO" held at -.110; as one equivalence row it is contradicted
    assert verdict(_ci(-0.13, -0.09), "<", than=0.01) == "reproduced"


def test_one_sided_halves_of_a_two_sided_claim_are_refused():
    diff = _ci(-0.13, -0.09)
    with pytest.raises(ValueError, match=r"^claims_table row 1: expect='>' is invalid: row 0 \('above'\) tests the "
                                         r"same measurement with expect='<'.*must be one row with expect='within'"):
        claims_table([_row("above", diff, expect="<", than=0.01), _row("below", diff, expect=">", than=-0.01)])
    with pytest.raises(ValueError, match=r"^claims_table row 1: id='a' is invalid: must be unique in the table"):
        claims_table([_row("a"), _row("a", _ci(0.2, 0.3))])
    with pytest.raises(ValueError, match=r"^measurements_table row 1: expect='>' is invalid: row 0"):  # per-seed values
        measurements_table([{"id": "a", "measurement": "m", "ours": [0.1, 0.2, 0.3], "expect": "<", "than": 0.5},
                            {"id": "b", "measurement": "m", "ours": [0.1, 0.2, 0.3], "expect": ">", "than": 0.0}])
    # the same measurement on the same side twice (a weaker reading) is not a split claim
    assert len(claims_table([_row("a", diff, expect="<"), _row("b", diff, expect="<", than=0.01)])) == 2


def test_a_row_grpo_also_reproduces_is_not_specific():
    rows = [_row("ood-keeps", _ci(-0.004, 0.006), expect="within", margin=0.01, against="base",
                 reference=_ci(-0.002, 0.008)),  # GRPO keeps it too
            _row("beats-pope", _ci(0.01, 0.03), against="baseline", reference=_ci(0.02, 0.04)),
            _row("beats-base", _ci(0.01, 0.03), against="base", reference=_ci(-0.02, 0.01)),  # GRPO does not
            _row("grpo-own", _ci(0.01, 0.03), against="base", reference="the row is GRPO's own"),
            _row("fails", _ci(-0.03, -0.01), against="base", reference=_ci(0.02, 0.04))]
    df = claims_table(rows)
    assert df["verdict"].tolist() == ["not specific", "not specific", "reproduced", "reproduced", "contradicted"]
    assert df.loc[0, "reference"] == "GRPO 0.003 [-0.002, 0.008]: reproduced"
    assert df.loc[2, "reference"] == "GRPO -0.005 [-0.020, 0.010]: unresolved"
    assert df.loc[3, "reference"] == "the row is GRPO's own"
    assert verdict_counts(df) == {"reproduced": 2, "contradicted": 1, "unresolved": 0, "not specific": 2}
    with pytest.raises(ValueError, match=r"^claims_table row 0: reference=None is invalid: must be the same test on "
                                         r"GRPO .* \(against='base'\)$"):
        claims_table([_row("x", against="base")])


def test_large_paper_effect_sets_the_minimum_effect_by_one_rule():
    # paper 59.14 -> 20.71 (-65%): a quarter of it at our level 0.4 is -0.0325
    assert min_effect(59.14, 20.71, 0.4) == pytest.approx(EFFECT_FRACTION * (20.71 - 59.14) / 59.14 * 0.4)
    assert min_effect(42.99, 44.04, 0.4) is None  # +2.4%: small, 0 stays the threshold
    rows = [_row("collapse", _ci(-0.03, -0.01), expect="<", paper_effect=("Math avg", 59.14, 20.71), level=0.4,
                 against="method"),
            _row("small", _ci(0.001, 0.003), paper_effect=("pass@1", 42.99, 44.04))]
    df = claims_table(rows)
    assert df["verdict"].tolist() == ["contradicted", "reproduced"]  # -0.02 is not a quarter of a collapse
    assert df.loc[0, "threshold"] == "< -0.065 (min effect)" and df.loc[1, "threshold"] == "> 0.000"
    assert df.loc[0, "paper_effect"] == "Math avg 59.14 -> 20.71 (-65%)"
    assert df.loc[0, "our_effect"] == "-5% of 0.400"
    with pytest.raises(ValueError, match=r"^claims_table row 0: level=None is invalid: must be our finite value"):
        claims_table([_row("x", paper_effect=("pass@1", 0.402, 0.489))])
    with pytest.raises(ValueError, match=r"^claims_table row 0: expect='<' is invalid: must be the side of the "
                                         r"paper's change 0.402 -> 0.489"):
        claims_table([_row("x", expect="<", paper_effect=("pass@1", 0.402, 0.489), level=0.3)])


def test_claims_table_columns_and_interval_methods():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, (1, 100))
    method = np.clip(base + 0.1 + rng.normal(0, 0.01, (3, 100)), 0, 1)
    gain = paired_difference_ci(method, base, bounds=(0, 1), n_resamples=2000)
    df = claims_table([_row("gain", gain, note="x"), _row("seeds", [0.0, 0.05, 0.9], bounds=(0, 1))])
    assert list(df.columns) == [*CLAIMS_COLUMNS, "note"]
    assert df.loc[0, "interval"].startswith("paired bootstrap over problems") and df.loc[0, "verdict"] == "reproduced"
    assert df.loc[1, "ours"] == "0.317 [0.000, 0.900]" and "bounds" not in df.columns
    t = claims_table([_row("t", [0.0, 0.05, 0.9])], aggregate=aggregate_seeds)
    assert t.loc[0, "interval"] == "Student-t over seeds"
    assert render_markdown(df).splitlines()[0].startswith("| id")


def test_claims_table_keeps_and_shows_the_full_claim():
    claim = ("GRPO with a large group raises pass@1 on every in-distribution family while its pass@k at the "
             "largest budget stays within the base model's interval, so the gain is sharpening, not new ability.")
    claim = (claim + " " + "x" * 200)[:200]
    df = claims_table([_row("long", claim=claim, paper="p" * 120)])
    assert df.loc[0, "claim"] == claim and df.loc[0, "paper"] == "p" * 120
    with pd.option_context("display.max_colwidth", 50):
        assert claim not in repr(pd.DataFrame(df))  # what a plain DataFrame shows
        assert claim in repr(df)
        assert claim in df._repr_html_()
    assert claim in render_markdown(df)
    assert claim in repr(df[df["verdict"] == "reproduced"])  # a slice is still a claims table
    assert pickle.loads(pickle.dumps(df)).equals(df)


def test_format_ci_takes_new_dicts():
    assert format_ci(aggregate_seeds([0.7])) == "0.700 (n=1)"
    assert format_ci({"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 1, "n_problems": 200}) == "0.500 [0.400, 0.600]"
    assert format_ci({"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1, "method": "single"}) == "0.500 (n=1)"
    assert format_ci({"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 3, "method": "m"}, ".2f") == "0.50 [0.40, 0.60]"


def test_claims_table_errors():
    with pytest.raises(ValueError, match=r"^claims_table row 0: fields=.* must be a mapping with \['paper'\] as well"):
        claims_table([{k: v for k, v in _row().items() if k != "paper"}])
    with pytest.raises(ValueError, match=r"^claims_table row 0: expect='>=' is invalid: must be one of "
                                         r"\['>', '<', 'within'\]$"):
        claims_table([_row(expect=">=")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: than='0' is invalid: must be a number"):
        claims_table([_row(than="0")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: margin=None is invalid: must be a number > 0"):
        claims_table([_row(expect="within")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: margin=0.01 is invalid: must be absent unless"):
        claims_table([_row(margin=0.01)])
    with pytest.raises(ValueError, match=r"^claims_table row 0: holds=True is invalid: must be absent: .*"
                                         r"instrument_checks$"):
        claims_table([_row(holds=True)])
    with pytest.raises(ValueError, match=r"^claims_table row 0: source='Nudge' is invalid: must be one of"):
        claims_table([_row(source="Nudge")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: against='gt' is invalid: must be one of"):
        claims_table([_row(against="gt")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: paper_effect=\('pass@1', 1\) is invalid"):
        claims_table([_row(paper_effect=("pass@1", 1))])
    with pytest.raises(ValueError, match=r"^claims_table row 1: ours=.* must be an interval dict with 'mean', "
                                         r"'ci_low', 'ci_high', 'n' \(and 'method'\); missing \['ci_low', 'ci_high'\]$"):
        claims_table([_row("a"), _row("b", {"mean": 1.0, "n": 3})])
    with pytest.raises(ValueError, match=r"^claims_table row 0: values=\[0.1, nan\] is invalid"):
        claims_table([_row(ours=[0.1, float("nan")])])


def test_jsonable_rejects_unknown_objects():
    with pytest.raises(TypeError):
        jsonable({"x": object()})


def test_claims_summary_counts_each_verdict_and_the_chance_count():
    rows = [_row("a", _ci(0.05, 0.2)), _row("b", _ci(-0.05, 0.2)), _row("c", _ci(0.05, 0.3), expect="<"),
            _row("d", _ci(0.05, 0.2), source="VIGOR", against="base", reference=_ci(0.01, 0.02))]
    text = claims_summary(claims_table(rows))
    lines = text.splitlines()
    assert lines[0].startswith("**1 reproduced, 1 contradicted, 1 unresolved, 1 not specific of 4 claims** "
                               "(chance alone, every effect at its threshold, would give 0.1 `reproduced`")
    assert find_claims_headline(text) == "1 reproduced, 1 contradicted, 1 unresolved, 1 not specific of 4 claims"
    assert find_claims_counts(text + "\n" + text) == {
        "SAGE": {"reproduced": 2, "contradicted": 2, "unresolved": 2, "not specific": 0},
        "VIGOR": {"reproduced": 0, "contradicted": 0, "unresolved": 0, "not specific": 2}}
    assert "- **contradicted**: claim c (SAGE) -- ours 0.175 [0.050, 0.300], threshold < 0.000" in text


def test_measurements_and_instrument_checks_are_tables_of_their_own():
    m = measurements_table([{"id": "rescued", "measurement": "rescued > lost", "ours": _ci(0.01, 0.02), "expect": ">"}])
    assert list(m.columns) == list(MEASUREMENT_COLUMNS) and m.loc[0, "verdict"] == "reproduced"
    assert find_claims_headline(measurements_summary(m)) is None  # never counted among claims
    c = instrument_checks([{"id": "ari", "check": "ARI >= 0.8", "kind": "measurement", "value": 0.91, "passes": True}])
    assert c.loc[0, "value"] == "0.910" and bool(c.loc[0, "passes"])
    with pytest.raises(ValueError, match=r"^instrument_checks row 0: kind='claim' is invalid: must be one of"):
        instrument_checks([{"id": "x", "check": "x", "kind": "claim", "value": 1, "passes": True}])


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
