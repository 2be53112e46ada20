"""Reasoning-mode diversity of sampled traces (scikit-learn clustering).

NudgeRL (arXiv 2605.15726) Fig. 1 counts the *reasoning modes* per problem: the
number of clusters among a problem's sampled traces. SAGE (arXiv 2605.18864) T2
reports the frequency of reasoning patterns, whose spread :func:`strategy_entropy`
summarises.

Pipeline::

    texts --(strip the leading "<name>:" tag, lowercase, digits -> "0",
    digit runs -> one "0")--> TF-IDF char n-grams (L2 rows) --> agglomerative
    (cosine, average linkage, threshold) or KMeans (k by silhouette)

For problem ``p`` with ``n_p`` samples and mode shares ``s_{p,m}``::

    count_p = |{m : s_{p,m} > 0 and s_{p,m} >= min_share}|

Departures (PAPERS.md does not state the papers' clustering; see also docs/departures.md):

1. the strategy tag is stripped (``strip_tag=True``), else the tag alone recovers
   the labels and the measurement is circular;
2. digits are masked and digit runs collapsed (``mask_digits``,
   ``collapse_numbers``), so clusters follow the steps, not the numbers;
3. mode counts default to agglomerative clustering (threshold 0.3, calibrated on
   the arithmetic testbed): it can return one mode and does not over-split;
4. counts and ARI come from one clustering pooled over all problems
   (:func:`modes_and_ari`).

Why each choice, and the distances it was calibrated on: docs/library/diversity.md.
"""

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
    """Map every decimal digit to ``"0"``: ``"47*86=4042"`` -> ``"00*00=0000"``.

    With ``collapse_numbers=True`` every maximal run of digits becomes one
    ``"0"`` (``"47*86=4042"`` -> ``"0*0=0"``), so number lengths are dropped too.
    """
    return (_NUMBER if collapse_numbers else _DIGIT).sub("0", text)


