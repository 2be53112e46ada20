"""Tests for rlvr_lib.eval.passk (unbiased pass@k, Chen et al. 2021)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from rlvr_lib.eval.passk import (
    default_ks,
    pass_at_k,
    pass_at_k_array,
    pass_at_k_curve,
    per_family_pass_at_k,
)


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Share of all k-subsets of n samples (c correct) that hold a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(samples[i] for i in s) for s in subsets)
    return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_brute_force_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = brute_force_pass_at_k(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)
            assert pass_at_k_array(n, [c], k)[0] == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_hand_worked_values():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5, abs=1e-15)
    # n=10, c=3, k=4: 1 - C(7,4)/C(10,4) = 1 - 35/210 = 5/6
    assert pass_at_k(10, 3, 4) == pytest.approx(5 / 6, abs=1e-15)
    # pass@1 is the mean correctness c/n
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16, abs=1e-15)


def test_edge_cases():
    assert pass_at_k(5, 0, 3) == 0.0  # nothing correct
    assert pass_at_k(5, 5, 1) == 1.0  # everything correct
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k = 3: every 3-subset has a correct one
    assert pass_at_k(5, 2, 3) < 1.0  # n - c = 3 = k: one subset misses
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert isinstance(pass_at_k(np.int64(8), np.int32(2), np.int16(2)), float)


def test_large_n_is_stable_and_exact():
    n = 1024
    assert math.comb(n, 512) > 1e306  # C(n, k) alone is within 1% of float max
    rng = np.random.default_rng(0)
    cs = np.concatenate([[0, 1, 2, 511, 512, 513, 1023, 1024], rng.integers(0, n + 1, size=24)])
    for k in (1, 2, 16, 100, 256, 512, 1000, 1024):
        vec = pass_at_k_array(n, cs, k)
        assert vec.shape == cs.shape and np.all(np.isfinite(vec))
        for c, v in zip(cs.tolist(), vec.tolist()):
            exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
            assert v == pytest.approx(float(exact), rel=1e-12, abs=1e-14), (c, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12, abs=1e-14), (c, k)


def test_beyond_float_range_binomials():
    n = 2048
    with pytest.raises(OverflowError):  # the naive float ratio cannot even be formed
        float(math.comb(n, 1024))
    for c, k in ((1, 1024), (3, 1024), (700, 1024), (1024, 1024), (1025, 1024)):
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12), (c, k)
    assert pass_at_k(n, 1, 1024) == pytest.approx(0.5, abs=1e-15)  # one correct, half the samples


def test_monotone_in_k_and_c():
    n = 64
    table = np.array([[pass_at_k(n, c, k) for k in range(1, n + 1)] for c in range(n + 1)])
    assert np.all(np.diff(table, axis=0) >= -1e-15)  # more correct -> higher
    assert np.all(np.diff(table, axis=1) >= -1e-15)  # bigger budget -> higher


def test_array_keeps_shape():
    out = pass_at_k_array(4, np.array([[0, 1], [2, 4]]), 2)
    expected = np.array([[0.0, 0.5], [1 - 1 / 6, 1.0]])
    np.testing.assert_allclose(out, expected, atol=1e-15)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0, 0, 1), "n"),
        ((4, 5, 1), "c"),
        ((4, -1, 1), "c"),
        ((4, 2, 0), "k"),
        ((4, 2, 5), "k"),
        ((4.0, 2, 1), "n"),
        ((4, 2, True), "k"),
    ],
)
def test_pass_at_k_rejects_bad_arguments(args, name):
    with pytest.raises(ValueError, match=rf"^{name}=.* is invalid: must be an integer (>= |in \[)"):
        pass_at_k(*args)


def test_array_rejects_bad_counts():
    with pytest.raises(ValueError, match="c_array contains 5"):
        pass_at_k_array(4, [1, 5], 2)
    with pytest.raises(ValueError, match="c_array"):
        pass_at_k_array(4, [1.5], 2)
    with pytest.raises(ValueError, match=r"^k=9 is invalid: must be an integer in \[1, 8\]$"):
        pass_at_k_array(8, [1], 9)


def test_default_ks():
    assert default_ks(1) == [1]
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(12) == [1, 2, 4, 8, 12]
    assert default_ks(100) == [1, 2, 4, 8, 16, 32, 64, 100]


def test_curve_hand_worked():
    correct = np.array(
        [
            [1, 0, 0, 0],  # c=1: pass@1 .25, pass@2 .5, pass@4 1
            [0, 0, 0, 0],  # c=0: 0, 0, 0
            [1, 1, 0, 1],  # c=3: .75, 1, 1
        ]
    )
    curve = pass_at_k_curve(correct)
    assert list(curve) == [1, 2, 4]
    assert curve[1] == pytest.approx((0.25 + 0 + 0.75) / 3)
    assert curve[2] == pytest.approx((0.5 + 0 + 1) / 3)
    assert curve[4] == pytest.approx(2 / 3)
    # bool and torch input, explicit ks (sorted, deduplicated)
    t = torch.tensor(correct.astype(bool))
    assert pass_at_k_curve(t, ks=[2, 1, 2]) == {1: curve[1], 2: curve[2]}


def test_curve_rejects_bad_input():
    with pytest.raises(ValueError, match="correct has shape"):
        pass_at_k_curve([1, 0, 1])
    with pytest.raises(ValueError, match="correct has shape"):
        pass_at_k_curve(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="correct contains 2"):
        pass_at_k_curve([[1, 2]])
    with pytest.raises(ValueError, match=r"^ks\[0\]=5 is invalid: must be an integer in \[1, 4\]$"):
        pass_at_k_curve([[1, 0, 0, 0]], ks=[5])
    with pytest.raises(ValueError, match="ks=.*empty"):
        pass_at_k_curve([[1, 0]], ks=[])


def test_per_family_unweighted_average():
    fams = {
        "aime": np.array([[1, 0], [0, 0], [0, 0], [0, 0]]),  # pass@1 = 1/8
        "math": np.array([[1, 1, 1, 0]]),  # pass@1 = 3/4, 4 samples
    }
    out = per_family_pass_at_k(fams, ks=[1, 2])
    assert out["aime"][1] == pytest.approx(1 / 8)
    assert out["aime"][2] == pytest.approx(1 / 4)
    assert out["math"][1] == pytest.approx(3 / 4)
    assert out["math"][2] == pytest.approx(1.0)
    # unweighted over families (aime has 4x the problems but counts once)
    assert out["average"][1] == pytest.approx((1 / 8 + 3 / 4) / 2)
    assert out["average"][2] == pytest.approx((1 / 4 + 1) / 2)
    # default ks follow the family with the fewest samples (n=2)
    assert list(per_family_pass_at_k(fams)["average"]) == [1, 2]


def test_per_family_rejects_bad_input():
    with pytest.raises(ValueError, match="correct_by_family"):
        per_family_pass_at_k({})
    with pytest.raises(ValueError, match="'average'"):
        per_family_pass_at_k({"average": [[1]]})
    with pytest.raises(ValueError, match=r"correct_by_family\['b'\]"):
        per_family_pass_at_k({"a": [[1]], "b": [1]})
    with pytest.raises(ValueError, match=r"^ks\[0\]=4 is invalid: must be an integer in \[1, 2\]$"):
        per_family_pass_at_k({"a": [[1, 0, 0, 0]], "b": [[1, 0]]}, ks=[4])
