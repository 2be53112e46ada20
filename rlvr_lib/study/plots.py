"""Figures for the notebooks: pass@k curves, strategy shares, hint following, training curves, reasoning-mode
histograms, and the figures a reader looks for first: the claims forest plot (:func:`plot_claims_forest`), each
arm's paired gain over GRPO (:func:`plot_paired_gain`) and the "when does it help" heatmap
(:func:`plot_when_it_helps`).

Every helper takes plain dicts (what :mod:`rlvr_lib.study.runs` records hold, JSON string keys such as ``"16"``
included), returns the :class:`matplotlib.figure.Figure` and, given ``path``, saves it atomically through
:func:`save_figure` (conventional place: :func:`figure_path`, ``results/<experiment>/figures/<name>.png``). Pass
``ax`` (``axes`` for :func:`plot_training_curves`) to draw into an existing figure.

Shared rules of the figures with many labels: at most :data:`MAX_LINES_PER_PANEL` (6) labels per panel (more are
split over panels, ``split=False`` raises ``ValueError``, ``groups`` chooses panels, ``reference`` is drawn
solid in every panel); one fixed colour per method in every figure and panel (:data:`METHOD_COLORS`,
:func:`method_color`; labels that name no method take seaborn's ``"colorblind"`` colours) and line styles by
position in the panel (:data:`LINESTYLES`); every line in a legend, outside the axes; bands over seeds are Student-t intervals
``mean +- t_{n-1} s / sqrt(n)`` (:func:`rlvr_lib.study.stats.aggregate_seeds`) clipped to
:data:`METRIC_BOUNDS`. A figure is detached from pyplot (``plt.close(fig)``) and never shown here: end a
notebook cell with it to show it once.

The readability rules in full and how display works: docs/study/plots.md.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, MaxNLocator, NullLocator

from rlvr_lib.files import atomic_file
from rlvr_lib.study.stats import aggregate_seeds
from rlvr_lib.validation import check, check_int, check_range, invalid, is_real

__all__ = [
    "oriented_distance",
    "plot_claims_overview",
    "DEFAULT_METRICS",
    "FOREST_KEYS",
    "GUIDE_COLOR",
    "COMPOSITE_SEPARATOR",
    "LINESTYLES",
    "MAX_LINES_PER_PANEL",
    "METHOD_COLORS",
    "METRIC_BOUNDS",
    "OTHER_COLORS",
    "REFERENCE_COLOR",
    "VERDICT_COLORS",
    "figure_path",
    "final_mode_histogram",
    "method_color",
    "plot_claims_forest",
    "plot_hint_follow",
    "plot_grad_norm_vs_length",
    "plot_mode_histogram",
    "plot_paired_gain",
    "plot_pass_at_k",
    "plot_pass_at_k_gap",
    "plot_per_problem_scatter",
    "plot_rank_accuracy",
    "plot_strategy_freq",
    "plot_training_curves",
    "plot_when_it_helps",
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

#: One fixed colour per method (every registered method of :mod:`rlvr_lib.methods` and the base policy), the same in
#: every figure: a paper's variants share its hue in shades (3PO greens, SAGE oranges, BNPO purples, DAPO browns),
#: GRPO's estimator and KL variants are blues, cyans and greys, the base policy is the dark grey reference.
#: tests/test_plots.py holds it complete against the registry and free of repeats.
METHOD_COLORS: dict[str, str] = {
    "base": "#333333",
    "grpo": "#0173b2", "grpo_k1": "#17becf", "grpo_k2": "#08306b", "grpo_k3": "#4a6fe3", "grpo_no_kl": "#949494",
    "grpo_forward_kl": "#a6761d", "dr_grpo": "#56b4e9",
    "nudgerl": "#de8f05",
    "b3po": "#029e73", "m3po": "#66c2a5", "c3po": "#00441b",
    "sage": "#d55e00", "sage_random": "#fdae6b", "sage_token": "#7f2704",
    "vigor": "#cc78bc", "intuitor": "#fb9a99",
    "dapo": "#ca9161", "dapo_branch": "#8c510a",
    "bnpo_beta": "#c2a5cf", "bnpo_loss": "#9970ab", "bnpo_loss_branch": "#762a83",
    "entropy_reg": "#e7298a", "kl_cov": "#8172b3", "clip_cov": "#937860",
    "polaris": "#b15928", "polaris_fixed": "#dfc27d", "pope": "#e6ab02", "oracle_explore": "#bcbd22",
}
#: How a composite's name joins its components (``rlvr_lib.methods.compose.SEPARATOR``).
COMPOSITE_SEPARATOR = "+"
_LABEL_SEPARATORS = "_@ ,:(/"  # what may follow a method's name in an arm label ("grpo-g8", "NudgeRL@8", "grpo, 8")


def _single_method(text: str) -> str | None:
    """The longest method name that ``text`` (lower case, ``-`` read as ``_``) is or starts with, then a separator."""
    text = text.replace("-", "_")
    found = [m for m in METHOD_COLORS if text == m or (text.startswith(m) and text[len(m)] in _LABEL_SEPARATORS)]
    return max(found, key=len) if found else None


def _method_of(label: Any) -> str | None:
    """The method (or ``"a+b"`` composite) an arm label names, or None: see :func:`method_color`."""
    text = str(label).strip().lower()
    if COMPOSITE_SEPARATOR in text:
        head = re.split(r"[@ ,:(/]", text, maxsplit=1)[0]
        parts = [_single_method(part) for part in head.split(COMPOSITE_SEPARATOR)]
        if len(parts) > 1 and all(p is not None and p != "base" for p in parts):
            return COMPOSITE_SEPARATOR.join(parts)
        return None
    return _single_method(text)


def method_color(label: Any) -> str:
    """The fixed colour (hex) of the method an arm label names, from :data:`METHOD_COLORS`.

    A label names a method when, in lower case with ``-`` read as ``_``, it is a method's name or starts with one
    followed by one of ``_ @ space , : ( /`` (the longest name wins): ``"grpo-g8"``, ``"GRPO@8"``, ``"sage-k3"``,
    ``"NudgeRL@8"``, ``"grpo_k2"``, ``"base-wide"``. A composite ``"a+b"`` (``"b3po+vigor"``) has the mean, in RGB,
    of its components' colours: fixed, and between the two.

    Raises:
        ValueError: when the label names no method of :data:`METHOD_COLORS` (nor a composite of two).
    """
    method = _method_of(label)
    if method is None:
        raise invalid("label", label, f"an arm label naming a method (one of {sorted(METHOD_COLORS)}, optionally "
                                      f"followed by one of {list(_LABEL_SEPARATORS)} and more, e.g. 'grpo-g8'), or a "
                                      f"composite 'a{COMPOSITE_SEPARATOR}b' of two")
    parts = method.split(COMPOSITE_SEPARATOR)
    if len(parts) == 1:
        return METHOD_COLORS[method]
    return to_hex(np.mean([to_rgb(METHOD_COLORS[p]) for p in parts], axis=0))


#: Colour of guide lines (a reference slope): a light grey no method has.
GUIDE_COLOR = "0.7"
#: Colours of the labels that name no method in a figure that shows methods (none is a method's colour).
OTHER_COLORS: tuple[str, ...] = ("#a50026", "#313695", "#35978f", "#f46d43", "#5e4fa2", "#01665e")

#: One fixed colour per claims-table verdict (:data:`rlvr_lib.study.claims.tables.VERDICTS`).
VERDICT_COLORS: dict[str, str] = {
    "reproduced": "#009e73", "contradicted": "#d55e00", "unresolved": "#7f7f7f", "not specific": "#e69f00",
    "premise absent": "#b8b8b8",
}


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


def _label_colors(labels: Sequence[Any], *, beside_methods: bool = False) -> dict[Any, Any]:
    """Colour of each label of one figure: a method's label its :func:`method_color`; the other labels (a family,
    a strategy, ``"ivon-no-noise"``) seaborn's ``"colorblind"`` colours in order, or :data:`OTHER_COLORS` (none a
    method's colour) when the figure also shows a method (``beside_methods``: one not among the labels)."""
    out = {label: method_color(label) for label in labels if _method_of(label) is not None}
    spare = iter(OTHER_COLORS if out or beside_methods else _colors(max(len(labels), 1)))
    for label in labels:
        if label not in out:
            out[label] = next(spare, REFERENCE_COLOR)
    return out


