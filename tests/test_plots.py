"""Tests of ``rlvr_lib.study.plots``: figure structure, saving, input validation."""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import pytest
import matplotlib.pyplot as plt
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


# ------------------------------------------------------------ one colour per method, every line in a legend
from matplotlib.colors import to_hex  # noqa: E402


def test_method_colors_cover_every_registered_method_once():
    from rlvr_lib.methods import METHODS
    from rlvr_lib.methods.compose import SEPARATOR
    from rlvr_lib.study.claims.tables import VERDICTS

    registered = {name for name in METHODS if SEPARATOR not in name}  # composites get their components' mean
    assert set(plots.METHOD_COLORS) == registered | {"base"}
    hexes = [to_hex(c) for c in plots.METHOD_COLORS.values()]
    assert len(set(hexes)) == len(hexes)  # no two methods share a colour
    assert not {to_hex(c) for c in plots.OTHER_COLORS} & set(hexes)
    assert plots.COMPOSITE_SEPARATOR == SEPARATOR
    assert list(plots.VERDICT_COLORS) == list(VERDICTS)


@pytest.mark.parametrize(("label", "method"), [
    ("grpo", "grpo"), ("grpo-g8", "grpo"), ("GRPO@8", "grpo"), ("grpo, 200 steps", "grpo"), ("grpo_k2", "grpo_k2"),
    ("grpo-nudgerl-settings", "grpo"), ("dr-grpo-g16", "dr_grpo"), ("sage-k3", "sage"), ("SAGE", "sage"),
    ("sage_token", "sage_token"), ("NudgeRL@8", "nudgerl"), ("B3PO", "b3po"), ("base-wide", "base"),
])
def test_method_color_reads_arm_labels(label, method):
    assert plots.method_color(label) == plots.METHOD_COLORS[method]


def test_a_composite_has_the_mean_of_its_components_colours_and_an_unknown_label_is_refused():
    import numpy as np
    from matplotlib.colors import to_rgb

    mean = np.mean([to_rgb(plots.METHOD_COLORS["b3po"]), to_rgb(plots.METHOD_COLORS["vigor"])], axis=0)
    assert plots.method_color("b3po+vigor") == plots.method_color("B3PO+VIGOR vs GRPO") == to_hex(mean)
    for label in ("ivon-no-noise", "grpox", "easy_mix", "base+grpo"):
        with pytest.raises(ValueError,
                           match=rf"^label='{re.escape(label)}' is invalid: must be an arm label naming a method"):
            plots.method_color(label)


def _drawn(fig) -> dict[str, set[str]]:
    """``{label: colours}`` of every labelled line, bar, band and error bar of a figure, over all its panels."""
    out: dict[str, set[str]] = {}
    for ax in fig.axes:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels):
            if hasattr(handle, "patches"):  # bars
                colours = {to_hex(p.get_facecolor()) for p in handle.patches}
            elif hasattr(handle, "lines"):  # error bars: the data line
                colours = {to_hex(handle.lines[0].get_color())}
            elif hasattr(handle, "get_color"):
                colours = {to_hex(handle.get_color())}
            else:
                colours = {to_hex(handle.get_facecolor()[0])}
            out.setdefault(label.split(" (n=")[0], set()).update(colours)
    return out


def _legend_texts(fig) -> set[str]:
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    return {t.get_text().split(" (n=")[0] for leg in legends if leg is not None for t in leg.get_texts()}


