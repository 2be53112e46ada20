"""Tests of ``rlvr_lib.study.plots``: figure structure, saving, input validation."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.figure import Figure

from rlvr_lib.study import plots

CURVES = {"before": {1: 0.1, 4: 0.3, 16: 0.5}, "after": {"1": 0.2, "4": 0.35, "16": 0.45}}


def _history(offset: float, steps: int = 5) -> list[dict]:
    return [
        {"step": s, "accuracy": offset + 0.1 * s, "reward_mean": offset + 0.1 * s, "entropy": 1.0 - 0.05 * s,
         "zero_adv_frac": 0.5}
        for s in range(steps)
    ]


def test_pass_at_k_lines_and_log2_axis(tmp_path):
    fig = plots.plot_pass_at_k(CURVES, title="t", path=tmp_path / "a" / "b" / "passk.png")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and ax.get_xscale() == "log"
    assert list(ax.lines[1].get_xdata()) == [1, 4, 16]  # string keys parsed and sorted
    assert (tmp_path / "a" / "b" / "passk.png").stat().st_size > 0


def test_strategy_freq_grouped_bars():
    fig = plots.plot_strategy_freq({"grpo": {"direct": 0.7, "split": 0.3}, "nudgerl": {"round": 0.2}})
    assert len(fig.axes[0].patches) == 2 * 3  # missing strategies drawn as 0


def test_hint_follow_bars_and_target():
    assert len(plots.plot_hint_follow({"direct": 1.0, "split": 0.9}).axes[0].lines) == 0
    ax = plots.plot_hint_follow({"direct": 1.0, "split": 0.9, "round": 0.7}, target=0.8).axes[0]
    assert len(ax.patches) == 3 and len(ax.lines) == 1
    assert ax.lines[0].get_ydata()[0] == 0.8


def test_mode_histogram_bars_and_existing_ax():
    fig0 = plots.plot_pass_at_k(CURVES)
    fig = plots.plot_mode_histogram({"base": {1: 0.6, 2: 0.4}, "rl": {"1": 0.9, "3": 0.1}}, ax=fig0.axes[0])
    assert fig is fig0 and len(fig.axes[0].patches) == 2 * 3


def test_training_curves_single_run_and_seeds(tmp_path):
    fig = plots.plot_training_curves(
        {"grpo": _history(0.0), "nudgerl": [_history(0.1), _history(0.2), _history(0.3, steps=3)]},
        path=tmp_path / "curves.png",
    )
    assert len(fig.axes) == 3 and all(len(ax.lines) == 2 for ax in fig.axes)
    ax = fig.axes[0]
    assert len(ax.collections) == 1  # one band: only the seeded label
    assert ax.lines[1].get_ydata()[0] == pytest.approx(0.2)  # mean over the 3 seeds
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_training_curves_skips_missing_and_null_rows():
    hist = _history(0.0)
    hist[2]["entropy"] = None
    del hist[3]["entropy"]
    fig = plots.plot_training_curves({"a": hist}, metrics=["entropy"])
    assert list(fig.axes[0].lines[0].get_xdata()) == [0, 1, 4]


@pytest.mark.parametrize(
    ("call", "arg"),
    [
        (lambda: plots.plot_pass_at_k({}), "curves"),
        (lambda: plots.plot_pass_at_k({"a": {}}), "curves"),
        (lambda: plots.plot_pass_at_k({"a": {0: 0.1}}), r"^curves\['a'\]: k=0 is invalid: must be a positive integer$"),
        (lambda: plots.plot_strategy_freq({}), "freqs"),
        (lambda: plots.plot_hint_follow({}), "follow"),
        (lambda: plots.plot_hint_follow({"a": 1.0}, target=2.0),
         r"^target=2.0 is invalid: must be a number in \[0, 1\]$"),
        (lambda: plots.plot_mode_histogram({"a": {"two": 0.5}}),
         r"^hists\['a'\]: n_modes='two' is invalid: must be a positive integer$"),
        (lambda: plots.plot_training_curves({}), "histories"),
        (lambda: plots.plot_training_curves({"a": []}), "histories"),
        (lambda: plots.plot_training_curves({"a": _history(0.0)}, metrics=["kl"]), "metrics"),
        (lambda: plots.plot_training_curves({"a": _history(0.0)}, confidence=1.0),
         r"^confidence=1.0 is invalid: must be a number in \(0, 1\)$"),
        (lambda: plots.plot_training_curves({"a": [{"reward_mean": 1.0}]}, metrics=["reward_mean"]), "histories"),
        (lambda: plots.save_figure("not a figure", "x.png"), "fig"),
    ],
)
def test_bad_inputs_name_the_argument(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


def test_rank_accuracy_lines_are_the_mean_over_units(tmp_path):
    import numpy as np

    rows = {"base": np.array([[1, 0, 0], [1, 1, 0]]), "step 10": np.array([[0.5, 0.5, 0.25]])}
    fig = plots.plot_rank_accuracy(rows, path=tmp_path / "rank.png")
    ax = fig.axes[0]
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]
    assert list(ax.lines[0].get_ydata()) == [1.0, 0.5, 0.0] and list(ax.lines[1].get_ydata()) == [0.5, 0.5, 0.25]
    assert (tmp_path / "rank.png").stat().st_size > 0
    with pytest.raises(ValueError, match="rows\\['a'\\]"):
        plots.plot_rank_accuracy({"a": np.array([1, 0])})


def test_grad_norm_vs_length_draws_both_quantities_per_bin():
    import numpy as np

    from rlvr_lib.study.probes.grad_norm_profile import GradNormProfile

    lengths = np.array([[10, 20, 40, 80], [10, 20, 40, 80]])
    prof = GradNormProfile(problems=[0, 1], lengths=lengths, norms=3.0 / np.sqrt(lengths),
                           correct=np.zeros((2, 4), bool), truncated=np.zeros((2, 4), bool))
    fig = plots.plot_grad_norm_vs_length({"base": prof}, bins=4)
    raw, scaled = fig.axes[:2]
    np.testing.assert_allclose(raw.lines[0].get_xdata(), [10, 20, 40, 80])
    np.testing.assert_allclose(raw.lines[0].get_ydata(), 3.0 / np.sqrt([10, 20, 40, 80]))
    np.testing.assert_allclose(scaled.lines[0].get_ydata(), 3.0)  # sqrt(T) ||g|| flat
    np.testing.assert_allclose(raw.lines[1].get_ydata(), 3.0 / np.sqrt([10, 80]))  # the slope -1/2 guide
    assert raw.get_xscale() == "log" and scaled.get_yscale() == "log"
    with pytest.raises(ValueError, match="GradNormProfile"):
        plots.plot_grad_norm_vs_length({"base": {"T": 1}})


def test_pass_at_k_gap_draws_the_base_minus_run_panel():
    from rlvr_lib.study.plots import plot_pass_at_k_gap

    base = {"1": 0.2, "8": 0.5, "64": 0.8}
    fig = plot_pass_at_k_gap(base, {"grpo": {"1": 0.4, "8": 0.55, "64": 0.7}}, title="crossover")
    left, right = fig.axes[:2]
    gap = right.lines[0].get_ydata()
    assert list(right.lines[0].get_xdata()) == [1, 8, 64]
    assert gap == pytest.approx([-0.2, -0.05, 0.1])
    assert [line.get_label() for line in left.lines] == ["base", "grpo"]
    with pytest.raises(ValueError, match="runs\\['grpo'\\]"):
        plot_pass_at_k_gap(base, {"grpo": {"1": 0.4}})


def test_per_problem_scatter_counts_points_off_the_diagonal():
    from rlvr_lib.study.plots import plot_per_problem_scatter

    fig = plot_per_problem_scatter([0.9, 0.5, 0.2, 0.3], [0.1, 0.5, 0.6, 0.0])
    ax = fig.axes[0]
    assert ax.get_legend().get_texts()[0].get_text() == "2 below, 1 above the diagonal"
    with pytest.raises(ValueError, match="equal, non-zero length"):
        plot_per_problem_scatter([0.1], [0.1, 0.2])