def _panel_styles(labels: Sequence[Any], colors: Mapping[Any, Any], reference: Any = None) -> list[tuple[Any, Any]]:
    """(colour, line style) of each label of a panel: its figure colour (``colors``, :func:`_label_colors`) and the
    panel position's style; the reference solid (dark grey unless it is a method)."""
    return [(colors[label] if _method_of(label) is not None else REFERENCE_COLOR, "-") if label == reference
            else (colors[label], LINESTYLES[j % MAX_LINES_PER_PANEL]) for j, label in enumerate(labels)]


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
    colors = _label_colors(list(groups))
    for i, label in enumerate(groups):
        colour = colors[label]
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
    colors = _label_colors(list(per_label))
    for panel_ax, labels in zip(axes, panels):
        for label, (colour, style) in zip(labels, _panel_styles(labels, colors, reference)):
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
    colors = _label_colors(list(per_label))
    for panel_ax, labels in zip(axes, panels):
        width = 0.8 / len(labels)
        for j, (label, (colour, _)) in enumerate(zip(labels, _panel_styles(labels, colors, reference))):
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
    colors = _label_colors(list(runs))
    for r, metric in enumerate(metrics):
        lo, hi = clip[metric] or (-math.inf, math.inf)
        for c, labels in enumerate(panels):
            ax = grid[r, c]
            for label, (colour, style) in zip(labels, _panel_styles(labels, colors, reference)):
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
    colors = _label_colors(list(rows))
    for j, (label, values) in enumerate(rows.items()):
        arr = np.asarray(values, dtype=float)
        check(arr.ndim == 2 and arr.shape[1] >= 2, f"rows[{label!r}]", arr.shape, "a (units, G) array, G >= 2")
        stats = [_mean_interval(arr[:, r], confidence) if len(arr) > 1 else (arr[0, r],) * 3
                 for r in range(arr.shape[1])]
        ranks = np.arange(1, arr.shape[1] + 1)
        colour, style = colors[label], LINESTYLES[j % MAX_LINES_PER_PANEL]
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
    colors = _label_colors(list(profiles))
    for j, (label, profile) in enumerate(profiles.items()):
        table = profile.by_length(bins)
        colour, style = colors[label], LINESTYLES[j % MAX_LINES_PER_PANEL]
        for ax, column in zip(axes, ("||g||", "sqrt(T) ||g||")):
            ax.plot(table["mean T"], table[column], color=colour, linestyle=style, marker="o", label=str(label))
    first = profiles[next(iter(profiles))].by_length(bins)
    t0, g0 = float(first["mean T"].iloc[0]), float(first["||g||"].iloc[0])
    ts = np.array([first["mean T"].min(), first["mean T"].max()])
    axes[0].plot(ts, g0 * (ts / t0) ** -0.5, color=GUIDE_COLOR, linestyle=":", label="slope -1/2")
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
    colors = _label_colors(["base", *runs])
    left.plot(x, [_num(base[k]) for k in ks], color=colors["base"], linestyle="-", marker="o", label="base")
    for i, (label, curve) in enumerate(runs.items()):
        color, style = colors[label], LINESTYLES[(i + 1) % MAX_LINES_PER_PANEL]
        left.plot(x, [_num(curve[k]) for k in ks], color=color, linestyle=style, marker="o", label=str(label))
        right.plot(x, [_num(base[k]) - _num(curve[k]) for k in ks], color=color, linestyle=style, marker="o",
                   label=str(label))
    right.axhline(0.0, color="0.5", linewidth=0.8, label="0: base = run")
    for ax, ylabel in ((left, "pass@k"), (right, "base - run")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(k) for k in x])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("k (log2 scale)")
        ax.set_ylabel(ylabel)
    _legend_outside(right, handles=[*left.lines, right.lines[-1]])  # every line of both panels, the base's too
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
    ax.plot([0, 1], [0, 1], color="0.5", linewidth=0.8, label="diagonal: y = x")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left", fontsize="small")
    return _finish(fig, title, path, ax=None)


