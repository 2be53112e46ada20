"""Readability rules of ``rlvr_lib.study.plots`` (panels of at most six lines,
distinct colour/style pairs, legends outside the axes, bands clipped to the
valid range, smoothing named), the mode-histogram and pass@k aggregation over
seeds, and atomic saving under ``results/<experiment>/figures``.

Everything runs on the Agg backend and inspects the figure's artists; there
are no pixel snapshots.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math
import os

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.image import imread

from rlvr_lib.study import plots
from rlvr_lib.study.runs import RESULTS_ENV
from rlvr_lib.study.stats import aggregate_seeds

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _history(values, metric: str = "accuracy") -> list[dict]:
    return [{"step": s, metric: v, "entropy": 0.5} for s, v in enumerate(values)]


def _histories(n_labels: int, seeds: int = 1) -> dict[str, list[list[dict]]]:
    return {f"m{i:02d}": [_history([0.1 * (i % 9) + 0.01 * s] * 4) for s in range(seeds)] for i in range(n_labels)}


def _style_key(line) -> tuple:
    """What tells two lines apart: colour and full dash pattern.

    ``get_linestyle()`` reports every custom dash tuple as ``'--'``, so the
    (offset, dashes) pattern matplotlib actually draws is compared too.
    """
    dashes = line._unscaled_dash_pattern  # (offset, sequence or None); no public getter
    return to_rgba(line.get_color()), (line.get_linestyle(), dashes[0], tuple(dashes[1] or ()))


def _band_ys(ax) -> np.ndarray:
    polys = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert polys, "no band drawn"
    return np.concatenate([p.vertices[:, 1] for c in polys for p in c.get_paths()])


def _bar_labels(ax) -> list[str]:
    return [c.get_label() for c in ax.containers if isinstance(c, BarContainer)]


# -------------------------------------------------------- at most six lines
@pytest.mark.parametrize(("n_labels", "sizes"), [(1, [1]), (6, [6]), (7, [4, 3]), (13, [5, 4, 4]), (16, [6, 5, 5])])
def test_training_curves_split_into_panels_of_at_most_six(n_labels, sizes):
    hist = _histories(n_labels)
    fig = plots.plot_training_curves(hist, metrics=["accuracy", "entropy"])
    assert len(fig.axes) == 2 * len(sizes)
    rows = [fig.axes[:len(sizes)], fig.axes[len(sizes):]]  # row-major: metric, then panel
    for row in rows:
        assert [len(ax.lines) for ax in row] == sizes
        drawn = [line.get_label() for ax in row for line in ax.lines]
        assert drawn == list(hist)  # every label exactly once per metric, in order


def test_pass_at_k_and_mode_histogram_split_too():
    curves = {f"m{i}": {1: 0.1, 2: 0.2, 4: 0.3} for i in range(14)}
    fig = plots.plot_pass_at_k(curves)
    assert [len(ax.lines) for ax in fig.axes] == [5, 5, 4]
    hists = {f"m{i}": {1: 0.5, 2: 0.5} for i in range(8)}
    fig = plots.plot_mode_histogram(hists)
    assert [len(_bar_labels(ax)) for ax in fig.axes] == [4, 4]
    assert all(len(ax.patches) <= 6 * 2 for ax in fig.axes)


def test_reference_is_in_every_panel_and_counts_towards_six():
    hist = _histories(12)
    fig = plots.plot_training_curves(hist, metrics="accuracy", reference="m05")
    assert len(fig.axes) == 3
    for ax in fig.axes:
        labels = [line.get_label() for line in ax.lines]
        assert len(labels) <= 6 and labels[0] == "m05"
        assert to_rgba(ax.lines[0].get_color()) == to_rgba(plots.REFERENCE_COLOR)
    others = [line.get_label() for ax in fig.axes for line in ax.lines[1:]]
    assert sorted(others) == sorted(set(hist) - {"m05"})


def test_max_per_panel_and_split_false():
    hist = _histories(7)
    assert [len(ax.lines) for ax in plots.plot_training_curves(hist, "accuracy", max_per_panel=3).axes] == [3, 2, 2]
    with pytest.raises(ValueError, match=r"7 labels do not fit one panel of at most 6 lines .*split=False"):
        plots.plot_training_curves(hist, "accuracy", split=False)
    with pytest.raises(ValueError, match="split=False"):
        plots.plot_pass_at_k({f"m{i}": {1: 0.1} for i in range(7)}, split=False)
    fig = plots.plot_training_curves(_histories(6), "accuracy", split=False)  # fits: one panel
    assert len(fig.axes) == 1


def test_groups_choose_the_panels():
    hist = _histories(4)
    fig = plots.plot_training_curves(hist, "accuracy", groups=[["m00", "m03"], ["m01", "m02"]])
    assert [[line.get_label() for line in ax.lines] for ax in fig.axes] == [["m00", "m03"], ["m01", "m02"]]


# ---------------------------------------------- colour and style per panel
@pytest.mark.parametrize("reference", [None, "m07"])
def test_no_two_lines_in_a_panel_share_colour_and_style(reference):
    fig = plots.plot_training_curves(_histories(16), metrics=["accuracy", "entropy"], reference=reference)
    for ax in fig.axes:
        keys = [_style_key(line) for line in ax.lines]
        assert len(set(keys)) == len(keys), keys
        assert len({c for c, _ in keys}) == len(keys)  # in fact every colour differs within a panel
    # Different labels never share a (colour, style) pair anywhere in the figure either.
    by_label = {}
    for ax in fig.axes:
        for line in ax.lines:
            by_label.setdefault(_style_key(line), set()).add(line.get_label())
    assert all(len(labels) == 1 for labels in by_label.values())


def test_line_styles_differ_within_a_panel_without_reference():
    fig = plots.plot_pass_at_k({f"m{i}": {1: 0.1, 2: 0.2} for i in range(12)})
    for ax in fig.axes:
        styles = [_style_key(line)[1] for line in ax.lines]
        assert len(set(styles)) == len(styles)


def test_colours_come_from_the_colour_blind_palette():
    import seaborn as sns

    palette = {to_rgba(c) for c in sns.color_palette("colorblind", 6)}
    fig = plots.plot_training_curves(_histories(6), "accuracy")
    assert {to_rgba(line.get_color()) for line in fig.axes[0].lines} == palette


# ------------------------------------------------------- legend placement
def _assert_legends_outside(fig: Figure, n_legends: int) -> None:
    canvas = FigureCanvasAgg(fig)  # the figures come detached from pyplot, on a base canvas that cannot draw
    canvas.draw()  # runs the constrained layout, as saving or display does
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == n_legends
    renderer = canvas.get_renderer()
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert box.width > 0 and box.height > 0
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (legend, ax)


def test_legends_are_outside_every_axes():
    _assert_legends_outside(plots.plot_training_curves(_histories(16), metrics=["accuracy", "entropy"]), 3)
    _assert_legends_outside(plots.plot_training_curves(_histories(3), metrics="accuracy"), 1)
    _assert_legends_outside(plots.plot_pass_at_k({f"m{i}": {1: 0.1, 4: 0.9} for i in range(9)}), 2)
    _assert_legends_outside(plots.plot_mode_histogram({f"m{i}": {1: 0.9, 2: 0.1} for i in range(4)}), 1)


# ------------------------------------------------------------ bands clipped
def _spread_histories() -> dict:
    """Three seeds whose t-interval leaves [0, 1] on both sides."""
    seeds_hi = [_history([1.0, 1.0, 1.0]), _history([1.0, 1.0, 1.0]), _history([0.4, 0.5, 0.6])]
    seeds_lo = [_history([0.0, 0.0, 0.0]), _history([0.0, 0.0, 0.0]), _history([0.6, 0.5, 0.4])]
    return {"hi": seeds_hi, "lo": seeds_lo}


def test_bands_are_clipped_to_the_metric_range():
    hist = _spread_histories()
    unclipped = _band_ys(plots.plot_training_curves(hist, "accuracy", bounds={"accuracy": None}).axes[0])
    assert unclipped.max() > 1.0 and unclipped.min() < 0.0  # the data do leave [0, 1]
    for bounds in (None, (0, 1)):  # None: METRIC_BOUNDS knows accuracy is a rate
        ys = _band_ys(plots.plot_training_curves(hist, "accuracy", bounds=bounds).axes[0])
        assert ys.min() >= 0.0 and ys.max() <= 1.0
    ys = _band_ys(plots.plot_training_curves(hist, "accuracy", bounds=(0.2, 0.9)).axes[0])
    assert ys.min() == pytest.approx(0.2) and ys.max() == pytest.approx(0.9)
    ys = _band_ys(plots.plot_training_curves(hist, "accuracy", bounds=(-math.inf, 0.95)).axes[0])
    assert ys.max() <= 0.95 and ys.min() < 0.0


def test_pass_at_k_bands_clipped_and_per_seed_mean():
    seeds = [{"1": 0.9, "8": 1.0}, {"1": 0.95, "8": 1.0}, {"1": 0.3, "8": 0.5}]
    fig = plots.plot_pass_at_k({"m": seeds})
    ax = fig.axes[0]
    assert list(ax.lines[0].get_xdata()) == [1, 8] and ax.get_xscale() == "log"
    assert ax.lines[0].get_ydata()[1] == pytest.approx(aggregate_seeds([1.0, 1.0, 0.5])["mean"])
    assert aggregate_seeds([1.0, 1.0, 0.5])["ci_high"] > 1.0
    ys = _band_ys(ax)
    assert ys.min() >= 0.0 and ys.max() <= 1.0
    assert "mean over 3 seeds" in ax.get_title() and "95% Student-t" in ax.get_title()


def test_pass_at_k_accepts_interval_dicts():
    agg = {k: aggregate_seeds(v) for k, v in {"1": [0.2, 0.3, 0.4], "4": [0.5, 0.6, 0.7]}.items()}
    ax = plots.plot_pass_at_k({"m": agg, "base": {1: 0.1, 4: 0.2}}).axes[0]
    assert list(ax.lines[0].get_ydata()) == pytest.approx([0.3, 0.6])
    ys = _band_ys(ax)
    assert ys.min() == pytest.approx(agg["1"]["ci_low"]) and ys.max() == pytest.approx(agg["4"]["ci_high"])
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1  # no band for plain floats


# ------------------------------------------------------------ smoothing named
@pytest.mark.parametrize(
    ("smoothing", "name", "expected"),
    [
        (None, "no smoothing", [0.0, 1.0, 0.0, 1.0]),
        (("ema", 0.5), "EMA 0.5", [0.0, 0.5, 0.25, 0.625]),
        (("rolling", 2), "rolling mean over 2 logged steps", [0.0, 0.5, 0.5, 0.5]),
    ],
)
def test_smoothing_is_applied_and_named(smoothing, name, expected):
    fig = plots.plot_training_curves({"a": _history([0.0, 1.0, 0.0, 1.0])}, metrics=["accuracy", "entropy"],
                                     smoothing=smoothing)
    for ax in fig.axes:
        assert name in ax.get_title() or name in ax.get_ylabel()
    assert list(fig.axes[0].lines[0].get_ydata()) == pytest.approx(expected)


def test_smoothing_before_the_mean_over_seeds():
    fig = plots.plot_training_curves({"a": [_history([0.0, 1.0]), _history([1.0, 1.0])]}, "accuracy",
                                     smoothing=("ema", 0.5))
    assert list(fig.axes[0].lines[0].get_ydata()) == pytest.approx([0.5, 0.75])


def test_title_states_seed_counts():
    fig = plots.plot_training_curves({"a": [_history([0.1])] * 3, "b": [_history([0.2])]}, "accuracy", title="T")
    assert fig.get_suptitle().startswith("T\n")
    assert [line.get_label() for line in fig.axes[0].lines] == ["a (n=3)", "b (n=1)"]


# --------------------------------------------------------- mode histograms
def _final(hists: dict) -> dict:
    return {"average": {"families": list(hists)},
            "families": {f: {"diversity": {"histogram": h}} for f, h in hists.items()}}


def test_final_mode_histogram_averages_families():
    final = _final({"easy": {"1": 0.5, "2": 0.5}, "hard": {"1": 0.8, "3": 0.2}})
    assert plots.final_mode_histogram(final) == pytest.approx({1: 0.65, 2: 0.25, 3: 0.1})
    with pytest.raises(ValueError, match="final"):
        plots.final_mode_histogram({"average": {}})


def test_mode_histogram_aggregates_over_seeds_and_says_so():
    fig = plots.plot_mode_histogram({"rl": [{1: 0.2, 2: 0.8}, {"1": 0.6, "3": 0.4}], "base": {1: 1.0}},
                                    title="modes")
    ax = fig.axes[0]
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers if isinstance(c, BarContainer)}
    assert bars["rl (n=2)"] == pytest.approx([0.4, 0.4, 0.2])  # a count missing from a seed is 0
    assert bars["base (n=1)"] == pytest.approx([1.0, 0.0, 0.0])
    assert ax.get_title().startswith("modes\n") and "seeds" in ax.get_title()
    segments = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(segments) == 1  # error bars only for the seeded label
    ys = np.concatenate([s[:, 1] for s in segments[0].get_segments()])
    assert ys.min() >= 0.0 and ys.max() <= 1.0  # clipped (t with 1 dof is wide)
    title = plots.plot_mode_histogram({"a": {1: 1.0}, "b": {2: 1.0}}).axes[0].get_title()
    assert "one run" in title
    assert "mean over 3 seeds" in plots.plot_mode_histogram({"a": [{1: 1.0}] * 3}).axes[0].get_title()


# ------------------------------------------------------------------ saving
def test_figure_path_layout(tmp_path, monkeypatch):
    assert plots.figure_path("exp1", "curves", root=tmp_path) == tmp_path / "exp1" / "figures" / "curves.png"
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "env"))
    assert plots.figure_path("exp1", "pass_at_k") == tmp_path / "env" / "exp1" / "figures" / "pass_at_k.png"
    assert not (tmp_path / "exp1").exists()  # the path only; saving creates the folder


def test_plot_saves_a_readable_png_atomically(tmp_path, monkeypatch):
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((os.fspath(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)  # atomic_file (rlvr_lib.files) calls os.replace
    path = plots.figure_path("exp1", "curves", root=tmp_path)
    plots.plot_training_curves(_histories(8, seeds=2), "accuracy", path=path)
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert os.listdir(path.parent) == ["curves.png"]  # no temp file left behind
    assert len(replaced) == 1
    src, dst = replaced[0]
    assert dst == str(path) and os.path.dirname(src) == str(path.parent) and src != dst
    assert (path.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize(
    "call",
    [
        lambda p: plots.plot_pass_at_k({"a": {1: 0.5}}, path=p),
        lambda p: plots.plot_mode_histogram({"a": {1: 0.5}}, path=p),
        lambda p: plots.plot_strategy_freq({"a": {"x": 0.5}}, path=p),
        lambda p: plots.plot_hint_follow({"x": 0.5}, path=p),
    ],
)
def test_every_plot_saves_through_figure_path(tmp_path, call):
    path = plots.figure_path("exp", "fig", root=tmp_path)
    call(path)
    assert path.read_bytes()[:8] == PNG_MAGIC and os.listdir(path.parent) == ["fig.png"]


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = plots.figure_path("exp", "fig", root=tmp_path)
    fig = plots.plot_pass_at_k({"a": {1: 0.5}})
    plots.save_figure(fig, path)
    before = path.read_bytes()

    def broken_savefig(f, **kwargs):
        f.write(b"partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", broken_savefig)
    with pytest.raises(RuntimeError, match="disk full"):
        plots.save_figure(fig, path)
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == ["fig.png"]


# -------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "reward"), r"metrics \['reward'\] not in"),
        (lambda: plots.plot_training_curves({}, "accuracy"), "histories must be a non-empty dict"),
        (lambda: plots.plot_training_curves({"a": []}, "accuracy"), r"histories\['a'\] must be a non-empty list"),
        (lambda: plots.plot_training_curves({"a": [[]]}, "accuracy"), r"histories\['a'\] holds an empty"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, []), "metrics must be"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", bounds=(1, 1)),
         r"^bounds=\(1, 1\) is invalid: must be a pair \(lo, hi\) of numbers with lo < hi"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", bounds=(1, 0)), "bounds"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", bounds=(0, math.nan)), "bounds"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", bounds={"accuracy": (0.5, 0.5)}),
         r"^bounds\['accuracy'\]=\(0.5, 0.5\) is invalid"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", smoothing=("ema", 1.0)),
         r"^smoothing=\('ema', 1.0\) is invalid"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", smoothing=("rolling", 0)),
         "smoothing"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", smoothing=("rolling", 2.5)),
         "smoothing"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", smoothing=0.9), "smoothing"),
        (lambda: plots.plot_training_curves({"a": _history([0.5])}, "accuracy", max_per_panel=7),
         r"^max_per_panel=7 is invalid: must be an integer in \[1, 6\]$"),
        (lambda: plots.plot_training_curves(_histories(2), "accuracy", groups=[["m00"]]),
         r"missing: \['m01'\]"),
        (lambda: plots.plot_training_curves(_histories(2), "accuracy", groups=[["m00", "zz"], ["m01"]]),
         r"unknown: \['zz'\]"),
        (lambda: plots.plot_training_curves(_histories(8), "accuracy", groups=[list(_histories(8))]),
         "at most max_per_panel=6"),
        (lambda: plots.plot_training_curves(_histories(2), "accuracy", reference="zz"), "reference='zz'"),
        (lambda: plots.plot_training_curves(_histories(8), "accuracy", axes=plots.plot_pass_at_k({"a": {1: 1}}).axes),
         r"axes must hold one Axes per \(metric, panel\): 1 metrics x 2 panels = 2, got 1"),
        (lambda: plots.plot_pass_at_k({"a": []}), r"curves\['a'\] must be a non-empty"),
        (lambda: plots.plot_pass_at_k({"a": {1: {"mean": 0.5}}}), r"curves\['a'\]\[1\]"),
        (lambda: plots.plot_pass_at_k({f"m{i}": {1: 0.1} for i in range(7)},
                                      ax=plots.plot_pass_at_k({"a": {1: 1}}).axes[0]),
         "one matplotlib Axes per panel"),
        (lambda: plots.plot_mode_histogram({"a": [{}]}), r"hists\['a'\]"),
        (lambda: plots.figure_path("exp", "curves.png"), r"^name='curves.png' is invalid"),
        (lambda: plots.figure_path("exp", "a/b"), "name"),
        (lambda: plots.figure_path("../up", "x"), "experiment"),
        (lambda: plots.save_figure(plots.plot_pass_at_k({"a": {1: 1}}), "x.notaformat"), r"^path='x.notaformat'"),
    ],
)
def test_bad_inputs_raise_clear_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_strategy_shares_of_many_runs_become_one_stacked_row_each():
    from rlvr_lib.study.plots import MAX_LINES_PER_PANEL, plot_strategy_freq

    n = MAX_LINES_PER_PANEL + 4
    freqs = {f"method_{i}": {"direct": 0.5, "split": 0.3, "round": 0.2 - i / 100} for i in range(n)}
    fig = plot_strategy_freq(freqs, strategies=["direct", "split", "round"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(freqs)
    assert len(ax.patches) == 3 * n
    ends = {round(p.get_y(), 3): p.get_x() + p.get_width() for p in ax.patches}  # stacked: last strategy ends at the sum
    assert ends[round(ax.patches[-1].get_y(), 3)] == pytest.approx(0.8 + 0.2 - (n - 1) / 100)
    assert ax.get_legend() is not None and [t.get_text() for t in ax.get_legend().get_texts()] == ["direct", "split", "round"]
