"""Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models
Trained on Code", arXiv 2107.03374, Codex paper, eq. 1 and Fig. 3).

With ``n`` samples of which ``c`` are correct, the probability that a random
``k``-subset of the samples holds at least one correct sample is::

    pass@k = 1 - C(n - c, k) / C(n, k)

The binomial coefficients overflow a float long before the ratio does (for
``n = 1024``, ``C(1024, 512)`` is about 4.5e306), so the ratio is computed as a
product of ``c`` factors, each in ``[0, 1]``::

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)

which is exactly 0 as soon as ``n - c < k`` (the factor for ``i = k`` is 0),
i.e. pass@k = 1 when every ``k``-subset must contain a correct sample.

pass@1 reduces to the mean correctness ``c / n`` (NudgeRL and 3PO report
pass@1 / mean@8 this way); SAGE's pass@256 and VIGOR's greedy pass@1 use the
same estimator with other ``n`` and ``k``.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rlvr_lib.validation import check_int

__all__ = [
    "AVERAGE_KEY",
    "default_ks",
    "pass_at_k",
    "pass_at_k_array",
    "pass_at_k_curve",
    "per_family_pass_at_k",
]

AVERAGE_KEY = "average"
"""Key of the unweighted mean over families in :func:`per_family_pass_at_k`."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate for one problem (Chen et al. 2021, eq. 1).

    ``pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i)``,
    and exactly 1.0 when ``n - c < k``.

    Args:
        n: number of samples drawn for the problem, ``n >= 1``.
        c: number of correct samples, ``0 <= c <= n``.
        k: budget, ``1 <= k <= n``.

    Returns:
        The estimate in ``[0, 1]``.

    Raises:
        ValueError: if an argument is not an integer or is out of its range.
    """
    n = check_int("n", n, 1)
    c = check_int("c", c, 0, n)
    k = check_int("k", k, 1, n)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def _as_counts(name: str, values: Any, n: int) -> np.ndarray:
    """Validate an array of correct-counts in ``[0, n]`` and return it as int64."""
    arr = np.asarray(values)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} has dtype {arr.dtype}: must hold integer counts in [0, {n}]")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name}={arr!r} is not valid: must hold integer counts in [0, {n}]")
    if arr.size and (arr.min() < 0 or arr.max() > n):
        bad = arr[(arr < 0) | (arr > n)].ravel()[0]
        raise ValueError(f"{name} contains {bad}, out of range: counts must be in [0, {n}]")
    return arr.astype(np.int64)


def pass_at_k_array(n: int, c_array: Any, k: int) -> np.ndarray:
    """Vectorised :func:`pass_at_k` over many problems with the same ``n``.

    Uses the suffix products ``S_c = prod_{i=n-c+1}^{n} (1 - k/i)`` for all
    ``c = 0..n`` at once (one ``cumprod`` of length ``n``), then
    ``pass@k[j] = 1 - S_{c_array[j]}``. ``S_c`` is exactly 0 for ``n - c < k``.

    Args:
        n: samples per problem, ``n >= 1``.
        c_array: array-like of correct counts, any shape, integers in ``[0, n]``.
        k: budget, ``1 <= k <= n``.

    Returns:
        float64 array of the same shape as ``c_array``.

    Raises:
        ValueError: on a bad ``n``/``k`` or a count that is not an integer in ``[0, n]``.
    """
    n = check_int("n", n, 1)
    k = check_int("k", k, 1, n)
    counts = _as_counts("c_array", c_array, n)
    # suffix[c] = prod_{i=n-c+1}^{n} (1 - k/i); suffix[0] = 1 (empty product).
    factors = 1.0 - k / np.arange(n, 0, -1, dtype=np.float64)
    suffix = np.concatenate(([1.0], np.cumprod(factors)))
    suffix[n - k + 1 :] = 0.0  # n - c < k: exactly zero (already 0 or -0.0 numerically)
    return 1.0 - suffix[counts]


def default_ks(n: int) -> list[int]:
    """Default budgets for ``n`` samples: all powers of two ``<= n``, plus ``n``.

    Example: ``default_ks(12) == [1, 2, 4, 8, 12]``.
    """
    n = check_int("n", n, 1)
    ks = [1 << p for p in range(n.bit_length()) if (1 << p) <= n]
    if ks[-1] != n:
        ks.append(n)
    return ks


def _as_correct_matrix(name: str, correct: Any) -> np.ndarray:
    """Validate a (problems x samples) 0/1 matrix and return it as bool."""
    if hasattr(correct, "detach"):  # torch tensor
        correct = correct.detach().cpu().numpy()
    arr = np.asarray(correct)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(
            f"{name} has shape {arr.shape}: must be 2-D (problems, samples) with at least one of each"
        )
    if arr.dtype == bool:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} has dtype {arr.dtype}: must be bool or 0/1 numbers")
    bad = ~np.isin(arr, (0, 1))
    if bad.any():
        raise ValueError(f"{name} contains {arr[bad].ravel()[0].item()!r}: must hold only 0/1 or True/False")
    return arr.astype(bool)


def _check_ks(ks: Iterable[int] | None, n: int) -> list[int]:
    if ks is None:
        return default_ks(n)
    if isinstance(ks, numbers.Integral):
        ks = [ks]
    ks_list = [check_int(f"ks[{i}]", k, 1, n) for i, k in enumerate(ks)]
    if not ks_list:
        raise ValueError(f"ks={ks!r} is empty: give at least one k in [1, {n}] or None for the default")
    return sorted(set(ks_list))


def pass_at_k_curve(correct: Any, ks: Iterable[int] | None = None) -> dict[int, float]:
    """Mean unbiased pass@k over problems, for each budget ``k``.

    ``curve[k] = (1/P) sum_p pass@k(n, c_p, k)`` with ``c_p`` the number of
    correct samples of problem ``p`` (SAGE T1 pass@1 / pass@256; NudgeRL T1
    pass@1 = mean correctness).

    Args:
        correct: array-like of shape ``(P, n)``, bool or 0/1 (numpy or torch):
            ``correct[p, j]`` is whether sample ``j`` of problem ``p`` is right.
        ks: budgets, each in ``[1, n]``; default :func:`default_ks` ``(n)``.

    Returns:
        ``{k: mean pass@k}`` with ``k`` ascending.

    Raises:
        ValueError: on a non-2-D / empty matrix, a value other than 0/1, or a
            ``k`` outside ``[1, n]``.
    """
    arr = _as_correct_matrix("correct", correct)
    n = arr.shape[1]
    counts = arr.sum(axis=1)
    return {k: float(pass_at_k_array(n, counts, k).mean()) for k in _check_ks(ks, n)}


def per_family_pass_at_k(
    correct_by_family: Mapping[str, Any], ks: Iterable[int] | None = None
) -> dict[str, dict[int, float]]:
    """pass@k per problem family, plus their unweighted average.

    ``out[family] = pass_at_k_curve(correct_by_family[family], ks)`` and
    ``out["average"][k] = (1/F) sum_f out[f][k]`` -- each family (benchmark)
    counts once whatever its size, as the papers' "avg" columns do (NudgeRL
    T1 over AIME24/AIME25/AMC23/MATH500-L5/APEX; SAGE T1; VIGOR "Math avg").

    Args:
        correct_by_family: ``{family: (P_f, n_f) 0/1 matrix}``; families may
            have different numbers of problems and of samples.
        ks: budgets; each must be ``<= n_f`` for every family. Default:
            :func:`default_ks` of the smallest ``n_f`` (so every family has them).

    Returns:
        ``{family: {k: pass@k}, ..., "average": {k: mean over families}}``.

    Raises:
        ValueError: on an empty mapping, a family named ``"average"``, or any
            error of :func:`pass_at_k_curve`.
    """
    if not isinstance(correct_by_family, Mapping) or len(correct_by_family) == 0:
        raise ValueError(
            f"correct_by_family={correct_by_family!r} is not valid: must be a non-empty mapping family -> matrix"
        )
    if AVERAGE_KEY in correct_by_family:
        raise ValueError(f"correct_by_family has a family named {AVERAGE_KEY!r}: that key is reserved for the mean")
    mats = {fam: _as_correct_matrix(f"correct_by_family[{fam!r}]", m) for fam, m in correct_by_family.items()}
    n_min = min(m.shape[1] for m in mats.values())
    ks_list = _check_ks(ks, n_min)
    out: dict[str, dict[int, float]] = {fam: pass_at_k_curve(m, ks_list) for fam, m in mats.items()}
    out[AVERAGE_KEY] = {k: float(np.mean([out[fam][k] for fam in mats])) for k in ks_list}
    return out
