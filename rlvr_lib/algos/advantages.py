"""Sequence-level advantage estimators of the GRPO family, and group-level reward helpers.

N rollouts, one scalar reward each; ``group_index`` (N,) integer prompt ids (any order). Every estimator is
``fn(rewards, group_index, hint_index=None, **options) -> (N,)`` detached; only NudgeRL's ``"hint"`` reads
``hint_index``. A group of equal rewards, or of one rollout, gets advantage exactly 0.
Details and the authors' code's gaps: docs/library/algos.md."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from rlvr_lib.validation import check_choice, check_range

from .policy_loss import _check_tensor

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "bnpo_beta_advantages",
    "hint_advantages",
    "dr_grpo_advantages",
    "dynamic_sampling_keep_mask",
    "get_advantage_estimator",
    "grpo_advantages",
    "overlong_reward_shaping",
    "rank_advantages",
]


# --------------------------------------------------------------------------
# validation and group statistics (private)
# --------------------------------------------------------------------------
def _check_values(name: str, x: object) -> Tensor:
    """1-D finite values, returned detached as a float tensor."""
    x = _check_tensor(name, x)
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite (no NaN/inf)")
    return x.detach()


def _check_index(name: str, idx: object, n: int) -> Tensor:
    idx = _check_tensor(name, idx)
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {idx.dtype}")
    if idx.shape != (n,):
        raise ValueError(f"{name} has shape {tuple(idx.shape)}, expected ({n},) to match rewards")
    return idx


def _groups(group_index: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary group ids to 0..G-1; return (inverse (N,), G)."""
    uniq, inv = torch.unique(group_index, return_inverse=True)
    return inv, uniq.numel()


def _group_sum(x: Tensor, inv: Tensor, n_groups: int) -> Tensor:
    return x.new_zeros(n_groups).index_add_(0, inv, x)


def _group_count(x: Tensor, inv: Tensor, n_groups: int) -> Tensor:
    return _group_sum(torch.ones_like(x), inv, n_groups)


def _group_mean(x: Tensor, inv: Tensor, n_groups: int) -> Tensor:
    return _group_sum(x, inv, n_groups) / _group_count(x, inv, n_groups)


def _center(x: Tensor, inv: Tensor, n_groups: int) -> Tensor:
    """x - group mean, exactly 0 on groups whose values are all equal."""
    centred = x - _group_mean(x, inv, n_groups)[inv]
    gmax = x.new_zeros(n_groups).scatter_reduce(0, inv, x, "amax", include_self=False)
    gmin = x.new_zeros(n_groups).scatter_reduce(0, inv, x, "amin", include_self=False)
    return torch.where((gmax == gmin)[inv], torch.zeros_like(centred), centred)


def _group_std(centred: Tensor, inv: Tensor, n_groups: int, *, unbiased: bool) -> Tensor:
    """Per-group std of already centred values; 0 for a group of one."""
    count = _group_count(centred, inv, n_groups)
    denom = (count - 1).clamp(min=1) if unbiased else count
    return (_group_sum(centred * centred, inv, n_groups) / denom).sqrt()


def _normalize(centred: Tensor, std: Tensor, eps: float) -> Tensor:
    # centred is exactly 0 wherever std is 0, so the clamp only matters for eps=0
    # and turns 0/0 into 0.
    return centred / (std + eps).clamp(min=torch.finfo(centred.dtype).tiny)


def _prepare(rewards: object, group_index: object, name: str = "rewards") -> tuple[Tensor, Tensor, int]:
    r = _check_values(name, rewards)
    g = _check_index("group_index", group_index, r.shape[0])
    inv, n_groups = _groups(g)
    return r, inv, n_groups


# --------------------------------------------------------------------------
# estimators
# --------------------------------------------------------------------------
def grpo_advantages(rewards: Tensor, group_index: Tensor, hint_index: Tensor | None = None, *,
                    eps: float = 1e-6, normalize_std: bool = True) -> Tensor:
    """GRPO advantage (DeepSeekMath, arXiv 2402.03300), (N,)::

        A_i = (r_i - mean_g) / (std_g + eps)    (normalize_std=True; std_g unbiased, as TRL and verl)
        A_i = r_i - mean_g                      (normalize_std=False, i.e. Dr.GRPO)"""
    r, inv, n_groups = _prepare(rewards, group_index)
    check_range("eps", eps, 0.0)
    centred = _center(r, inv, n_groups)
    if not normalize_std:
        return centred
    std = _group_std(centred, inv, n_groups, unbiased=True)
    return _normalize(centred, std[inv], eps)


