"""Unbiased pass@k (Chen et al. 2021, arXiv 2107.03374, eq. 1).

With ``n`` samples of which ``c`` are correct::

    pass@k = 1 - C(n - c, k) / C(n, k)
    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)

The product form avoids overflow (``C(1024, 512)`` is about 4.5e306) and is exactly 0 when ``n - c < k``.
pass@1 = ``c / n`` (NudgeRL, 3PO); SAGE's pass@256 and VIGOR's greedy pass@1 use other ``n`` and ``k``."""

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
    """``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` for one problem; ``1 <= k <= n``, ``0 <= c <= n``, else ValueError."""
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
    """:func:`pass_at_k` for counts ``c_array`` (any shape, same ``n``), via ``S_c = prod_{i=n-c+1}^{n} (1 - k/i)``."""
    n = check_int("n", n, 1)
    k = check_int("k", k, 1, n)
    counts = _as_counts("c_array", c_array, n)
    # suffix[c] = prod_{i=n-c+1}^{n} (1 - k/i); suffix[0] = 1 (empty product).
    factors = 1.0 - k / np.arange(n, 0, -1, dtype=np.float64)
    suffix = np.concatenate(([1.0], np.cumprod(factors)))
    suffix[n - k + 1 :] = 0.0  # n - c < k: exactly zero (already 0 or -0.0 numerically)
    return 1.0 - suffix[counts]


def default_ks(n: int) -> list[int]:
    """Powers of two ``<= n``, plus ``n``: ``default_ks(12) == [1, 2, 4, 8, 12]``."""
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
    """``{k: (1/P) sum_p pass@k(n, c_p, k)}`` for ``correct`` ``(P, n)`` 0/1 (SAGE T1, NudgeRL T1).

    Raises ValueError on a non-2-D / empty matrix, a value other than 0/1, or ``k`` outside ``[1, n]``."""
    arr = _as_correct_matrix("correct", correct)
    n = arr.shape[1]
    counts = arr.sum(axis=1)
    return {k: float(pass_at_k_array(n, counts, k).mean()) for k in _check_ks(ks, n)}


def per_family_pass_at_k(
    correct_by_family: Mapping[str, Any], ks: Iterable[int] | None = None
) -> dict[str, dict[int, float]]:
    """pass@k per family ``{family: (P_f, n_f)}`` plus ``"average"``: ``(1/F) sum_f out[f][k]`` (the papers' avg).

    Default ``ks``: :func:`default_ks` of the smallest ``n_f``. Raises ValueError on an empty mapping or a family
    named ``"average"``."""
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