def _method_figures():
    """Every figure of the module whose series are methods, with several methods spread over panels, in
    different orders and label spellings from figure to figure."""
    import numpy as np

    from rlvr_lib.study.probes.grad_norm_profile import GradNormProfile

    curve = lambda a: {1: 0.1 + a, 8: 0.3 + a, 64: 0.5 + a}  # noqa: E731
    methods = ["base", "grpo", "nudgerl", "b3po", "sage", "vigor", "dapo", "grpo_forward_kl", "b3po+vigor"]
    lengths = np.array([[10, 20, 40, 80], [10, 20, 40, 80]])
    prof = GradNormProfile(problems=[0, 1], lengths=lengths, norms=3.0 / np.sqrt(lengths),
                           correct=np.zeros((2, 4), bool), truncated=np.zeros((2, 4), bool))
    return {
        "pass_at_k": plots.plot_pass_at_k({m: curve(0.01 * i) for i, m in enumerate(methods)}, reference="base"),
        "pass_at_k reversed": plots.plot_pass_at_k({m: [curve(0.0), curve(0.02)] for m in reversed(methods)},
                                                   max_per_panel=3),
        "training_curves": plots.plot_training_curves({m: [_history(0.01 * i), _history(0.02 * i)]
                                                       for i, m in enumerate(methods[1:])}, reference="grpo"),
        "mode_histogram": plots.plot_mode_histogram({m: {1: 0.5, 2: 0.5} for m in methods[::-1]}, max_per_panel=4),
        "strategy_freq": plots.plot_strategy_freq({m: {"direct": 0.6, "split": 0.4} for m in methods[2:8]}),
        "rank_accuracy": plots.plot_rank_accuracy({m: np.array([[1, 0, 0], [1, 1, 0]]) for m in methods[3:9]}),
        "grad_norm": plots.plot_grad_norm_vs_length({"vigor": prof, "base": prof, "grpo-g8": prof}, bins=4),
        "pass_at_k_gap": plots.plot_pass_at_k_gap(curve(0.0), {"GRPO@8": curve(0.1), "NudgeRL@8": curve(0.05),
                                                               "sage-k3": curve(0.02), "ivon-no-noise": curve(0.0)}),
        "paired_gain": plots.plot_paired_gain({"NudgeRL": {"mean": 0.01, "low": -0.01, "high": 0.03},
                                               "b3po+vigor": {"mean": 0.0, "ci_low": -0.02, "ci_high": 0.02},
                                               "vigor": {"mean": -0.02, "low": -0.03, "high": -0.01},
                                               "ivon-no-noise": {"mean": 0.02, "low": 0.0, "high": 0.04}}),
    }


def test_every_method_has_one_colour_in_every_figure_and_every_line_is_in_a_legend():
    seen: dict[str, set[str]] = {}
    for name, fig in _method_figures().items():
        drawn = _drawn(fig)
        assert drawn, name
        missing = set(drawn) - _legend_texts(fig)
        assert not missing, f"{name}: drawn but not in a legend: {missing}"
        for label, colours in drawn.items():
            try:
                expected = plots.method_color(label)
            except ValueError:
                # a label naming no method: one colour, none a method's
                assert len(colours) == 1 and not colours & set(plots.METHOD_COLORS.values()), (name, label)
                continue
            assert colours == {expected}, (name, label, colours)
            seen.setdefault(expected, set()).add(label)
    assert plots.method_color("grpo") in seen and len(seen) >= 9  # the figures did draw the methods


def test_pass_at_k_gap_has_the_base_line_in_its_legend():
    fig = plots.plot_pass_at_k_gap({"1": 0.2, "8": 0.5}, {"grpo": {"1": 0.3, "8": 0.45}})
    assert {"base", "grpo", "0: base = run"} <= _legend_texts(fig)
    assert to_hex(fig.axes[0].lines[0].get_color()) == plots.METHOD_COLORS["base"]


