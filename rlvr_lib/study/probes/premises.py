"""The premises of the four methods, measured on a policy before any method runs (reported, not gates).

1. NudgeRL (arXiv 2605.15726, Fig 1) -- :func:`single_strategy_share`: share of problems on which ``k = 8``
   naive samples all show one strategy (exact, hypergeometric).
2. 3PO (arXiv 2608.09805, Fig 1) -- :func:`branch_flip_by_ess`: per ESS, the share of prompts whose top branch
   token changes under ``w = m + sigma(ESS) z``; :func:`ess_by_noise_rule` picks 3PO's training ESS.
3. SAGE (arXiv 2605.18864) -- :func:`branch_entropy_percentiles`: token-entropy percentiles, branch vs rest.
4. VIGOR (arXiv 2605.09920) -- :func:`vigor_spearman`: Spearman correlation of ``S = -sqrt(T) ||g||`` with
   correctness, pooled and within problems.

:func:`measure_premises` returns all four as one JSON-ready dict (notebook 00). Departures: the testbed's
strategy label stands in for NudgeRL's clusters of traces; 3PO's noise formula and VIGOR's truncation rule are
restated here so this module sits below `rlvr_lib.methods`. Details: docs/study/premises.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlvr_lib.study.stats import _check_common, _percentile, _Shown, bootstrap_ci
from rlvr_lib.eval.weight_noise import branch_logits, order_changed, strategy_tokens, weight_sample
from rlvr_lib.validation import check, check_choice, check_int, check_range, invalid

__all__ = [
    "DEFAULT_ESS_GRID",
    "DEFAULT_FLIP_BAND",
    "branch_entropy_percentiles",
    "branch_flip_by_ess",
    "completion_entropies",
    "entropy_percentiles",
    "ess_by_flip_rule",
    "ess_by_noise_rule",
    "MAX_NOISY_MALFORMED",
    "MIN_NOISY_ACCURACY_RATIO",
    "noisy_rollout_quality",
    "ivon_initial_sigma",
    "measure_premises",
    "next_flip_ess",
    "score_correctness_spearman",
    "single_strategy_probs",
    "single_strategy_share",
    "truncated_to_problem_min",
    "vigor_score_correctness",
    "vigor_scores",
    "vigor_spearman",
]

DEFAULT_ESS_GRID: tuple[float, ...] = (1e9, 3e8, 1e8, 3e7, 1e7, 3e6, 1e6, 3e5, 1e5)
"""ESS values measured by :func:`measure_premises`: 1e9 (the authors') down to 1e5 in half decades."""

DEFAULT_FLIP_BAND: tuple[float, float] = (0.05, 0.20)
"""The band of :func:`ess_by_flip_rule`: 5% to 20% of prompts change their top strategy token."""

MAX_NOISY_MALFORMED = 0.1
""":func:`ess_by_noise_rule`: largest malformed rate of rollouts at a weight sample."""
MIN_NOISY_ACCURACY_RATIO = 0.9
""":func:`ess_by_noise_rule`: least accuracy of rollouts at a weight sample, as a share of the mean weights'."""


# ------------------------------------------------------------------------------ NudgeRL
def _strategy_count_matrix(strategy_counts: Mapping[str, Sequence[int]]) -> tuple[list[str], np.ndarray]:
    """``(labels, (S, P) int array)`` from ``{strategy: [count per problem]}``, validated."""
    if not isinstance(strategy_counts, Mapping) or not strategy_counts:
        raise invalid("strategy_counts", strategy_counts,
                      "a non-empty mapping {strategy: [count per problem]} (evaluate_policy's 'strategy_counts')")
    labels = list(strategy_counts)
    rows = []
    for s in labels:
        counts = strategy_counts[s]
        try:
            arr = np.asarray(counts)
        except (TypeError, ValueError):
            arr = None
        ok = (arr is not None and arr.ndim == 1 and arr.size > 0
              and (arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and np.all(np.isfinite(arr))
                                              and np.all(arr == np.round(arr)))) and np.all(arr >= 0))
        if not ok:
            raise invalid(f"strategy_counts[{s!r}]", counts, "a non-empty 1-D sequence of non-negative integer counts")
        rows.append(arr.astype(np.int64))
    lengths = {len(r) for r in rows}
    if len(lengths) != 1:
        raise invalid("strategy_counts", {s: len(r) for s, r in zip(labels, rows)},
                      "one count per problem for every strategy (lists of equal length)")
    return labels, np.stack(rows)


def single_strategy_probs(strategy_counts: Mapping[str, Sequence[int]], k: int = 8) -> np.ndarray:
    """Per problem, the probability that ``k`` of its samples all show one strategy: ``(P,)`` float64.

    Hypergeometric, ``c_{s,p}`` samples of strategy ``s`` among ``n_p = sum_s c_{s,p}`` (``"none"`` counts in
    ``n_p`` only)::

        q_p = sum_{s != "none"} C(c_{s,p}, k) / C(n_p, k)

    an unbiased estimate of ``sum_s pi_{s,p}^k`` (docs/study/premises.md).

    Args:
        strategy_counts: ``{strategy: [count per problem]}`` as `evaluate_policy` stores it, ``"none"`` included.
        k: Samples drawn, ``1 <= k <= n_p`` for every problem.

    Raises:
        ValueError: on an empty or ragged mapping, a bad count, or ``k`` above some ``n_p``.
    """
    labels, counts = _strategy_count_matrix(strategy_counts)
    k = check_int("k", k, 1)
    n = counts.sum(0)
    if int(n.min()) < k:
        p = int(np.argmin(n))
        raise invalid("k", k, f"at most every problem's number of samples (problem {p} has {int(n[p])})")
    shown = [i for i, s in enumerate(labels) if s != "none"]
    total = np.array([math.comb(int(m), k) for m in n], dtype=object)
    same = np.array([sum(math.comb(int(counts[i, p]), k) for i in shown) for p in range(counts.shape[1])],
                    dtype=object)
    return np.array([float(a / b) for a, b in zip(same, total)], dtype=np.float64)  # exact ratio, then rounded


