"""Figures for the notebooks: pass@k curves, strategy shares, hint following,
training curves and reasoning-mode histograms.

Every helper takes plain dicts (what :mod:`rlvr_lib.experiments` records hold,
JSON string keys such as ``"16"`` included), returns the
:class:`matplotlib.figure.Figure` and, given ``path``, also saves it (parent
folders are created). Pass ``ax`` (``axes`` for :func:`plot_training_curves`)
to draw into an existing figure instead of a new one.

Display: a new figure is created through pyplot -- which is what switches on
Jupyter's inline backend -- and then detached from pyplot with
``plt.close(fig)``. So nothing is shown twice, no figure piles up in a loop,
and nothing here calls ``plt.show()`` (safe under ``Agg``). In a notebook, end
the cell with the returned figure (or call ``display(fig)``) to show it once.

Styling uses seaborn's ``whitegrid`` axes style (as a context, so global
``rcParams`` are left alone) and its colour-blind palette.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from rlvr_lib.validation import check, check_range

__all__ = [
    "plot_hint_follow",
    "plot_mode_histogram",
    "plot_pass_at_k",
    "plot_strategy_freq",
    "plot_training_curves",
    "save_figure",
]

DEFAULT_METRICS = ("reward_mean", "entropy", "zero_adv_frac")
_STYLE = "whitegrid"
_PALETTE = "colorblind"


# ------------------------------------------------------------------ helpers
def save_figure(fig: Figure, path: str | Path, *, dpi: int = 150) -> Path:
    """Saves ``fig`` to ``path``, creating parent folders.

    Args:
        fig: The figure.
        path: Output file; the suffix picks the format (``.png`` when there is
            none).
        dpi: Resolution for raster formats.

    Returns:
        The path written.

    Raises:
        ValueError: if ``fig`` is not a matplotlib Figure.
    """
    if not isinstance(fig, Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def _new_figure(ncols: int = 1, *, width: float = 5.0, height: float = 3.5) -> tuple[Figure, list[Axes]]:
    """New figure with ``ncols`` axes in one row, detached from pyplot (see module docstring)."""
    with sns.axes_style(_STYLE):
        fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False, layout="constrained")
    plt.close(fig)
    return fig, list(axes[0])


def _target_axes(ax: Axes | None, **size: float) -> tuple[Figure, Axes]:
    if ax is None:
        fig, axes = _new_figure(**size)
        return fig, axes[0]
    if not isinstance(ax, Axes):
        raise ValueError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax.figure, ax


def _finish(fig: Figure, title: str | None, path: str | Path | None, ax: Axes | None = None) -> Figure:
    if title:
        (ax.set_title if ax is not None else fig.suptitle)(title)
    if path is not None:
        save_figure(fig, path)
    return fig


def _colors(n: int) -> list:
    return sns.color_palette(_PALETTE, n)


def _check_nested(name: str, value: Any) -> None:
    """``value`` must be a non-empty ``{label: non-empty mapping}``."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{name} must be a non-empty dict {{label: {{key: value}}}}, got {value!r}")
    for label, inner in value.items():
        if not isinstance(inner, Mapping) or not inner:
            raise ValueError(f"{name}[{label!r}] must be a non-empty dict, got {inner!r}")


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
def plot_pass_at_k(
    curves: Mapping[str, Mapping[int, float]],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
) -> Figure:
    """pass@k against k (log2 axis), one line per label.

    Args:
        curves: ``{label: {k: pass@k}}``, e.g. one label per family or per
            method, or ``"before"``/``"after"``. ``k`` may be an int or an
            int-like string.
        title: Axes title.
        ax: Axes to draw into; a new figure when None.
        path: Also save the figure there.

    Returns:
        The figure.

    Raises:
        ValueError: if ``curves`` is empty, holds an empty curve or a ``k``
            that is not a positive integer.
    """
    _check_nested("curves", curves)
    fig, ax = _target_axes(ax)
    all_k: set[int] = set()
    for (label, curve), colour in zip(curves.items(), _colors(len(curves))):
        points = sorted((_int_key("curves", label, k, "k"), _num(v)) for k, v in curve.items())
        ks, values = zip(*points)
        all_k.update(ks)
        ax.plot(ks, values, marker="o", color=colour, label=str(label))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_k), [str(k) for k in sorted(all_k)])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(bottom=0.0)
    ax.legend(frameon=False)
    return _finish(fig, title, path, ax)


# ------------------------------------------------------ strategy shares, hints
def plot_strategy_freq(
    freqs: Mapping[str, Mapping[str, float]],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
    strategies: Sequence[str] | None = None,
) -> Figure:
    """Grouped bar chart of strategy shares: strategies on x, one bar per label.

    Args:
        freqs: ``{label: {strategy: share}}``; a strategy missing from a label
            counts as share 0.
        title: Axes title.
        ax: Axes to draw into; a new figure when None.
        path: Also save the figure there.
        strategies: Order of the strategies on x; default: order of first
            appearance in ``freqs``.

    Returns:
        The figure (``len(freqs) * len(strategies)`` bars).

    Raises:
        ValueError: if ``freqs`` is empty or holds an empty dict, or
            ``strategies`` is empty.
    """
    _check_nested("freqs", freqs)
    if strategies is None:
        strategies = list(dict.fromkeys(s for shares in freqs.values() for s in shares))
    elif not strategies:
        raise ValueError("strategies must be None or a non-empty list of strategy names")
    fig, ax = _target_axes(ax)
    _grouped_bars(ax, freqs, list(strategies))
    ax.set_xlabel("strategy")
    ax.set_ylabel("share")
    ax.set_ylim(bottom=0.0)
    return _finish(fig, title, path, ax)