def _assert_tick_labels_apart(fig, ax):
    """2 to 7 labelled x ticks in view, each at least half a letter clear of the next (in pixels, once drawn)."""
    fig.canvas.draw()
    labels = [t for t in ax.get_xticklabels() if t.get_text() and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    boxes = [t.get_window_extent() for t in labels]
    half_a_letter = 0.5 * labels[0].get_fontsize() * fig.dpi / 72  # pixels
    assert 2 <= len(boxes) <= 7
    assert all(b.x0 - a.x1 >= half_a_letter for a, b in zip(boxes, boxes[1:])), [(b.x0, b.x1) for b in boxes]


# ------------------------------------------------------------------------------- claims forest plot
FOREST = [
    dict(notebook="03_nudgerl", id="beats-base", claim="c1", paper="NudgeRL", our_effect=0.066, low=0.051,
         high=0.08, threshold=0.021, verdict="not specific", expect=">", margin=None),
    dict(notebook="03_nudgerl", id="beats-grpo", claim="c2", paper="NudgeRL", our_effect=0.001, low=-0.013,
         high=0.014, threshold=0.0, verdict="premise absent"),
    dict(notebook="06_vigor", id="shorter", claim="c3", paper="VIGOR", our_effect=14.5, low=10.3, high=17.8,
         threshold=0.0, verdict="contradicted", expect="<"),
    dict(notebook="06_vigor", id="flat", claim="c4", paper="VIGOR", our_effect=-0.004, low=-0.01, high=0.002,
         threshold=0.0, verdict="reproduced", expect="within", margin=0.25),
    dict(notebook="06_vigor", id="one-seed", claim="c5", paper="VIGOR", our_effect=0.375, low=None, high=None,
         threshold=0.75, verdict="unresolved"),
]


def test_claims_forest_places_each_row_at_its_effect_interval_and_threshold(tmp_path):
    import numpy as np

    fig = plots.plot_claims_forest(FOREST, title="claims", path=tmp_path / "claims.png")
    assert (tmp_path / "claims.png").stat().st_size > 0
    panels = fig.axes[:2]
    assert [ax.get_title(loc="left") for ax in panels] == ["03_nudgerl (NudgeRL)", "06_vigor (VIGOR)"]
    assert panels[0].get_xscale() == "linear" and panels[1].get_xscale() == "symlog"  # 17.8 passes +-1
    for ax, rows in zip(panels, (FOREST[:2], FOREST[2:])):
        ys = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}
        assert list(ys) == [r["id"] for r in rows]
        points = {}
        for c in ax.containers:
            line, _, (bars,) = c
            verdict = c.get_label().split(" (")[0]
            assert to_hex(line.get_color()) == plots.VERDICT_COLORS[verdict]
            for x, y, seg in zip(line.get_xdata(), line.get_ydata(), bars.get_segments()):
                points[y] = (verdict, x, seg[0][0], seg[1][0], seg[0][1])
        for r in rows:
            verdict, x, lo, hi, y = points[ys[r["id"]]]
            assert (verdict, x, y) == (r["verdict"], r["our_effect"], ys[r["id"]])
            if r["low"] is None:
                assert lo == hi == x  # no interval: no bar
            else:
                assert (lo, hi) == pytest.approx((r["low"], r["high"]))
        (threshold,) = [line for line in ax.lines if line.get_label() == "threshold"]
        assert list(threshold.get_xdata()) == [r["threshold"] for r in rows]
        assert list(threshold.get_ydata()) == [ys[r["id"]] for r in rows]
    (margin,) = [line for line in panels[1].lines if line.get_label().startswith("equivalence margin")]
    np.testing.assert_allclose(margin.get_xdata(), [-0.25, 0.25])
    legend = _legend_texts(fig)
    assert {"not specific (1)", "premise absent (1)", "contradicted (1)", "reproduced (1)", "unresolved (1)",
            "threshold", "equivalence margin (within)", "0"} == legend
    assert set(_drawn(fig)) <= legend


def test_claims_forest_draws_a_committed_notebooks_claims():
    from pathlib import Path

    from rlvr_lib.study.claims.tables import claims_rows

    root = Path(__file__).resolve().parents[1]
    path = next(p for p in (root / "notebooks" / "03_nudgerl.ipynb", root / "results/notebooks/full/03_nudgerl.ipynb")
                if p.exists())
    rows = claims_rows(path)
    fig = plots.plot_claims_forest(rows)
    assert len(fig.axes[0].get_yticks()) == len(rows)
    assert sum(len(c.lines[0].get_xdata()) for c in fig.axes[0].containers) == len(rows)