def single_strategy_share(strategy_counts: Mapping[str, Sequence[int]], k: int = 8) -> float:
    """NudgeRL's premise (Fig 1): expected share of problems where ``k`` naive samples show one strategy.

        share = (1 / P) sum_p sum_{s != "none"} C(c_{s,p}, k) / C(n_p, k)      (mean of :func:`single_strategy_probs`)
    """
    return float(single_strategy_probs(strategy_counts, k).mean())


# ------------------------------------------------------------------------------ 3PO
def ivon_initial_sigma(ess: float, hess_init: float = 1e-3, weight_decay: float = 1e-6) -> float:
    """IVON's initial per-weight noise std at effective sample size ``ess``: ``1 / sqrt(ess * (h0 + wd))``.

    As `rlvr_lib.methods.threepo.initial_sigma` (arXiv 2608.09805); defaults are the authors' ``hess_init`` 1e-3
    and weight decay 1e-6.
    """
    ess = check_range("ess", ess, 0.0, lo_open=True)
    hess_init = check_range("hess_init", hess_init, 0.0, lo_open=True)
    weight_decay = check_range("weight_decay", weight_decay, 0.0)
    return 1.0 / math.sqrt(ess * (hess_init + weight_decay))


def _check_ess_grid(ess_grid: Sequence[float]) -> list[float]:
    if isinstance(ess_grid, (str, bytes)) or not isinstance(ess_grid, Sequence) or not ess_grid:
        raise invalid("ess_grid", ess_grid, "a non-empty sequence of distinct ESS values > 0")
    grid = [check_range("ess_grid", e, 0.0, lo_open=True) for e in ess_grid]
    check(len(set(grid)) == len(grid), "ess_grid", list(ess_grid), "distinct ESS values > 0")
    return grid


def _check_band(band: tuple[float, float]) -> tuple[float, float]:
    try:
        lo, hi = band
    except (TypeError, ValueError):
        raise invalid("band", band, "a pair (lo, hi) with 0 <= lo <= hi <= 1") from None
    lo = check_range("band[0]", lo, 0.0, 1.0)
    hi = check_range("band[1]", hi, 0.0, 1.0)
    check(lo <= hi, "band", band, "a pair (lo, hi) with 0 <= lo <= hi <= 1")
    return lo, hi


def _check_shares(shares_by_ess: Mapping[float, float]) -> dict[float, float]:
    if not isinstance(shares_by_ess, Mapping) or not shares_by_ess:
        raise invalid("shares_by_ess", shares_by_ess, "a non-empty mapping {ess: share of prompts}")
    out = {}
    for ess, share in shares_by_ess.items():
        ess = check_range("shares_by_ess (an ESS)", ess, 0.0, lo_open=True)
        out[ess] = check_range(f"shares_by_ess[{ess!r}]", share, 0.0, 1.0)
    return out


def ess_by_flip_rule(shares_by_ess: Mapping[float, float],
                     band: tuple[float, float] = DEFAULT_FLIP_BAND) -> float | None:
    """The ESS at which 3PO's premise is reported: the LARGEST measured ESS with ``band[0] <= share <= band[1]``.

    ``share`` as in :func:`branch_flip_by_ess`; ``None`` when no measured ESS is in the band. The rule and the
    grid are fixed before measuring (docs/study/premises.md).

    Raises:
        ValueError: on an empty mapping, an ESS <= 0, a share outside ``[0, 1]`` or NaN, or a bad band.
    """
    lo, hi = _check_band(band)
    inside = [ess for ess, share in _check_shares(shares_by_ess).items() if lo <= share <= hi]
    return max(inside) if inside else None