def dr_grpo_advantages(rewards: Tensor, group_index: Tensor, hint_index: Tensor | None = None) -> Tensor:
    """Dr.GRPO advantage (arXiv 2503.20783): A_i = r_i - mean_g (no std division); (N,)."""
    return grpo_advantages(rewards, group_index, normalize_std=False)


def hint_advantages(rewards: Tensor, group_index: Tensor, hint_index: Tensor | None = None, *,
                    lam: float = 1.1, eps: float = 1e-5) -> Tensor:
    """NudgeRL inter/intra-hint advantage (arXiv 2605.15726), (N,).

    In prompt group g, rollout i has hint z(i) (``hint_index`` local to the group) or none (-1)::

        hinted:      A_i = (r_i - mean_{g,z(i)}) + lam * (mean_{g,z(i)} - mean_g)
        no hint:     A_i = r_i - mean_g
        A_hat_i = (A_i - mean_g(A)) / (std_g(A) + eps)      (POPULATION std, as the authors' code)

    ``lam`` >= 0 (paper: 1.1)."""
    r, inv, n_groups = _prepare(rewards, group_index)
    if hint_index is None:
        raise ValueError("hint_advantages needs hint_index= (N,): the hint of each rollout, -1 for none")
    hint = _check_index("hint_index", hint_index, r.shape[0])
    if (hint < -1).any():
        raise ValueError(f"hint_index must be >= 0, or -1 for no hint; got min {int(hint.min())}")
    check_range("lam", lam, 0.0)
    check_range("eps", eps, 0.0)

    c = _center(r, inv, n_groups)
    # Sub-groups (group, hint); no-hint rollouts get their own key but it is unused.
    _, sub_inv = torch.unique(torch.stack([inv, hint.to(inv.dtype)], dim=1), dim=0, return_inverse=True)
    n_sub = int(sub_inv.max()) + 1 if sub_inv.numel() else 0
    sub_mean_c = _group_mean(c, sub_inv, n_sub)[sub_inv]  # = mean_{g,z} - mean_g
    # (r - m_z) + lam (m_z - m_g) = c + (lam - 1) (m_z - m_g); written on c so equal-reward groups give 0.
    raw = torch.where(hint >= 0, c + (lam - 1.0) * sub_mean_c, c)
    centred = _center(raw, inv, n_groups)
    std = _group_std(centred, inv, n_groups, unbiased=False)
    return _normalize(centred, std[inv], eps)


def rank_advantages(scores: Tensor, group_index: Tensor, hint_index: Tensor | None = None, *,
                    eps: float = 1e-4) -> Tensor:
    """VIGOR rank-shaped advantage (arXiv 2605.09920; authors' code ZJUSCL/VIGOR), (N,)::

        rank_i = 1 + position of row i in the group's stable ascending sort of ``scores``
        u_i = 2 * (rank_i - 1) / (G - 1) - 1       (u_i = 0 when G = 1)
        A_i = (u_i - mean_g(u)) / (std_g(u) + eps)  (unbiased std; paper eps 1e-4)"""
    s, inv, n_groups = _prepare(scores, group_index, name="scores")
    check_range("eps", eps, 0.0)
    # Two stable sorts: by score, then by group; rows end up grouped, ascending in score, ties in row order.
    by_score = torch.sort(s, stable=True).indices
    order = by_score[torch.sort(inv[by_score], stable=True).indices]
    position = torch.empty_like(inv)
    position[order] = torch.arange(len(s), device=s.device)
    size = _group_count(s, inv, n_groups)
    start = torch.cumsum(size, 0) - size  # groups are numbered in sorted order, so they appear in that order
    rank = (position - start.long()[inv] + 1).to(s.dtype)
    size = size[inv]
    u = torch.where(size > 1, 2.0 * (rank - 1.0) / (size - 1.0).clamp(min=1.0) - 1.0, torch.zeros_like(s))
    return grpo_advantages(u, inv, eps=eps)