def test_claims_forest_tick_labels_never_run_together():
    # every effect within +-0.01 of 0 and an equivalence margin of 0.01 (notebook 08's rows at the quick profile):
    # the default locator gave 9 ticks, -0.0100 to 0.0100, whose labels ran into each other
    rows = [dict(FOREST[1], notebook="08_discovery", id=f"{arm}-beats-grpo", our_effect=0.0, low=0.0, high=0.0)
            for arm in ("nudgerl", "c3po", "m3po")]
    rows.append(dict(FOREST[3], notebook="08_discovery", id="b3po-matches-grpo", our_effect=0.0, low=0.0, high=0.0,
                     verdict="premise absent", margin=0.01))
    fig = plots.plot_claims_forest(rows)
    _assert_tick_labels_apart(fig, fig.axes[0])


@pytest.mark.parametrize(("rows", "match"), [
    ([], r"^rows='list' is invalid: must be a non-empty list of dicts"),
    ([{k: v for k, v in FOREST[0].items() if k != "threshold"}], r"^rows\[0\]: keys=.* is invalid: must be a dict "
                                                                 r"with \['threshold'\] as well$"),
    ([{**FOREST[0], "verdict": "holds"}], r"^rows\[0\]: verdict='holds' is invalid: must be one of"),
    ([{**FOREST[0], "low": 0.2}], r"^rows\[0\]: \(low, high\)=\(0.2, 0.08\) is invalid: must be two finite numbers "
                                  r"with low <= high, or both None / NaN"),
    ([{**FOREST[0], "high": None}], r"rows\[0\]: \(low, high\)"),
    ([{**FOREST[0], "our_effect": float("nan")}], r"^rows\[0\]: our_effect=nan is invalid: must be a finite number$"),
    ([{**FOREST[3], "margin": None}], r"^rows\[0\]: margin=None is invalid: must be a number > 0"),
])
def test_claims_forest_refuses_bad_rows(rows, match):
    with pytest.raises(ValueError, match=match):
        plots.plot_claims_forest(rows)


# ---------------------------------------------------------------------------- paired gain over GRPO
def test_paired_gain_draws_each_arm_at_its_mean_and_interval(tmp_path):
    gains = {"NudgeRL@8": {"mean": 0.02, "low": 0.01, "high": 0.04},
             "sage-k3": {"mean": -0.01, "ci_low": -0.03, "ci_high": 0.005, "n": 5}}
    ax = plots.plot_paired_gain(gains, title="gain over GRPO").axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(gains)
    for y, c in enumerate(ax.containers):
        line, _, (bars,) = c
        (seg,) = bars.get_segments()
        g = gains[c.get_label()]
        assert (line.get_xdata()[0], line.get_ydata()[0]) == (g["mean"], y)
        assert (seg[0][0], seg[1][0]) == pytest.approx((g.get("low", g.get("ci_low")), g.get("high", g.get("ci_high"))))
        assert to_hex(line.get_color()) == plots.method_color(c.get_label())
    assert ax.lines[0].get_xdata()[0] == 0 and ax.lines[0].get_label() == "GRPO (0)"
    # another reference is named; the gain axis' tick labels never overlap (a -0.01..0.03 range gave 9 ticks
    # whose labels ran into each other at the figure's width)
    fig = plots.plot_paired_gain({"grpo-g16": {"mean": 0.0054, "low": -0.0085, "high": 0.0194},
                                  "grpo-g32": {"mean": 0.0086, "low": -0.005, "high": 0.022},
                                  "grpo-g64": {"mean": 0.017, "low": 0.0047, "high": 0.029}}, reference="GRPO@8")
    ax = fig.axes[0]
    assert ax.lines[0].get_label() == "GRPO@8 (0)" and ax.get_xlabel().startswith("paired gain over GRPO@8")
    _assert_tick_labels_apart(fig, ax)
    # long arm names (notebook 05's) stand beside the axes twice: the figure widens, so the axes keep their width
    long_names = ["sage", "bnpo_loss_branch@bnpo-loss-k3-lr", "sage@sage_token-lr", "dapo-full-branch", "dapo-k3"]
    fig = plots.plot_paired_gain({a: {"mean": 0.001 * i, "low": -0.03, "high": 0.03} for i, a in enumerate(long_names)},
                                 reference="GRPO (k3)", path=tmp_path / "gain.png")  # saved, as laid out
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_window_extent().width / fig.dpi >= 3.5  # inches (6-inch wide, they were squeezed to 1)
    _assert_tick_labels_apart(fig, ax)
    with pytest.raises(ValueError, match=r"^gains='dict' is invalid: must be a non-empty dict"):
        plots.plot_paired_gain({})
    with pytest.raises(ValueError, match=r"^gains\['a'\]=\{'mean': 0.1\} is invalid: must be a dict with 'mean' and"):
        plots.plot_paired_gain({"a": {"mean": 0.1}})