def ess_by_noise_rule(flips: Mapping[str, Any], quality: Mapping[str, Any],
                      band: tuple[float, float] = DEFAULT_FLIP_BAND, *,
                      max_malformed: float = MAX_NOISY_MALFORMED,
                      min_accuracy_ratio: float = MIN_NOISY_ACCURACY_RATIO) -> dict[str, Any]:
    """3PO's training ESS on a policy: noise that moves the branch without breaking the policy.

    An ESS keeps the policy when its rollouts (:func:`noisy_rollout_quality`) have

        malformed_e <= max_malformed   and   accuracy_e >= min_accuracy_ratio * accuracy_mean

    The pick is the largest ESS that keeps the policy with its flip share in ``band`` (premise holds), else the
    smallest ESS that keeps it (premise does not hold), else ``None``. Why: docs/study/premises.md.

    Returns:
        ``{"chosen_ess", "premise_holds", "kept" (largest first), "in_band", "max_malformed",
        "min_accuracy_ratio", "rule"}``.

    Raises:
        ValueError: on bounds outside ``[0, 1]``, a bad band, or ``quality`` missing an ESS of ``flips``.
    """
    lo, hi = _check_band(band)
    max_malformed = check_range("max_malformed", max_malformed, 0.0, 1.0)
    min_accuracy_ratio = check_range("min_accuracy_ratio", min_accuracy_ratio, 0.0, 1.0)
    shares = _check_shares(dict(zip(flips["ess"], flips["share"])))
    measured = dict(zip(quality["ess"], zip(quality["accuracy"], quality["malformed"])))
    missing = [e for e in shares if e not in measured]
    check(not missing, "quality", _Shown(f"<measured at {sorted(measured)}>"),
          f"a measurement at every ESS of flips (missing {missing})")
    floor = min_accuracy_ratio * quality["accuracy_mean"]
    kept = sorted((e for e in shares if measured[e][1] <= max_malformed and measured[e][0] >= floor), reverse=True)
    in_band = sorted((e for e, share in shares.items() if lo <= share <= hi), reverse=True)
    both = [e for e in kept if e in in_band]
    chosen = both[0] if both else (kept[-1] if kept else None)
    return {"chosen_ess": chosen, "premise_holds": bool(both), "kept": kept, "in_band": in_band,
            "max_malformed": max_malformed, "min_accuracy_ratio": min_accuracy_ratio,
            "rule": (f"keeps the policy: malformed <= {max_malformed:g} and accuracy >= {min_accuracy_ratio:g} x the "
                     f"mean weights'; the largest ESS that keeps it with its flip share in [{lo:g}, {hi:g}] "
                     "(premise holds), else the smallest ESS that keeps it (premise does not hold)")}


def noisy_rollout_quality(model, tokenizer, problems: Sequence, ess_values: Sequence[float],
                          sigma_of_ess: Callable[[float], float] = ivon_initial_sigma, *, verify: Callable,
                          samples: int = 8, seed: int = 0, temperature: float = 1.0, max_new_tokens: int = 48,
                          batch_size: int = 256) -> dict[str, Any]:
    """Accuracy and malformed rate of rollouts at weight samples, per ESS (what a B3PO group trains on).

    One completion per problem at each weight sample ``m + sigma_e eps_n`` (``eps_n`` as in
    :func:`branch_flip_by_ess` with the same seed; sampling seed ``seed + n``)::

        accuracy_e  = mean_{n,p} 1[verdict_{n,p} = correct]
        malformed_e = mean_{n,p} 1[verdict_{n,p} = malformed]

    and the same at the mean weights; the weights are restored exactly.

    Returns:
        ``{"ess", "sigma", "accuracy", "malformed"}`` (largest ESS first), ``"accuracy_mean"``,
        ``"malformed_mean"``, ``"samples"``, ``"n_problems"``, ``"seed"``.

    Raises:
        ValueError: on a bad grid, no problems, or a bad ``samples`` / ``seed``.
    """
    from rlvr_lib.tasks import CORRECT, MALFORMED

    grid = sorted(_check_ess_grid(ess_values), reverse=True)
    problems = list(problems)
    if not problems:
        raise invalid("problems", problems, "at least one problem")
    samples = check_int("samples", samples, 1)
    seed = check_int("seed", seed, 0)
    prompts = [p.prompt for p in problems]

    def rates(n: int) -> tuple[float, float]:  # one completion per problem, sampling seed seed + n
        return rates_of(_sample(model, tokenizer, prompts, samples=1, seed=seed + n, temperature=temperature,
                                max_new_tokens=max_new_tokens, batch_size=batch_size).texts)

    def rates_of(texts: Sequence[str]) -> tuple[float, float]:
        status = [verify(p, t).status for p, t in zip(problems, texts)]
        return float(np.mean([s == CORRECT for s in status])), float(np.mean([s == MALFORMED for s in status]))

    mean = [rates(n) for n in range(samples)]
    out: dict[str, list] = {"ess": grid, "sigma": [], "accuracy": [], "malformed": []}
    for ess in grid:
        sigma = check_range("sigma", sigma_of_ess(ess), 0.0)
        gen = torch.Generator().manual_seed(seed)
        per = []
        for n in range(samples):
            with weight_sample(model, sigma, gen):
                per.append(rates(n))
        out["sigma"].append(float(sigma))
        out["accuracy"].append(float(np.mean([a for a, _ in per])))
        out["malformed"].append(float(np.mean([m for _, m in per])))
    return {**out, "accuracy_mean": float(np.mean([a for a, _ in mean])),
            "malformed_mean": float(np.mean([m for _, m in mean])), "samples": samples,
            "n_problems": len(problems), "seed": seed}


def next_flip_ess(shares_by_ess: Mapping[float, float],
                  band: tuple[float, float] = DEFAULT_FLIP_BAND) -> float | None:
    """The ESS to measure next when none is in the band: ``sqrt(e_{j-1} * e_j)`` (the midpoint in log ESS).

    ``e_j`` is the largest ESS with share above the band and ``e_{j-1}`` the next larger measured one; ``None`` when
    an ESS is in the band or there is no such bracket.

    Raises:
        ValueError: as :func:`ess_by_flip_rule`.
    """
    lo, hi = _check_band(band)
    shares = _check_shares(shares_by_ess)
    if any(lo <= s <= hi for s in shares.values()):
        return None
    ordered = sorted(shares, reverse=True)
    above = [j for j, ess in enumerate(ordered) if shares[ess] > hi]
    if not above or above[0] == 0:
        return None
    j = above[0]
    return math.sqrt(ordered[j - 1] * ordered[j])


