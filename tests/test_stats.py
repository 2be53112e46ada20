"""Tests for rlvr_lib.study.stats: bootstrap intervals, paired differences, rescued / lost problems."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rlvr_lib.study.stats import (
                                  aggregate_seeds,
                                  bootstrap_ci,
                                  eval_counts,
                                  has_interval,
                                  hierarchical_bootstrap_ci,
                                  paired_difference_ci,
                                  per_problem_scores,
                                  rescued_lost_counts,
                                  rescued_lost_null,
                                  strategy_shares,
                                  )

# Stored run records (real evaluations, small): the regression records.
RECORDS = Path(__file__).resolve().parent / "data" / "regression" / "records"


def _width(agg):
    return agg["ci_high"] - agg["ci_low"]


# ---------------------------------------------------------------- coverage
def _coverage(draw, true_mean, confidence, reps=300, n=30):
    rng = np.random.default_rng(2024)
    hits = 0
    for r in range(reps):
        agg = bootstrap_ci(draw(rng, n), confidence=confidence, n_resamples=2000, seed=r)
        hits += agg["ci_low"] <= true_mean <= agg["ci_high"]
    return hits / reps


# Tolerance: 300 repetitions give a Monte Carlo standard error of
# sqrt(.95 * .05 / 300) = 0.0126 at 95% (0.029 at 50%). The percentile
# bootstrap with n = 30 is known to undercover slightly (its spread is the
# plug-in s * sqrt((n-1)/n) / sqrt(n) and it uses normal rather than t
# quantiles: about 1-2 points at 95%), so we accept
# [nominal - 0.03 - 3 SE, nominal + 3 SE] = [0.88, 0.99] at 95% and
# [0.38, 0.59] at 50%. An interval of the wrong level or width (e.g. the
# sample range, ~100% coverage, or a 50% interval reported as 95%) fails.
@pytest.mark.parametrize(
    "draw, true_mean",
    [
        (lambda rng, n: rng.normal(0.5, 1.0, n), 0.5),
        # Bernoulli rates. p = 0.35 lies midway between the values k/30 a mean of
        # 30 draws can take: with p on that lattice (e.g. 0.3 = 9/30) an interval
        # endpoint often equals p exactly and counts as covering, which inflates
        # the 50% coverage (0.65 measured at p = 0.3) for a reason unrelated to the method.
        (lambda rng, n: (rng.random(n) < 0.35).astype(float), 0.35),
    ],
    ids=["normal", "bernoulli"],
)
def test_percentile_bootstrap_covers_the_mean_at_its_nominal_rate(draw, true_mean):
    assert 0.88 <= _coverage(draw, true_mean, 0.95) <= 0.99
    assert 0.38 <= _coverage(draw, true_mean, 0.50) <= 0.59


def test_bootstrap_width_matches_the_normal_approximation_for_large_n():
    # For large n the bootstrap distribution of the mean is ~ N(mean, s_plugin^2 / n),
    # so the 95% interval is ~ mean +- 1.96 * s * sqrt((n - 1) / n) / sqrt(n).
    x = np.random.default_rng(0).normal(2.0, 3.0, 400)
    agg = bootstrap_ci(x)
    expected = 2 * 1.959964 * x.std(ddof=0) / math.sqrt(x.size)
    assert _width(agg) == pytest.approx(expected, rel=0.05)
    assert agg["mean"] == pytest.approx(x.mean())
    assert agg["std"] == pytest.approx(x.std(ddof=1))
    assert agg["se"] == pytest.approx(x.std(ddof=0) / math.sqrt(x.size), rel=0.05)
    assert agg["n"] == 400
    assert agg["method"] == "percentile bootstrap over seeds (B=10000)"


def test_bootstrap_is_deterministic_given_seed():
    x = np.random.default_rng(0).random(20)
    assert bootstrap_ci(x, seed=3) == bootstrap_ci(x, seed=3)
    assert bootstrap_ci(x, seed=3)["ci_low"] != bootstrap_ci(x, seed=4)["ci_low"]
    X = np.random.default_rng(1).random((3, 20))
    assert hierarchical_bootstrap_ci(X, seed=5) == hierarchical_bootstrap_ci(X, seed=5)
    assert paired_difference_ci(X, X[:1], seed=5) == paired_difference_ci(X, X[:1], seed=5)


def test_bootstrap_keys_median_and_single_value():
    agg = bootstrap_ci([0.2, 0.4, 0.9], n_resamples=500)
    assert set(agg) == {"mean", "ci_low", "ci_high", "n", "std", "se", "method"}
    assert all(type(agg[k]) is float for k in ("mean", "ci_low", "ci_high", "std", "se"))
    assert agg["ci_low"] <= agg["mean"] <= agg["ci_high"]
    med = bootstrap_ci([1.0, 2.0, 100.0], statistic="median", n_resamples=500)
    assert med["mean"] == 2.0 and "median" in med["method"]
    one = bootstrap_ci([0.7])
    assert one["mean"] == one["ci_low"] == one["ci_high"] == 0.7
    assert one["n"] == 1 and one["std"] == 0.0 and "no interval" in one["method"]
    assert not has_interval(one) and has_interval(agg)
    assert bootstrap_ci(0.25)["mean"] == 0.25  # a scalar is one value


# ------------------------------------------------------------------ bounds
@pytest.mark.parametrize("values", [[0.0] * 3, [1.0] * 3, [0.0, 1.0], [0.0, 0.0, 1.0], [0.98, 1.0], [0.0, 0.02]])
def test_rate_intervals_never_leave_unit_interval(values):
    agg = bootstrap_ci(values, bounds=(0, 1), n_resamples=2000)
    assert 0.0 <= agg["ci_low"] <= agg["mean"] <= agg["ci_high"] <= 1.0
    h = hierarchical_bootstrap_ci(np.array([values, values[::-1]]), bounds=(0, 1), n_resamples=2000)
    assert 0.0 <= h["ci_low"] <= h["ci_high"] <= 1.0
    d = paired_difference_ci([values], [values[::-1]], bounds=(0, 1), n_resamples=2000)
    assert -1.0 <= d["ci_low"] <= d["ci_high"] <= 1.0


def test_bootstrap_stays_in_range_where_the_t_interval_does_not():
    values = [0.0, 0.05, 0.9]
    assert aggregate_seeds(values)["ci_low"] < 0.0  # the problem this module exists for
    agg = bootstrap_ci(values, bounds=(0, 1))
    assert 0.0 <= agg["ci_low"] and agg["ci_high"] <= 1.0


def test_constant_data_gives_a_zero_width_interval_at_the_value():
    b = bootstrap_ci([0.3] * 5)
    assert b["ci_low"] == b["ci_high"] == b["mean"] == 0.3
    h = hierarchical_bootstrap_ci(np.full((3, 50), 0.7))
    assert h["ci_low"] == h["ci_high"] == h["mean"] == 0.7
    assert h["se"] == pytest.approx(0.0, abs=1e-12) and h["std"] == 0.0


# ------------------------------------------------------------ hierarchical
def _seeds_by_problems(rng, S=3, P=200, seed_sd=0.01, problem_sd=0.3, noise_sd=0.05, mu=0.5):
    return (mu + rng.normal(0, seed_sd, (S, 1)) + rng.normal(0, problem_sd, (1, P))
            + rng.normal(0, noise_sd, (S, P)))


def test_hierarchical_is_wider_than_seeds_only_when_problems_vary():
    X = _seeds_by_problems(np.random.default_rng(1))
    h = hierarchical_bootstrap_ci(X, n_resamples=4000)
    s = bootstrap_ci(X.mean(axis=1), n_resamples=4000)
    assert h["mean"] == pytest.approx(X.mean()) == pytest.approx(s["mean"])
    # problem sd 0.3 over 200 problems: se ~ 0.3 / sqrt(200) = 0.021, width ~ 0.083;
    # seed means vary by ~0.01: seeds-only width is a few hundredths at most
    assert _width(h) > 2 * _width(s)
    assert _width(h) == pytest.approx(2 * 1.96 * X.mean(axis=0).std() / math.sqrt(200), rel=0.2)
    assert h["n"] == 3 and h["n_problems"] == 200
    assert h["std"] == pytest.approx(X.mean(axis=1).std(ddof=1))
    assert h["method"] == "bootstrap over seeds x problems (S=3, P=200, B=4000)"


def test_hierarchical_with_one_seed_resamples_problems():
    X = _seeds_by_problems(np.random.default_rng(2), S=1)
    h = hierarchical_bootstrap_ci(X, n_resamples=4000)
    p = bootstrap_ci(X[0], n_resamples=4000)  # the same resampling, over problems only
    assert has_interval(h) and h["n"] == 1
    assert _width(h) == pytest.approx(_width(p), rel=0.1)
    single = hierarchical_bootstrap_ci([[0.4]])
    assert not has_interval(single) and single["ci_low"] == single["ci_high"] == 0.4


def test_hierarchical_covers_the_population_mean():
    # crossed seed and problem effects around mu = 0.5: the seeds x problems
    # bootstrap should cover mu at about 95% (it is mildly conservative);
    # 150 repetitions, SE 0.018; accept [0.85, 1]. A seeds-only interval here
    # covers far less often (it ignores the problem draw): checked below.
    rng = np.random.default_rng(7)
    hits = seeds_only = 0
    for r in range(150):
        X = _seeds_by_problems(rng, S=5, P=40, seed_sd=0.1, problem_sd=0.2, noise_sd=0.1)
        h = hierarchical_bootstrap_ci(X, n_resamples=1000, seed=r)
        s = bootstrap_ci(X.mean(axis=1), n_resamples=1000, seed=r)
        hits += h["ci_low"] <= 0.5 <= h["ci_high"]
        seeds_only += s["ci_low"] <= 0.5 <= s["ci_high"]
    assert hits / 150 >= 0.85
    assert seeds_only / 150 < hits / 150 - 0.1


# ------------------------------------------------------------------ paired
def test_paired_difference_removes_shared_problem_difficulty():
    rng = np.random.default_rng(3)
    difficulty = rng.uniform(0.05, 0.95, 300)
    A = np.clip(difficulty + 0.03 + rng.normal(0, 0.02, (3, 300)), 0, 1)
    B = np.clip(difficulty + rng.normal(0, 0.02, (3, 300)), 0, 1)
    d = paired_difference_ci(A, B, bounds=(0, 1), n_resamples=4000)
    assert d["mean"] == pytest.approx(A.mean() - B.mean())
    assert d["mean_a"] == pytest.approx(A.mean()) and d["mean_b"] == pytest.approx(B.mean())
    assert d["ci_low"] > 0.0  # the 0.03 gain is resolved when paired ...
    ha, hb = hierarchical_bootstrap_ci(A, n_resamples=4000), hierarchical_bootstrap_ci(B, n_resamples=4000)
    assert ha["ci_low"] < hb["ci_high"]  # ... while the unpaired intervals overlap
    assert _width(d) < 0.25 * _width(ha)
    assert (d["n"], d["n_a"], d["n_b"], d["n_problems"]) == (3, 3, 3, 300)
    assert d["method"].startswith("paired bootstrap over problems, seeds within each method (S_a=3, S_b=3, P=300")


def test_paired_constant_shift_is_exact_and_base_can_be_one_evaluation():
    rng = np.random.default_rng(4)
    base = rng.uniform(0, 0.8, (1, 100))
    method = np.repeat(base + 0.1, 3, axis=0)  # three identical seeds, +0.1 on every problem
    d = paired_difference_ci(method, base, bounds=(0, 1))
    assert d["ci_low"] == pytest.approx(0.1) and d["ci_high"] == pytest.approx(0.1)
    assert d["n"] == 1 and has_interval(d)
    full = paired_difference_ci(np.ones((2, 5)), np.zeros((1, 5)), bounds=(0, 1))
    assert full["ci_low"] == full["ci_high"] == 1.0


# ---------------------------------------------------------- rescued / lost
def test_rescued_lost_counts_hand_made_pair():
    before = [0, 3, 0, 5, 1, 0]
    after = [2, 0, 0, 5, 1, 7]
    # solved before: problems 1, 3, 4 (3); after: 0, 3, 4, 5 (4);
    # rescued (0 -> >0): 0 and 5 (2); lost (>0 -> 0): 1 (1); problem 2 stays unsolved
    assert rescued_lost_counts(before, after) == {"n_problems": 6, "solved_before": 3, "solved_after": 4, "rescued": 2,
                                          "lost": 1, "net": 1}
    assert rescued_lost_counts(after, before) == {"n_problems": 6, "solved_before": 4, "solved_after": 3, "rescued": 1,
                                          "lost": 2, "net": -1}


def test_rescued_lost_null_between_two_base_evaluations():
    null = rescued_lost_null([0, 1, 0, 4, 2], [1, 0, 0, 4, 0])
    # a -> b: rescued problem 0, lost problems 1 and 4
    assert (null["rescued"], null["lost"], null["flips_per_direction"]) == (1, 2, 1.5)
    assert "sampling seeds" in null["method"]


def test_rescued_lost_counts_errors():
    with pytest.raises(ValueError, match=r"^counts_after=<5 counts> is invalid: must be counts for the same 6 "
                                         r"problems as counts_before, in the same order \(got 5\)$"):
        rescued_lost_counts([0] * 6, [0] * 5)
    with pytest.raises(ValueError, match="non-negative integer counts"):
        rescued_lost_counts([0, -1], [0, 1])
    with pytest.raises(ValueError, match="non-negative integer counts"):
        rescued_lost_counts([0, 1.5], [0, 1])
    with pytest.raises(ValueError, match=r"uids_after=<2 uids> is invalid: must be the same problem ids as "
                                         r"uids_before, in the same order \(first difference at index 1\)"):
        rescued_lost_counts([0, 1], [1, 0], uids_before=["a", "b"], uids_after=["a", "c"])


def _evaluation(counts_by_family, uid_prefix=""):
    return {"families": {f: {"correct_counts": c, "uids": [f"{uid_prefix}{f}:{i}" for i in range(len(c))]}
                         for f, c in counts_by_family.items()}}


def test_rescued_lost_counts_from_stored_evaluations_by_hand():
    ref = _evaluation({"easy": [0, 2, 4], "hard": [0, 0, 1]})
    null = _evaluation({"easy": [1, 2, 4], "hard": [0, 0, 0]})  # flips: rescued 1, lost 1 -> 1.0 per direction
    run = SimpleNamespace(final=_evaluation({"easy": [3, 2, 0], "hard": [1, 1, 1]}))  # a run record
    (c_ref, u_ref), (c_run, u_run) = eval_counts(ref, ["easy", "hard"]), eval_counts(run.final, ["easy", "hard"])
    r = rescued_lost_counts(c_ref, c_run, uids_before=u_ref, uids_after=u_run)
    # run vs ref over 6 problems: ref solves easy:1, easy:2, hard:2 (3); the run solves all but easy:2 (5);
    # rescued easy:0, hard:0, hard:1 (3); lost easy:2 (1)
    assert [r[k] for k in ("n_problems", "solved_before", "solved_after", "rescued", "lost", "net")] == [6, 3, 5, 3, 1, 2]
    c_null, u_null = eval_counts(null, ["easy", "hard"])
    assert rescued_lost_null(c_ref, c_null, uids_before=u_ref, uids_after=u_null)["flips_per_direction"] == 1.0
    other, u_other = eval_counts(_evaluation({"easy": [0, 0, 0]}, uid_prefix="other-"), ["easy"])
    with pytest.raises(ValueError, match="same problem ids"):
        rescued_lost_counts(eval_counts(ref, ["easy"])[0], other, uids_before=eval_counts(ref, ["easy"])[1],
                            uids_after=u_other)
    with pytest.raises(ValueError, match=r"must be family names of the evaluation, among \['easy', 'hard'\]"):
        eval_counts(ref, ["medium"])


# ------------------------------------------------------- stored records
def _record(name):
    return json.loads(next(RECORDS.glob(f"{name}-*.json")).read_text())


def test_per_problem_scores_reproduce_the_stored_pass_at_k():
    rec = _record("grpo_no_kl")
    fams = rec["final"]["average"]["families"]
    n, P = rec["config"]["eval"]["samples"], rec["config"]["eval"]["problems_per_family"]
    for k in ("1", "4"):
        for f in fams:
            X, uids = per_problem_scores([rec["final"]], [f], samples=n, k=int(k))
            assert X.shape == (1, P) and len(uids) == P
            assert X.mean() == pytest.approx(rec["final"]["families"][f]["pass_at_k"][k], abs=1e-12)
        X, _ = per_problem_scores([rec["final"]], fams, samples=n, k=int(k))
        assert X.mean() == pytest.approx(rec["final"]["average"]["pass_at_k"][k], abs=1e-12)


def test_stored_runs_are_paired_on_the_same_problems():
    ref, rec = _record("pope"), _record("grpo_no_kl")
    fams = ref["final"]["average"]["families"]
    n, P = ref["config"]["eval"]["samples"], ref["config"]["eval"]["problems_per_family"]
    Xr, ur = per_problem_scores([ref["final"]], fams, samples=n)
    Xm, um = per_problem_scores([rec["final"]], fams, samples=n)
    assert ur == um
    d = paired_difference_ci(Xm, Xr, bounds=(0, 1), n_resamples=2000)
    assert d["mean"] == pytest.approx(rec["final"]["average"]["pass_at_k"]["1"]
                                      - ref["final"]["average"]["pass_at_k"]["1"])
    assert d["ci_low"] <= d["mean"] <= d["ci_high"]
    counts, uids = eval_counts(ref["final"], fams)
    assert counts.shape == (P * len(fams),) and uids == ur
    with pytest.raises(ValueError, match="same problems as evaluations"):
        per_problem_scores([ref["final"], _evaluation({f: [0] * P for f in fams}, "x")], fams, samples=n)


# ------------------------------------------------------------ strategies
def test_strategy_shares_over_seeds():
    freqs = [{"split": 0.8, "direct": 0.15, "none": 0.05}, {"split": 0.9, "direct": 0.1, "none": 0.0},
             {"split": 1.0, "direct": 0.0, "none": 0.0}]
    out = strategy_shares(freqs, n_resamples=1000)
    assert list(out) == ["split", "direct", "none"]
    assert out["split"]["mean"] == pytest.approx(0.9)
    for agg in out.values():
        assert 0.0 <= agg["ci_low"] <= agg["mean"] <= agg["ci_high"] <= 1.0
    assert list(strategy_shares(freqs, ["none"])) == ["none"]
    with pytest.raises(ValueError, match=r"freqs_per_seed\[0\]=.* is invalid: must be a mapping with a share for strategy 'round'"):
        strategy_shares(freqs, ["round"])
    with pytest.raises(ValueError, match="values within bounds=\\(0, 1\\)"):
        strategy_shares([{"a": 1.5}])
    with pytest.raises(ValueError, match="non-empty sequence"):
        strategy_shares([])


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: bootstrap_ci([]), r"^values=\[\] is invalid: must be a non-empty 1-D sequence of finite numbers "
                                   r"\(got an empty array"),
        (lambda: bootstrap_ci([0.1, float("nan")]), r"^values=\[0.1, nan\] is invalid: .*finite numbers \(got NaN, inf "
                                                    r"or None at index \[1\]\)"),
        (lambda: bootstrap_ci([0.1, None]), r"got NaN, inf or None at index \[1\]"),
        (lambda: bootstrap_ci([[0.1, 0.2]]), r"^values=\[\[0.1, 0.2\]\] is invalid: .*\(got 2-D, shape \(1, 2\)\)"),
        (lambda: bootstrap_ci(["a"]), r"^values=\['a'\] is invalid: must be a 1-D array of finite numbers"),
        (lambda: bootstrap_ci([0.1], confidence=1.0), r"^confidence=1.0 is invalid: must be a number in \(0, 1\)$"),
        (lambda: bootstrap_ci([0.1], confidence=0), r"^confidence=0 is invalid: must be a number in \(0, 1\)$"),
        (lambda: bootstrap_ci([0.1], n_resamples=0), r"^n_resamples=0 is invalid: must be an integer >= 1$"),
        (lambda: bootstrap_ci([0.1], statistic="mode"),
         r"^statistic='mode' is invalid: must be one of \['mean', 'median'\]$"),
        (lambda: bootstrap_ci([0.1], bounds=(1, 0)), r"^bounds=\(1, 0\) is invalid: must be None or a pair"),
        (lambda: bootstrap_ci([0.1, 1.2], bounds=(0, 1)),
         r"^values=\[0.1, 1.2\] is invalid: must be values within bounds=\(0, 1\) \(got min 0.1, max 1.2\)"),
        (lambda: hierarchical_bootstrap_ci([0.1, 0.2]), r"^per_seed_per_problem=\[0.1, 0.2\] is invalid: .*"
                                                        r"\(got 1-D, shape \(2,\)\)"),
        (lambda: hierarchical_bootstrap_ci(np.zeros((3, 0))), r"got an empty array, shape \(3, 0\)"),
        (lambda: hierarchical_bootstrap_ci([[0.1, np.inf]]), r"got NaN, inf or None at index \[\[0, 1\]\]"),
        (lambda: paired_difference_ci(np.zeros((3, 5)), np.zeros((1, 4))),
         r"^b=<array of shape \(1, 4\)> is invalid: must be an \(S_b, P\) array with the same P=5 problems"),
        (lambda: paired_difference_ci(np.zeros((3, 5)), np.zeros((1, 5)), confidence=1.5),
         r"^confidence=1.5 is invalid: must be a number in \(0, 1\)$"),
    ],
)
def test_bad_input_names_what_is_wrong_and_what_is_allowed(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_names_kept_importable_elsewhere_are_the_same_objects():
    """The interval code lives in rlvr_lib.study.stats (issue 30); study modules that re-export it give the same object."""
    import rlvr_lib.study.stats as new
    import rlvr_lib.study.summaries as summaries

    names = ["PASSK_INTERVAL", "RANGES", "SEED_INTERVAL", "passk_ci", "seed_ci"]
    assert all(getattr(summaries, name) is getattr(new, name) for name in names)