# ---------------------------------------------------------------------------- when does it help: heatmap
def test_when_it_helps_heatmap_holds_each_gain_centred_at_zero():
    import numpy as np
    import pandas as pd

    table = pd.DataFrame([
        dict(run="NudgeRL vs GRPO", bucket="<= 0", problems=10, mean=0.05, ci_low=0.01, ci_high=0.09),
        dict(run="NudgeRL vs GRPO", bucket="> 0", problems=12, mean=-0.02, ci_low=-0.05, ci_high=0.01),
        dict(run="SAGE vs grpo_k3", bucket="> 0", problems=12, mean=-0.1, ci_low=-0.15, ci_high=-0.05),
    ])
    fig = plots.plot_when_it_helps(table, title="when")
    ax = fig.axes[0]
    mesh = ax.collections[0]
    values = np.ma.filled(mesh.get_array().reshape(2, 2).astype(float), np.nan)
    np.testing.assert_allclose(values, [[0.05, -0.02], [np.nan, -0.1]])
    assert (mesh.norm.vmin, mesh.norm.vmax) == (-0.1, 0.1)  # symmetric: 0 is the middle colour
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<= 0\n(10 problems)", "> 0\n(12 problems)"]
    texts = {t.get_text(): t.get_fontweight() for t in ax.texts}
    assert texts == {"+0.050\n[0.010, 0.090]": "bold", "-0.020\n[-0.050, 0.010]": "normal",
                     "-0.100\n[-0.150, -0.050]": "bold"}
    labels = {t.get_text(): to_hex(t.get_color()) for t in ax.get_yticklabels()}
    assert labels == {"NudgeRL vs GRPO": plots.METHOD_COLORS["nudgerl"], "SAGE vs grpo_k3": plots.METHOD_COLORS["sage"]}
    assert fig.axes[1].get_ylabel() == "gain over the comparator"  # the colour bar; a DataFrame names no metric
    with pytest.raises(ValueError, match=r"^table='list' is invalid: must be head_to_head.gain_map's DataFrame"):
        plots.plot_when_it_helps([])
    with pytest.raises(ValueError, match=r"missing \['ci_low', 'ci_high'\]"):
        plots.plot_when_it_helps(table.drop(columns=["ci_low", "ci_high"]))


