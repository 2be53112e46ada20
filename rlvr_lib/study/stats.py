"""Every interval of the study, paired comparisons, rescued / lost problems: one home.

* :func:`bootstrap_ci` -- percentile bootstrap over a 1-D sample (seeds), clipped to the metric's range.
* :func:`hierarchical_bootstrap_ci` -- seeds x problems bootstrap of the mean of an ``(S, P)`` score matrix.
* :func:`paired_difference_ci` -- ``mean(A) - mean(B)`` on the same problems: each side's seeds resampled
  independently, the problems jointly.
* :func:`rescued_lost_counts`, :func:`rescued_lost_null` -- per-problem solved / rescued / lost against a
  reference, and what resampling alone produces.
* :func:`strategy_shares`, :func:`per_problem_scores`, :func:`eval_counts` -- shares with intervals, the
  ``(S, P)`` matrices and count vectors from stored evaluations.
* :func:`aggregate_seeds` -- mean and Student-t interval ``mean +- t_{n-1} s / sqrt(n)`` over seeds.

Every interval is a dict with at least ``{"mean", "ci_low", "ci_high", "n", "method"}`` (:func:`format_ci`,
:func:`has_interval`); resampling uses ``np.random.default_rng(seed)``. Coverage with 3 seeds, and why not a
t-interval for everything: docs/study/stats.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from rlvr_lib.study.runs import jsonable
from rlvr_lib.validation import check_choice, check_int, check_range, invalid

__all__ = [
    "PASSK_INTERVAL",
    "RANGES",
    "SEED_INTERVAL",
    "STATISTICS",
    "aggregate_seeds",
    "bootstrap_ci",
    "eval_counts",
    "format_ci",
    "has_interval",
    "hierarchical_bootstrap_ci",
    "paired_difference_ci",
    "passk_ci",
    "per_problem_scores",
    "rescued_lost_counts",
    "rescued_lost_null",
    "seed_ci",
    "seed_counts",
    "strategy_shares",
]

STATISTICS = ("mean", "median")
"""Statistics :func:`bootstrap_ci` can bootstrap."""

# The interval methods of passk_ci and seed_ci, named in tables.
PASSK_INTERVAL = "percentile bootstrap over seeds x problems"
SEED_INTERVAL = "percentile bootstrap over seeds"
# Per-seed metrics that are rates: their intervals are checked against and clipped to [0, 1].
RANGES = {key: (0.0, 1.0) for key in ("malformed_rate", "wrong_rate", "zero_adv_frac", "accuracy")}

_BLOCK = 1 << 22  # elements per resampling block: bounds memory at ~32 MB of float64


# ------------------------------------------------------------------ checks
class _Shown(str):
    """A description shown as is (no quotes) where an error message shows a value's ``repr``."""

    def __repr__(self) -> str:
        return str(self)


def _short(arr: np.ndarray) -> Any:
    """A value to show in an error message: the list when small, else a shape summary."""
    if arr.size <= 12:
        return arr.tolist()
    return _Shown(f"<array of shape {arr.shape}>")


def _as_float_array(name: str, values: Any, ndim: int) -> np.ndarray:
    """Validates a non-empty ``ndim``-D array of finite real numbers (``None`` rejected) and returns it as float64."""
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu().numpy()
    if ndim == 1 and np.ndim(values) == 0:
        values = [values]
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        shown = values if not isinstance(values, np.ndarray) else _short(values)
        raise invalid(name, shown, f"a {ndim}-D array of finite numbers (got non-numeric or ragged entries)") from None
    what = "a non-empty 1-D sequence of finite numbers" if ndim == 1 else \
        f"a {ndim}-D array of finite numbers with at least one entry along each axis"
    if arr.ndim != ndim:
        raise invalid(name, _short(arr), f"{what} (got {arr.ndim}-D, shape {arr.shape})")
    if arr.size == 0:
        raise invalid(name, _short(arr), f"{what} (got an empty array, shape {arr.shape})")
    bad = ~np.isfinite(arr)
    if bad.any():
        where = np.argwhere(bad)[:5].tolist() if ndim > 1 else np.flatnonzero(bad)[:5].tolist()
        raise invalid(name, _short(arr), f"{what} (got NaN, inf or None at index {where}); filter them explicitly")
    return arr


