"""Reasoning-mode diversity of sampled traces (scikit-learn clustering).

NudgeRL (arXiv 2605.15726) Fig. 1 counts the *reasoning modes* per problem (clusters among a problem's
sampled traces); SAGE (arXiv 2605.18864) T2 reports pattern frequencies, summarised by :func:`strategy_entropy`.

Pipeline: strip the leading ``"<name>:"`` tag, lowercase, digits -> ``"0"`` (digit runs -> one ``"0"``) -> TF-IDF
char n-grams (L2 rows) -> agglomerative (cosine, average linkage, threshold) or KMeans (k by silhouette).
For problem ``p`` with mode shares ``s_{p,m}``::

    count_p = |{m : s_{p,m} > 0 and s_{p,m} >= min_share}|

Departures (the papers do not state their clustering; see docs/papers/nudgerl.md):

1. the strategy tag is stripped (``strip_tag=True``), else the measurement is circular;
2. digits are masked and digit runs collapsed, so clusters follow the steps, not the numbers;
3. mode counts default to agglomerative clustering (threshold 0.3, calibrated on the testbed);
4. counts and ARI come from one clustering pooled over all problems (:func:`modes_and_ari`).

Why each choice, and the distances it was calibrated on: docs/library/diversity.md."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.stats import entropy as _scipy_entropy
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import adjusted_rand_score, silhouette_score
from sklearn.metrics.pairwise import cosine_distances

from rlvr_lib.validation import check, check_choice, check_int, check_range, is_int

__all__ = [
    "CLUSTER_METHODS",
    "ModeCounts",
    "build_vectorizer",
    "cluster_features",
    "cluster_traces",
    "distinct_fraction",
    "digit_mask",
    "featurize_traces",
    "mode_ari",
    "mode_counts_per_problem",
    "modes_and_ari",
    "strategy_entropy",
    "strip_strategy_tag",
]

CLUSTER_METHODS = ("kmeans", "agglomerative")
_DIGIT = re.compile(r"\d")
_NUMBER = re.compile(r"\d+")
# The strategy tag: at the very start, optional whitespace, a word (a letter,
# then letters / digits / "_" / "-"), a colon, and the whitespace after it.
_TAG = re.compile(r"\A\s*[^\W\d_][\w-]*:\s*")
_ANALYZERS = ("char_wb", "char", "word")


# --------------------------------------------------------------------------- validation


def _check_texts(name: str, texts: Any) -> list[str]:
    if isinstance(texts, np.ndarray) and texts.ndim == 1:
        texts = texts.tolist()
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ValueError(f"{name}={texts!r:.80} is not valid: must be a sequence (list/tuple/1-D array) of strings")
    if len(texts) == 0:
        raise ValueError(f"{name} is empty: must hold at least one string")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"{name}[{i}]={t!r:.80} is a {type(t).__name__}: every element must be a str")
    return list(texts)


def _check_int_pair(name: str, pair: Any, lo: int, first: str, second: str) -> tuple[int, int]:
    """``pair`` as ``(first, second)`` integers with ``lo <= first <= second``."""
    ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and all(is_int(v) for v in pair)
    check(ok and lo <= pair[0] <= pair[1], name, pair, f"({first}, {second}) integers with {lo} <= {first} <= {second}")
    return int(pair[0]), int(pair[1])


# --------------------------------------------------------------------------- features


def digit_mask(text: str, *, collapse_numbers: bool = False) -> str:
    """Digits -> ``"0"`` (``"47*86=4042"`` -> ``"00*00=0000"``); ``collapse_numbers``: digit runs -> one ``"0"``."""
    return (_NUMBER if collapse_numbers else _DIGIT).sub("0", text)


def strip_strategy_tag(text: str) -> str:
    r"""Remove one leading tag matching ``\A\s*[^\W\d_][\w-]*:\s*``: ``"split: 40*86+..."`` -> ``"40*86+..."``."""
    return _TAG.sub("", text, count=1)


@dataclass(frozen=True)
class _TracePreprocessor:
    """Picklable ``preprocessor`` for ``TfidfVectorizer``: strip the tag, lowercase, then mask digits / numbers."""

    lowercase: bool
    mask_digits: bool
    collapse_numbers: bool
    strip_tag: bool = True

    def __call__(self, text: str) -> str:
        if self.strip_tag:
            text = strip_strategy_tag(text)
        if self.lowercase:
            text = text.lower()
        if self.mask_digits:
            text = digit_mask(text, collapse_numbers=self.collapse_numbers)
        return text


def build_vectorizer(
    *,
    analyzer: str = "char_wb",
    ngram_range: tuple[int, int] = (2, 4),
    mask_digits: bool = True,
    collapse_numbers: bool = True,
    lowercase: bool = True,
    strip_tag: bool = True,
    **tfidf_kwargs: Any,
) -> TfidfVectorizer:
    """An unfitted ``TfidfVectorizer`` for traces (sklearn defaults, L2 rows).

    ``tfidf(t, d) = tf(t, d) * (ln((1+N)/(1+df(t))) + 1)``; Euclidean row distance ``sqrt(2 - 2 cos)``.
    ``analyzer`` is ``"char_wb"``, ``"char"`` or ``"word"``; ``**tfidf_kwargs`` go to ``TfidfVectorizer`` except
    ``preprocessor`` (built from the flags). Raises ValueError on a bad option."""
    check_choice("analyzer", analyzer, _ANALYZERS)
    _check_int_pair("ngram_range", ngram_range, 1, "min_n", "max_n")
    if "preprocessor" in tfidf_kwargs:
        raise ValueError(
            "preprocessor=... is not accepted: use strip_tag=, mask_digits=, collapse_numbers=, lowercase= instead"
        )
    allowed = sorted(set(TfidfVectorizer().get_params()) - {"analyzer", "ngram_range", "preprocessor", "lowercase"})
    unknown = sorted(set(tfidf_kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"unknown keyword argument(s) {unknown}: allowed TfidfVectorizer options are {allowed}")
    flags = (
        ("mask_digits", mask_digits), ("collapse_numbers", collapse_numbers), ("lowercase", lowercase),
        ("strip_tag", strip_tag),
    )
    for name, flag in flags:
        check(isinstance(flag, bool), name, flag, "True or False")
    pre = _TracePreprocessor(
        lowercase=lowercase, mask_digits=mask_digits, collapse_numbers=collapse_numbers, strip_tag=strip_tag
    )
    return TfidfVectorizer(
        analyzer=analyzer, ngram_range=tuple(ngram_range), preprocessor=pre, lowercase=False, **tfidf_kwargs
    )


def featurize_traces(
    texts: Sequence[str],
    *,
    analyzer: str = "char_wb",
    ngram_range: tuple[int, int] = (2, 4),
    mask_digits: bool = True,
    collapse_numbers: bool = True,
    lowercase: bool = True,
    strip_tag: bool = True,
    **tfidf_kwargs: Any,
) -> sp.csr_matrix:
    """TF-IDF features of ``texts`` (fitted on them): sparse CSR ``(N, V)``, rows L2-normalised.

    Raises ValueError on empty / non-string input, bad options or an empty vocabulary."""
    texts = _check_texts("texts", texts)
    vec = build_vectorizer(
        analyzer=analyzer,
        ngram_range=ngram_range,
        mask_digits=mask_digits,
        collapse_numbers=collapse_numbers,
        lowercase=lowercase,
        strip_tag=strip_tag,
        **tfidf_kwargs,
    )
    try:
        return sp.csr_matrix(vec.fit_transform(texts))
    except ValueError as err:  # sklearn: "empty vocabulary; perhaps the documents only contain stop words"
        raise ValueError(f"texts={texts[:3]!r}... yield no {analyzer} n-gram in {ngram_range}: {err}") from err


# --------------------------------------------------------------------------- clustering


def _distinct_row_ids(X: sp.csr_matrix) -> np.ndarray:
    """Integer id per row such that equal rows (to 1e-12) get equal ids."""
    X = sp.csr_matrix(X, copy=True)
    X.eliminate_zeros()
    X.sort_indices()
    keys: dict[tuple[bytes, bytes], int] = {}
    ids = np.empty(X.shape[0], dtype=np.int64)
    for r in range(X.shape[0]):
        lo, hi = X.indptr[r], X.indptr[r + 1]
        key = (X.indices[lo:hi].tobytes(), np.round(X.data[lo:hi], 12).tobytes())
        ids[r] = keys.setdefault(key, len(keys))
    return ids


def _relabel_by_size(labels: np.ndarray) -> np.ndarray:
    """Renumber clusters 0..K-1 by decreasing size (ties: first occurrence)."""
    uniq, first, counts = np.unique(labels, return_index=True, return_counts=True)
    order = sorted(range(len(uniq)), key=lambda j: (-counts[j], first[j]))
    remap = {uniq[j]: new for new, j in enumerate(order)}
    return np.array([remap[v] for v in labels], dtype=np.int64)


def cluster_features(
    X: Any,
    *,
    method: str = "kmeans",
    k_range: tuple[int, int] = (2, 8),
    seed: int = 0,
    distance_threshold: float = 0.3,
    silhouette_sample_size: int | None = 2000,
) -> np.ndarray:
    """Cluster feature rows ``X (N, V)`` into reasoning modes; int64 labels ``(N,)``, 0 = largest cluster.

    ``"kmeans"``: ``k`` in ``k_range`` (clamped to ``min(k_max, D, N - 1)``, ``D`` distinct rows) maximising the
    silhouette ``s = mean_i (b_i - a_i) / max(a_i, b_i)``; never fewer than 2 clusters for ``D >= 2``.
    ``"agglomerative"``: cosine, average linkage, merge until cluster distance exceeds ``distance_threshold``
    (in ``(0, 2]``); dense ``N x N`` distances (``8 N^2`` bytes). ``D < 2`` -> one cluster.
    Raises ValueError on a bad method, ``k_range``, threshold or matrix."""
    check_choice("method", method, CLUSTER_METHODS)
    k_min, k_max = _check_int_pair("k_range", k_range, 2, "k_min", "k_max")
    check_int("seed", seed, 0)
    check_range("distance_threshold", distance_threshold, 0, 2, lo_open=True)
    check(
        silhouette_sample_size is None or (is_int(silhouette_sample_size) and silhouette_sample_size >= 3),
        "silhouette_sample_size", silhouette_sample_size, "None or an integer >= 3",
    )
    X = sp.csr_matrix(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"X has shape {X.shape}: must be 2-D with at least one row")
    if not np.all(np.isfinite(X.data)):
        raise ValueError("X contains NaN or inf: features must be finite")
    n = X.shape[0]
    row_ids = _distinct_row_ids(X)
    n_distinct = int(row_ids.max()) + 1
    if n_distinct < 2:
        return np.zeros(n, dtype=np.int64)

    if method == "agglomerative":
        model = AgglomerativeClustering(
            n_clusters=None, metric="precomputed", linkage="average", distance_threshold=float(distance_threshold)
        )
        # Cosine distances from the sparse rows (an all-zero row is at distance 1 from all).
        return _relabel_by_size(model.fit_predict(cosine_distances(X)))

    hi = min(k_max, n_distinct, n - 1)
    if hi < 2:  # n == 2, two distinct rows: silhouette undefined, keep them apart
        return _relabel_by_size(row_ids)
    lo = min(k_min, hi)
    # KMeans on the distinct rows weighted by multiplicity minimises the same
    # objective as on all rows, and is much cheaper (traces repeat a lot once
    # digits are masked); the silhouette is scored on all rows.
    _, first = np.unique(row_ids, return_index=True)
    weights = np.bincount(row_ids).astype(np.float64)
    X_distinct = X[first]
    best_labels, best_score = None, -np.inf
    sample = None if silhouette_sample_size is None or n <= silhouette_sample_size else silhouette_sample_size
    for k in range(lo, hi + 1):
        km = KMeans(n_clusters=k, n_init=10, random_state=int(seed))
        labels = km.fit_predict(X_distinct, sample_weight=weights)[row_ids]
        if len(np.unique(labels)) < 2:
            continue
        score = silhouette_score(X, labels, metric="euclidean", sample_size=sample, random_state=int(seed))
        if score > best_score:
            best_labels, best_score = labels, score
    if best_labels is None:
        return np.zeros(n, dtype=np.int64)
    return _relabel_by_size(best_labels)


def cluster_traces(
    texts: Sequence[str],
    *,
    k_range: tuple[int, int] = (2, 8),
    method: str = "kmeans",
    seed: int = 0,
    distance_threshold: float = 0.3,
    silhouette_sample_size: int | None = 2000,
    strip_tag: bool = True,
    **featurize_kwargs: Any,
) -> np.ndarray:
    """Mode labels of traces: :func:`featurize_traces` then :func:`cluster_features`; int64 ``(N,)``."""
    texts = _check_texts("texts", texts)
    X = featurize_traces(texts, strip_tag=strip_tag, **featurize_kwargs)
    return cluster_features(
        X,
        method=method,
        k_range=k_range,
        seed=seed,
        distance_threshold=distance_threshold,
        silhouette_sample_size=silhouette_sample_size,
    )


# --------------------------------------------------------------------------- per-problem modes


@dataclass(frozen=True)
class ModeCounts:
    """Result of :func:`mode_counts_per_problem`: ``counts (P,)``, ``histogram`` {m: share of problems}, ``n_modes``
    (pooled clusters) and ``labels_by_problem`` (global mode ids)."""

    counts: np.ndarray
    histogram: dict[int, float]
    n_modes: int
    labels_by_problem: list[np.ndarray]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (lists and plain numbers)."""
        return {
            "counts": [int(c) for c in self.counts],
            "histogram": {int(m): float(f) for m, f in self.histogram.items()},
            "n_modes": int(self.n_modes),
            "mean_modes": float(np.mean(self.counts)),
        }


