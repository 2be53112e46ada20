"""Tests for rlvr_lib.eval.diversity (reasoning-mode clustering, NudgeRL Fig. 1).

Samples are built by a tiny generator of the testbed's surface form
(``rlvr_lib.tasks``), e.g. for 47*86::

    direct: #4042
    split: 40*86+7*86=3440+602=4042 #4042
    round: 50*86-3*86=4300-258=4042 #4042

with deliberately wrong numbers and ~5% garbage strings, as model samples are.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from rlvr_lib.eval.diversity import (
    ModeCounts,
    build_vectorizer,
    cluster_features,
    cluster_traces,
    digit_mask,
    distinct_fraction,
    featurize_traces,
    mode_ari,
    mode_counts_per_problem,
    strategy_entropy,
)

STRATEGIES = ("direct", "split", "round")
_GARBAGE_CHARS = list("0123456789*+-=# :dirctsplound")


# --------------------------------------------------------------------------- generator


def _maybe_wrong(x: int, rng: np.random.Generator, p_wrong: float) -> int:
    """``x``, or with probability ``p_wrong`` a nearby wrong number."""
    if rng.random() < p_wrong:
        return max(0, x + int(rng.choice([-1, 1])) * int(rng.integers(1, x // 3 + 2)))
    return x


def _clean_trace(a: int, b: int, strategy: str, rng: np.random.Generator, p_wrong: float) -> str:
    if strategy == "direct":
        return f"direct: #{_maybe_wrong(a * b, rng, p_wrong)}"
    if strategy == "split":
        tens, units = a // 10 * 10, a % 10
        p1, p2 = _maybe_wrong(tens * b, rng, p_wrong), _maybe_wrong(units * b, rng, p_wrong)
        total = _maybe_wrong(p1 + p2, rng, p_wrong)
        return f"split: {tens}*{b}+{units}*{b}={p1}+{p2}={total} #{_maybe_wrong(total, rng, p_wrong / 2)}"
    up = (a // 10 + 1) * 10
    down = up - a
    p1, p2 = _maybe_wrong(up * b, rng, p_wrong), _maybe_wrong(down * b, rng, p_wrong)
    total = _maybe_wrong(p1 - p2, rng, p_wrong)
    return f"round: {up}*{b}-{down}*{b}={p1}-{p2}={total} #{_maybe_wrong(total, rng, p_wrong / 2)}"


def make_trace(
    a: int, b: int, strategy: str, rng: np.random.Generator, p_wrong: float = 0.0, p_struct: float = 0.0
) -> str:
    """One sample of ``strategy`` for ``a*b``: wrong numbers with probability
    ``p_wrong`` each, and with probability ``p_struct`` a structural slip
    (a skipped step, a repeated step, or a trace cut short)."""
    text = _clean_trace(a, b, strategy, rng, p_wrong)
    if rng.random() < p_struct:
        head, _, tail = text.partition(": ")
        steps = tail.split("=")
        kind = int(rng.integers(3))
        if kind == 0 and len(steps) > 2:  # skip a middle step
            del steps[int(rng.integers(1, len(steps) - 1))]
        elif kind == 1 and len(steps) > 1:  # repeat a step
            i = int(rng.integers(len(steps) - 1))
            steps.insert(i, steps[i])
        else:  # cut short (keep at least the tag and half the body)
            body = "=".join(steps)
            steps = [body[: int(rng.integers(len(body) // 2 + 1, len(body) + 1))]]
        text = f"{head}: " + "=".join(steps)
    return text


def random_problem(rng: np.random.Generator) -> tuple[int, int]:
    a = int(rng.integers(11, 90))
    while a % 10 == 0:
        a = int(rng.integers(11, 90))
    return a, int(rng.integers(2, 100))


def garbage(rng: np.random.Generator) -> str:
    return "".join(rng.choice(_GARBAGE_CHARS, size=int(rng.integers(3, 30))))


def labelled_samples(n: int, seed: int, p_wrong: float = 0.3, p_struct: float = 0.15, p_garbage: float = 0.05):
    """n samples of random problems and strategies; garbage is labelled "malformed"."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        if rng.random() < p_garbage:
            texts.append(garbage(rng))
            labels.append("malformed")
            continue
        a, b = random_problem(rng)
        s = STRATEGIES[int(rng.integers(3))]
        texts.append(make_trace(a, b, s, rng, p_wrong, p_struct))
        labels.append(s)
    return texts, labels