def test_when_it_helps_reads_the_map_a_committed_notebook_stores():
    from pathlib import Path

    from rlvr_lib.study.claims.tables import notebook_outputs
    from rlvr_lib.study.head_to_head import find_map

    root = Path(__file__).resolve().parents[1]
    path = next(p for p in (root / "notebooks" / "07_head_to_head.ipynb",
                            root / "results/notebooks/full/07_head_to_head.ipynb") if p.exists())
    data = find_map(notebook_outputs(path))
    ax = plots.plot_when_it_helps(data).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(data["runs"])
    assert len(ax.texts) == sum(len(b) for b in data["runs"].values())
    assert ax.get_xlabel() == f"bucket of {data['property']}"


# ---------------------------------------------------------------- the claims overview (README's headline figure)
@pytest.mark.parametrize("row, expected", [
    ({"our_effect": 0.3, "low": 0.1, "high": 0.5, "threshold": 0.2, "expect": ">"}, (0.1, -0.1, 0.3)),
    ({"our_effect": 0.3, "low": 0.1, "high": 0.5, "threshold": 0.2, "expect": "<"}, (-0.1, -0.3, 0.1)),
    # within 0.2 +- 0.25: the farthest end (0.5) is 0.3 away -> low -0.05; the threshold is inside -> high 0.25
    ({"our_effect": 0.3, "low": 0.1, "high": 0.5, "threshold": 0.2, "expect": "within", "margin": 0.25},
     (0.15, -0.05, 0.25)),
    # within, threshold outside the interval: high is margin minus the nearest end's distance
    ({"our_effect": 0.5, "low": 0.4, "high": 0.6, "threshold": 0.2, "expect": "within", "margin": 0.5},
     (0.2, 0.1, 0.3)),
])
def test_oriented_distance_is_positive_on_the_papers_side(row, expected):
    assert plots.oriented_distance(row) == pytest.approx(expected)


def test_oriented_distance_without_an_interval_is_nan_at_the_ends():
    point, low, high = plots.oriented_distance({"our_effect": 0.3, "low": None, "high": None, "threshold": 0.2})
    assert point == pytest.approx(0.1) and math.isnan(low) and math.isnan(high)


def test_claims_overview_orders_papers_and_places_every_claim_at_its_distance():
    from rlvr_lib.study.report import claims_rows

    rows = claims_rows()
    fig = plots.plot_claims_overview(rows)
    panels = [a for a in fig.axes if a.get_visible()]
    from rlvr_lib.study.claims.tables import PAPER_NAMES
    assert [a.get_title(loc="left").split(" (")[0] for a in panels] == [p for p in PAPER_NAMES
                                                                        if any(r["paper"] == p for r in rows)]
    for panel in panels:
        paper = panel.get_title(loc="left").split(" (")[0]
        expected = sorted(plots.oriented_distance(r)[0] for r in rows if r["paper"] == paper)
        drawn = sorted(x for line in panel.get_lines() if line.get_marker() == "o" for x in line.get_xdata())
        assert drawn == pytest.approx(expected)
    # the sign of the interval's low end is the verdict, for every tested claim of the committed notebooks
    for r in rows:
        if r["verdict"] in ("reproduced", "not specific") and not math.isnan(plots.oriented_distance(r)[1]):
            assert plots.oriented_distance(r)[1] > 0, r["id"]
        if r["verdict"] == "contradicted" and not math.isnan(plots.oriented_distance(r)[2]):
            assert plots.oriented_distance(r)[2] < 0, r["id"]
    labels = fig.legends[0].get_texts()
    assert {t.get_text().split(" (")[0] for t in labels} == {r["verdict"] for r in rows}
    plt.close(fig)


def test_claims_overview_refuses_bad_input():
    with pytest.raises(ValueError, match="ncols"):
        plots.plot_claims_overview([{"notebook": "n", "id": "a", "claim": "c", "paper": "SAGE", "our_effect": 0.1,
                                     "low": 0.0, "high": 0.2, "threshold": 0.0, "verdict": "reproduced"}], ncols=0)
    with pytest.raises(ValueError):
        plots.plot_claims_overview([])
