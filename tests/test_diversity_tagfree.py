"""Tag-free reasoning-mode clustering (rlvr_lib.eval.diversity).

A testbed completion names its strategy in its first token (``split: ...``)
and the strategy labels are read from that token, so clustering traces that
still carry it measures the label, not the reasoning. These tests check that
the default clustering never sees the tag, that ``strip_tag=False`` still
does (for comparison), and that :func:`modes_and_ari` reports mode counts
and ARI from one and the same clustering.

Traces come from the testbed's own oracle (``solution_trace``).
"""

from __future__ import annotations

import inspect
import pickle

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from rlvr_lib.eval.diversity import (
    build_vectorizer,
    cluster_traces,
    featurize_traces,
    mode_ari,
    mode_counts_per_problem,
    modes_and_ari,
    strip_strategy_tag,
)
from rlvr_lib.tasks.arithmetic import STRATEGIES, solution_trace

METHODS = ("kmeans", "agglomerative")
# Tags that name no testbed strategy: the strip must not depend on the three names.
OTHER_TAGS = ("carry", "Estimate", "two-step_2")


def _problems(n: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        a, b = int(rng.integers(11, 100)), int(rng.integers(2, 100))
        if a % 10:
            out.append((a, b))
    return out


def _body(a: int, b: int, strategy: str) -> str:
    return solution_trace(a, b, strategy).split(": ", 1)[1]


# --------------------------------------------------------------------------- the strip itself


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("split: 40*86+7*86=3440+602=4042 #4042", "40*86+7*86=3440+602=4042 #4042"),
        ("direct: #4042", "#4042"),
        ("  Round:\t50*86-3*86=4300-258=4042 #4042", "50*86-3*86=4300-258=4042 #4042"),
        ("carry: 1+2=3 #3", "1+2=3 #3"),  # any name, not only the strategies
        ("two-step_2:1*2=2 #2", "1*2=2 #2"),  # letters, digits, '_', '-'; no space needed
        ("split: round: 1", "round: 1"),  # only the first tag
        ("direct:", ""),
        ("#4042", "#4042"),  # no tag: unchanged
        ("split 4: x", "split 4: x"),  # colon not right after the first word
        ("47*86: x", "47*86: x"),  # starts with a number
        ("_x: 1", "_x: 1"),  # a word starts with a letter
        ("1*2=2 #2 note: x", "1*2=2 #2 note: x"),  # a colon later in the text
    ],
)
def test_strip_strategy_tag_removes_exactly_the_leading_tag(text, expected):
    assert strip_strategy_tag(text) == expected


def test_tag_free_is_the_default_of_every_measuring_function():
    for fn in (build_vectorizer, featurize_traces, cluster_traces, mode_counts_per_problem, mode_ari, modes_and_ari):
        assert inspect.signature(fn).parameters["strip_tag"].default is True, fn.__name__


def test_vectorizer_with_strip_tag_pickles():
    vec = build_vectorizer().fit(["direct: #12", "split: 10*3+2*3=30+6=36 #36"])
    vec2 = pickle.loads(pickle.dumps(vec))
    np.testing.assert_allclose(
        vec.transform(["round: 10*3+2*3=30+6=36 #36"]).toarray(),
        vec2.transform(["split: 10*3+2*3=30+6=36 #36"]).toarray(),
    )
    with pytest.raises(ValueError, match=r"^strip_tag='yes' is invalid: must be True or False$"):
        build_vectorizer(strip_tag="yes")


# --------------------------------------------------------------------------- tag-only differences


@pytest.fixture(scope="module")
def tag_only():
    """Traces that differ only in their tag: the same body, one of 6 tags."""
    tags = STRATEGIES + OTHER_TAGS
    texts, labels = [], []
    for a, b in _problems(20, seed=1):
        for t in tags:
            texts.append(f"{t}: #{a * b}")  # the direct body: nothing but the answer
            labels.append(t)
    return texts, labels


@pytest.mark.parametrize("method", METHODS)
def test_tagged_clustering_reads_the_tag(tag_only, method):
    texts, labels = tag_only
    assert mode_ari(texts, labels, method=method, strip_tag=False) == pytest.approx(1.0)