def _check_bounds(name: str, bounds: Any, arr: np.ndarray) -> Optional[tuple[float, float]]:
    """Validates ``bounds = (lo, hi)`` (``lo < hi``, finite) and that every value lies within."""
    if bounds is None:
        return None
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise invalid("bounds", bounds, "None or a pair (lo, hi) of finite numbers with lo < hi") from None
    lo = check_range("bounds[0]", lo)
    hi = check_range("bounds[1]", hi)
    if not lo < hi:
        raise invalid("bounds", bounds, "None or a pair (lo, hi) of finite numbers with lo < hi")
    if arr.min() < lo or arr.max() > hi:
        raise invalid(name, _short(arr),
                      f"values within bounds=({lo:g}, {hi:g}) (got min {arr.min():g}, max {arr.max():g}); "
                      "widen or drop bounds if the metric is not a rate")
    return lo, hi


def _check_common(confidence: Any, n_resamples: Any, seed: Any) -> tuple[float, int, int]:
    confidence = check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    n_resamples = check_int("n_resamples", n_resamples, 1)
    seed = check_int("seed", seed, 0)
    return confidence, n_resamples, seed


def _percentile(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    lo, hi = np.quantile(stats, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def _clip(lo: float, hi: float, bounds: Optional[tuple[float, float]]) -> tuple[float, float]:
    if bounds is None:
        return lo, hi
    return float(np.clip(lo, *bounds)), float(np.clip(hi, *bounds))


# ----------------------------------------------------------- interval dicts
def has_interval(agg: Mapping[str, Any]) -> bool:
    """Whether an interval dict carries an interval: ``n >= 2`` seeds or ``n_problems >= 2`` problems resampled."""
    return int(agg.get("n", 1)) >= 2 or int(agg.get("n_problems", 1)) >= 2


def format_ci(agg: Mapping[str, Any], fmt: str = ".3f") -> str:
    """Formats an interval dict as ``"mean [lo, hi]"``, or ``"mean (n=1)"`` without an interval."""
    if not has_interval(agg):
        return f"{agg['mean']:{fmt}} (n={agg.get('n', 1)})"
    return f"{agg['mean']:{fmt}} [{agg['ci_low']:{fmt}}, {agg['ci_high']:{fmt}}]"


# --------------------------------------------------------------- intervals
def bootstrap_ci(
    values: Any,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    bounds: Optional[tuple[float, float]] = None,
    statistic: str = "mean",
) -> dict[str, Any]:
    """Percentile bootstrap interval of the mean (or median) over a 1-D sample, e.g. seeds.

    ``B`` resamples ``x*_b`` of ``x`` with replacement, ``T_b = statistic(x*_b)``::

        [ci_low, ci_high] = [q_{(1-confidence)/2}(T), q_{(1+confidence)/2}(T)]

    clipped to ``bounds``. Too narrow with few values (docs/study/stats.md).

    Args:
        values: ``(n,)`` finite numbers (one per seed).
        bounds: ``(lo, hi)`` range of the metric; every value must lie in it.
        statistic: ``"mean"`` or ``"median"`` (:data:`STATISTICS`).

    Returns:
        ``{"mean", "ci_low", "ci_high", "n", "std", "se", "method"}``; ``mean`` is the statistic's value, ``se``
        the std of the ``B`` statistics; with ``n == 1`` no interval.

    Raises:
        ValueError: on bad ``values``, values outside ``bounds``, or a bad ``confidence`` / ``n_resamples`` /
            ``statistic``.
    """
    x = _as_float_array("values", values, 1)
    confidence, n_resamples, seed = _check_common(confidence, n_resamples, seed)
    bounds = _check_bounds("values", bounds, x)
    check_choice("statistic", statistic, STATISTICS)
    fn = np.mean if statistic == "mean" else np.median
    n = x.size
    point = float(np.clip(fn(x), x.min(), x.max()))  # a mean lies in the data's range; drop rounding noise
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    if n == 1:
        return {"mean": point, "ci_low": point, "ci_high": point, "n": 1, "std": 0.0, "se": 0.0,
                "method": "single value: no interval (n=1)"}
    rng = np.random.default_rng(seed)
    stats = np.empty(n_resamples)
    block = max(1, _BLOCK // n)
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        stats[start:stop] = fn(x[idx], axis=1)
    np.clip(stats, x.min(), x.max(), out=stats)  # a mean/median of a resample lies in the data's range
    lo, hi = _clip(*_percentile(stats, confidence), bounds)
    of = "" if statistic == "mean" else " of the median"
    return {"mean": point, "ci_low": lo, "ci_high": hi, "n": int(n), "std": std, "se": float(stats.std()),
            "method": f"percentile bootstrap{of} over seeds (B={n_resamples})"}


def aggregate_seeds(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean and Student-t interval over per-seed values: ``half = t_{(1+confidence)/2, n-1} * s / sqrt(n)`` (ddof=1).

    For unbounded metrics and curves; for rates use the bootstraps (docs/study/stats.md). With ``n == 1`` no
    interval.

    Returns:
        ``{"mean", "ci_low", "ci_high", "n", "std", "method"}``.

    Raises:
        ValueError: if ``values`` is empty or holds a non-finite value or ``None``.
    """
    from scipy import stats

    check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    xs = jsonable(values)
    xs = [xs] if not isinstance(xs, list) else xs
    if not xs:
        raise ValueError("aggregate_seeds: no values")
    bad = [v for v in xs if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)]
    if bad:
        raise ValueError(f"aggregate_seeds: non-finite or non-numeric values {bad!r} in {xs!r}; filter them explicitly")
    n = len(xs)
    mean = math.fsum(xs) / n
    if n == 1:
        return {"mean": mean, "ci_low": mean, "ci_high": mean, "n": 1, "std": 0.0,
                "method": "single value: no interval (n=1)"}
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * std / math.sqrt(n)
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n, "std": std,
            "method": "Student-t over seeds"}


def _weights(rng: np.random.Generator, size: int, count: int) -> np.ndarray:
    """``(count, size)`` bootstrap weights, row ``b`` = ``multinomial(size, 1/size) / size`` (via one ``bincount``)."""
    idx = rng.integers(0, size, size=(count, size))
    idx += size * np.arange(count)[:, None]
    return np.bincount(idx.ravel(), minlength=count * size).reshape(count, size) / size


def hierarchical_bootstrap_ci(
    per_seed_per_problem: Any,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    bounds: Optional[tuple[float, float]] = None,
) -> dict[str, Any]:
    """Bootstrap over seeds x problems of the mean of a seeds-by-problems matrix (Owen 2007).

    ``X`` is ``(S, P)``; each resample draws ``S`` seeds and, independently, ``P`` problems (one draw shared by all
    seeds)::

        T_b = (1 / (S P)) sum_{i, j} X[s_i, p_j] = w_b^T X v_b

    ``w_b = multinomial(S, 1/S) / S``, ``v_b = multinomial(P, 1/P) / P``; percentile interval of ``T`` clipped to
    ``bounds``; point estimate ``X.mean()``.

    Returns:
        ``{"mean", "ci_low", "ci_high", "n" (S), "n_problems" (P), "std", "se", "method"}``; no interval when
        ``S == P == 1``.

    Raises:
        ValueError: on a non-2-D, empty or non-finite matrix, values outside ``bounds``, or a bad setting.
    """
    X = _as_float_array("per_seed_per_problem", per_seed_per_problem, 2)
    confidence, n_resamples, seed = _check_common(confidence, n_resamples, seed)
    bounds = _check_bounds("per_seed_per_problem", bounds, X)
    S, P = X.shape
    point = float(np.clip(X.mean(), X.min(), X.max()))
    seed_means = X.mean(axis=1)
    std = float(seed_means.std(ddof=1)) if S > 1 else 0.0
    out = {"mean": point, "n": int(S), "n_problems": int(P), "std": std}
    if S == 1 and P == 1:
        return {**out, "ci_low": point, "ci_high": point, "se": 0.0,
                "method": "single value: no interval (S=1 seed, P=1 problem)"}
    rng = np.random.default_rng(seed)
    stats = np.empty(n_resamples)
    block = max(1, _BLOCK // (S + P))
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        w = _weights(rng, S, stop - start)  # (b, S)
        v = _weights(rng, P, stop - start)  # (b, P)
        stats[start:stop] = np.einsum("bp,bp->b", w @ X, v)
    np.clip(stats, X.min(), X.max(), out=stats)
    lo, hi = _clip(*_percentile(stats, confidence), bounds)
    return {**out, "ci_low": lo, "ci_high": hi, "se": float(stats.std()),
            "method": f"bootstrap over seeds x problems (S={S}, P={P}, B={n_resamples})"}


def paired_difference_ci(
    a: Any,
    b: Any,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    bounds: Optional[tuple[float, float]] = None,
) -> dict[str, Any]:
    """Paired bootstrap interval of ``mean(a) - mean(b)`` for two methods on the same problems.

    ``A`` ``(S_a, P)``, ``B`` ``(S_b, P)``, column ``p`` the same problem; seeds resampled independently per side,
    problems jointly::

        D_b = (w_b^T A - u_b^T B) v_b

    (weights as in :func:`hierarchical_bootstrap_ci`); point estimate ``A.mean() - B.mean()``; clipped to
    ``(lo - hi, hi - lo)``.

    Returns:
        ``{"mean", "ci_low", "ci_high", "mean_a", "mean_b", "n" (min(S_a, S_b)), "n_a", "n_b", "n_problems",
        "se", "method"}``.

    Raises:
        ValueError: on bad inputs, different numbers of columns, values outside ``bounds``, or a bad setting.
    """
    A = _as_float_array("a", a, 2)
    B = _as_float_array("b", b, 2)
    if A.shape[1] != B.shape[1]:
        raise invalid("b", _Shown(f"<array of shape {B.shape}>"),
                      f"an (S_b, P) array with the same P={A.shape[1]} problems (columns) as a, "
                      f"shape {A.shape} (got P={B.shape[1]})")
    confidence, n_resamples, seed = _check_common(confidence, n_resamples, seed)
    vb = _check_bounds("a", bounds, A)
    _check_bounds("b", bounds, B)
    diff_bounds = None if vb is None else (vb[0] - vb[1], vb[1] - vb[0])
    (Sa, P), Sb = A.shape, B.shape[0]
    mean_a, mean_b = float(A.mean()), float(B.mean())
    point = mean_a - mean_b
    out = {"mean": point, "mean_a": mean_a, "mean_b": mean_b, "n": int(min(Sa, Sb)), "n_a": int(Sa),
           "n_b": int(Sb), "n_problems": int(P)}
    if P == 1 and Sa == 1 and Sb == 1:
        return {**out, "ci_low": point, "ci_high": point, "se": 0.0,
                "method": "single difference: no interval (one seed each, P=1 problem)"}
    rng = np.random.default_rng(seed)
    stats = np.empty(n_resamples)
    block = max(1, _BLOCK // (Sa + Sb + 2 * P))
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        w = _weights(rng, Sa, stop - start)
        u = _weights(rng, Sb, stop - start)
        v = _weights(rng, P, stop - start)
        stats[start:stop] = np.einsum("bp,bp->b", w @ A - u @ B, v)
    lo, hi = _clip(*_percentile(stats, confidence), diff_bounds)
    return {**out, "ci_low": lo, "ci_high": hi, "se": float(stats.std()),
            "method": f"paired bootstrap over problems, seeds within each method "
                      f"(S_a={Sa}, S_b={Sb}, P={P}, B={n_resamples})"}


def strategy_shares(
    freqs_per_seed: Sequence[Mapping[str, float]],
    strategies: Optional[Sequence[str]] = None,
    **bootstrap_kwargs: Any,
) -> dict[str, dict[str, Any]]:
    """Per-strategy shares over seeds: ``out[s] = bootstrap_ci([f_1[s], ..., f_S[s]], bounds=(0, 1))``.

    Args:
        freqs_per_seed: One ``{strategy: share}`` mapping per seed (``strategy_freq``).
        strategies: Strategies to report (default the first mapping's keys).

    Raises:
        ValueError: on no seeds, a seed lacking a strategy, a share outside ``[0, 1]``, or bad bootstrap arguments.
    """
    if isinstance(freqs_per_seed, Mapping) or not isinstance(freqs_per_seed, Sequence) or not freqs_per_seed:
        raise invalid("freqs_per_seed", freqs_per_seed, "a non-empty sequence of {strategy: share} mappings, one per seed")
    for i, f in enumerate(freqs_per_seed):
        if not isinstance(f, Mapping):
            raise invalid(f"freqs_per_seed[{i}]", f, "a {strategy: share} mapping")
    names = list(freqs_per_seed[0]) if strategies is None else list(strategies)
    if not names:
        raise invalid("strategies", strategies, "a non-empty sequence of strategy names")
    if "bounds" in bootstrap_kwargs:
        raise invalid("bounds", bootstrap_kwargs["bounds"], "left out: shares are always bounded by (0, 1)")
    out = {}
    for s in names:
        for i, f in enumerate(freqs_per_seed):
            if s not in f:
                raise invalid(f"freqs_per_seed[{i}]", dict(f), f"a mapping with a share for strategy {s!r}")
        out[s] = bootstrap_ci([f[s] for f in freqs_per_seed], bounds=(0.0, 1.0), **bootstrap_kwargs)
    return out


# ------------------------------------------------------- rescued / lost
def _as_counts(name: str, counts: Any) -> np.ndarray:
    arr = _as_float_array(name, counts, 1)
    if (arr < 0).any() or (arr != np.round(arr)).any():
        raise invalid(name, _short(arr), "a 1-D sequence of non-negative integer counts (correct samples per problem)")
    return arr.astype(np.int64)


def rescued_lost_counts(
    counts_before: Any,
    counts_after: Any,
    *,
    uids_before: Optional[Sequence[str]] = None,
    uids_after: Optional[Sequence[str]] = None,
) -> dict[str, int]:
    """Problems solved, rescued and lost between two evaluations on the same problems.

    With ``c_p`` (before) and ``d_p`` (after) correct samples on problem ``p``::

        solved_before = #{p : c_p > 0}      solved_after = #{p : d_p > 0}
        rescued       = #{p : c_p = 0 < d_p}
        lost          = #{p : c_p > 0 = d_p}
        net           = rescued - lost = solved_after - solved_before

    Args:
        counts_before, counts_after: ``(P,)`` non-negative integer counts.
        uids_before, uids_after: Optional problem ids; when both are given they must be equal.

    Raises:
        ValueError: on counts that are not 1-D non-negative integers, different lengths, or different ``uids``.
    """
    c = _as_counts("counts_before", counts_before)
    d = _as_counts("counts_after", counts_after)
    if c.size != d.size:
        raise invalid("counts_after", _Shown(f"<{d.size} counts>"),
                      f"counts for the same {c.size} problems as counts_before, in the same order (got {d.size})")
    if uids_before is not None and uids_after is not None:
        ub, ua = list(uids_before), list(uids_after)
        if ub != ua:
            first = next((i for i, (x, y) in enumerate(zip(ub, ua)) if x != y), min(len(ub), len(ua)))
            raise invalid("uids_after", _Shown(f"<{len(ua)} uids>"),
                          f"the same problem ids as uids_before, in the same order (first difference at index {first})")
        if len(ub) != c.size:
            raise invalid("uids_before", _Shown(f"<{len(ub)} uids>"), f"one id per count ({c.size})")
    sb, sa = c > 0, d > 0
    rescued, lost = int((~sb & sa).sum()), int((sb & ~sa).sum())
    return {"n_problems": int(c.size), "solved_before": int(sb.sum()), "solved_after": int(sa.sum()),
            "rescued": rescued, "lost": lost, "net": rescued - lost}


def rescued_lost_null(base_a: Any, base_b: Any, **uids: Any) -> dict[str, Any]:
    """Rescued / lost counts from resampling alone: two evaluations of one policy with different sampling seeds.

    ``flips_per_direction = (rescued + lost) / 2``: an approximate null (docs/study/stats.md).

    Returns:
        :func:`rescued_lost_counts`'s keys plus ``"flips_per_direction"`` and ``"method"``.
    """
    out: dict[str, Any] = dict(rescued_lost_counts(base_a, base_b, **uids))
    out["flips_per_direction"] = (out["rescued"] + out["lost"]) / 2.0
    out["method"] = "two evaluations of the reference, different sampling seeds"
    return out


# ------------------------------------------------------ from records
def _evaluation(name: str, evaluation: Any) -> Mapping[str, Any]:
    """Accepts an evaluation dict (``evaluate_policy`` output / ``record.final``) or a run record."""
    final = getattr(evaluation, "final", evaluation)
    if not isinstance(final, Mapping) or not isinstance(final.get("families"), Mapping):
        raise invalid(name, type(evaluation).__name__,
                      "an evaluate_policy result (a run record's `final`, with a 'families' mapping) or a run record")
    return final


def eval_counts(evaluation: Any, families: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Per-problem correct counts and problem ids of one evaluation, ``families`` in order: ``(counts (P,), uids)``.

    Raises:
        ValueError: on a missing family or an evaluation without ``correct_counts`` / ``uids``.
    """
    final = _evaluation("evaluation", evaluation)
    if isinstance(families, str) or not families:
        raise invalid("families", families, "a non-empty sequence of family names")
    counts, uids = [], []
    for f in families:
        fam = final["families"].get(f)
        if fam is None:
            raise invalid("families", list(families), f"family names of the evaluation, among {sorted(final['families'])}")
        if "correct_counts" not in fam or "uids" not in fam:
            raise invalid(f"evaluation['families'][{f!r}]", sorted(fam),
                          "a family summary with 'correct_counts' and 'uids' (re-run the evaluation with this version)")
        if len(fam["correct_counts"]) != len(fam["uids"]):
            raise invalid(f"evaluation['families'][{f!r}]['uids']", _Shown(f"<{len(fam['uids'])} uids>"),
                          f"one id per correct count ({len(fam['correct_counts'])})")
        counts.append(_as_counts(f"evaluation['families'][{f!r}]['correct_counts']", fam["correct_counts"]))
        uids += [str(u) for u in fam["uids"]]
    return np.concatenate(counts), uids


def seed_counts(evaluations: Sequence[Any], families: Sequence[str]) -> tuple[list[np.ndarray], list[str]]:
    """Each seed's :func:`eval_counts` over ``families``: ``(list of (P,) counts, uids)``.

    Raises:
        ValueError: on an evaluation whose problem ids differ from the first's, or as :func:`eval_counts`.
    """
    rows, uids0 = [], None
    for i, ev in enumerate(evaluations):
        counts, uids = eval_counts(_evaluation(f"evaluations[{i}]", ev), families)
        if uids0 is None:
            uids0 = uids
        elif uids != uids0:
            raise invalid(f"evaluations[{i}]", _Shown("<evaluation>"),
                          "an evaluation on the same problems as evaluations[0] (their uids differ)")
        rows.append(counts)
    return rows, list(uids0 or [])


def per_problem_scores(
    evaluations: Sequence[Any],
    families: Sequence[str],
    *,
    samples: int,
    k: int = 1,
) -> tuple[np.ndarray, list[str]]:
    """The ``(S, P)`` matrix of per-problem pass@k, one row per seed's evaluation: ``(X, uids)``.

    ``X[s, p] = pass@k(n=samples, c=correct_counts_s[p], k)`` (Chen et al., :func:`pass_at_k_array`; ``c/n`` at
    ``k = 1``) over ``families`` concatenated.

    Raises:
        ValueError: on no evaluations, different ``uids``, counts above ``samples``, or a bad ``k``.
    """
    from rlvr_lib.eval.passk import pass_at_k_array

    if isinstance(evaluations, Mapping) or not isinstance(evaluations, Sequence) or not evaluations:
        raise invalid("evaluations", type(evaluations).__name__, "a non-empty sequence of evaluations, one per seed")
    samples = check_int("samples", samples, 1)
    k = check_int("k", k, 1, samples)
    counts, uids = seed_counts(evaluations, families)
    return np.stack([pass_at_k_array(samples, c, k) for c in counts]), uids


def _records(name: str, records: Any) -> list:
    if isinstance(records, (str, Mapping)) or not isinstance(records, Sequence) or not records:
        raise invalid(name, type(records).__name__, "a non-empty list of run records, one per seed")
    return list(records)


def passk_ci(records: Sequence[Any], families: Sequence[str], k: int) -> dict[str, Any]:
    """pass@k over ``families`` with a bootstrap over seeds x problems, clipped to [0, 1]."""
    records = _records("records", records)
    samples = records[0].config["eval"]["samples"]
    scores, _ = per_problem_scores(records, families, samples=samples, k=k)
    return hierarchical_bootstrap_ci(scores, bounds=(0, 1))


def seed_ci(values: Sequence[float], key: Optional[str] = None) -> dict[str, Any]:
    """Percentile bootstrap over seeds, clipped to ``RANGES[key]`` when the metric has one."""
    return bootstrap_ci(list(values), bounds=RANGES.get(key))