def test_generator_matches_testbed_surface_form():
    rng = np.random.default_rng(0)
    assert make_trace(47, 86, "direct", rng) == "direct: #4042"
    assert make_trace(47, 86, "split", rng) == "split: 40*86+7*86=3440+602=4042 #4042"
    assert make_trace(47, 86, "round", rng) == "round: 50*86-3*86=4300-258=4042 #4042"


# --------------------------------------------------------------------------- features


def test_digit_mask():
    assert digit_mask("split: 40*86+7*86=3440+602=4042 #4042") == "split: 00*00+0*00=0000+000=0000 #0000"
    assert digit_mask("round: 50*86-3*86=4300-258", collapse_numbers=True) == "round: 0*0-0*0=0-0"


def test_masking_makes_same_shaped_traces_identical():
    texts = [
        "split: 40*86+7*86=3440+602=4042 #4042",
        "split: 30*57+2*57=1710+114=1824 #1824",  # same shape, same number lengths
        "split: 40*6+7*6=240+42=282 #282",  # same shape, shorter numbers
        "round: 50*86-3*86=4300-258=4042 #4042",
    ]
    X = featurize_traces(texts).toarray()  # default: digits masked, runs collapsed
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
    np.testing.assert_allclose(X[0], X[1])
    np.testing.assert_allclose(X[0], X[2])
    assert X[0] @ X[3] < 0.6
    Xm = featurize_traces(texts, collapse_numbers=False).toarray()  # digit by digit
    np.testing.assert_allclose(Xm[0], Xm[1])
    assert Xm[0] @ Xm[2] < 0.95  # number lengths still differ
    Xu = featurize_traces(texts, mask_digits=False).toarray()
    assert Xu[0] @ Xu[1] < 0.7  # without masking the numbers pull them apart
    assert Xu[0] @ Xu[1] < Xu[0] @ Xu[3]  # ... more than the strategy does


def test_fitted_vectorizer_pickles_and_transforms():
    vec = build_vectorizer().fit(["direct: #12", "split: 10*3+2*3=30+6=36 #36"])
    vec2 = pickle.loads(pickle.dumps(vec))
    a = vec.transform(["direct: #999"]).toarray()
    np.testing.assert_allclose(a, vec2.transform(["direct: #11"]).toarray())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(analyzer="chars"), r"^analyzer='chars' is invalid: must be one of \["),
        (dict(ngram_range=(3, 2)), r"^ngram_range=\(3, 2\) is invalid: must be \(min_n, max_n\) integers with 1 <= min_n <= max_n$"),
        (dict(preprocessor=str.lower), "preprocessor"),
        (dict(mask_digits="yes"), r"^mask_digits='yes' is invalid: must be True or False$"),
        (dict(n_clusters=3), r"unknown keyword argument\(s\) \['n_clusters'\]"),
    ],
)
def test_featurize_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        featurize_traces(["a b", "c d"], **kwargs)


def test_featurize_rejects_bad_texts():
    with pytest.raises(ValueError, match="texts="):
        featurize_traces("direct: #12")
    with pytest.raises(ValueError, match="texts is empty"):
        featurize_traces([])
    with pytest.raises(ValueError, match=r"texts\[1\]=3"):
        featurize_traces(["a", 3])
    with pytest.raises(ValueError, match="yield no"):
        featurize_traces(["", ""])


# --------------------------------------------------------------------------- clustering


@pytest.fixture(scope="module")
def noisy_samples():
    return labelled_samples(240, seed=7)


@pytest.mark.parametrize("method", ["kmeans", "agglomerative"])
def test_modes_recover_strategies(noisy_samples, method):
    texts, labels = noisy_samples
    n_garbage = labels.count("malformed")
    assert 3 <= n_garbage <= 25  # the generator did add garbage
    assert mode_ari(texts, labels, method=method) >= 0.8  # garbage kept as a 4th label
    pred = cluster_traces(texts, method=method)
    keep = np.array(labels) != "malformed"
    assert adjusted_rand_score(np.array(labels)[keep], pred[keep]) >= 0.8
    # garbage dropped before clustering
    clean = [t for t, lab in zip(texts, labels) if lab != "malformed"]
    assert mode_ari(clean, [lab for lab in labels if lab != "malformed"], method=method) >= 0.8


@pytest.mark.parametrize("method", ["kmeans", "agglomerative"])
def test_modes_follow_shape_not_tag(noisy_samples, method):
    texts, labels = noisy_samples
    untagged = [t.split(": ", 1)[1] if ": " in t else t for t in texts]
    assert mode_ari(untagged, labels, method=method) >= 0.8
    # unmasked, the numbers dominate and the strategies are not recovered
    assert mode_ari(untagged, labels, method=method, mask_digits=False) < 0.5