def _check_texts_by_problem(texts_by_problem: Any) -> list[list[str]]:
    if isinstance(texts_by_problem, str) or not isinstance(texts_by_problem, Sequence) or len(texts_by_problem) == 0:
        raise ValueError(
            f"texts_by_problem={texts_by_problem!r:.80} is not valid: must be a non-empty list of lists of strings"
        )
    return [_check_texts(f"texts_by_problem[{i}]", t) for i, t in enumerate(texts_by_problem)]


def _pooled_modes(
    per: list[list[str]], min_share: float, cluster_kwargs: dict[str, Any]
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, dict[int, float]]:
    """One clustering of the pooled traces; ``(labels, labels_by_problem, counts, histogram)``."""
    check_range("min_share", min_share, 0, 1)
    pooled = [t for texts in per for t in texts]
    labels = cluster_traces(pooled, **cluster_kwargs)
    bounds = np.cumsum([0] + [len(t) for t in per])
    labels_by_problem = [labels[bounds[i] : bounds[i + 1]] for i in range(len(per))]
    counts = np.empty(len(per), dtype=np.int64)
    for i, lab in enumerate(labels_by_problem):
        shares = np.bincount(lab) / len(lab)
        counts[i] = int(np.sum((shares > 0) & (shares >= min_share)))
    start = 0 if counts.min() == 0 else 1
    histogram = {m: float(np.mean(counts == m)) for m in range(start, int(counts.max()) + 1)}
    return labels, labels_by_problem, counts, histogram