# ------------------------------------------------ claims, gains over GRPO, when it helps
FOREST_KEYS = ("notebook", "id", "claim", "paper", "our_effect", "low", "high", "threshold", "verdict")
"""The keys each row of :func:`plot_claims_forest` needs (:func:`rlvr_lib.study.claims.tables.claims_rows` writes
them, with ``expect`` and ``margin``)."""
_SYMLOG_ABOVE = 1.0  # a forest panel whose values reach past +-1 gets a symmetric-log x axis


def _finite(where: str, value: Any) -> float:
    check(is_real(value) and math.isfinite(float(value)), where, value, "a finite number")
    return float(value)


def _interval_ends(where: str, row: Mapping[str, Any], low_key: str, high_key: str) -> tuple[float, float]:
    """``(low, high)`` of a row: both finite with ``low <= high``, or both None / NaN (no interval)."""
    low, high = (math.nan if row[k] is None else row[k] for k in (low_key, high_key))
    ok = is_real(low) and is_real(high) and (
        (math.isnan(float(low)) and math.isnan(float(high)))
        or (math.isfinite(float(low)) and math.isfinite(float(high)) and float(low) <= float(high)))
    check(ok, f"{where}: ({low_key}, {high_key})", (low, high),
          "two finite numbers with low <= high, or both None / NaN (no interval)")
    return float(low), float(high)


