"""Figures for the notebooks: pass@k curves, strategy shares, hint following, training curves and reasoning-mode
histograms.

Every helper takes plain dicts (what :mod:`rlvr_lib.study.runs` records hold, JSON string keys such as ``"16"``
included), returns the :class:`matplotlib.figure.Figure` and, given ``path``, saves it atomically through
:func:`save_figure` (conventional place: :func:`figure_path`, ``results/<experiment>/figures/<name>.png``). Pass
``ax`` (``axes`` for :func:`plot_training_curves`) to draw into an existing figure.

Shared rules of the figures with many labels: at most :data:`MAX_LINES_PER_PANEL` (6) labels per panel (more are
split over panels, ``split=False`` raises ``ValueError``, ``groups`` chooses panels, ``reference`` is drawn
dark grey in every panel); seaborn's ``"colorblind"`` palette with distinct line styles (:data:`LINESTYLES`);
legends outside the axes; bands over seeds are Student-t intervals
``mean +- t_{n-1} s / sqrt(n)`` (:func:`rlvr_lib.study.stats.aggregate_seeds`) clipped to
:data:`METRIC_BOUNDS`. A figure is detached from pyplot (``plt.close(fig)``) and never shown here: end a
notebook cell with it to show it once.

The readability rules in full and how display works: docs/study/plots.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, NullLocator

from rlvr_lib.files import atomic_file
from rlvr_lib.study.stats import aggregate_seeds
from rlvr_lib.validation import check, check_int, check_range, invalid, is_real

__all__ = [
    "DEFAULT_METRICS",
    "LINESTYLES",
    "MAX_LINES_PER_PANEL",
    "METRIC_BOUNDS",
    "REFERENCE_COLOR",
    "figure_path",
    "final_mode_histogram",
    "plot_hint_follow",
    "plot_grad_norm_vs_length",
    "plot_mode_histogram",
    "plot_pass_at_k",
    "plot_rank_accuracy",
    "plot_strategy_freq",
    "plot_training_curves",
    "save_figure",
]

DEFAULT_METRICS = ("accuracy", "entropy", "zero_adv_frac")
MAX_LINES_PER_PANEL = 6
#: One line style per position in a panel: solid, dashed, dash-dot, dotted,
#: dash-dot-dot and long dash -- six patterns that stay apart in print and grey.
LINESTYLES: tuple = ("-", "--", "-.", ":", (0, (6, 1.5, 1, 1.5, 1, 1.5)), (0, (10, 3)))
#: Valid range of the trainer's step metrics, used to clip bands when
#: ``bounds`` is not given. Unlisted metrics are not clipped. ``reward_mean``
#: is not listed: INTUITOR's self-certainty reward is not a rate.
METRIC_BOUNDS: dict[str, tuple[float, float]] = {
    **{m: (0.0, 1.0) for m in (
        "accuracy", "zero_adv_frac", "malformed_rate", "truncated_rate", "clip_frac_high", "clip_frac_low",
    )},
    **{m: (0.0, math.inf) for m in ("entropy", "response_length", "grad_norm", "advantage_abs_mean")},
    "reward_acc_corr": (-1.0, 1.0),
}
PASS_AT_K_BOUNDS = (0.0, 1.0)
#: Colour of the ``reference`` label (e.g. ``"base"``), drawn solid in every panel.
REFERENCE_COLOR = "0.2"
_STYLE = "whitegrid"
_PALETTE = "colorblind"


# ------------------------------------------------------------------ saving
def figure_path(experiment: str, name: str, root: str | Path | None = None) -> Path:
    """Returns ``<results root>/<experiment>/figures/<name>.png`` (the folder is created on save).

    ``name``: file-name safe (letters, digits and ``. _ + = @ -``, not starting with a symbol, no ``.png``).

    Raises:
        ValueError: if ``experiment`` or ``name`` is not file-name safe.
    """
    from rlvr_lib.study.runs import NAME_RE, run_dir

    check(
        isinstance(name, str) and NAME_RE.match(name) and not name.lower().endswith(".png"), "name", name,
        "a file-name-safe figure name without extension (letters, digits and . _ + = @ -, not starting with a symbol)",
    )
    return run_dir(experiment, root) / "figures" / f"{name}.png"


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 150) -> Path:
    """Saves ``fig`` to ``path`` atomically (temporary file + ``os.replace``), creating parent folders; returns the
    path.

    Raises:
        ValueError: if ``fig`` is not a matplotlib Figure or the suffix is not a format matplotlib writes.
    """
    if not isinstance(fig, Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".png")
    fmt = path.suffix[1:].lower()
    formats = fig.canvas.get_supported_filetypes()
    check(fmt in formats, "path", str(path), f"a file name ending in one of {sorted('.' + f for f in formats)}")
    check_int("dpi", dpi, 1)
    with atomic_file(path, "wb", permissions=0o644) as f:
        fig.savefig(f, format=fmt, dpi=dpi, bbox_inches="tight")
    return path


# ------------------------------------------------------------------ helpers
def _new_figure(ncols: int = 1, *, width: float = 5.0, height: float = 3.5, nrows: int = 1,
                sharey: bool | str = False) -> tuple[Figure, np.ndarray]:
    """New ``nrows x ncols`` figure (constrained layout), detached from pyplot (see module docstring)."""
    with sns.axes_style(_STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                                 layout="constrained", sharey=sharey)
    plt.close(fig)
    return fig, axes


def _target_axes(ax: Axes | None, **size: float) -> tuple[Figure, Axes]:
    if ax is None:
        fig, axes = _new_figure(**size)
        return fig, axes[0, 0]
    if not isinstance(ax, Axes):
        raise ValueError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax.figure, ax


def _panel_axes(ax: Axes | Sequence[Axes] | None, n_panels: int, *, width: float, height: float,
                sharey: bool = True) -> tuple[Figure, list[Axes]]:
    """One Axes per panel: a new one-row figure, or the caller's Axes (one, or one per panel)."""
    if ax is None:
        fig, axes = _new_figure(n_panels, width=width, height=height, sharey=sharey)
        return fig, list(axes[0])
    given = [ax] if isinstance(ax, Axes) else list(ax) if isinstance(ax, Sequence) else None
    if given is None or len(given) != n_panels or not all(isinstance(a, Axes) for a in given):
        raise ValueError(
            f"ax must be None or hold one matplotlib Axes per panel ({n_panels} panels needed), got {ax!r:.80}"
        )
    return given[0].figure, given