@pytest.mark.parametrize("method", METHODS)
def test_tag_free_clustering_puts_tag_only_differences_in_one_cluster(tag_only, method):
    texts, labels = tag_only
    X = featurize_traces(texts).toarray()
    np.testing.assert_allclose(X, np.broadcast_to(X[0], X.shape))  # identical rows
    np.testing.assert_array_equal(cluster_traces(texts, method=method), 0)
    assert mode_ari(texts, labels, method=method) == 0.0
    # default call, no strip_tag given: one mode per problem
    per = [texts[i : i + 6] for i in range(0, len(texts), 6)]
    assert mode_counts_per_problem(per, method=method).counts.tolist() == [1] * len(per)


# --------------------------------------------------------------------------- tag-swapped traces


@pytest.fixture(scope="module")
def tag_swapped():
    """Every (body strategy, tag) pair equally often: the tag says nothing about the body."""
    texts, body_labels, tag_labels = [], [], []
    for a, b in _problems(40, seed=2):
        for body in STRATEGIES:
            for tag in STRATEGIES:
                texts.append(f"{tag}: {_body(a, b, body)}")
                body_labels.append(body)
                tag_labels.append(tag)
    return texts, body_labels, tag_labels


@pytest.mark.parametrize("method", METHODS)
def test_tag_free_clusters_follow_the_body_not_the_tag(tag_swapped, method):
    texts, body_labels, tag_labels = tag_swapped
    pred = cluster_traces(texts, method=method)
    assert len(set(pred.tolist())) == 3
    assert adjusted_rand_score(body_labels, pred) == pytest.approx(1.0)
    assert abs(adjusted_rand_score(tag_labels, pred)) < 0.01
    # modes_and_ari sees the same thing
    per = [texts[i : i + 9] for i in range(0, len(texts), 9)]
    per_body = [body_labels[i : i + 9] for i in range(0, len(texts), 9)]
    per_tag = [tag_labels[i : i + 9] for i in range(0, len(texts), 9)]
    assert modes_and_ari(per, per_body, method=method)["ari_vs_strategy"] == pytest.approx(1.0)
    assert abs(modes_and_ari(per, per_tag, method=method)["ari_vs_strategy"]) < 0.01


@pytest.mark.parametrize("method", METHODS)
def test_tagged_clusters_are_pulled_by_the_tag(tag_swapped, method):
    # The contrast that makes the test above meaningful: with the tag kept,
    # the clusters no longer follow the body alone and carry tag information.
    texts, body_labels, tag_labels = tag_swapped
    pred = cluster_traces(texts, method=method, strip_tag=False)
    assert adjusted_rand_score(body_labels, pred) < 0.9
    assert adjusted_rand_score(tag_labels, pred) > 0.05


# --------------------------------------------------------------------------- one clustering for counts and ARI


def _hand_made():
    """3 problems; clean oracle traces, labels = the strategy of the body."""
    p0 = [("split", 47, 86)] * 4
    p1 = [("split", 23, 45)] * 2 + [("round", 23, 45)] * 2
    p2 = [("direct", 38, 7), ("direct", 38, 7), ("split", 38, 7), ("round", 38, 7)]
    texts = [[solution_trace(a, b, s) for s, a, b in p] for p in (p0, p1, p2)]
    labels = [[s for s, _, _ in p] for p in (p0, p1, p2)]
    return texts, labels


def _check_consistent(res, labels):
    """Counts and ARI both follow from the returned cluster labels."""
    clusters = res["labels_by_problem"]
    assert res["counts"] == [len(set(c)) for c in clusters]
    assert res["mean_modes"] == pytest.approx(np.mean(res["counts"]))
    assert res["n_modes"] == len({v for c in clusters for v in c})
    flat = [v for c in clusters for v in c]
    assert res["ari_vs_strategy"] == pytest.approx(adjusted_rand_score([v for lab in labels for v in lab], flat))


