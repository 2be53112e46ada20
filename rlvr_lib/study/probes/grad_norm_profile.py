"""VIGOR's diagnostics on a policy's own samples: ||g|| against length, accuracy by score rank (arXiv 2605.09920).

:func:`grad_norm_profile` samples ``samples`` completions of each problem and
records, per completion, its length T (tokens, EOS included), the norm
``||g||`` of the gradient of its mean token NLL (`rlvr_lib.rewards.grad_norm`,
the reward VIGOR trains on), the verifier's verdict and whether it was
truncated. The `GradNormProfile` answers two of the paper's figures:

* **Length.** If each token's loss gradient were an independent draw of
  equal variance, ``||grad (1/T) sum_t l_t|| ~ c / sqrt(T)``: ``log ||g|| =
  a - 0.5 log T`` and ``sqrt(T) ||g||`` is flat (the paper: raw ||g|| about
  180 -> 90 over 250-1000 tokens, slope -0.5; scaled flat).
  :meth:`GradNormProfile.loglog_slope_ci` fits ``b`` in ``log v = a + b log
  T`` by least squares over every completion, with a percentile bootstrap
  over problems (a problem's completions are resampled together);
  :meth:`GradNormProfile.by_length` bins by length quantiles.
* **Rank.** :meth:`GradNormProfile.correct_by_rank` orders each group of G
  completions of a problem by the score ``S = -sqrt(T) ||g||`` (``-||g||``
  without ``sqrt_len``), empty completions (T = 0) below the group minimum as
  in training (`rlvr_lib.methods.vigor.empty_below_group_min`), and gives the correctness at each rank (the paper: rank 1 70.5%,
  rank 8 52.7% at step 10, monotone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from rlvr_lib.study.stats import _check_common, _percentile
from rlvr_lib.validation import check, check_choice, check_int, invalid

__all__ = ["GradNormProfile", "grad_norm_profile", "rank_trend"]

VALUES = ("norm", "scaled")
"""What :meth:`GradNormProfile.values` returns: ``||g||`` or ``sqrt(T) ||g||``."""


@dataclass
class GradNormProfile:
    """``n`` completions of each of ``P`` problems with their gradient norms; arrays are ``(P, n)``.

    Attributes:
        problems: The problems, in order.
        lengths: Completion lengths T in tokens (EOS included).
        norms: ``||grad_theta l||``, l the completion's mean token NLL.
        correct: The verifier's verdict is ``"correct"``.
        truncated: The completion hit ``max_new_tokens``.
    """

    problems: list
    lengths: np.ndarray
    norms: np.ndarray
    correct: np.ndarray
    truncated: np.ndarray

    def values(self, which: str = "norm") -> np.ndarray:
        """``(P, n)``: ``||g||`` (``"norm"``) or ``sqrt(T) ||g||`` (``"scaled"``)."""
        check_choice("which", which, VALUES)
        return self.norms if which == "norm" else np.sqrt(self.lengths) * self.norms

    def by_length(self, bins: int = 5):
        """A ``pandas.DataFrame``, one row per length-quantile bin (fewer when lengths tie).

        Columns: ``completions``, ``mean T``, ``||g||``, ``sqrt(T) ||g||``
        (means over the bin's completions) and ``accuracy``; the index names
        the bin's length range.
        """
        import pandas as pd

        check_int("bins", bins, 1)
        frame = pd.DataFrame({"T": self.lengths.ravel(), "norm": self.norms.ravel(),
                              "scaled": self.values("scaled").ravel(), "correct": self.correct.ravel()})
        frame["bin"] = pd.qcut(frame["T"], q=bins, duplicates="drop")
        table = frame.groupby("bin", observed=True).agg(
            completions=("T", "size"), mean_T=("T", "mean"), norm=("norm", "mean"), scaled=("scaled", "mean"),
            accuracy=("correct", "mean"))
        table.index = [f"{int(np.floor(b.left)) + 1}-{int(np.floor(b.right))}" for b in table.index]  # (left, right]
        table.index.name = "T"
        return table.rename(columns={"mean_T": "mean T", "norm": "||g||", "scaled": "sqrt(T) ||g||"})

    def loglog_slope_ci(self, which: str = "norm", *, confidence: float = 0.95, n_resamples: int = 10_000,
                        seed: int = 0) -> dict:
        """Least-squares slope ``b`` of ``log v = a + b log T`` over every completion, bootstrapped over problems.

        Each resample draws ``P`` problems with replacement (all of a
        problem's completions come along) and refits ``b``; the interval is
        the percentile interval of the refits. Computed from per-problem sums:
        with resample counts ``c_p``, ``b = (N Sxy - Sx Sy) / (N Sxx - Sx^2)``
        where ``N = sum_p c_p n``, ``Sx = sum_p c_p sum_j x_pj`` etc.

        Returns:
            ``{"mean", "ci_low", "ci_high", "n", "n_problems", "se", "method"}``
            like the other intervals (``mean`` is the slope on all
            completions, ``n`` the number of completions).

        Raises:
            ValueError: unknown ``which``, a non-positive value (no log), all
                lengths equal (no slope), or a bad ``confidence`` / ``n_resamples``.
        """
        v = self.values(which)
        if not (np.isfinite(v).all() and (v > 0).all()):
            raise invalid(which, "<non-positive or non-finite values>", "positive finite values (a log is taken)")
        confidence, n_resamples, seed = _check_common(confidence, n_resamples, seed)
        x, y = np.log(self.lengths.astype(np.float64)), np.log(v.astype(np.float64))
        per_problem = np.stack([np.full(len(x), x.shape[1], dtype=np.float64), x.sum(1), y.sum(1),
                                (x * x).sum(1), (x * y).sum(1)], axis=1)  # (P, 5): n, Sx, Sy, Sxx, Sxy

        def slope(sums: np.ndarray) -> np.ndarray:
            n, sx, sy, sxx, sxy = sums.T
            with np.errstate(invalid="ignore", divide="ignore"):
                return (n * sxy - sx * sy) / (n * sxx - sx * sx)

        point = float(slope(per_problem.sum(0, keepdims=True))[0])
        if not np.isfinite(point):
            raise invalid("lengths", "<all equal>", "completions of at least two lengths (a slope needs spread)")
        rng = np.random.default_rng(seed)
        P = len(per_problem)
        counts = rng.multinomial(P, np.full(P, 1.0 / P), size=n_resamples).astype(np.float64)  # (B, P)
        stats = slope(counts @ per_problem)
        stats = stats[np.isfinite(stats)]  # a resample of problems whose completions all share one length
        lo, hi = _percentile(stats, confidence)
        return {"mean": point, "ci_low": lo, "ci_high": hi, "n": int(x.size), "n_problems": P,
                "se": float(stats.std()),
                "method": f"least squares on log-log, percentile bootstrap over problems (P={P}, B={n_resamples})"}

    def correct_by_rank(self, group_size: int, *, sqrt_len: bool = True) -> np.ndarray:
        """``(P * n / G, G)``: each group's correctness in VIGOR score order (column 0 = best score).

        Groups are consecutive runs of ``group_size`` completions of one
        problem; the score is ``-sqrt(T) ||g||`` (``-||g||`` without
        ``sqrt_len``), empty completions (length 0) at their group's minimum
        minus 1e-3 as in training (truncated ones keep their score), ties in
        sampling order (`rlvr_lib.methods.vigor.correct_by_rank`).

        Raises:
            ValueError: when ``group_size`` does not divide the samples per problem.
        """
        from rlvr_lib.methods.vigor import correct_by_rank, empty_below_group_min

        n = self.lengths.shape[1]
        check_int("group_size", group_size, 1)
        check(n % group_size == 0, "group_size", group_size, f"a divisor of the samples per problem ({n})")
        scores = -torch.from_numpy(self.values("scaled" if sqrt_len else "norm").ravel().astype(np.float64))
        groups = torch.arange(scores.numel()) // group_size
        scores = empty_below_group_min(scores, torch.from_numpy(self.lengths.ravel() == 0), groups)
        return correct_by_rank(scores, torch.from_numpy(self.correct.ravel()), groups).numpy()


def rank_trend(rows: np.ndarray) -> np.ndarray:
    """``(units,)``: each row's least-squares slope of accuracy on rank 1..G (negative: falls with rank).

    ``b_u = sum_r (r - rbar) a_ur / sum_r (r - rbar)^2``; linear in the row,
    so the mean of the slopes is the slope of the mean curve, and a bootstrap
    over units gives its interval.

    Raises:
        ValueError: unless ``rows`` is 2-D with at least two ranks.
    """
    rows = np.asarray(rows, dtype=np.float64)
    check(rows.ndim == 2 and rows.shape[1] >= 2, "rows", rows.shape, "a (units, G) array with G >= 2")
    centred = np.arange(rows.shape[1]) - (rows.shape[1] - 1) / 2
    return rows @ centred / (centred @ centred)


def grad_norm_profile(model, tokenizer, problems: Sequence, *, samples: int = 8, seed: int = 0,
                      temperature: float = 1.0, max_new_tokens: int = 48, impl: str = "auto", batch_size: int = 64,
                      verifier: Callable | None = None) -> GradNormProfile:
    """Sample ``samples`` completions per problem and measure each one's VIGOR gradient norm.

    Rollouts come from `rlvr_lib.rollout.KVCacheEngine` at ``temperature``
    with sampling seed ``seed``; norms from `rlvr_lib.rewards.grad_norm_scores`
    (``impl``; evaluation mode, the model's weights and gradients untouched) in
    chunks of ``batch_size`` rows (memory only: the values do not depend on it); verdicts from ``verifier`` (default: the
    arithmetic testbed's `rlvr_lib.tasks.arithmetic.verify`).

    Raises:
        ValueError: no problems, or a bad ``samples`` / ``seed`` / ``batch_size``.
    """
    from rlvr_lib.rewards import grad_norm_scores
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams
    from rlvr_lib.tasks import CORRECT
    from rlvr_lib.tasks.arithmetic import verify

    problems = list(problems)
    if not problems:
        raise invalid("problems", problems, "at least one problem")
    check_int("samples", samples, 1)
    check_int("seed", seed, 0)
    check_int("batch_size", batch_size, 1)
    verifier = verifier or verify
    params = SamplingParams(n=samples, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    ro = KVCacheEngine(model, tokenizer).generate([p.prompt for p in problems], params)
    norms = []
    for rows in torch.arange(len(ro)).split(batch_size):
        scores = grad_norm_scores(model, ro.prompt_ids[rows], ro.prompt_mask[rows], ro.completion_ids[rows],
                                  ro.completion_mask[rows], sqrt_len=False, impl=impl)
        norms.append(-scores.double())
    shape = (len(problems), samples)
    verdicts = [verifier(problems[i // samples], text) for i, text in enumerate(ro.texts)]
    return GradNormProfile(
        problems=problems,
        lengths=ro.completion_mask.sum(1).numpy().reshape(shape),
        norms=torch.cat(norms).numpy().reshape(shape),
        correct=np.array([v.status == CORRECT for v in verdicts]).reshape(shape),
        truncated=np.array([r == "length" for r in ro.finish_reasons]).reshape(shape),
    )