def _xerr(effects: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> np.ndarray:
    """Asymmetric error lengths ``[effect - low, high - effect]``; 0 where there is no interval."""
    e, lo, hi = (np.asarray(v, dtype=float) for v in (effects, lows, highs))
    return np.nan_to_num(np.array([e - lo, hi - e]), nan=0.0).clip(min=0.0)


def _check_forest_rows(rows: Any) -> list[dict[str, Any]]:
    from rlvr_lib.study.claims.tables import EXPECTS, VERDICTS

    ok = isinstance(rows, Sequence) and not isinstance(rows, (str, bytes)) and len(rows) > 0
    check(ok, "rows", f"{type(rows).__name__}", f"a non-empty list of dicts with keys {list(FOREST_KEYS)}")
    out = []
    for i, row in enumerate(rows):
        where = f"rows[{i}]"
        check(isinstance(row, Mapping), where, f"{type(row).__name__}", f"a dict with keys {list(FOREST_KEYS)}")
        missing = [k for k in FOREST_KEYS if k not in row]
        check(not missing, f"{where}: keys", sorted(row), f"a dict with {missing} as well")
        check(row["verdict"] in VERDICTS, f"{where}: verdict", row["verdict"], f"one of {list(VERDICTS)}")
        effect = _finite(f"{where}: our_effect", row["our_effect"])
        low, high = _interval_ends(where, row, "low", "high")
        expect, margin = row.get("expect"), row.get("margin")
        check(expect is None or expect in EXPECTS, f"{where}: expect", expect, f"None or one of {list(EXPECTS)}")
        if expect == "within":
            check(is_real(margin) and float(margin) > 0, f"{where}: margin", margin, "a number > 0 (expect='within')")
        out.append({**row, "our_effect": effect, "low": low, "high": high,
                    "threshold": _finite(f"{where}: threshold", row["threshold"]),
                    "margin": float(margin) if expect == "within" else None})
    return out


def _forest_axes(ax: Axes | Sequence[Axes] | None, sizes: Sequence[int]) -> tuple[Figure, list[Axes]]:
    """One Axes per group of a forest, stacked, each as tall as its rows: new, or the caller's (one per group)."""
    if ax is not None:
        return _panel_axes(ax, len(sizes), width=0, height=0)
    with sns.axes_style(_STYLE):
        fig, axes = plt.subplots(len(sizes), 1, figsize=(8.0, 0.24 * sum(sizes) + 0.55 * len(sizes) + 0.8),
                                 squeeze=False, layout="constrained", gridspec_kw={"height_ratios": list(sizes)})
    plt.close(fig)
    return fig, list(axes[:, 0])


def plot_claims_forest(
    rows: Sequence[Mapping[str, Any]],
    ax: Axes | Sequence[Axes] | None = None,
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Claims forest plot: each claim's effect with its 95% interval against its threshold, coloured by verdict.

    One panel per ``notebook`` (in order of first appearance; its title names the notebook and the papers of its
    rows), one row per claim, y tick labels the claim ids. The effect is a dot with a horizontal error bar
    ``[low, high]`` in the :data:`VERDICT_COLORS` colour of its verdict (no bar without an interval), the threshold
    a black ``|`` (an equivalence claim, ``expect="within"``, also has grey ``|`` at ``threshold +- margin``), 0 a
    thin grey line. Effects are in each claim's own units, so each panel has its own x axis: linear, or
    symmetric-log (linear within +-0.05) when one of its values passes +-1. One legend, beside the first panel,
    counts the verdicts over all rows.

    Args:
        rows: ``[{notebook, id, claim, paper, our_effect, low, high, threshold, verdict}, ...]`` (:data:`FOREST_KEYS`;
            optional ``expect`` and ``margin``), e.g. :func:`rlvr_lib.study.claims.tables.claims_rows`; ``low`` and
            ``high`` None or NaN for a claim without an interval.
        ax: One Axes per notebook of ``rows``; a new figure sized to the rows when None.

    Returns:
        The figure.

    Raises:
        ValueError: on no rows, a row missing a key, a verdict not in ``VERDICTS``, a non-finite effect or
            threshold, ``low > high``, one interval end missing, or ``ax`` not one Axes per notebook.
    """
    rows = _check_forest_rows(rows)
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["notebook"], []).append(row)
    fig, axes = _forest_axes(ax, [len(g) for g in groups.values()])
    names = {v: f"{v} ({sum(r['verdict'] == v for r in rows)})" for v in VERDICT_COLORS}
    for panel, (notebook, mine) in zip(axes, groups.items()):
        ys = range(len(mine))
        panel.axvline(0.0, color="0.6", linewidth=0.8, label="0")
        for verdict, colour in VERDICT_COLORS.items():
            these = [(y, r) for y, r in zip(ys, mine) if r["verdict"] == verdict]
            if these:
                effects = [r["our_effect"] for _, r in these]
                panel.errorbar(effects, [y for y, _ in these],
                               xerr=_xerr(effects, [r["low"] for _, r in these], [r["high"] for _, r in these]),
                               fmt="o", markersize=4, color=colour, ecolor=colour, elinewidth=1.6, capsize=2,
                               label=names[verdict], zorder=3)
        panel.plot([r["threshold"] for r in mine], list(ys), linestyle="none", marker="|", markersize=11,
                   markeredgewidth=1.6, color="black", label="threshold", zorder=4)
        within = [(y, r) for y, r in zip(ys, mine) if r.get("margin") is not None]
        if within:
            panel.plot([r["threshold"] + s * r["margin"] for _, r in within for s in (-1, 1)],
                       [y for y, _ in within for _ in (-1, 1)], linestyle="none", marker="|", markersize=11,
                       markeredgewidth=1.2, color="0.45", label="equivalence margin (within)", zorder=4)
        values = [v for r in mine for v in (r["our_effect"], r["low"], r["high"], r["threshold"]) if math.isfinite(v)]
        if max(abs(v) for v in values) > _SYMLOG_ABOVE:
            panel.set_xscale("symlog", linthresh=0.05, linscale=2.0)
            lo, hi = panel.get_xlim()
            ticks = [t for t in (-100, -10, -1, -0.1, 0, 0.1, 1, 10, 100) if lo <= t <= hi]
            panel.set_xticks(ticks, [f"{t:g}" for t in ticks])
            panel.xaxis.set_minor_locator(NullLocator())
        else:  # at most 6 ticks: a narrow range (every effect near 0) otherwise gets labels that run together
            panel.xaxis.set_major_locator(MaxNLocator(nbins=6))
        panel.set_yticks(list(ys), [str(r["id"]) for r in mine], fontsize="small")
        panel.set_ylim(len(mine) - 0.5, -0.5)  # first row on top
        panel.grid(axis="y", visible=False)
        papers = ", ".join(dict.fromkeys(str(r["paper"]) for r in mine))
        panel.set_title(f"{notebook} ({papers})", loc="left", fontsize="medium", fontweight="bold")
    axes[-1].set_xlabel("effect, 95% interval and threshold (each claim's units; a symmetric-log axis is linear "
                        "within +-0.05)")
    handles = {}
    for panel in axes:
        for handle, label in zip(*panel.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    order = [*names.values(), "threshold", "equivalence margin (within)", "0"]
    labels = sorted(handles, key=order.index)
    _legend_outside(axes[0], handles=[handles[lab] for lab in labels], labels=labels, fontsize="small")
    return _finish(fig, title, path)  # the figure's title: each panel's names its notebook


def oriented_distance(row: Mapping[str, Any]) -> tuple[float, float, float]:
    """A claim's distance from its threshold, signed so that positive is the paper's side: ``(point, low, high)``.

    ``expect ">"``: ``effect - threshold``; ``"<"``: ``threshold - effect``; ``"within"`` (margin ``m``):
    ``m - |effect - threshold|``, whose interval is ``[m - max |end - threshold|, m - min |x - threshold|]`` over the
    interval's points ``x`` (0 when the threshold lies inside it). A claim is reproduced exactly when ``low > 0``;
    ``low``/``high`` are NaN without an interval.
    """
    e, lo, hi, t = (float(row[k]) if row[k] is not None else math.nan for k in ("our_effect", "low", "high", "threshold"))
    expect = row.get("expect", ">")
    if expect == ">":
        return e - t, lo - t, hi - t
    if expect == "<":
        return t - e, t - hi, t - lo
    m = float(row["margin"])
    if math.isnan(lo):
        return m - abs(e - t), math.nan, math.nan
    nearest = 0.0 if lo <= t <= hi else min(abs(lo - t), abs(hi - t))
    return m - abs(e - t), m - max(abs(lo - t), abs(hi - t)), m - nearest


def plot_claims_overview(
    rows: Sequence[Mapping[str, Any]],
    title: str | None = None,
    path: str | Path | None = None,
    *,
    ncols: int = 2,
) -> Figure:
    """Every claim at a glance (README's headline figure): one panel per paper, each claim's
    :func:`oriented_distance` from its threshold with its 95% interval, coloured by verdict.

    Right of 0 is the paper's side: an interval wholly right of 0 is ``reproduced``, wholly left ``contradicted``,
    across 0 ``unresolved`` (the verdict colours are the notebooks' own, :data:`VERDICT_COLORS`; ``premise absent``
    rows are drawn hollow, at the distance their interval alone gives). Rows are sorted by distance within a paper,
    without tick labels: the per-notebook forests (:func:`plot_claims_forest`) name each claim. The x axis is
    symmetric-log (linear within +-0.05), since claims are in their own units.

    Args:
        rows: As :func:`plot_claims_forest` (``expect`` and, for ``"within"``, ``margin`` used; ``expect`` ">" when
            absent).
        ncols: Panels per row of the grid.

    Raises:
        ValueError: as :func:`plot_claims_forest`, or ``ncols`` < 1.
    """
    rows = _check_forest_rows(rows)
    if not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be an integer >= 1, got {ncols!r}")
    papers: dict[Any, list[tuple[tuple[float, float, float], dict[str, Any]]]] = {}
    from rlvr_lib.study.claims.tables import PAPER_NAMES

    for row in sorted(rows, key=lambda r: PAPER_NAMES.index(r["paper"]) if r["paper"] in PAPER_NAMES else len(PAPER_NAMES)):
        papers.setdefault(row["paper"], []).append((oriented_distance(row), row))
    nrows = -(-len(papers) // ncols)
    tallest = max(len(v) for v in papers.values())
    fig, grid = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 0.5 + nrows * (0.6 + 0.085 * tallest)),
                             squeeze=False, constrained_layout=True)
    counts = Counter(r["verdict"] for r in rows)
    for panel, (paper, mine) in zip(grid.flat, papers.items()):
        mine.sort(key=lambda dr: dr[0][0])
        panel.axvline(0.0, color="black", linewidth=1.0)
        for verdict, colour in VERDICT_COLORS.items():
            these = [(y, d) for y, (d, r) in enumerate(mine) if r["verdict"] == verdict]
            if not these:
                continue
            points = [d[0] for _, d in these]
            hollow = verdict == "premise absent"
            panel.errorbar(points, [y for y, _ in these],
                           xerr=_xerr(points, [d[1] for _, d in these], [d[2] for _, d in these]),
                           fmt="o", markersize=3.5, color=colour, ecolor=colour, elinewidth=1.2,
                           markerfacecolor="white" if hollow else colour,
                           label=f"{verdict} ({counts[verdict]})", zorder=3)
        panel.set_xscale("symlog", linthresh=0.05, linscale=1.5)
        lo, hi = panel.get_xlim()
        ticks = [t for t in (-100, -10, -1, -0.1, 0, 0.1, 1, 10, 100) if lo <= t <= hi]
        panel.set_xticks(ticks, [f"{t:g}" for t in ticks])
        panel.xaxis.set_minor_locator(NullLocator())
        panel.set_yticks([])
        panel.set_ylim(len(mine) - 0.5, -0.5)
        panel.set_title(f"{paper} ({len(mine)} claims)", loc="left", fontsize="medium", fontweight="bold")
        panel.set_xlabel("distance from the threshold, paper's side > 0", fontsize="small")
    for panel in list(grid.flat)[len(papers):]:
        panel.set_visible(False)
    handles = {}
    for panel in grid.flat:
        for handle, label in zip(*panel.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    order = [f"{v} ({counts[v]})" for v in VERDICT_COLORS]
    labels = sorted(handles, key=order.index)
    fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center", ncols=len(labels),
               fontsize="small", frameon=False)
    return _finish(fig, title, path)


def plot_paired_gain(
    gains: Mapping[str, Mapping[str, float]],
    ax: Axes | None = None,
    title: str | None = None,
    path: str | Path | None = None,
    reference: str = "GRPO",
) -> Figure:
    """Each arm's paired gain over a reference arm (GRPO): a dot and its 95% interval per arm, one row each, 0 (the
    reference) dashed; at most 6 ticks on the gain axis, so that its labels never run into each other.

    Args:
        gains: ``{arm: {"mean", "low", "high"}}``; ``"ci_low"`` / ``"ci_high"`` are read in place of ``"low"`` /
            ``"high"``, so :func:`rlvr_lib.study.stats.paired_difference_ci`'s dicts go in as they are. Arms are
            coloured by :func:`method_color` where they name a method.
        reference: What the gains are over, as the legend and the axis name it (``"GRPO@8"`` for notebook 01's
            group sizes); the 0 line keeps GRPO's colour.

    Raises:
        ValueError: on no arms, an arm without a finite mean, or a bad interval.
    """
    check(isinstance(gains, Mapping) and len(gains) > 0, "gains", f"{type(gains).__name__}",
          "a non-empty dict {arm: {'mean', 'low', 'high'}}")
    parsed = {}
    for arm, gain in gains.items():
        where = f"gains[{arm!r}]"
        check(isinstance(gain, Mapping) and "mean" in gain, where, gain,
              "a dict with 'mean' and 'low', 'high' (or 'ci_low', 'ci_high')")
        keys = ("low", "high") if "low" in gain or "high" in gain else ("ci_low", "ci_high")
        check(all(k in gain for k in keys), where, gain,
              "a dict with 'mean' and 'low', 'high' (or 'ci_low', 'ci_high')")
        parsed[arm] = (_finite(f"{where}: mean", gain["mean"]), *_interval_ends(where, gain, *keys))
    # the arm names stand twice beside the axes (tick labels, legend): widen with them, so the axes keep ~4 inches
    longest = max(len(str(a)) for a in (*parsed, f"{reference} (0)"))
    fig, ax = _target_axes(ax, width=max(6.0, 4.5 + 0.15 * longest), height=0.4 * len(parsed) + 1.3)
    colors = _label_colors(list(parsed), beside_methods=True)  # GRPO's colour is the 0 line's
    ax.axvline(0.0, color=METHOD_COLORS["grpo"], linestyle="--", linewidth=1.0, label=f"{reference} (0)")
    for j, (arm, (mean, low, high)) in enumerate(parsed.items()):
        ax.errorbar([mean], [j], xerr=_xerr([mean], [low], [high]), fmt="o", markersize=6, color=colors[arm],
                    elinewidth=2, capsize=3, label=str(arm))
    ax.set_yticks(range(len(parsed)), [str(a) for a in parsed])
    ax.set_ylim(len(parsed) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(f"paired gain over {reference} (mean, 95% interval)")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
    _legend_outside(ax, fontsize="small")
    return _finish(fig, title, path, ax)


def _map_frame(table: Any) -> tuple[Any, dict[str, str]]:
    """``(rows of run, bucket, problems, mean, ci_low, ci_high; words)`` of a gain map, from either form."""
    import pandas as pd

    need = ["run", "bucket", "mean", "ci_low", "ci_high"]
    if isinstance(table, pd.DataFrame):
        missing = [c for c in need if c not in table.columns]
        check(not missing, "table", f"DataFrame with columns {list(table.columns)}",
              f"head_to_head.gain_map's frame: columns {need} (missing {missing})")
        return table, {}
    ok = isinstance(table, Mapping) and isinstance(table.get("runs"), Mapping) and table["runs"]
    check(ok, "table", f"{type(table).__name__}",
          "head_to_head.gain_map's DataFrame or head_to_head.find_map's dict (with a non-empty 'runs')")
    frame = pd.DataFrame([{"run": run, **b} for run, buckets in table["runs"].items() for b in buckets])
    missing = [c for c in need if c not in frame.columns]
    check(not missing, "table['runs']", f"buckets with keys {list(frame.columns)}", f"buckets with {need}")
    return frame, {k: str(table[k]) for k in ("metric", "property") if k in table}


def plot_when_it_helps(
    table: Any,
    ax: Axes | None = None,
    title: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """The "when does it help" map as a heatmap: one row per comparison, one column per bucket, cell = mean gain.

    Diverging colours centred at 0 (seaborn's ``"vlag"``: blue below, red above, symmetric range); each cell
    annotated ``+mean`` and ``[low, high]``, bold where the whole 95% interval excludes 0 (the bucket *helps* or
    *hurts*); empty cells (a bucket a row lacks) blank. Row labels take the colour of the method their arm names
    (:func:`method_color`, the text before ``" vs "``); column labels carry the bucket's problem count.

    Args:
        table: :func:`rlvr_lib.study.head_to_head.gain_map` / ``comparison_map``'s DataFrame (``run``, ``bucket``,
            ``mean``, ``ci_low``, ``ci_high``, optional ``problems``), or the dict
            :func:`rlvr_lib.study.head_to_head.find_map` reads back from a notebook (``runs``, ``metric``,
            ``property``).

    Raises:
        ValueError: on another input, missing columns, a non-finite mean, or a bad interval.
    """
    frame, words = _map_frame(table)
    runs = list(dict.fromkeys(frame["run"]))
    buckets = list(dict.fromkeys(frame["bucket"]))
    check(runs, "table", "no rows", "a map with at least one (run, bucket) cell")
    means = np.full((len(runs), len(buckets)), np.nan)
    cells: dict[tuple[int, int], tuple[float, float, float]] = {}
    problems: dict[str, set] = {b: set() for b in buckets}
    for _, r in frame.iterrows():
        i, j = runs.index(r["run"]), buckets.index(r["bucket"])
        where = f"table: run {r['run']!r}, bucket {r['bucket']!r}"
        check((i, j) not in cells, where, "twice", "one cell per (run, bucket)")
        mean = _finite(f"{where}: mean", r["mean"])
        cells[i, j] = (mean, *_interval_ends(where, r, "ci_low", "ci_high"))
        means[i, j] = mean
        if "problems" in r and r["problems"] is not None and not _missing(r["problems"]):
            problems[r["bucket"]].add(int(r["problems"]))
    vmax = float(np.nanmax(np.abs(means))) or 1e-9
    fig, ax = _target_axes(ax, width=1.7 * len(buckets) + 3.5, height=0.55 * len(runs) + 1.6)
    gain = f"{words['metric']} gain" if "metric" in words else "gain"  # a DataFrame names no metric
    sns.heatmap(means, ax=ax, cmap="vlag", center=0.0, vmin=-vmax, vmax=vmax, mask=np.isnan(means),
                linewidths=0.5, linecolor="white", cbar_kws={"label": f"{gain} over the comparator"})
    for (i, j), (mean, low, high) in cells.items():
        excludes = low > 0 or high < 0
        ax.text(j + 0.5, i + 0.5, f"{mean:+.3f}\n[{low:.3f}, {high:.3f}]" if math.isfinite(low) else f"{mean:+.3f}",
                ha="center", va="center", fontsize="x-small", fontweight="bold" if excludes else "normal",
                color="white" if abs(mean) > 0.6 * vmax else "black")
    ax.set_xticks(np.arange(len(buckets)) + 0.5,
                  [f"{b}\n({problems[b].pop()} problems)" if len(problems[b]) == 1 else str(b) for b in buckets],
                  rotation=0)
    ax.set_yticks(np.arange(len(runs)) + 0.5, [str(r) for r in runs], rotation=0)
    for label, run in zip(ax.get_yticklabels(), runs):
        arm = str(run).split(" vs ")[0]
        if _method_of(arm) is not None:
            label.set_color(method_color(arm))
    ax.set_xlabel(f"bucket of {words['property']}" if "property" in words else "bucket")
    note = "cell: mean gain [95% interval]; bold: the interval excludes 0 (helps above, hurts below)"
    return _finish(fig, _join_title(title, note), path, ax)


def _missing(value: Any) -> bool:
    """True for None and NaN (a DataFrame's missing cell)."""
    return value is None or (is_real(value) and math.isnan(float(value)))