def test_modes_and_ari_recovers_strategies_consistently():
    texts, labels = _hand_made()
    res = modes_and_ari(texts, labels)
    assert res["tag_free"] is True and res["n_traces"] == 12
    assert res["ari_vs_strategy"] == pytest.approx(1.0)
    # ARI 1 with min_share=0: the modes are the strategies, so counts = distinct labels
    assert res["counts"] == [1, 2, 3] == [len(set(lab)) for lab in labels]
    assert res["histogram"] == {1: pytest.approx(1 / 3), 2: pytest.approx(1 / 3), 3: pytest.approx(1 / 3)}
    assert res["n_modes"] == 3
    _check_consistent(res, labels)
    # same counts as mode_counts_per_problem with the same options
    assert mode_counts_per_problem(texts).counts.tolist() == res["counts"]


def test_modes_and_ari_merged_clusters_lower_both_numbers():
    # Tag-free distances here: split-round 0.57, direct-others 0.78.
    texts, labels = _hand_made()
    # threshold above every distance: one cluster, so 1 mode everywhere and ARI 0
    one = modes_and_ari(texts, labels, distance_threshold=1.0)
    assert one["counts"] == [1, 1, 1] and one["n_modes"] == 1
    assert one["ari_vs_strategy"] == 0.0
    _check_consistent(one, labels)
    # threshold between the two: split and round merge, direct stays apart
    two = modes_and_ari(texts, labels, distance_threshold=0.65)
    assert two["counts"] == [1, 1, 2] and two["n_modes"] == 2
    # hand-computed ARI: truth 2 direct, 7 split, 3 round vs clusters {d} / {s, r}
    # contingency rows (d, s, r) x cols (D, SR): [[2, 0], [0, 7], [0, 3]]
    # sum_ij C(n_ij, 2) = 1 + 21 + 3 = 25; rows: 1 + 21 + 3 = 25; cols: 1 + 45 = 46; C(12, 2) = 66
    expected = (25 - 25 * 46 / 66) / (0.5 * (25 + 46) - 25 * 46 / 66)  # = 0.419
    assert two["ari_vs_strategy"] == pytest.approx(expected)
    _check_consistent(two, labels)


@pytest.mark.parametrize("method", METHODS)
def test_modes_and_ari_is_one_clustering_whatever_the_method(method):
    texts, labels = _hand_made()
    _check_consistent(modes_and_ari(texts, labels, method=method), labels)
    _check_consistent(modes_and_ari(texts, labels, method=method, strip_tag=False), labels)
    assert modes_and_ari(texts, labels, method=method, strip_tag=False)["tag_free"] is False


def test_modes_and_ari_min_share_affects_counts_only():
    texts, labels = _hand_made()
    full = modes_and_ari(texts, labels)
    high = modes_and_ari(texts, labels, min_share=0.3)
    assert high["counts"] == [1, 2, 1]  # in problem 2 each mode holds 1/4 or 2/4
    assert high["ari_vs_strategy"] == full["ari_vs_strategy"]
    assert high["labels_by_problem"] == full["labels_by_problem"]


def test_modes_and_ari_single_label_gives_none():
    texts, _ = _hand_made()
    res = modes_and_ari(texts, [["x"] * len(t) for t in texts])
    assert res["ari_vs_strategy"] is None
    assert res["counts"] == [1, 2, 3]


def test_modes_and_ari_rejects_misshaped_labels():
    texts, labels = _hand_made()
    with pytest.raises(ValueError, match=r"labels_by_problem has 2 problems: must equal len\(texts_by_problem\)=3"):
        modes_and_ari(texts, labels[:2])
    with pytest.raises(ValueError, match=r"labels_by_problem\[1\]=.* must be a list of 4 labels"):
        modes_and_ari(texts, [labels[0], labels[1][:3], labels[2]])
    with pytest.raises(ValueError, match="labels_by_problem="):
        modes_and_ari(texts, "split")
    with pytest.raises(ValueError, match=r"texts_by_problem\[1\] is empty"):
        modes_and_ari([["direct: #1"], []], [["direct"], []])
    with pytest.raises(ValueError, match=r"^min_share=2 is invalid"):
        modes_and_ari(texts, labels, min_share=2)