def _finish(fig: Figure, title: str | None, path: str | Path | None, ax: Axes | None = None) -> Figure:
    if title:
        (ax.set_title if ax is not None else fig.suptitle)(title)
    if path is not None:
        save_figure(fig, path)
    return fig


def _colors(n: int) -> list:
    return sns.color_palette(_PALETTE, n)


def _style(panel: int, pos: int) -> tuple[Any, Any]:
    """(colour, line style) of the ``pos``-th label of panel ``panel``: no pair repeats across up to six panels."""
    n = MAX_LINES_PER_PANEL
    return _colors(n)[pos], LINESTYLES[(pos + panel) % n]


def _panel_styles(panel: int, labels: Sequence[Any], reference: Any = None) -> list[tuple[Any, Any]]:
    """(colour, line style) of each label of a panel; the reference is dark grey and solid."""
    return [(REFERENCE_COLOR, "-") if label == reference else _style(panel, j) for j, label in enumerate(labels)]


def _legend_outside(ax: Axes, **kwargs: Any) -> None:
    """Legend to the right of ``ax``, outside its box (constrained layout makes room)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, **kwargs)


def _split_labels(
    labels: Sequence[Any], max_per_panel: int, split: bool, groups: Sequence[Sequence[Any]] | None,
    reference: Any = None,
) -> list[list[Any]]:
    """Labels per panel: ``groups``, one panel, or near-equal chunks; ``reference`` first in every panel."""
    check_int("max_per_panel", max_per_panel, 1, MAX_LINES_PER_PANEL)
    if reference is not None:
        check(reference in labels, "reference", reference, f"None or one of the labels {list(labels)}")
        check(max_per_panel >= 2, "max_per_panel", max_per_panel, "an integer >= 2 when a reference is drawn")
        if groups is not None and not isinstance(groups, (str, bytes, Mapping)) and isinstance(groups, Sequence):
            groups = [[reference, *(g for g in group if g != reference)]
                      if isinstance(group, Sequence) and not isinstance(group, (str, bytes)) and group else group
                      for group in groups]
        else:
            rest = [lab for lab in labels if lab != reference]
            if not rest:
                return [[reference]]
            return [[reference, *chunk] for chunk in _split_labels(rest, max_per_panel - 1, split, None)]
    if groups is not None:
        if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Sequence) or not groups:
            raise invalid("groups", groups, "None or a non-empty list of non-empty lists of labels")
        out = []
        for i, group in enumerate(groups):
            if isinstance(group, (str, bytes, Mapping)) or not isinstance(group, Sequence) or not group:
                raise invalid(f"groups[{i}]", group, "a non-empty list of labels")
            group = list(group)
            unknown = [g for g in group if g not in labels]
            check(not unknown, f"groups[{i}]", group,
                  f"a list of known labels (unknown: {unknown}; known: {list(labels)})")
            check(len(set(group)) == len(group), f"groups[{i}]", group, "a list without repeated labels")
            check(len(group) <= max_per_panel, f"groups[{i}]", group,
                  f"a list of at most max_per_panel={max_per_panel} labels")
            out.append(group)
        missing = [lab for lab in labels if not any(lab in g for g in out)]
        check(not missing, "groups", groups, f"a grouping that places every label (missing: {missing})")
        return out
    labels = list(labels)
    if len(labels) <= max_per_panel:
        return [labels]
    if not split:
        raise ValueError(
            f"{len(labels)} labels do not fit one panel of at most {max_per_panel} lines (max_per_panel, less one "
            f"for a reference) and split=False; pass split=True (several panels), groups=[[...], ...], or fewer "
            f"labels"
        )
    n_panels = math.ceil(len(labels) / max_per_panel)
    base, extra = divmod(len(labels), n_panels)
    out, start = [], 0
    for i in range(n_panels):
        size = base + (i < extra)
        out.append(labels[start:start + size])
        start += size
    return out


def _seed_note(counts: Mapping[Any, int], what: str, band: str | None) -> tuple[dict[Any, str], str]:
    """Legend labels and a title line saying over how many seeds ``what`` is taken."""
    ns = set(counts.values())
    if len(ns) == 1:
        n = ns.pop()
        names = {label: str(label) for label in counts}
        note = f"{what}: one run" if n == 1 else f"{what}: mean over {n} seeds"
    else:
        names = {label: f"{label} (n={n})" for label, n in counts.items()}
        note = f"{what}: mean over the seeds of each label (n in the legend)"
    if band and any(n > 1 for n in counts.values()):
        note += f"; {band}"
    return names, note


def _join_title(title: str | None, note: str) -> str:
    return f"{title}\n{note}" if title else note


def _check_nested(name: str, value: Any) -> None:
    """``value`` must be a non-empty ``{label: non-empty mapping}``."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{name} must be a non-empty dict {{label: {{key: value}}}}, got {value!r}")
    for label, inner in value.items():
        if not isinstance(inner, Mapping) or not inner:
            raise ValueError(f"{name}[{label!r}] must be a non-empty dict, got {inner!r}")