def test_ari_against_shuffled_labels_is_near_zero(noisy_samples):
    texts, labels = noisy_samples
    shuffled = list(np.random.default_rng(0).permutation(labels))
    assert abs(mode_ari(texts, shuffled, method="agglomerative")) < 0.1


def test_clustering_is_deterministic_and_sorted_by_size(noisy_samples):
    texts, _ = noisy_samples
    a = cluster_traces(texts, seed=3)
    b = cluster_traces(texts, seed=3)
    np.testing.assert_array_equal(a, b)
    sizes = np.bincount(a)
    assert np.all(np.diff(sizes) <= 0)  # 0 = largest cluster
    assert a.dtype == np.int64 and a.shape == (len(texts),)


def test_degenerate_inputs():
    np.testing.assert_array_equal(cluster_traces(["direct: #12"]), [0])
    # equal after masking -> fewer than 2 distinct texts -> one cluster
    np.testing.assert_array_equal(cluster_traces(["direct: #12", "direct: #34", "direct: #56"]), [0, 0, 0])
    np.testing.assert_array_equal(
        cluster_traces(["direct: #12", "direct: #34"], method="agglomerative"), [0, 0]
    )
    # two distinct texts: silhouette undefined, kept apart
    two = cluster_traces(["direct: #12", "split: 10*2+2*2=20+4=24 #24"])
    assert sorted(two.tolist()) == [0, 1]
    # k_range clamped to the 3 distinct shapes (and n - 1)
    texts = ["direct: #1", "direct: #2", "split: 1*2+3*2=2+6=8 #8", "round: 20*3-1*3=60-3=57 #57"]
    labels = cluster_traces(texts, k_range=(5, 8))
    assert labels[0] == labels[1] and len(set(labels.tolist())) in (2, 3)


def test_agglomerative_can_find_one_mode_where_kmeans_cannot():
    # Same strategy, numbers of different lengths: with digit-by-digit masking
    # the shapes differ a little (cosine distance 0.16 < threshold 0.3).
    texts = [
        "split: 40*86+7*86=3440+602=4042 #4042",
        "split: 40*6+7*6=240+42=282 #282",
        "split: 30*57+2*57=1710+114=1824 #1825",
        "split: 80*9+3*9=720+27=747 #747",
    ] * 3
    km = cluster_traces(texts, collapse_numbers=False)
    assert len(set(km.tolist())) == 2  # silhouette never picks k = 1
    assert km[0] != km[1] and km[0] == km[2]
    np.testing.assert_array_equal(cluster_traces(texts, collapse_numbers=False, method="agglomerative"), 0)
    # a tighter threshold separates the two length patterns
    tight = cluster_traces(texts, collapse_numbers=False, method="agglomerative", distance_threshold=0.1)
    np.testing.assert_array_equal(tight, km)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(method="dbscan"), r"^method='dbscan' is invalid: must be one of \["),
        (dict(k_range=(1, 4)), r"^k_range=\(1, 4\) is invalid: must be \(k_min, k_max\) integers with 2 <= k_min <= k_max$"),
        (dict(k_range=(4, 3)), "k_range"),
        (dict(distance_threshold=0.0), r"^distance_threshold=0.0 is invalid: must be a number in \(0, 2\]$"),
        (dict(seed=-1), r"^seed=-1 is invalid: must be an integer >= 0$"),
        (dict(silhouette_sample_size=2), r"^silhouette_sample_size=2 is invalid: must be None or an integer >= 3$"),
    ],
)
def test_cluster_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cluster_traces(["direct: #1", "split: 1*2+3*2=2+6=8 #8", "x"], **kwargs)


def test_cluster_features_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        cluster_features(np.array([[1.0, np.nan], [0.0, 1.0]]))


# --------------------------------------------------------------------------- modes per problem