def branch_flip_by_ess(model, tokenizer, prompts: Sequence[str], ess_grid: Sequence[float],
                       sigma_of_ess: Callable[[float], float] = ivon_initial_sigma, *, samples: int = 8,
                       refine: int = 0, band: tuple[float, float] = DEFAULT_FLIP_BAND,
                       tokens: Sequence[int] | None = None, strategies: Sequence[str] | None = None,
                       seed: int = 0, batch_size: int = 256) -> dict[str, Any]:
    """3PO's premise: per ESS, the share of prompts whose top strategy token changes under weight noise.

    Against the mean weights' branch log-probs ``r_p = log_softmax(z_p)``, for weight samples ``m + sigma_e eps_n``
    (the same ``eps_n`` for every ESS) and ``changed_{n,p}`` = the top candidate differs::

        share_e     = (1 / (N P)) sum_{n,p} changed_{n,p}
        share_any_e = (1 / P) sum_p max_n changed_{n,p}
        mass_e      = mean_{n,p} sum_{c in candidates} p^(n)_{p,c}

    then up to ``refine`` bisections (:func:`next_flip_ess`). Weights are restored exactly. Details:
    docs/study/premises.md.

    Args:
        prompts: ``P`` prompt strings.
        sigma_of_ess: ``ess -> sigma`` (default :func:`ivon_initial_sigma`).
        samples: ``N`` weight samples per ESS.
        tokens: Candidate token ids (default the first tokens of ``strategies``).

    Returns:
        ``{"ess", "sigma", "share", "share_any", "mass"}`` (largest ESS first), ``"refined"``, ``"mass_mean"``,
        ``"samples"``, ``"n_prompts"``, ``"tokens"``, ``"seed"``.

    Raises:
        ValueError: on a bad grid, a ``sigma_of_ess`` value not finite >= 0, or a bad setting.
    """
    grid = _check_ess_grid(ess_grid)
    if not callable(sigma_of_ess):
        raise invalid("sigma_of_ess", sigma_of_ess, "a callable ess -> sigma")
    samples = check_int("samples", samples, 1)
    refine = check_int("refine", refine, 0)
    band = _check_band(band)
    seed = check_int("seed", seed, 0)
    if tokens is None:
        from rlvr_lib.tasks.arithmetic import STRATEGIES

        tokens = strategy_tokens(tokenizer, STRATEGIES if strategies is None else strategies)
    cand = [int(t) for t in tokens]
    ref = torch.log_softmax(branch_logits(model, tokenizer, prompts, batch_size=batch_size), dim=-1)
    order_changed(ref, ref, cand, 1)  # validates the candidates before any sample runs
    idx = torch.tensor(cand, dtype=torch.long)
    rows: dict[float, tuple[float, float, float, float]] = {}  # ess -> (sigma, share, share_any, mass)

    def measure(ess: float) -> None:
        sigma = sigma_of_ess(ess)
        try:
            sigma = check_range("sigma", sigma, 0.0)
        except ValueError:
            raise invalid("sigma_of_ess", sigma_of_ess,
                          f"a callable giving a finite sigma >= 0 (got {sigma!r} at ess={ess!r})") from None
        gen = torch.Generator().manual_seed(seed)
        changed, masses = [], []
        for _ in range(samples):
            with weight_sample(model, sigma, gen):
                noisy = torch.log_softmax(branch_logits(model, tokenizer, prompts, batch_size=batch_size), dim=-1)
            changed.append(order_changed(ref, noisy, cand, 1).numpy())
            masses.append(noisy[:, idx].exp().sum(1).numpy())
        changed = np.stack(changed)  # (N, P)
        rows[ess] = (float(sigma), float(changed.mean()), float(changed.any(axis=0).mean()), float(np.mean(masses)))

    for ess in grid:
        measure(ess)
    refined = []
    for _ in range(refine):
        ess = next_flip_ess({e: r[1] for e, r in rows.items()}, band)
        if ess is None or ess in rows:
            break
        measure(ess)
        refined.append(ess)
    order = sorted(rows, reverse=True)
    return {"ess": order, "sigma": [rows[e][0] for e in order], "share": [rows[e][1] for e in order],
            "share_any": [rows[e][2] for e in order], "mass": [rows[e][3] for e in order], "refined": refined,
            "mass_mean": float(ref[:, idx].exp().sum(1).mean()), "samples": samples, "n_prompts": len(prompts),
            "tokens": cand, "seed": seed}


# ------------------------------------------------------------------------------ sampling shared by SAGE and VIGOR
def _sample(model, tokenizer, prompts: Sequence[str], *, samples: int, seed: int, temperature: float,
            max_new_tokens: int, batch_size: int):
    """``samples`` completions per prompt from `KVCacheEngine` (eval mode, mode restored): `Rollouts`."""
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams

    if isinstance(prompts, (str, bytes)) or not prompts:
        raise invalid("prompts", prompts, "a non-empty sequence of prompt strings")
    params = SamplingParams(n=check_int("samples", samples, 1), temperature=temperature,
                            max_new_tokens=max_new_tokens, seed=check_int("seed", seed, 0))
    was_training = model.training
    model.eval()
    try:
        return KVCacheEngine(model, tokenizer, batch_size=check_int("batch_size", batch_size, 1)).generate(
            list(prompts), params)
    finally:
        model.train(was_training)