def _check_per_seed(name: str, value: Any) -> dict[Any, list[Mapping]]:
    """``{label: mapping | [mapping per seed]}`` -> ``{label: [mapping per seed]}``, all non-empty."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(
            f"{name} must be a non-empty dict {{label: {{key: value}}}} or {{label: [{{key: value}}, ...]}} "
            f"(one dict per seed), got {value!r:.80}"
        )
    out = {}
    for label, inner in value.items():
        seeds = [inner] if isinstance(inner, Mapping) else inner
        if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
            raise ValueError(f"{name}[{label!r}] must be a non-empty dict or a non-empty list of dicts, "
                             f"got {inner!r:.80}")
        for s in seeds:
            if not isinstance(s, Mapping) or not s:
                raise ValueError(f"{name}[{label!r}] must be a non-empty dict or a list of non-empty dicts, "
                                 f"got {s!r:.80}")
        out[label] = list(seeds)
    return out


def _int_key(name: str, label: Any, key: Any, what: str) -> int:
    """Positive integer from an int or an int-like string (JSON keys are strings)."""
    try:
        k = int(key)
    except (TypeError, ValueError):
        k = None
    ok = k is not None and not isinstance(key, bool) and k >= 1 and not (isinstance(key, float) and key != k)
    check(ok, f"{name}[{label!r}]: {what}", key, "a positive integer")
    return k


def _num(value: Any) -> float:
    """Float, with ``None`` (a JSON-stored NaN) read as NaN."""
    return math.nan if value is None else float(value)


def _check_bounds(name: str, bounds: Any) -> tuple[float, float]:
    """``(lo, hi)`` of real numbers (infinities allowed) with ``lo < hi``."""
    ok = (
        isinstance(bounds, Sequence) and not isinstance(bounds, (str, bytes)) and len(bounds) == 2
        and all(is_real(b) and not math.isnan(float(b)) for b in bounds) and float(bounds[0]) < float(bounds[1])
    )
    check(ok, name, bounds, "a pair (lo, hi) of numbers with lo < hi (infinities allowed), or None")
    return float(bounds[0]), float(bounds[1])


def _mean_interval(values: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """Mean and Student-t interval over seeds (:func:`~rlvr_lib.study.stats.aggregate_seeds`)."""
    a = aggregate_seeds(list(values), confidence)
    return a["mean"], a["ci_low"], a["ci_high"]


def _grouped_bars(ax: Axes, groups: Mapping[Any, Mapping[Any, float]], categories: Sequence[Any]) -> None:
    """One bar per (group, category), groups side by side within each category; missing -> 0."""
    n = len(groups)
    width = 0.8 / n
    x = np.arange(len(categories))
    for i, (label, colour) in enumerate(zip(groups, _colors(n))):
        heights = [_num(groups[label].get(c, 0.0)) for c in categories]
        ax.bar(x + (i - (n - 1) / 2) * width, heights, width=width, color=colour, label=str(label))
    ax.set_xticks(x, [str(c) for c in categories])
    if n > 1:
        ax.legend(frameon=False)


# ----------------------------------------------------------------- pass@k
def _pass_at_k_points(label: Any, seeds: list[Mapping], confidence: float) -> tuple[list[tuple], bool]:
    """Sorted ``(k, mean, low, high)`` of one label and whether it has an interval (per-seed lists: Student-t)."""
    if len(seeds) == 1:
        points, has_band = [], False
        for k, v in seeds[0].items():
            k = _int_key("curves", label, k, "k")
            if isinstance(v, Mapping):
                ok = all(key in v and is_real(v[key]) for key in ("mean", "ci_low", "ci_high"))
                check(ok, f"curves[{label!r}][{k}]", v, "a number or a dict with numbers mean, ci_low, ci_high")
                points.append((k, float(v["mean"]), float(v["ci_low"]), float(v["ci_high"])))
                has_band = True
            else:
                m = _num(v)
                points.append((k, m, m, m))
        return sorted(points), has_band
    by_k: dict[int, list[float]] = {}
    for seed in seeds:
        for k, v in seed.items():
            k = _int_key("curves", label, k, "k")
            check(not isinstance(v, Mapping), f"curves[{label!r}][{k}]", v, "a number in a per-seed curve")
            if v is not None and math.isfinite(float(v)):
                by_k.setdefault(k, []).append(float(v))
    points = [(k, *_mean_interval(vs, confidence)) for k, vs in sorted(by_k.items())]
    check(points, f"curves[{label!r}]", seeds, "a list of per-seed curves with at least one finite value")
    return points, True


def plot_pass_at_k(
    curves: Mapping[str, Any],
    title: str | None = None,
    ax: Axes | Sequence[Axes] | None = None,
    path: str | Path | None = None,
    *,
    confidence: float = 0.95,
    max_per_panel: int = MAX_LINES_PER_PANEL,
    split: bool = True,
    groups: Sequence[Sequence[str]] | None = None,
    reference: str | None = None,
) -> Figure:
    """pass@k against k (log2 axis), one line per label, with intervals clipped to [0, 1].

    A label's value is ``{k: pass@k}`` (no interval), ``{k: {"mean", "ci_low", "ci_high"}}``, or a list of per-seed
    ``{k: pass@k}`` (mean and Student-t band); ``k`` may be an int-like string.

    Args:
        curves: ``{label: curve}``.
        ax: Axes to draw into, one per panel; a new figure when None.
        max_per_panel, split, groups, reference: The panel rules of the module docstring.

    Raises:
        ValueError: on empty curves, a bad ``k`` or interval, labels that do not fit with ``split`` False, or
            ``ax`` not one Axes per panel.
    """
    per_label = _check_per_seed("curves", curves)
    check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    panels = _split_labels(list(per_label), max_per_panel, split, groups, reference)
    points = {label: _pass_at_k_points(label, seeds, confidence) for label, seeds in per_label.items()}
    fig, axes = _panel_axes(ax, len(panels), width=6.0, height=3.6)
    lo, hi = PASS_AT_K_BOUNDS
    counts = {label: len(seeds) for label, seeds in per_label.items()}
    names, note = _seed_note(counts, "lines", f"bands: {confidence:.0%} Student-t interval over seeds")
    if any(band for _, band in points.values()) and all(n == 1 for n in counts.values()):
        note = "bands: the given intervals"
    all_k = sorted({p[0] for pts, _ in points.values() for p in pts})
    for i, (panel_ax, labels) in enumerate(zip(axes, panels)):
        for label, (colour, style) in zip(labels, _panel_styles(i, labels, reference)):
            pts, has_band = points[label]
            ks, mean, low, high = (np.array(v, dtype=float) for v in zip(*pts))
            panel_ax.plot(ks, mean, marker="o", markersize=4, color=colour, linestyle=style, label=names[label])
            if has_band:
                panel_ax.fill_between(ks, np.clip(low, lo, hi), np.clip(high, lo, hi), color=colour, alpha=0.15,
                                      linewidth=0)
        panel_ax.set_xscale("log", base=2)
        panel_ax.set_xticks(all_k, [str(k) for k in all_k])
        panel_ax.xaxis.set_minor_locator(NullLocator())
        panel_ax.set_xlabel("k (log2 scale)")
        panel_ax.set_ylabel("pass@k")
        _legend_outside(panel_ax)
    full_title = _join_title(title, note) if len(per_label) > 1 or any(b for _, b in points.values()) else title
    return _finish(fig, full_title, path, axes[0] if len(axes) == 1 else None)


# ------------------------------------------------------ strategy shares, hints
def plot_strategy_freq(
    freqs: Mapping[str, Mapping[str, float]],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
    strategies: Sequence[str] | None = None,
) -> Figure:
    """Strategy shares: grouped bars (``len(freqs) * len(strategies)``), or one stacked bar per label past
    :data:`MAX_LINES_PER_PANEL` labels.

    Args:
        freqs: ``{label: {strategy: share}}``; a missing strategy counts as 0.
        strategies: Order on x; default first appearance.

    Raises:
        ValueError: if ``freqs`` is empty or holds an empty dict, or ``strategies`` is empty.
    """
    _check_nested("freqs", freqs)
    if strategies is None:
        strategies = list(dict.fromkeys(s for shares in freqs.values() for s in shares))
    elif not strategies:
        raise ValueError("strategies must be None or a non-empty list of strategy names")
    if len(freqs) <= MAX_LINES_PER_PANEL:
        fig, ax = _target_axes(ax)
        _grouped_bars(ax, freqs, list(strategies))
        ax.set_xlabel("strategy")
        ax.set_ylabel("share")
        ax.set_ylim(bottom=0.0)
        return _finish(fig, title, path, ax)
    # Many labels: one stacked horizontal bar per label, so every label keeps a readable row.
    fig, ax = _target_axes(ax, width=6.0, height=max(3.5, 0.3 * len(freqs) + 1.0))
    labels = list(freqs)
    left = np.zeros(len(labels))
    for strategy, colour in zip(strategies, _colors(len(strategies))):
        widths = np.array([_num(freqs[label].get(strategy, 0.0)) for label in labels])
        ax.barh(np.arange(len(labels)), widths, left=left, color=colour, label=str(strategy))
        left += widths
    ax.set_yticks(np.arange(len(labels)), [str(label) for label in labels])
    ax.invert_yaxis()
    ax.set_xlabel("share")
    ax.set_xlim(0.0, max(1.0, float(left.max())))
    _legend_outside(ax, title="strategy")
    return _finish(fig, title, path, ax)


def plot_hint_follow(
    follow: Mapping[str, float],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
    target: float | None = None,
) -> Figure:
    """Bar chart of the hint-follow rate per hinted strategy (``{strategy: rate}``), dashed line at ``target``.

    Raises:
        ValueError: if ``follow`` is empty or ``target`` is outside [0, 1].
    """
    if not isinstance(follow, Mapping) or not follow:
        raise ValueError(f"follow must be a non-empty dict {{strategy: rate}}, got {follow!r}")
    if target is not None:
        check_range("target", target, 0, 1)
    fig, ax = _target_axes(ax)
    names = [str(s) for s in follow]
    ax.bar(names, [_num(v) for v in follow.values()], color=_colors(len(names)))
    if target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g}")
        ax.legend(frameon=False, loc="upper right")
    ax.set_xlabel("hinted strategy")
    ax.set_ylabel("hint-follow rate")
    ax.set_ylim(0.0, 1.15)  # headroom above rate 1 for the legend
    ax.set_yticks(np.linspace(0.0, 1.0, 6))
    return _finish(fig, title, path, ax)


# ------------------------------------------------------- reasoning modes
def final_mode_histogram(final: Mapping[str, Any]) -> dict[int, float]:
    """Mode histogram of one run's ``final``, averaged over its families: ``{n_modes: mean fraction}`` (missing: 0).

    Raises:
        ValueError: if ``final`` lacks ``average.families`` or a family's ``diversity.histogram``.
    """
    try:
        fams = list(final["average"]["families"])
        hists = [final["families"][f]["diversity"]["histogram"] for f in fams]
    except (KeyError, TypeError) as e:
        raise ValueError(
            "final must be a run record's evaluation with average.families and "
            f"families[f].diversity.histogram; missing {e}"
        ) from None
    check(fams, "final['average']['families']", fams, "a non-empty list of families")
    parsed = [{_int_key("histogram", f, n, "n_modes"): _num(v) for n, v in h.items()} for f, h in zip(fams, hists)]
    counts = sorted({n for h in parsed for n in h})
    return {n: float(np.mean([h.get(n, 0.0) for h in parsed])) for n in counts}


def plot_mode_histogram(
    hists: Mapping[str, Any],
    title: str | None = None,
    ax: Axes | Sequence[Axes] | None = None,
    path: str | Path | None = None,
    *,
    confidence: float = 0.95,
    max_per_panel: int = MAX_LINES_PER_PANEL,
    split: bool = True,
    groups: Sequence[Sequence[str]] | None = None,
    reference: str | None = None,
) -> Figure:
    """Fraction of problems with 1, 2, ... distinct reasoning modes (NudgeRL Fig. 1).

    A label's value is one histogram ``{n_modes: fraction}`` or a list per seed (mean, missing counts as 0, with a
    Student-t error bar clipped to [0, 1]).

    Args:
        hists: ``{label: histogram or [histogram per seed]}``.
        max_per_panel, split, groups, reference: The panel rules of the module docstring.

    Raises:
        ValueError: on an empty input, a bad ``n_modes``, labels that do not fit with ``split`` False, or ``ax``
            not one Axes per panel.
    """
    per_label = _check_per_seed("hists", hists)
    check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    parsed = {
        label: [{_int_key("hists", label, n, "n_modes"): _num(v) for n, v in h.items()} for h in seeds]
        for label, seeds in per_label.items()
    }
    counts = sorted({n for seeds in parsed.values() for h in seeds for n in h})
    stats = {
        label: np.array([_mean_interval([h.get(n, 0.0) for h in seeds], confidence) for n in counts]).T
        for label, seeds in parsed.items()
    }
    panels = _split_labels(list(per_label), max_per_panel, split, groups, reference)
    fig, axes = _panel_axes(ax, len(panels), width=5.5, height=3.5)
    names, note = _seed_note({lab: len(s) for lab, s in parsed.items()}, "bars",
                             f"error bars: {confidence:.0%} Student-t interval over seeds")
    x = np.arange(len(counts))
    for i, (panel_ax, labels) in enumerate(zip(axes, panels)):
        width = 0.8 / len(labels)
        for j, (label, (colour, _)) in enumerate(zip(labels, _panel_styles(i, labels, reference))):
            mean, low, high = stats[label]
            yerr = None
            if len(parsed[label]) > 1:
                yerr = np.array([mean - np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0) - mean])
            panel_ax.bar(x + (j - (len(labels) - 1) / 2) * width, mean, width=width, color=colour,
                         label=names[label], yerr=yerr, capsize=2 if yerr is not None else 0)
        panel_ax.set_xticks(x, [str(c) for c in counts])
        panel_ax.set_xlabel("number of reasoning modes")
        panel_ax.set_ylabel("fraction of problems")
        panel_ax.set_ylim(bottom=0.0)
        _legend_outside(panel_ax)
    return _finish(fig, _join_title(title, note), path, axes[0] if len(axes) == 1 else None)


# --------------------------------------------------------- training curves
def _as_runs(label: Any, history: Any) -> list[Sequence[Mapping]]:
    """A history of one run (``[dict]``) or of seeds (``[[dict]]``) -> list of runs."""
    if isinstance(history, (str, bytes, Mapping)) or not isinstance(history, Sequence) or not history:
        raise ValueError(
            f"histories[{label!r}] must be a non-empty list of step dicts or a list of such lists (one per seed)"
        )
    runs = [history] if isinstance(history[0], Mapping) else list(history)
    for run in runs:
        if isinstance(run, (str, bytes, Mapping)) or not isinstance(run, Sequence) or not run:
            raise ValueError(f"histories[{label!r}] holds an empty or malformed run: {run!r:.80}")
        if not all(isinstance(row, Mapping) for row in run):
            raise ValueError(f"histories[{label!r}] mixes step dicts and other values")
    return runs


def _series(label: Any, run: Sequence[Mapping], metric: str, x: str) -> dict[float, float]:
    """``{x: value}`` of one run; rows without the metric or with a non-finite value are skipped."""
    out = {}
    for row in run:
        if x not in row:
            raise ValueError(f"histories[{label!r}] has a row without {x!r}: {dict(row)!r:.120}")
        value = row.get(metric)
        if value is not None and math.isfinite(float(value)):
            out[float(row[x])] = float(value)
    return out


def _smoother(smoothing: Any) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """``(function on a run's values in x order, its name for the plot)``."""
    if smoothing is None:
        return (lambda v: v), "no smoothing"
    must = "None, ('ema', alpha) with alpha in (0, 1), or ('rolling', window) with an integer window >= 1"
    ok = isinstance(smoothing, (tuple, list)) and len(smoothing) == 2 and smoothing[0] in ("ema", "rolling")
    check(ok, "smoothing", smoothing, must)
    kind, param = smoothing
    if kind == "ema":
        check(is_real(param) and 0 < float(param) < 1, "smoothing", smoothing, must)
        alpha = float(param)

        def ema(v: np.ndarray) -> np.ndarray:
            out = np.empty_like(v)
            acc = v[0]
            for i, value in enumerate(v):
                acc = alpha * acc + (1 - alpha) * value
                out[i] = acc
            return out

        return ema, f"EMA {alpha:g}"
    check(not isinstance(param, bool) and isinstance(param, (int, np.integer)) and param >= 1, "smoothing",
          smoothing, must)
    window = int(param)

    def rolling(v: np.ndarray) -> np.ndarray:
        csum = np.concatenate([[0.0], np.cumsum(v)])
        idx = np.arange(1, len(v) + 1)
        start = np.maximum(idx - window, 0)
        return (csum[idx] - csum[start]) / (idx - start)

    return rolling, f"rolling mean over {window} logged steps"


def _smoothed_band(series: list[dict[float, float]], smooth: Callable, confidence: float) -> tuple[np.ndarray, ...]:
    """Each run smoothed in x order, then per-x mean and Student-t interval over the runs that have the x."""
    smoothed = []
    for s in series:
        xs = sorted(s)
        smoothed.append(dict(zip(xs, smooth(np.array([s[x] for x in xs], dtype=float))) if xs else {}))
    xs = sorted(set().union(*smoothed))
    rows = [_mean_interval([s[x] for s in smoothed if x in s], confidence) for x in xs]
    if not rows:
        return tuple(np.array([]) for _ in range(4))
    return (np.array(xs), *(np.array(col) for col in zip(*rows)))


def _resolve_bounds(bounds: Any, metrics: Sequence[str]) -> dict[str, tuple[float, float] | None]:
    """Per-metric ``(lo, hi)`` or None (no clipping); see :func:`plot_training_curves`."""
    if bounds is None:
        return {m: METRIC_BOUNDS.get(m) for m in metrics}
    if isinstance(bounds, Mapping):
        out = {}
        for m in metrics:
            b = bounds[m] if m in bounds else METRIC_BOUNDS.get(m)
            out[m] = None if b is None else _check_bounds(f"bounds[{m!r}]", b)
        return out
    b = _check_bounds("bounds", bounds)
    return {m: b for m in metrics}


def plot_training_curves(
    histories: Mapping[str, Sequence[Mapping] | Sequence[Sequence[Mapping]]],
    metrics: str | Sequence[str] = DEFAULT_METRICS,
    title: str | None = None,
    axes: Sequence[Axes] | None = None,
    path: str | Path | None = None,
    confidence: float = 0.95,
    x: str = "step",
    *,
    smoothing: tuple[str, float] | None = None,
    bounds: tuple[float, float] | Mapping[str, tuple[float, float] | None] | None = None,
    max_per_panel: int = MAX_LINES_PER_PANEL,
    split: bool = True,
    groups: Sequence[Sequence[str]] | None = None,
    reference: str | None = None,
) -> Figure:
    """Training metrics against step: one row per metric, one column per group of at most ``max_per_panel`` labels.

    A label with several seeds is the per-step mean with a Student-t band (as
    :func:`rlvr_lib.study.stats.aggregate_seeds`) clipped to the metric's range; rows without the metric are
    skipped; y axes shared along a row.

    Args:
        histories: ``{label: history or [history per seed]}`` (the trainer's per-step dicts).
        metrics: A step-dict key, or several (one row each).
        axes: One per (metric, panel), row-major; a new figure when None.
        smoothing: ``None``, ``("ema", alpha)`` -- ``s_t = alpha * s_{t-1} + (1 - alpha) * v_t`` -- or
            ``("rolling", w)`` -- trailing mean of the last ``w`` logged values; applied per seed first.
        bounds: ``None`` (:data:`METRIC_BOUNDS`), a ``(lo, hi)`` for all, or ``{metric: (lo, hi) or None}``.
        max_per_panel, split, groups, reference: The panel rules of the module docstring.

    Returns:
        The figure (``len(metrics) * n_panels`` axes).

    Raises:
        ValueError: on empty or malformed inputs, a row lacking ``x``, a missing metric, a bad bound or smoothing,
            labels that do not fit with ``split`` False, or ``axes`` of the wrong count.
    """
    if not isinstance(histories, Mapping) or not histories:
        raise ValueError(f"histories must be a non-empty dict {{label: history}}, got {histories!r:.80}")
    if isinstance(metrics, str):
        metrics = (metrics,)
    if not isinstance(metrics, Sequence) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise ValueError(f"metrics must be a metric name or a non-empty list of metric names, got {metrics!r}")
    metrics = list(metrics)
    check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    smooth, smooth_name = _smoother(smoothing)
    clip = _resolve_bounds(bounds, metrics)
    runs = {label: _as_runs(label, h) for label, h in histories.items()}
    for label, label_runs in runs.items():
        keys = set().union(*(row.keys() for run in label_runs for row in run))
        missing = [m for m in metrics if m not in keys]
        if missing:
            raise ValueError(f"metrics {missing} not in histories[{label!r}]; it has {sorted(keys)}")
    panels = _split_labels(list(runs), max_per_panel, split, groups, reference)

    n_rows, n_cols = len(metrics), len(panels)
    if axes is None:
        fig, grid = _new_figure(n_cols, nrows=n_rows, width=6.2, height=3.0, sharey="row")
    else:
        axes = list(axes)
        if len(axes) != n_rows * n_cols or not all(isinstance(a, Axes) for a in axes):
            raise ValueError(
                f"axes must hold one Axes per (metric, panel): {n_rows} metrics x {n_cols} panels = "
                f"{n_rows * n_cols}, got {len(axes)}"
            )
        fig = axes[0].figure
        grid = np.array(axes, dtype=object).reshape(n_rows, n_cols)

    names, note = _seed_note({lab: len(r) for lab, r in runs.items()}, "lines",
                             f"bands: {confidence:.0%} Student-t interval over seeds")
    for r, metric in enumerate(metrics):
        lo, hi = clip[metric] or (-math.inf, math.inf)
        for c, labels in enumerate(panels):
            ax = grid[r, c]
            for label, (colour, style) in zip(labels, _panel_styles(c, labels, reference)):
                xs, mean, low, high = _smoothed_band([_series(label, run, metric, x) for run in runs[label]], smooth,
                                                     confidence)
                ax.plot(xs, mean, color=colour, linestyle=style, linewidth=1.4, label=names[label])
                if len(runs[label]) > 1:
                    ax.fill_between(xs, np.clip(low, lo, hi), np.clip(high, lo, hi), color=colour, alpha=0.15,
                                    linewidth=0)
            ax.set_xlabel(x)
            ax.set_ylabel(metric)
            ax.set_title(f"{metric} ({smooth_name})", fontsize="medium")
            if r == 0:
                _legend_outside(ax)
    return _finish(fig, _join_title(title, note), path)


# ----------------------------------------------------------------- VIGOR
def plot_rank_accuracy(
    rows: Mapping[str, Any],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
    confidence: float = 0.95,
) -> Figure:
    """Accuracy of the completion at each reward rank (VIGOR's rank-vs-accuracy figure).

    Args:
        rows: ``{label: (units, G) array}`` of correctness at ranks 1..G; Student-t band over units.

    Raises:
        ValueError: on no labels, too many, or a label whose array is not 2-D with >= 2 ranks.
    """
    check(isinstance(rows, Mapping) and 0 < len(rows) <= MAX_LINES_PER_PANEL, "rows", f"{type(rows).__name__}",
          f"a dict of 1 to {MAX_LINES_PER_PANEL} labels")
    fig, ax = _target_axes(ax)
    for j, (label, values) in enumerate(rows.items()):
        arr = np.asarray(values, dtype=float)
        check(arr.ndim == 2 and arr.shape[1] >= 2, f"rows[{label!r}]", arr.shape, "a (units, G) array, G >= 2")
        stats = [_mean_interval(arr[:, r], confidence) if len(arr) > 1 else (arr[0, r],) * 3
                 for r in range(arr.shape[1])]
        ranks = np.arange(1, arr.shape[1] + 1)
        colour, style = _style(0, j)
        ax.plot(ranks, [m for m, _, _ in stats], color=colour, linestyle=style, marker="o", label=f"{label} (n={len(arr)})")
        ax.fill_between(ranks, np.clip([lo for _, lo, _ in stats], 0, 1), np.clip([hi for _, _, hi in stats], 0, 1),
                        color=colour, alpha=0.15, linewidth=0)
    ax.set_xticks(np.arange(1, max(np.asarray(v).shape[1] for v in rows.values()) + 1))
    ax.set_xlabel("rank by reward within the group (1 = best)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0.0, 1.0)
    _legend_outside(ax)
    return _finish(fig, _join_title(title, f"bands: {confidence:.0%} Student-t interval over units"), path, ax)


def plot_grad_norm_vs_length(
    profiles: Mapping[str, Any],
    title: str | None = None,
    path: str | Path | None = None,
    bins: int = 8,
) -> Figure:
    """``||g||`` and ``sqrt(T) ||g||`` against completion length T, log-log (VIGOR's length figure).

    Per label, completions binned by length quantiles (`GradNormProfile.by_length`), with a reference slope -1/2
    (``||g|| ~ T^-1/2``).
    """
    check(isinstance(profiles, Mapping) and 0 < len(profiles) <= MAX_LINES_PER_PANEL, "profiles",
          f"{type(profiles).__name__}", f"a dict of 1 to {MAX_LINES_PER_PANEL} labels")
    for label, profile in profiles.items():
        check(hasattr(profile, "by_length"), f"profiles[{label!r}]", type(profile).__name__, "a GradNormProfile")
    fig, axes = _panel_axes(None, 2, width=4.5, height=3.5, sharey=False)
    for j, (label, profile) in enumerate(profiles.items()):
        table = profile.by_length(bins)
        colour, style = _style(0, j)
        for ax, column in zip(axes, ("||g||", "sqrt(T) ||g||")):
            ax.plot(table["mean T"], table[column], color=colour, linestyle=style, marker="o", label=str(label))
    first = profiles[next(iter(profiles))].by_length(bins)
    t0, g0 = float(first["mean T"].iloc[0]), float(first["||g||"].iloc[0])
    ts = np.array([first["mean T"].min(), first["mean T"].max()])
    axes[0].plot(ts, g0 * (ts / t0) ** -0.5, color=REFERENCE_COLOR, linestyle=":", label="slope -1/2")
    for ax, column in zip(axes, ("||g||", "sqrt(T) ||g||")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers (20, 30), not 2 x 10^1; minor labels thinned by range
            axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
            axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.6)))
        ax.set_xlabel("completion length T (tokens, bin mean)")
        ax.set_ylabel(column)
        ax.set_title(f"{column} (mean per length bin)", fontsize="medium")
    axes[0].legend(handles=axes[0].lines[-1:], frameon=False, fontsize="small")  # the guide
    _legend_outside(axes[1])
    return _finish(fig, title, path)


