"""VIGOR's length and rank diagnostics (`rlvr_lib.study.probes.grad_norm_profile`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlvr_lib.study.probes.grad_norm_profile import GradNormProfile, grad_norm_profile
from rlvr_lib.rewards import grad_norms_naive


def _profile(lengths, norms, correct=None, truncated=None):
    lengths, norms = np.asarray(lengths), np.asarray(norms, dtype=float)
    return GradNormProfile(problems=list(range(len(lengths))), lengths=lengths, norms=norms,
                           correct=np.zeros(lengths.shape, bool) if correct is None else np.asarray(correct, bool),
                           truncated=np.zeros(lengths.shape, bool) if truncated is None else np.asarray(truncated))


def test_slopes_of_an_exact_inverse_square_root_law():
    lengths = np.array([[10, 20, 40, 80], [15, 30, 60, 120], [12, 24, 48, 96]])
    prof = _profile(lengths, 7.0 / np.sqrt(lengths))
    raw, scaled = prof.loglog_slope_ci("norm", n_resamples=500), prof.loglog_slope_ci("scaled", n_resamples=500)
    assert raw["mean"] == pytest.approx(-0.5) and raw["ci_low"] == pytest.approx(-0.5)
    assert raw["ci_high"] == pytest.approx(-0.5)
    assert scaled["mean"] == pytest.approx(0.0, abs=1e-12) and scaled["ci_high"] == pytest.approx(0.0, abs=1e-12)
    assert raw["n"] == 12 and raw["n_problems"] == 3 and "over problems" in raw["method"]


def test_slope_interval_resamples_problems_not_completions():
    # problem 0 falls with length, problem 1 rises: the pooled slope is 0 but a problem draw moves it
    lengths = np.array([[10, 100], [10, 100]])
    norms = np.array([[10.0, 1.0], [1.0, 10.0]])
    ci = _profile(lengths, norms).loglog_slope_ci("norm", n_resamples=2000, seed=1)
    assert ci["mean"] == pytest.approx(0.0, abs=1e-12)
    assert ci["ci_low"] == pytest.approx(-1.0) and ci["ci_high"] == pytest.approx(1.0)  # all of 0 or all of 1


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="which"):
        _profile([[1, 2]], [[1.0, 1.0]]).values("sqrt")
    with pytest.raises(ValueError, match="positive finite"):
        _profile([[1, 2]], [[0.0, 1.0]]).loglog_slope_ci()
    with pytest.raises(ValueError, match="two lengths"):
        _profile([[5, 5]], [[1.0, 2.0]]).loglog_slope_ci()
    with pytest.raises(ValueError, match="divisor"):
        _profile([[1, 2, 3]], [[1.0, 1.0, 1.0]]).correct_by_rank(2)


def test_correct_by_rank_orders_by_score_and_puts_empty_last():
    # one problem, two groups of 3; score -sqrt(T)||g||: smaller scaled norm ranks first
    lengths = np.array([[4, 4, 4, 1, 4, 0]])
    norms = np.array([[3.0, 1.0, 2.0, 1.0, 0.25, 0.0]])   # scaled: 6, 2, 4 | 1, 0.5, (empty)
    correct = np.array([[1, 0, 1, 0, 1, 0]])
    truncated = np.array([[False, False, False, True, False, False]])
    rows = _profile(lengths, norms, correct, truncated).correct_by_rank(3)
    # group 0 by scaled norm: row 1 (2), row 2 (4), row 0 (6). Group 1: row 3 is truncated but keeps its
    # score -1 (issue 29: as the authors); row 5 is empty: its zero gradient would score best (0), it gets the
    # group's minimum minus 1e-3 (-1.001) instead: row 4 (-0.5), row 3 (-1), row 5.
    np.testing.assert_array_equal(rows, [[0, 1, 1], [1, 0, 0]])
    # raw norms: group 0 ranks as before; group 1: row 4 (-0.25), row 3 (-1), row 5 (-1.001)
    np.testing.assert_array_equal(_profile(lengths, norms, correct, truncated).correct_by_rank(3, sqrt_len=False),
                                  [[0, 1, 1], [1, 0, 0]])


def test_by_length_bins_cover_every_completion():
    lengths = np.array([[10, 10, 20, 20], [30, 30, 40, 40]])
    norms = 1.0 / np.sqrt(lengths)
    table = _profile(lengths, norms, correct=[[1, 1, 0, 0], [1, 0, 0, 0]]).by_length(4)
    assert list(table.index) == ["10-17", "18-25", "26-32", "33-40"]  # quartile edges 17.5, 25, 32.5
    assert table["completions"].tolist() == [2, 2, 2, 2]
    np.testing.assert_allclose(table["sqrt(T) ||g||"], 1.0)
    np.testing.assert_allclose(table["accuracy"], [1.0, 0.0, 0.5, 0.0])


def test_profile_of_the_policy_matches_the_reference_norms(policy):
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams
    from rlvr_lib.tasks.arithmetic import family_problems, verify

    model, tokenizer = policy
    problems = family_problems("easy_mix", 3, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    prof = grad_norm_profile(model, tokenizer, problems, samples=4, seed=5, batch_size=5)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
    ro = KVCacheEngine(model, tokenizer).generate([p.prompt for p in problems], SamplingParams(n=4, seed=5))
    ref = grad_norms_naive(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    np.testing.assert_allclose(prof.norms.ravel(), ref.numpy(), rtol=1e-4)
    np.testing.assert_array_equal(prof.lengths.ravel(), ro.completion_mask.sum(1).numpy())
    verdicts = [verify(problems[i // 4], t) for i, t in enumerate(ro.texts)]
    np.testing.assert_array_equal(prof.correct.ravel(), [v.status == "correct" for v in verdicts])
    assert prof.norms.shape == (3, 4) and (prof.norms > 0).all()


def test_rank_trend_by_hand():
    from rlvr_lib.study.probes.grad_norm_profile import rank_trend

    # ranks 1..4 centred -1.5 -0.5 0.5 1.5 (sum of squares 5)
    np.testing.assert_allclose(rank_trend(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 2, 3]])),
                               [(-1.5 - 0.5) / 5, 0.0, 1.0])
    with pytest.raises(ValueError, match="rows"):
        rank_trend(np.array([1.0, 0.0]))