def plot_hint_follow(
    follow: Mapping[str, float],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
    target: float | None = None,
) -> Figure:
    """Bar chart of the hint-follow rate per hinted strategy.

    Args:
        follow: ``{strategy: rate}``, the share of hinted samples that used
            the hinted strategy.
        title: Axes title.
        ax: Axes to draw into; a new figure when None.
        path: Also save the figure there.
        target: Draw a dashed horizontal line at this rate (the testbed's
            calibration asks for 0.8); no line when None.

    Returns:
        The figure (one bar per strategy, one line when ``target`` is set).

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


def plot_mode_histogram(
    hists: Mapping[str, Mapping[int, float]],
    title: str | None = None,
    ax: Axes | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Fraction of problems with 1, 2, ... distinct reasoning modes (NudgeRL Fig. 1).

    Args:
        hists: ``{label: {n_modes: fraction of problems}}``; ``n_modes`` may
            be an int or an int-like string. A count missing from a label is
            drawn as 0.
        title: Axes title.
        ax: Axes to draw into; a new figure when None.
        path: Also save the figure there.

    Returns:
        The figure (``len(hists)`` bars per mode count present in any label).

    Raises:
        ValueError: if ``hists`` is empty, holds an empty dict or an
            ``n_modes`` that is not a positive integer.
    """
    _check_nested("hists", hists)
    groups = {
        label: {_int_key("hists", label, n, "n_modes"): v for n, v in hist.items()} for label, hist in hists.items()
    }
    counts = sorted({n for hist in groups.values() for n in hist})
    fig, ax = _target_axes(ax)
    _grouped_bars(ax, groups, counts)
    ax.set_xlabel("number of reasoning modes")
    ax.set_ylabel("fraction of problems")
    ax.set_ylim(bottom=0.0)
    return _finish(fig, title, path, ax)


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


def _mean_band(series: list[dict[float, float]], confidence: float) -> tuple[np.ndarray, ...]:
    """Per-x mean and Student-t interval over runs (interval = mean where one run has the x)."""
    from .experiments import aggregate_seeds

    xs = sorted(set().union(*series))
    aggs = [aggregate_seeds([s[x] for s in series if x in s], confidence) for x in xs]
    return tuple(np.array(v) for v in (xs, [a["mean"] for a in aggs], [a["ci_low"] for a in aggs],
                                       [a["ci_high"] for a in aggs]))


def plot_training_curves(
    histories: Mapping[str, Sequence[Mapping] | Sequence[Sequence[Mapping]]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    title: str | None = None,
    axes: Sequence[Axes] | None = None,
    path: str | Path | None = None,
    confidence: float = 0.95,
    x: str = "step",
) -> Figure:
    """Training metrics against step: one subplot per metric, one line per label.

    A label with several seeds is drawn as the per-step mean with a shaded
    Student-t confidence band (the same formula as
    :func:`rlvr_lib.experiments.aggregate_seeds`). Rows lacking a metric or
    holding ``None``/NaN for it are skipped, so metrics logged every few
    steps work.

    Args:
        histories: ``{label: history}`` where a history is the trainer's list
            of per-step dicts (one run) or a list of such lists (one per seed).
        metrics: Keys of the step dicts to plot, one subplot each.
        title: Figure title.
        axes: One Axes per metric to draw into; a new figure when None.
        path: Also save the figure there.
        confidence: Level of the band, in (0, 1).
        x: Key of the x value in each step dict.

    Returns:
        The figure (``len(metrics)`` axes, ``len(histories)`` lines each).

    Raises:
        ValueError: if ``histories`` or ``metrics`` is empty or malformed, a
            row lacks ``x``, a metric is absent from a label's history, or
            ``axes`` does not hold one Axes per metric.
    """
    if not isinstance(histories, Mapping) or not histories:
        raise ValueError(f"histories must be a non-empty dict {{label: history}}, got {histories!r:.80}")
    if isinstance(metrics, str) or not metrics:
        raise ValueError(f"metrics must be a non-empty list of metric names, got {metrics!r}")
    check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    runs = {label: _as_runs(label, h) for label, h in histories.items()}
    for label, label_runs in runs.items():
        keys = set().union(*(row.keys() for run in label_runs for row in run))
        missing = [m for m in metrics if m not in keys]
        if missing:
            raise ValueError(f"metrics {missing} not in histories[{label!r}]; it has {sorted(keys)}")

    if axes is None:
        fig, axes = _new_figure(len(metrics), width=4.2, height=3.2)
    else:
        axes = list(axes)
        if len(axes) != len(metrics) or not all(isinstance(a, Axes) for a in axes):
            raise ValueError(f"axes must hold one Axes per metric ({len(metrics)}), got {len(axes)}")
        fig = axes[0].figure

    colours = _colors(len(runs))
    for ax, metric in zip(axes, metrics):
        for (label, label_runs), colour in zip(runs.items(), colours):
            xs, mean, low, high = _mean_band([_series(label, r, metric, x) for r in label_runs], confidence)
            ax.plot(xs, mean, color=colour, label=str(label))
            if len(label_runs) > 1:
                ax.fill_between(xs, low, high, color=colour, alpha=0.2, linewidth=0)
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.set_title(metric)
    axes[0].legend(frameon=False)
    return _finish(fig, title, path)