def test_mode_counts_one_vs_three_strategies():
    rng = np.random.default_rng(11)
    pool = []
    for _ in range(20):  # background problems, mixed strategies, with garbage
        a, b = random_problem(rng)
        pool.append(
            [
                garbage(rng)
                if rng.random() < 0.05
                else make_trace(a, b, STRATEGIES[int(rng.integers(3))], rng, 0.3, 0.15)
                for _ in range(8)
            ]
        )
    a, b = random_problem(rng)
    one = [make_trace(a, b, "split", rng, 0.3, 0.15) for _ in range(16)]
    a, b = random_problem(rng)
    three = [make_trace(a, b, STRATEGIES[i % 3], rng, 0.3, 0.15) for i in range(18)]
    a, b = random_problem(rng)
    direct_only = [make_trace(a, b, "direct", rng, 0.3, 0.15) for _ in range(8)]
    # kmeans over-splits on structural slips (silhouette favours tight
    # micro-clusters), so it needs min_share to ignore rare slip-modes.
    for method, min_share in (("agglomerative", 0.0), ("kmeans", 0.2)):
        mc = mode_counts_per_problem([one, three, direct_only, *pool], method=method, min_share=min_share)
        assert isinstance(mc, ModeCounts)
        assert mc.counts[0] == 1, method
        assert mc.counts[1] == 3, method
        assert mc.counts[2] == 1, method
        # mode ids are global: the split-only and direct-only problems have
        # different main modes, and both main modes occur in the mixed problem
        main_split = np.bincount(mc.labels_by_problem[0]).argmax()
        main_direct = np.bincount(mc.labels_by_problem[2]).argmax()
        assert main_split != main_direct
        assert {main_split, main_direct} <= set(mc.labels_by_problem[1].tolist())
        assert mc.n_modes >= 3
        assert sum(mc.histogram.values()) == pytest.approx(1.0)
        assert mc.histogram[1] == pytest.approx(np.mean(mc.counts == 1))
        assert [len(lab) for lab in mc.labels_by_problem] == [16, 18, 8] + [8] * 20


def test_mode_counts_min_share_and_histogram():
    rng = np.random.default_rng(5)
    a, b = 47, 86
    mostly_split = [make_trace(a, b, "split", rng) for _ in range(15)] + [make_trace(a, b, "direct", rng)]
    balanced = [make_trace(a, b, s, rng) for s in STRATEGIES for _ in range(4)]
    direct = [make_trace(23, 45, "direct", rng) for _ in range(4)]
    texts_by_problem = [mostly_split, balanced, direct, direct]
    mc = mode_counts_per_problem(texts_by_problem)
    assert mc.counts.tolist() == [2, 3, 1, 1]
    assert mc.histogram == {1: 0.5, 2: 0.25, 3: 0.25}
    assert mc.n_modes == 3
    mc10 = mode_counts_per_problem(texts_by_problem, min_share=0.1)
    assert mc10.counts.tolist() == [1, 3, 1, 1]  # 1/16 direct is below 10%
    assert mc10.histogram == {1: 0.75, 2: 0.0, 3: 0.25}
    mc_hi = mode_counts_per_problem(texts_by_problem, min_share=0.5)
    assert mc_hi.counts.tolist() == [1, 0, 1, 1]  # no mode holds half of `balanced`
    assert mc_hi.histogram == {0: 0.25, 1: 0.75}
    d = mc.to_dict()
    assert d["counts"] == [2, 3, 1, 1] and d["mean_modes"] == pytest.approx(7 / 4)


def test_mode_counts_rejects_bad_input():
    with pytest.raises(ValueError, match="texts_by_problem"):
        mode_counts_per_problem([])
    with pytest.raises(ValueError, match=r"texts_by_problem\[1\] is empty"):
        mode_counts_per_problem([["direct: #1"], []])
    with pytest.raises(ValueError, match=r"^min_share=1.5 is invalid: must be a number in \[0, 1\]$"):
        mode_counts_per_problem([["direct: #1"]], min_share=1.5)


# --------------------------------------------------------------------------- summaries


def test_strategy_entropy_hand_worked():
    assert strategy_entropy(["split"] * 5) == 0.0
    assert strategy_entropy(["a", "b", "a", "b"]) == pytest.approx(math.log(2))
    assert strategy_entropy(["a", "b", "c"]) == pytest.approx(math.log(3))
    # 3/4, 1/4: -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335...
    assert strategy_entropy(np.array(["d", "d", "d", "s"])) == pytest.approx(0.5623351446188083)
    with pytest.raises(ValueError, match="labels is empty"):
        strategy_entropy([])
    with pytest.raises(ValueError, match="unhashable"):
        strategy_entropy([[1], [2]])


def test_distinct_fraction():
    texts = ["direct: #12", "direct: #12", "direct: #34", "split: 10*2+2*2=20+4=24 #24"]
    assert distinct_fraction(texts) == 0.75
    assert distinct_fraction(texts, mask_digits=True) == 0.5
    with pytest.raises(ValueError, match="texts is empty"):
        distinct_fraction([])


def test_mode_ari_rejects_length_mismatch():
    with pytest.raises(ValueError, match="labels has length 1"):
        mode_ari(["direct: #1", "direct: #2"], ["direct"])