def strip_strategy_tag(text: str) -> str:
    """Remove the leading strategy tag: ``"split: 40*86+7*86=..."`` -> ``"40*86+7*86=..."``.

    Exactly what is removed: one match, at the very start of ``text``, of the
    regular expression ``\\A\\s*[^\\W\\d_][\\w-]*:\\s*``, i.e. optional
    leading whitespace, then a *word* (a letter followed by any letters,
    digits, ``_`` or ``-``; any name, not only ``direct`` / ``split`` /
    ``round``; any case), then a colon, then the whitespace that follows it.
    Nothing else is touched:

    * only the first tag goes (``"split: round: 1"`` -> ``"round: 1"``);
    * text that does not start with such a word is returned unchanged: no
      tag (``"#4042"``), a colon not right after the first word
      (``"split 4: x"``), or a number before the colon (``"47*86: x"``);
    * a trace that is only a tag (``"direct:"``) becomes ``""``.

    Args:
        text: one trace.

    Returns:
        ``text`` without its leading tag.
    """
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
    """An unfitted :class:`~sklearn.feature_extraction.text.TfidfVectorizer` for traces.

    TF-IDF with sklearn defaults: ``tfidf(t, d) = tf(t, d) * (ln((1+N)/(1+df(t))) + 1)``,
    rows L2-normalised, so Euclidean distance between rows is
    ``sqrt(2 - 2 cos)``.

    Args:
        analyzer: ``"char_wb"`` (default: char n-grams inside word
            boundaries), ``"char"`` or ``"word"``.
        ngram_range: ``(min_n, max_n)`` with ``1 <= min_n <= max_n``.
        mask_digits: map every digit to ``"0"`` before vectorising.
        collapse_numbers: with ``mask_digits``, map every run of digits to
            one ``"0"``, so number lengths stop being features too
            (``40*6+7*6`` and ``40*86+7*86`` get the same shape). Ignored when
            ``mask_digits=False``. Why both are on: docs/library/diversity.md.
        lowercase: lowercase before vectorising.
        strip_tag: remove the leading strategy tag (:func:`strip_strategy_tag`)
            before anything else, so the features never see the strategy's
            name (default). ``False`` keeps the tag (for comparison).
        **tfidf_kwargs: passed to ``TfidfVectorizer`` (e.g. ``min_df``,
            ``max_features``, ``sublinear_tf``); ``preprocessor`` is refused
            (it is built from ``strip_tag`` / ``mask_digits`` /
            ``collapse_numbers`` / ``lowercase``).

    Raises:
        ValueError: on an unknown analyzer, a bad ``ngram_range``, a
            ``preprocessor`` keyword or a keyword ``TfidfVectorizer`` lacks.
    """
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
    """TF-IDF features of traces, fitted on ``texts`` themselves.

    Args:
        texts: N trace strings.
        strip_tag: remove each trace's leading strategy tag before
            featurising (default): see :func:`strip_strategy_tag`.
        analyzer, ngram_range, mask_digits, collapse_numbers, lowercase,
            **tfidf_kwargs: see :func:`build_vectorizer`.

    Returns:
        Sparse CSR matrix of shape ``(N, V)``, rows L2-normalised (an empty
        trace gives an all-zero row).

    Raises:
        ValueError: on an empty / non-string input, bad vectoriser options, or
            when no text yields any n-gram (empty vocabulary).
    """
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
    """Cluster feature rows into reasoning modes.

    ``"kmeans"``: for each ``k`` in ``[k_min, k_max]`` (clamped to
    ``min(k_max, D, N - 1)`` with ``D`` the number of distinct rows) fit
    ``KMeans(k, n_init=10, random_state=seed)`` and keep the ``k`` with the
    highest silhouette ``s = mean_i (b_i - a_i) / max(a_i, b_i)`` (Euclidean,
    i.e. monotone in cosine for L2 rows). Silhouette cannot score one
    cluster, so this never returns fewer than 2 clusters for ``D >= 2``.

    ``"agglomerative"``: ``AgglomerativeClustering(metric="cosine",
    linkage="average", distance_threshold=t)``: merge until the mean cosine
    distance between clusters exceeds ``t``; the number of clusters (1 or
    more) follows from ``t``, ``k_range`` is not used. The default
    ``t = 0.3`` is calibrated on the arithmetic testbed's default features
    (docs/library/diversity.md); recalibrate it for other features and trace
    formats. Needs the dense ``N x N`` distance matrix (``8 N^2`` bytes).

    Degenerate inputs: ``D < 2`` distinct rows -> one cluster; ``N = 2`` and
    ``D = 2`` (silhouette undefined) -> two clusters under kmeans.

    Args:
        X: feature matrix ``(N, V)`` (sparse or dense), e.g. from :func:`featurize_traces`.
        method: ``"kmeans"`` or ``"agglomerative"``.
        k_range: ``(k_min, k_max)``, ``2 <= k_min <= k_max`` (kmeans only).
        seed: KMeans / silhouette-subsampling seed.
        distance_threshold: cosine-distance threshold in ``(0, 2]`` (agglomerative only).
        silhouette_sample_size: rows used to score silhouette when ``N`` is
            larger (``None``: all); keeps the ``O(N^2)`` cost bounded.

    Returns:
        int64 labels of shape ``(N,)``, numbered ``0..K-1`` by decreasing
        cluster size.

    Raises:
        ValueError: on a bad method, ``k_range``, threshold or matrix.
    """
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
    """Reasoning-mode labels of traces: :func:`featurize_traces` then :func:`cluster_features`.

    Args:
        texts: N trace strings.
        k_range, method, seed, distance_threshold, silhouette_sample_size:
            see :func:`cluster_features`.
        strip_tag: cluster the traces without their leading strategy tag
            (default; :func:`strip_strategy_tag`). ``False``: with it.
        **featurize_kwargs: see :func:`featurize_traces` (``analyzer``,
            ``ngram_range``, ``mask_digits``, ...).

    Returns:
        int64 labels of shape ``(N,)`` (0 = largest cluster). Fewer than two
        distinct texts (after tag stripping and masking) -> all zeros.
    """
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
    """Result of :func:`mode_counts_per_problem`.

    Attributes:
        counts: int array ``(P,)``, modes present in each problem's samples.
        histogram: ``{m: fraction of problems with exactly m modes}`` for
            ``m = 1..max(counts)`` (and ``0`` when ``min_share`` left a problem
            with none); fractions sum to 1 (NudgeRL Fig. 1).
        n_modes: number of clusters found on the pooled traces.
        labels_by_problem: per problem, the global mode id of each sample.
    """

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
    """Number of reasoning modes among each problem's samples (NudgeRL Fig. 1).

    The featuriser and the clustering are fitted ONCE on the pooled traces of
    all problems, so mode ids mean the same thing in every problem.
    Malformed samples (garbage) form modes of their own: drop them first
    (verifier status) or raise ``min_share``. Then for
    problem ``p`` with ``n_p`` samples and mode shares
    ``s_{p,m} = |{j : label_{p,j} = m}| / n_p``::

        count_p = |{m : s_{p,m} > 0 and s_{p,m} >= min_share}|

    To report mode counts together with their agreement with strategy
    labels, use :func:`modes_and_ari` (same clustering for both).

    Args:
        texts_by_problem: P lists of trace strings, each non-empty.
        min_share: in ``[0, 1]``; count only modes holding at least this
            share of the problem's samples (0 = every mode present).
        method: ``"agglomerative"`` (default here, unlike
            :func:`cluster_traces`: it can find a single mode, and it does not
            over-split on slips) or ``"kmeans"``.
        k_range, seed, distance_threshold, silhouette_sample_size: see
            :func:`cluster_features`.
        strip_tag: cluster the traces without their leading strategy tag
            (default, so modes are never counted from the strategy's name;
            :func:`strip_strategy_tag`). ``False``: the tagged measurement.
        **featurize_kwargs: see :func:`featurize_traces`.

    Returns:
        :class:`ModeCounts`.

    Raises:
        ValueError: on no problems, an empty problem, a non-string trace or
            ``min_share`` outside ``[0, 1]``.
    """
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
    """Mode counts per problem AND their ARI against strategy labels, from ONE clustering.

    The traces of all problems are pooled, featurised and clustered once
    (exactly as :func:`mode_counts_per_problem`); from those cluster labels:

    * ``count_p`` = number of distinct clusters among problem ``p``'s traces
      (those holding at least ``min_share`` of them), as in
      :func:`mode_counts_per_problem`;
    * ``ari_vs_strategy`` = ``adjusted_rand_score`` between the pooled
      strategy labels and the SAME pooled cluster labels (all traces, whatever
      ``min_share``).

    Pooled, so that the ARI rates the very partition whose per-problem
    restriction gives the counts (why, and what that guarantees:
    docs/library/diversity.md).

    Args:
        texts_by_problem: P non-empty lists of trace strings.
        labels_by_problem: P lists of strategy labels (any hashable; compared
            as ``str``, so ``None`` is a label of its own), with the same
            lengths as ``texts_by_problem``.
        min_share: see :func:`mode_counts_per_problem` (counts only).
        method: ``"agglomerative"`` (default) or ``"kmeans"``.
        k_range, seed, distance_threshold, silhouette_sample_size: see
            :func:`cluster_features`.
        strip_tag: cluster without the strategy tag (default;
            :func:`strip_strategy_tag`); ``False`` for the tagged (close to
            circular) measurement.
        **featurize_kwargs: see :func:`featurize_traces`.

    Returns:
        JSON-ready dict::

            mean_modes         mean of count_p over problems
            histogram          {m: share of problems with exactly m modes}
            n_modes            clusters in the pooled clustering
            counts             [count_p for each problem]
            ari_vs_strategy    float, or None when the labels hold fewer
                               than two distinct values (ARI undefined)
            tag_free           strip_tag (True: the tag was not seen)
            n_traces           number of pooled traces
            labels_by_problem  per problem, the cluster id of each trace
                               (0 = largest cluster), so both numbers can be
                               recomputed

    Raises:
        ValueError: on bad texts (as :func:`mode_counts_per_problem`), labels
            not shaped like the texts, or bad clustering options.
    """
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
    """Adjusted Rand index between unsupervised modes and known strategy labels.

    ``ARI = (RI - E[RI]) / (max RI - E[RI])`` (Hubert & Arabie 1985; sklearn
    ``adjusted_rand_score``): 1 = same partition, about 0 = chance. Checks
    that the clusters of :func:`cluster_traces` recover the testbed's
    strategies before mode counts are trusted. This clusters on its own, with
    :func:`cluster_traces`' defaults (KMeans): for an ARI that rates the very
    clustering the mode counts come from, use :func:`modes_and_ari`.

    Args:
        texts: N traces.
        labels: N strategy labels (any hashable, e.g. ``"split"``).
        strip_tag: cluster without the leading strategy tag (default). The
            testbed's labels are read from that tag, so ``strip_tag=False``
            makes the ARI close to circular (tag-only features score 1.0).
        **cluster_kwargs: passed to :func:`cluster_traces`.

    Raises:
        ValueError: if the lengths differ or the inputs are empty.
    """
    texts = _check_texts("texts", texts)
    if isinstance(labels, str) or not isinstance(labels, (Sequence, np.ndarray)):
        raise ValueError(f"labels={labels!r:.80} is not valid: must be a sequence of N={len(texts)} labels")
    if len(labels) != len(texts):
        raise ValueError(f"labels has length {len(labels)}: must equal len(texts)={len(texts)}")
    pred = cluster_traces(texts, strip_tag=strip_tag, **cluster_kwargs)
    return float(adjusted_rand_score(_label_ids(labels), pred))


def strategy_entropy(labels: Sequence[Hashable]) -> float:
    """Shannon entropy, in nats, of the empirical label distribution.

    ``H = -sum_s p_s ln p_s`` with ``p_s`` the share of label ``s``; 0 for a
    single label, ``ln S`` for ``S`` equally frequent labels (SAGE T2 pattern
    frequencies; NudgeRL strategy spread).

    Raises:
        ValueError: on an empty input or an unhashable label.
    """
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
    """Share of distinct strings: ``|set(texts)| / N``.

    Args:
        texts: N strings.
        mask_digits: compare after mapping digits to ``"0"`` (distinct shapes
            rather than distinct strings).

    Raises:
        ValueError: on an empty input or a non-string element.
    """
    texts = _check_texts("texts", texts)
    if mask_digits:
        texts = [digit_mask(t) for t in texts]
    return len(set(texts)) / len(texts)