def mode_counts_per_problem(
    texts_by_problem: Sequence[Sequence[str]],
    *,
    min_share: float = 0.0,
    method: str = "agglomerative",
    k_range: tuple[int, int] = (2, 8),
    seed: int = 0,
    distance_threshold: float = 0.3,
    silhouette_sample_size: int | None = 2000,
    strip_tag: bool = True,
    **featurize_kwargs: Any,
) -> ModeCounts:
    """Modes among each problem's samples (NudgeRL Fig. 1), from one clustering of the pooled traces.

    ``count_p = |{m : s_{p,m} > 0 and s_{p,m} >= min_share}|`` with ``s_{p,m} = |{j : label_{p,j} = m}| / n_p``.
    Malformed samples form modes of their own: drop them first or raise ``min_share``.
    Raises ValueError on no problems, an empty problem, a non-string trace or ``min_share`` outside ``[0, 1]``."""
    per = _check_texts_by_problem(texts_by_problem)
    labels, labels_by_problem, counts, histogram = _pooled_modes(
        per,
        min_share,
        dict(
            method=method,
            k_range=k_range,
            seed=seed,
            distance_threshold=distance_threshold,
            silhouette_sample_size=silhouette_sample_size,
            strip_tag=strip_tag,
            **featurize_kwargs,
        ),
    )
    return ModeCounts(
        counts=counts, histogram=histogram, n_modes=int(labels.max()) + 1, labels_by_problem=labels_by_problem
    )