def plot_pass_at_k_gap(
    base: Mapping[Any, float],
    runs: Mapping[Any, Mapping[Any, float]],
    *,
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """pass@k of the base and of each run (left), and base minus run (right): the crossover of RLVR.

    ``base`` is ``{k: pass@k}``; ``runs`` maps a label to its curve on the same ks. Where the right
    panel crosses 0 from below, the base policy catches up with the run (Yue et al., 2025).
    """
    ks = sorted(base, key=lambda k: int(k))
    for label, curve in runs.items():
        if sorted(curve, key=lambda k: int(k)) != ks:
            raise ValueError(f"runs[{label!r}] is not valid: must be a curve on the base curve's ks {ks}")
    fig, axes = _new_figure(2, width=5.0, height=3.5)
    left, right = axes[0]
    x = [int(k) for k in ks]
    left.plot(x, [_num(base[k]) for k in ks], color="0.25", linestyle="-", marker="o", label="base")
    for i, (label, curve) in enumerate(runs.items()):
        color, style = _style(0, i)
        left.plot(x, [_num(curve[k]) for k in ks], color=color, linestyle=style, marker="o", label=str(label))
        right.plot(x, [_num(base[k]) - _num(curve[k]) for k in ks], color=color, linestyle=style, marker="o",
                   label=str(label))
    right.axhline(0.0, color="0.5", linewidth=0.8)
    for ax, ylabel in ((left, "pass@k"), (right, "base - run")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel(ylabel)
    _legend_outside(right)
    return _finish(fig, title, path)


def plot_per_problem_scatter(
    x: Sequence[float],
    y: Sequence[float],
    *,
    xlabel: str = "base",
    ylabel: str = "run",
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """One point per problem (e.g. pass@256 of the base against a run's), with the diagonal.

    Points below the diagonal are problems the run does worse on; the counts of points strictly
    below and above it are in the legend.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"x, y are not valid: must be two 1-D sequences of equal, non-zero length "
                         f"(got shapes {x.shape} and {y.shape})")
    fig, ax = _target_axes(None, width=4.5, height=4.5)
    below, above = int((y < x).sum()), int((y > x).sum())
    ax.scatter(x, y, s=14, alpha=0.6, color=_colors(1)[0], label=f"{below} below, {above} above the diagonal")
    ax.plot([0, 1], [0, 1], color="0.5", linewidth=0.8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left", fontsize="small")
    return _finish(fig, title, path, ax=None)