# ------------------------------------------------------------------------------ SAGE
@torch.no_grad()
def completion_entropies(model, rollouts, *, temperature: float = 1.0,
                         batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token entropies of sampled completions, teacher-forced: ``(entropy (N, T) float64, mask (N, T) bool)``.

    ``H_{i,t} = -sum_v p_v log p_v`` with ``p = softmax(z_{i,t} / temperature)``; 0 on padding; column 0 is the
    branch token.
    """
    from rlvr_lib.rollout import sequence_logprobs

    check_int("batch_size", batch_size, 1)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        parts = []
        for rows in torch.arange(len(rollouts)).split(batch_size):
            tensors = (rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids, rollouts.completion_mask)
            _, ent = sequence_logprobs(model, *(t[rows].to(device) for t in tensors), temperature=temperature,
                                       with_entropy=True)
            parts.append(ent.double().cpu())
    finally:
        model.train(was_training)
    return torch.cat(parts), rollouts.completion_mask.bool().cpu()


def _check_percentiles(percentiles: Sequence[float]) -> tuple[float, ...]:
    if isinstance(percentiles, (str, bytes)) or not isinstance(percentiles, Sequence) or not percentiles:
        raise invalid("percentiles", percentiles, "a non-empty sequence of numbers in [0, 100]")
    return tuple(check_range("percentiles", q, 0.0, 100.0) for q in percentiles)


def _key(q: float) -> str:
    return f"p{q:g}"


def entropy_percentiles(entropy: Any, mask: Any, percentiles: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
    """Percentiles of token entropies and the entropy at the branch token vs the others (SAGE's tau).

        all[pq]          = percentile_q {H_{i,t}}
        branch[pq]       = percentile_q {H_{i,0}}
        branch_mean      = mean_i H_{i,0},   other_mean = mean_{t >= 1, mask} H_{i,t}
        branch_above[pq] = share of rows with H_{i,0} > all[pq]

    Args:
        entropy: ``(N, T)`` entropies (nats), finite on masked-in tokens.
        mask: ``(N, T)`` 0/1, a prefix of ones per row (every row >= 1 token).

    Returns:
        ``{"all", "branch", "branch_above", "branch_mean", "other_mean", "n_tokens", "n_branch", "percentiles"}``.

    Raises:
        ValueError: on bad shapes, a row without tokens, a non-finite masked-in entropy, or a bad percentile.
    """
    ent = np.asarray(entropy.detach().cpu() if hasattr(entropy, "detach") else entropy, dtype=np.float64)
    m = np.asarray(mask.detach().cpu() if hasattr(mask, "detach") else mask).astype(bool)
    check(ent.ndim == 2 and ent.shape == m.shape and ent.shape[1] >= 1, "entropy",
          _Shown(f"<array of shape {ent.shape}>"),
          f"an (N, T) array shaped like mask {m.shape}, T >= 1")
    check(bool(m[:, 0].all()) and ent.shape[0] >= 1, "mask", _Shown("<a row without tokens>"),
          "at least one completion token per row (mask[:, 0] all 1)")
    qs = _check_percentiles(percentiles)
    values = ent[m]
    check(bool(np.isfinite(values).all()), "entropy", _Shown("<NaN or inf on a token>"),
          "finite entropies on masked-in tokens")
    branch = ent[:, 0]
    other = ent[:, 1:][m[:, 1:]]
    all_q = {_key(q): float(v) for q, v in zip(qs, np.percentile(values, qs))}
    return {
        "all": all_q,
        "branch": {_key(q): float(v) for q, v in zip(qs, np.percentile(branch, qs))},
        "branch_above": {k: float((branch > v).mean()) for k, v in all_q.items()},
        "branch_mean": float(branch.mean()),
        "other_mean": float(other.mean()) if other.size else None,
        "n_tokens": int(values.size),
        "n_branch": int(branch.size),
        "percentiles": list(qs),
    }


def branch_entropy_percentiles(model, tokenizer, prompts: Sequence[str], samples: int = 8,
                               percentiles: Sequence[float] = (50, 90, 99), seed: int = 0, *,
                               temperature: float = 1.0, max_new_tokens: int = 48,
                               batch_size: int = 256) -> dict[str, Any]:
    """SAGE's premise: token-entropy percentiles of the policy's own completions, branch token vs the rest.

    Samples, :func:`completion_entropies` (what the guide ``q = 1 + gamma relu(H - tau)`` reads), then
    :func:`entropy_percentiles`; the premise is ``branch_above["p90"]`` well above 10%.

    Returns:
        :func:`entropy_percentiles`' dict plus ``"samples"``, ``"seed"``, ``"temperature"``.
    """
    check_range("temperature", temperature, 0.0, lo_open=True)
    qs = _check_percentiles(percentiles)
    ro = _sample(model, tokenizer, prompts, samples=samples, seed=seed, temperature=temperature,
                 max_new_tokens=max_new_tokens, batch_size=batch_size)
    ent, mask = completion_entropies(model, ro, temperature=temperature, batch_size=batch_size)
    return {**entropy_percentiles(ent, mask, qs), "samples": samples, "seed": seed, "temperature": float(temperature)}


# ------------------------------------------------------------------------------ VIGOR
def score_correctness_spearman(scores: Any, correct: Any) -> float:
    """Spearman's rank correlation of scores with correctness: ``rho = Pearson(rank(scores), rank(correct))``.

    NaN pairs are dropped; NaN when fewer than two pairs remain or either side is constant.

    Raises:
        ValueError: on shapes that differ or non-numeric values.
    """
    from scipy.stats import spearmanr

    def as_array(name: str, values: Any) -> np.ndarray:
        try:
            return np.asarray(values.detach().cpu() if hasattr(values, "detach") else values, dtype=np.float64)
        except (TypeError, ValueError):
            raise invalid(name, values, "a numeric array (non-numeric or ragged entries given)") from None

    s, c = as_array("scores", scores), as_array("correct", correct)
    check(s.shape == c.shape, "correct", _Shown(f"<array of shape {c.shape}>"),
          f"an array shaped like scores {s.shape}")
    keep = ~(np.isnan(s) | np.isnan(c))
    s, c = s[keep], c[keep]
    if s.size < 2 or np.all(s == s[0]) or np.all(c == c[0]):
        return float("nan")
    return float(spearmanr(s, c).statistic)


def truncated_to_problem_min(scores: np.ndarray, truncated: np.ndarray) -> np.ndarray:
    """``(P, n)`` scores with each truncated completion set to its problem's minimum: ``S_{p,j} <- min_j' S_{p,j'}``."""
    scores = np.asarray(scores, dtype=np.float64)
    truncated = np.asarray(truncated, dtype=bool)
    check(scores.ndim == 2 and truncated.shape == scores.shape, "truncated",
          _Shown(f"<array of shape {truncated.shape}>"),
          f"a bool array shaped like scores {scores.shape}")
    return np.where(truncated, scores.min(axis=1, keepdims=True), scores)


def vigor_scores(model, rollouts, *, sqrt_len: bool = True, impl: str = "auto", batch_size: int = 64) -> np.ndarray:
    """VIGOR's score of each rollout, ``S = -sqrt(T) ||g||`` (``-||g||`` without ``sqrt_len``): ``(N,)`` float64.

    ``g``: gradient of the completion's mean token NLL (`rlvr_lib.rewards.grad_norm_scores`); weights untouched.
    """
    from rlvr_lib.rewards import grad_norm_scores

    check_int("batch_size", batch_size, 1)
    check(isinstance(sqrt_len, bool), "sqrt_len", sqrt_len, "a bool")
    out = []
    for rows in torch.arange(len(rollouts)).split(batch_size):
        norms = -grad_norm_scores(model, rollouts.prompt_ids[rows], rollouts.prompt_mask[rows],
                                  rollouts.completion_ids[rows], rollouts.completion_mask[rows],
                                  sqrt_len=False, impl=impl).double()
        if sqrt_len:  # in float64 from the norm, not grad_norm_scores' float32 product
            norms = norms * rollouts.completion_mask[rows].sum(1).double().sqrt()
        out.append(-norms)
    return torch.cat(out).numpy()


def vigor_spearman(scores: Any, correct: Any, truncated: Any = None, *, confidence: float = 0.95,
                   n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """VIGOR's premise: does the score rank correct completions above wrong ones at the base?

    * ``pooled``: ``rho = spearman({S_{p,j}}, {c_{p,j}})`` over every sample, percentile bootstrap over problems;
    * ``within``: mean over mixed problems of ``rho_p = spearman(S_{p,.}, c_{p,.})``, `bootstrap_ci` over problems.

    Truncated samples take their problem's minimum (:func:`truncated_to_problem_min`).

    Args:
        scores, correct: ``(P, n)`` arrays; truncated: ``(P, n)`` bool or None.

    Returns:
        ``{"pooled", "within" (None when no problem is mixed), "n_mixed", "n_problems", "accuracy",
        "truncated_frac"}``; undefined values are None.

    Raises:
        ValueError: on arrays that are not ``(P, n)`` of one shape, or a bad bootstrap setting.
    """
    s = np.asarray(scores, dtype=np.float64)
    c = np.asarray(correct, dtype=np.float64)
    check(s.ndim == 2 and s.size > 0 and bool(np.isfinite(s).all()), "scores", _Shown(f"<array of shape {s.shape}>"),
          "a non-empty (P, n) array of finite scores")
    check(c.shape == s.shape and bool(np.isin(c, (0.0, 1.0)).all()), "correct", _Shown(f"<array of shape {c.shape}>"),
          f"a 0/1 array shaped like scores {s.shape}")
    t = np.zeros(s.shape, dtype=bool) if truncated is None else np.asarray(truncated)
    check(t.shape == s.shape and t.dtype == bool, "truncated", _Shown(f"<array of shape {t.shape}, {t.dtype}>"),
          f"None or a bool array shaped like scores {s.shape}")
    confidence, n_resamples, seed = _check_common(confidence, n_resamples, seed)
    s = truncated_to_problem_min(s, t)
    P = s.shape[0]

    def none_if_nan(x: float) -> float | None:
        return None if math.isnan(x) else float(x)

    point = score_correctness_spearman(s, c)
    rng = np.random.default_rng(seed)
    stats = np.array([score_correctness_spearman(s[idx], c[idx]) for idx in rng.integers(0, P, size=(n_resamples, P))])
    stats = stats[~np.isnan(stats)]
    lo, hi = _percentile(stats, confidence) if stats.size else (float("nan"), float("nan"))
    pooled = {"mean": none_if_nan(point), "ci_low": none_if_nan(lo), "ci_high": none_if_nan(hi), "n": int(s.size),
              "n_problems": P,
              "method": f"Spearman over all samples, percentile bootstrap over problems (P={P}, B={n_resamples}, "
                        f"{stats.size} defined)"}
    mixed = [p for p in range(P) if 0.0 < c[p].mean() < 1.0]
    rhos = np.array([score_correctness_spearman(s[p], c[p]) for p in mixed])
    rhos = rhos[~np.isnan(rhos)]  # a mixed problem whose scores all tie
    within = None
    if rhos.size:
        within = bootstrap_ci(rhos, confidence=confidence, n_resamples=n_resamples, seed=seed, bounds=(-1.0, 1.0))
        within["method"] = (f"mean of per-problem Spearman over problems with mixed correctness, percentile bootstrap "
                            f"over those problems (n={rhos.size}, B={n_resamples})")
        within["n_problems"] = int(rhos.size)
    return {"pooled": pooled, "within": within, "n_mixed": len(mixed), "n_problems": P,
            "accuracy": float(c.mean()), "truncated_frac": float(t.mean())}


def vigor_score_correctness(model, tokenizer, problems: Sequence, samples: int = 8, seed: int = 0, *,
                            temperature: float = 1.0, max_new_tokens: int = 48, sqrt_len: bool = True,
                            impl: str = "auto", verifier: Callable | None = None, batch_size: int = 256,
                            grad_batch_size: int = 64, confidence: float = 0.95,
                            n_resamples: int = 2000) -> dict[str, Any]:
    """Sample, score, verify: :func:`vigor_spearman`'s dict plus ``"samples"``, ``"sqrt_len"``."""
    from rlvr_lib.tasks import CORRECT
    from rlvr_lib.tasks.arithmetic import verify

    problems = list(problems)
    if not problems:
        raise invalid("problems", problems, "at least one problem")
    verifier = verifier or verify
    ro = _sample(model, tokenizer, [p.prompt for p in problems], samples=samples, seed=seed, temperature=temperature,
                 max_new_tokens=max_new_tokens, batch_size=batch_size)
    shape = (len(problems), samples)
    scores = vigor_scores(model, ro, sqrt_len=sqrt_len, impl=impl, batch_size=grad_batch_size).reshape(shape)
    correct = np.array([verifier(problems[i // samples], text).status == CORRECT
                        for i, text in enumerate(ro.texts)]).reshape(shape)
    truncated = np.array([r == "length" for r in ro.finish_reasons]).reshape(shape)
    out = vigor_spearman(scores, correct, truncated, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return {**out, "samples": samples, "sqrt_len": sqrt_len}


# ------------------------------------------------------------------------------ all four
def measure_premises(model, tokenizer, problems: Sequence, *, task: str = "arith", samples: int = 32, k: int = 8,
                     temperature: float = 1.0, max_new_tokens: int = 48, seed: int = 0,
                     ess_grid: Sequence[float] = DEFAULT_ESS_GRID,
                     sigma_of_ess: Callable[[float], float] = ivon_initial_sigma, weight_samples: int = 8,
                     refine: int = 4, band: tuple[float, float] = DEFAULT_FLIP_BAND,
                     reference_ess: float | None = None,
                     percentiles: Sequence[float] = (50, 90, 99), vigor_problems: int | None = None,
                     vigor_impl: str = "auto", sqrt_len: bool = True, confidence: float = 0.95,
                     n_resamples: int = 2000, batch_size: int = 256, grad_batch_size: int = 64) -> dict[str, Any]:
    """The four premises on one policy, from one sampling pass: a JSON-ready dict (notebook 00).

    One set of rollouts (``samples`` per problem) feeds ``nudgerl`` (:func:`single_strategy_share` at ``k``),
    ``sage`` (:func:`entropy_percentiles`) and ``vigor`` (:func:`vigor_spearman` on the first ``vigor_problems``);
    ``threepo`` uses the prompts only (:func:`branch_flip_by_ess`, :func:`ess_by_flip_rule`,
    :func:`noisy_rollout_quality`, :func:`ess_by_noise_rule`). Details: docs/study/premises.md.

    Returns:
        ``{"settings", "nudgerl", "threepo", "sage", "vigor", "seconds", "machine"}``; only ``seconds`` varies
        between identical calls.

    Raises:
        ValueError: on a bad argument (named, with the value and what is allowed).
    """
    from rlvr_lib.tasks import CORRECT, get_task

    task_ = get_task(task)
    problems = list(problems)
    if not problems:
        raise invalid("problems", problems, "at least one problem")
    samples = check_int("samples", samples, 1)
    k = check_int("k", k, 1, samples)
    temperature = check_range("temperature", temperature, 0.0, lo_open=True)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
    weight_samples = check_int("weight_samples", weight_samples, 1)
    if not callable(sigma_of_ess):
        raise invalid("sigma_of_ess", sigma_of_ess, "a callable ess -> sigma")
    from rlvr_lib.rewards import GRAD_NORM_IMPLS

    check_choice("vigor_impl", vigor_impl, sorted((*GRAD_NORM_IMPLS, "auto")))
    check(isinstance(sqrt_len, bool), "sqrt_len", sqrt_len, "a bool")
    grid = _check_ess_grid(ess_grid)
    if reference_ess is not None:
        reference_ess = check_range("reference_ess", reference_ess, 0.0, lo_open=True)
        if reference_ess not in grid:
            grid = sorted([*grid, reference_ess], reverse=True)
    qs = _check_percentiles(percentiles)
    if vigor_problems is not None:
        vigor_problems = check_int("vigor_problems", vigor_problems, 1, len(problems))
    n_vigor = len(problems) if vigor_problems is None else vigor_problems
    confidence, n_resamples, seed = _check_common(confidence, n_resamples, seed)
    check_int("grad_batch_size", grad_batch_size, 1)
    band = _check_band(band)
    refine = check_int("refine", refine, 0)
    seconds: dict[str, float] = {}

    clock = time.perf_counter()
    ro = _sample(model, tokenizer, [p.prompt for p in problems], samples=samples, seed=seed, temperature=temperature,
                 max_new_tokens=max_new_tokens, batch_size=batch_size)
    verdicts = [task_.verify(problems[i // samples], text) for i, text in enumerate(ro.texts)]
    shape = (len(problems), samples)
    seconds["sampling"] = time.perf_counter() - clock

    clock = time.perf_counter()
    labels = np.array([v.strategy for v in verdicts], dtype=object).reshape(shape)
    counts = {s: [int(sum(x == s for x in row)) for row in labels] for s in task_.strategies}
    counts["none"] = [samples - sum(c[p] for c in counts.values()) for p in range(len(problems))]  # None (or unknown)
    probs = single_strategy_probs(counts, k)
    nudgerl = {"share": float(probs.mean()),
               "interval": {**bootstrap_ci(probs, confidence=confidence, n_resamples=n_resamples, seed=seed,
                                           bounds=(0.0, 1.0)),
                            "method": f"percentile bootstrap over problems (P={len(problems)}, B={n_resamples})"},
               "k": k, "n": samples, "unparsed_frac": float(np.mean(counts["none"]) / samples),
               "mean_strategies_seen": float(np.mean([len({x for x in row if x is not None}) for row in labels])),
               "strategy_freq": {s: float(np.sum(v) / labels.size) for s, v in counts.items()},
               "strategy_counts": counts,
               "paper": "NudgeRL Fig 1: one mode on > 75% of problems"}
    seconds["nudgerl"] = time.perf_counter() - clock

    clock = time.perf_counter()
    flips = branch_flip_by_ess(model, tokenizer, [p.prompt for p in problems], grid, sigma_of_ess,
                               samples=weight_samples, refine=refine, band=band, strategies=task_.strategies,
                               seed=seed, batch_size=batch_size)
    chosen = ess_by_flip_rule(dict(zip(flips["ess"], flips["share"])), band)

    def at(ess: float | None) -> dict[str, Any] | None:
        if ess is None:
            return None
        i = flips["ess"].index(ess)
        return {key: flips[key][i] for key in ("ess", "sigma", "share", "share_any", "mass")}

    quality = noisy_rollout_quality(model, tokenizer, problems, flips["ess"], sigma_of_ess, verify=task_.verify,
                                    samples=weight_samples, seed=seed, temperature=temperature,
                                    max_new_tokens=max_new_tokens, batch_size=batch_size)
    noise_rule = ess_by_noise_rule(flips, quality, band)
    threepo = {**flips, "band": [float(band[0]), float(band[1])], "chosen_ess": chosen, "at_chosen": at(chosen),
               "reference_ess": reference_ess, "at_reference": at(reference_ess),
               "quality": quality, "noise_rule": noise_rule, "training_ess": noise_rule["chosen_ess"],
               "at_training": at(noise_rule["chosen_ess"]),
               "rule": "the largest measured ESS (the grid, then up to `refine` geometric bisections of the bracket "
                       "around the band) whose share (prompts whose top strategy token changes under one weight "
                       "sample) lies in the band; None if none",
               "paper": "3PO Fig 1: weight noise reorders the branch, temperature cannot"}
    seconds["threepo"] = time.perf_counter() - clock

    clock = time.perf_counter()
    ent, mask = completion_entropies(model, ro, temperature=temperature, batch_size=batch_size)
    sage = {**entropy_percentiles(ent, mask, qs),
            "paper": "SAGE: the branch guide fires where H > tau (paper tau 1.2 nats; testbed tau = the 90th "
                     "percentile on the train family)"}
    seconds["sage"] = time.perf_counter() - clock

    clock = time.perf_counter()
    rows = torch.arange(n_vigor * samples)
    scores = vigor_scores(model, ro.select(rows), sqrt_len=sqrt_len, impl=vigor_impl,
                          batch_size=grad_batch_size).reshape(n_vigor, samples)
    correct = np.array([v.status == CORRECT for v in verdicts]).reshape(shape)[:n_vigor]
    truncated = np.array([r == "length" for r in ro.finish_reasons]).reshape(shape)[:n_vigor]
    vigor = {**vigor_spearman(scores, correct, truncated, confidence=confidence, n_resamples=n_resamples, seed=seed),
             "sqrt_len": sqrt_len,
             "paper": "VIGOR: accuracy falls with the score's rank within a group (70.5% at rank 1, 52.7% at rank 8)"}
    seconds["vigor"] = time.perf_counter() - clock

    settings = {"task": task, "n_problems": len(problems), "samples": samples, "k": k,
                "temperature": float(temperature),
                "max_new_tokens": max_new_tokens, "seed": seed, "ess_grid": grid, "refine": refine,
                "sigma_of_ess": getattr(sigma_of_ess, "__name__", repr(sigma_of_ess)),
                "weight_samples": weight_samples, "band": [float(band[0]), float(band[1])],
                "reference_ess": reference_ess, "percentiles": list(qs), "vigor_problems": n_vigor,
                "vigor_impl": vigor_impl, "sqrt_len": sqrt_len, "confidence": confidence,
                "n_resamples": n_resamples}
    from rlvr_lib.study.runs import machine

    return {"settings": settings, "nudgerl": nudgerl, "threepo": threepo, "sage": sage, "vigor": vigor,
            "seconds": seconds, "machine": machine()}