def _label_ids(labels: Sequence[Hashable]) -> np.ndarray:
    """Integer class ids of labels compared as ``str`` (so ``None`` is a class of its own)."""
    return np.unique(np.asarray([str(v) for v in labels]), return_inverse=True)[1]


def modes_and_ari(
    texts_by_problem: Sequence[Sequence[str]],
    labels_by_problem: Sequence[Sequence[Hashable]],
    *,
    min_share: float = 0.0,
    method: str = "agglomerative",
    k_range: tuple[int, int] = (2, 8),
    seed: int = 0,
    distance_threshold: float = 0.3,
    silhouette_sample_size: int | None = 2000,
    strip_tag: bool = True,
    **featurize_kwargs: Any,
) -> dict[str, Any]:
    """Mode counts per problem and their ARI against strategy labels, from ONE pooled clustering.

    Returns a JSON-ready dict: ``mean_modes``, ``histogram``, ``n_modes``, ``counts``, ``ari_vs_strategy`` (None
    when labels hold fewer than two values), ``tag_free``, ``n_traces``, ``labels_by_problem``.
    Labels are compared as ``str``. Raises ValueError on bad texts, mis-shaped labels or bad options."""
    per = _check_texts_by_problem(texts_by_problem)
    if isinstance(labels_by_problem, str) or not isinstance(labels_by_problem, Sequence):
        raise ValueError(
            f"labels_by_problem={labels_by_problem!r:.80} is not valid: must be a list of P={len(per)} lists of labels"
        )
    if len(labels_by_problem) != len(per):
        raise ValueError(
            f"labels_by_problem has {len(labels_by_problem)} problems: must equal len(texts_by_problem)={len(per)}"
        )
    for i, (texts, labs) in enumerate(zip(per, labels_by_problem)):
        if isinstance(labs, str) or not isinstance(labs, (Sequence, np.ndarray)) or len(labs) != len(texts):
            raise ValueError(
                f"labels_by_problem[{i}]={labs!r:.80} is not valid: must be a list of {len(texts)} labels "
                f"(one per trace of texts_by_problem[{i}])"
            )
    check(isinstance(strip_tag, bool), "strip_tag", strip_tag, "True or False")
    labels, labels_by_problem_out, counts, histogram = _pooled_modes(
        per,
        min_share,
        dict(
            method=method,
            k_range=k_range,
            seed=seed,
            distance_threshold=distance_threshold,
            silhouette_sample_size=silhouette_sample_size,
            strip_tag=strip_tag,
            **featurize_kwargs,
        ),
    )
    truth = _label_ids([v for labs in labels_by_problem for v in labs])
    ari = float(adjusted_rand_score(truth, labels)) if truth.max() > 0 else None
    return {
        "mean_modes": float(np.mean(counts)),
        "histogram": {int(m): float(f) for m, f in histogram.items()},
        "n_modes": int(labels.max()) + 1,
        "counts": [int(c) for c in counts],
        "ari_vs_strategy": ari,
        "tag_free": strip_tag,
        "n_traces": int(len(labels)),
        "labels_by_problem": [[int(v) for v in lab] for lab in labels_by_problem_out],
    }