def bnpo_beta_advantages(rewards: Tensor, group_index: Tensor, hint_index: Tensor | None = None, *,
                         min_value: float = 0.0,
                         max_value: float = 1.0, max_weight: float = 1e6) -> Tensor:
    """BNPO Beta-normalised advantage (arXiv 2506.02864; authors' code changyi7231/BNPO), (N,).

    With R = (r - min_value) / (max_value - min_value), p_g the group mean and f the Beta(alpha, beta) density::

        A_i = (R_i - p_g) / f(p_g; alpha, beta),   alpha = 1 + a/3,  beta = 1 + b/3
        mu = mean(p), var = unbiased var(p), k = mu (1 - mu) / var - 1,  a = k mu,  b = k (1 - mu)

    alpha, beta >= 1; 1/f <= ``max_weight``. Groups of one get 0 and are left out of the fit; with fewer than two
    groups of size >= 2 or var = 0, alpha = beta = 1."""
    r, inv, n_groups = _prepare(rewards, group_index)
    check_range("max_value", max_value)
    check_range("min_value", min_value, None, max_value, hi_open=True)
    check_range("max_weight", max_weight, 0.0, lo_open=True)
    if r.numel() and (r.min() < min_value or r.max() > max_value):
        raise ValueError(f"rewards must lie in [min_value, max_value] = [{min_value}, {max_value}], "
                         f"got range [{float(r.min())}, {float(r.max())}]")

    r01 = (r - min_value) / (max_value - min_value)
    centred = _center(r01, inv, n_groups)  # R_i - p_g
    p = _group_mean(r01, inv, n_groups).clamp(0.0, 1.0)
    fitted = p[_group_count(r01, inv, n_groups) > 1]

    alpha = beta = 1.0
    if fitted.numel() >= 2 and float(fitted.var()) > 0.0:
        mu, var = float(fitted.mean()), float(fitted.var())
        k = mu * (1.0 - mu) / var - 1.0
        alpha = max(1.0 + k * mu / 3.0, 1.0)
        beta = max(1.0 + k * (1.0 - mu) / 3.0, 1.0)

    log_beta_fn = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    # xlogy keeps 0 * log 0 = 0 when alpha or beta is exactly 1.
    log_pdf = torch.xlogy(torch.full_like(p, alpha - 1.0), p) \
        + torch.xlogy(torch.full_like(p, beta - 1.0), 1.0 - p) - log_beta_fn
    weight = torch.exp(-log_pdf).clamp(max=max_weight)
    return weight[inv] * centred


# --------------------------------------------------------------------------
# DAPO helpers (arXiv 2503.14476)
# --------------------------------------------------------------------------
def overlong_reward_shaping(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO soft overlong punishment (arXiv 2503.14476), (N,) in [-1, 0], to ADD to the reward::

        R(L) = 0                                          if L <= max_len - cache_len
             = ((max_len - cache_len) - L) / cache_len    if max_len - cache_len < L <= max_len
             = -1                                         if L > max_len"""
    lengths = _check_values("lengths", lengths)
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got min {float(lengths.min())}")
    check_range("max_len", max_len, 0.0, lo_open=True)
    check_range("cache_len", cache_len, 0.0, max_len)
    if cache_len == 0:
        return torch.where(lengths > max_len, -1.0, 0.0).to(lengths.dtype)
    # The ramp is positive before the buffer and below -1 past max_len: clamp gives all three cases.
    return ((max_len - cache_len - lengths) / cache_len).clamp(-1.0, 0.0)


def dynamic_sampling_keep_mask(rewards: Tensor, group_index: Tensor) -> Tensor:
    """DAPO dynamic sampling (arXiv 2503.14476): bool (N,), True where the group's rewards are not all equal."""
    r, inv, n_groups = _prepare(rewards, group_index)
    gmax = r.new_zeros(n_groups).scatter_reduce(0, inv, r, "amax", include_self=False)
    gmin = r.new_zeros(n_groups).scatter_reduce(0, inv, r, "amin", include_self=False)
    return (gmax != gmin)[inv]


# --------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------
AdvantageFn = Callable[..., Tensor]

ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "hint": hint_advantages,  # NudgeRL; reads hint_index
    "rank": rank_advantages,  # VIGOR
    "bnpo": bnpo_beta_advantages,
}


def get_advantage_estimator(name: str) -> AdvantageFn:
    """Return the estimator ``fn(rewards, group_index, hint_index=None, **options) -> (N,)`` named ``name``."""
    return ADVANTAGE_ESTIMATORS[check_choice("advantage_estimator", name, sorted(ADVANTAGE_ESTIMATORS))]