# --------------------------------------------------------------------------- scalar summaries


def mode_ari(
    texts: Sequence[str], labels: Sequence[Hashable], *, strip_tag: bool = True, **cluster_kwargs: Any
) -> float:
    """ARI between :func:`cluster_traces` modes (its own clustering) and strategy labels.

    ``ARI = (RI - E[RI]) / (max RI - E[RI])`` (Hubert & Arabie 1985): 1 = same partition, about 0 = chance.
    Raises ValueError if lengths differ or inputs are empty."""
    texts = _check_texts("texts", texts)
    if isinstance(labels, str) or not isinstance(labels, (Sequence, np.ndarray)):
        raise ValueError(f"labels={labels!r:.80} is not valid: must be a sequence of N={len(texts)} labels")
    if len(labels) != len(texts):
        raise ValueError(f"labels has length {len(labels)}: must equal len(texts)={len(texts)}")
    pred = cluster_traces(texts, strip_tag=strip_tag, **cluster_kwargs)
    return float(adjusted_rand_score(_label_ids(labels), pred))


def strategy_entropy(labels: Sequence[Hashable]) -> float:
    """Entropy in nats of the label distribution: ``H = -sum_s p_s ln p_s`` (SAGE T2; NudgeRL strategy spread)."""
    if isinstance(labels, str) or not isinstance(labels, (Sequence, np.ndarray)):
        raise ValueError(f"labels={labels!r:.80} is not valid: must be a sequence of hashable labels")
    if len(labels) == 0:
        raise ValueError("labels is empty: must hold at least one label")
    try:
        counts = np.array(list(Counter(labels.tolist() if isinstance(labels, np.ndarray) else labels).values()))
    except TypeError as err:
        raise ValueError(f"labels contains an unhashable element: {err}") from err
    return float(_scipy_entropy(counts))


def distinct_fraction(texts: Sequence[str], *, mask_digits: bool = False) -> float:
    """Share of distinct strings ``|set(texts)| / N`` (``mask_digits``: of distinct digit shapes)."""
    texts = _check_texts("texts", texts)
    if mask_digits:
        texts = [digit_mask(t) for t in texts]
    return len(set(texts)) / len(texts)
