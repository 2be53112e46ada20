"""Policy-gradient surrogate losses and loss aggregation (GRPO family).

Per-token tensors are (N, T), right-padded, with a 0/1 ``mask`` (N, T); advantages are (N,) or (N, T).
Every loss is ``fn(logp, old_logp, advantages, mask, **kwargs) -> (per_token_loss (N, T), stats)``, zero at
masked positions, stats detached 0-dim over unmasked tokens; reduce with :func:`aggregate_loss`. The tensor
checks at the top are shared by the other ``rlvr_lib.algos`` modules."""

from __future__ import annotations


import torch
from torch import Tensor

from rlvr_lib.validation import check_choice, check_range

__all__ = [
    "LOSS_AGG_MODES",
    "aggregate_loss",
    "clip_cov_loss",
    "clip_cov_mask",
    "kl_cov_loss",
    "ppo_clip_loss",
    "token_covariance",
]


# --------------------------------------------------------------------------
# shared validation helpers (private)
# --------------------------------------------------------------------------
def _check_tensor(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _check_float_tensor(name: str, x: object, ndim: int | None = None) -> Tensor:
    x = _check_tensor(name, x)
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    return x


def _check_same_shape(ref_name: str, ref: Tensor, **others: Tensor) -> None:
    for name, x in others.items():
        _check_tensor(name, x)
        if x.shape != ref.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {ref_name} has shape {tuple(ref.shape)}; "
                "they must match"
            )


def _check_mask(mask: object, shape: torch.Size, name: str = "mask") -> Tensor:
    """Return ``mask`` as a bool tensor after checking its shape and 0/1 values."""
    mask = _check_tensor(name, mask)
    if mask.shape != shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {tuple(shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"{name} must contain only 0 and 1 (float or bool accepted)")
    return mask != 0


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over True entries of ``mask``; 0 when there are none."""
    total = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum()
    return total / mask.sum().clamp(min=1)


def _seq_advantages(advantages: object, shape: torch.Size) -> Tensor:
    """Return advantages broadcastable to (N, T): (N,) -> (N, 1); (N, T) kept."""
    advantages = _check_float_tensor("advantages", advantages)
    n = shape[0]
    if advantages.shape == (n,):
        return advantages.detach().unsqueeze(-1)
    if advantages.shape == shape:
        return advantages.detach()
    raise ValueError(
        f"advantages has shape {tuple(advantages.shape)}; allowed: ({n},) or {tuple(shape)}"
    )


def _check_logps(logp: object, old_logp: object, mask: object) -> tuple[Tensor, Tensor, Tensor]:
    logp = _check_float_tensor("logp", logp, ndim=2)
    old_logp = _check_float_tensor("old_logp", old_logp)
    _check_same_shape("logp", logp, old_logp=old_logp)
    return logp, old_logp.detach(), _check_mask(mask, logp.shape)


# --------------------------------------------------------------------------
# aggregation
# --------------------------------------------------------------------------
LOSS_AGG_MODES = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")


def aggregate_loss(per_token_loss: Tensor, mask: Tensor, mode: str, *,
                   normalizer: float | None = None) -> Tensor:
    """Reduce a per-token loss ``L`` (N, T) under mask ``m`` to a 0-dim tensor (masked entries never read).

    * ``"seq_mean_token_mean"`` (GRPO): mean_i [ sum_t m_it L_it / max(1, sum_t m_it) ] over all N;
    * ``"token_mean"`` (DAPO; SAGE's "bnpo"): sum_it m_it L_it / D, D = max(1, sum_it m_it) or ``normalizer``;
    * ``"seq_mean_token_sum_norm"`` (Dr.GRPO): sum_it m_it L_it / (N * normalizer), ``normalizer`` required."""
    per_token_loss = _check_float_tensor("per_token_loss", per_token_loss, ndim=2)
    m = _check_mask(mask, per_token_loss.shape)
    check_choice("mode", mode, LOSS_AGG_MODES)
    if normalizer is not None:
        check_range("normalizer", normalizer, 0.0, lo_open=True)
        if mode == "seq_mean_token_mean":
            raise ValueError("normalizer is not used by mode 'seq_mean_token_mean'; pass None")
    elif mode == "seq_mean_token_sum_norm":
        raise ValueError("mode 'seq_mean_token_sum_norm' requires a positive normalizer "
                         "(e.g. the maximum completion length), got None")

    zero = torch.zeros((), dtype=per_token_loss.dtype, device=per_token_loss.device)
    masked = torch.where(m, per_token_loss, zero)
    n_seq = per_token_loss.shape[0]
    if mode == "seq_mean_token_mean":
        seq_mean = masked.sum(-1) / m.sum(-1).clamp(min=1)
        return seq_mean.sum() / max(n_seq, 1)
    if mode == "token_mean":
        denom = m.sum().clamp(min=1) if normalizer is None else normalizer
        return masked.sum() / denom
    return masked.sum() / (max(n_seq, 1) * normalizer)


# --------------------------------------------------------------------------
# PPO-clip
# --------------------------------------------------------------------------
def _clip_regions(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, Tensor]:
    """Tokens where the clipped branch of the PPO min is the active one."""
    low = (adv < 0) & (ratio < 1.0 - eps_low)
    high = (adv > 0) & (ratio > 1.0 + eps_high)
    return low, high


def ppo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                  eps_low: float = 0.2, eps_high: float = 0.2) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate per token (arXiv 1707.06347; clip-higher from DAPO arXiv 2503.14476)::

        rho_t = exp(logp_t - old_logp_t)
        loss_t = -min(rho_t * A, clip(rho_t, 1 - eps_low, 1 + eps_high) * A)

    Stats: ``clip_frac_low`` (A < 0, rho < 1 - eps_low), ``clip_frac_high`` (A > 0, rho > 1 + eps_high),
    ``approx_kl`` = mean (rho - 1) - log rho (k3 of KL(pi_old || pi_theta)), ``ratio_mean``."""
    logp, old_logp, m = _check_logps(logp, old_logp, mask)
    adv = _seq_advantages(advantages, logp.shape)
    check_range("eps_low", eps_low, 0.0, 1.0, hi_open=True)
    check_range("eps_high", eps_high, 0.0)

    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    surr = ratio * adv
    surr_clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    loss = -torch.minimum(surr, surr_clipped)
    loss = torch.where(m, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))

    with torch.no_grad():
        low, high = _clip_regions(ratio, adv, eps_low, eps_high)
        stats = {
            "clip_frac_low": _masked_mean(low.to(logp.dtype), m),
            "clip_frac_high": _masked_mean(high.to(logp.dtype), m),
            "approx_kl": _masked_mean(ratio - 1.0 - log_ratio, m),
            "ratio_mean": _masked_mean(ratio, m),
        }
    return loss, stats


# --------------------------------------------------------------------------
# covariance-based entropy control: KL-Cov / Clip-Cov (arXiv 2505.22617)
# --------------------------------------------------------------------------
def token_covariance(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """cov_t = (logp_t - mean(logp)) * (A_t - mean(A)) over the batch's unmasked tokens (arXiv 2505.22617); (N, T)."""
    logp = _check_float_tensor("logp", logp, ndim=2)
    m = _check_mask(mask, logp.shape)
    adv = _seq_advantages(advantages, logp.shape).expand_as(logp)
    logp = logp.detach()
    cov = (logp - _masked_mean(logp, m)) * (adv - _masked_mean(adv, m))
    return torch.where(m, cov, torch.zeros((), dtype=cov.dtype, device=cov.device))


def kl_cov_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                k_frac: float = 2e-4, kl_coef: float = 1.0) -> tuple[Tensor, dict[str, Tensor]]:
    """KL-Cov policy loss (arXiv 2505.22617)::

        loss_t = -rho_t * A_t + kl_coef * |logp_t - old_logp_t|  on the k tokens of largest cov_t
        k = max(1, floor(k_frac * n_tokens))

    ``k_frac`` is a FRACTION (default 2e-4 = 0.02%, as verl and the KL-Cov paper; the authors' 7B scripts run 2e-3).
    Stats: ``kl_cov_frac``, ``abs_log_ratio``, ``ratio_mean``."""
    logp, old_logp, m = _check_logps(logp, old_logp, mask)
    adv = _seq_advantages(advantages, logp.shape)
    check_range("k_frac", k_frac, 0.0, 1.0, lo_open=True)
    check_range("kl_coef", kl_coef, 0.0)

    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    loss = -ratio * adv

    n_tokens = int(m.sum())
    selected = torch.zeros_like(m)
    if n_tokens > 0:
        k = max(1, int(k_frac * n_tokens))
        cov = token_covariance(logp, advantages, m).masked_fill(~m, float("-inf"))
        top = torch.topk(cov.flatten(), k).indices  # k <= n_tokens, so all unmasked
        selected.view(-1)[top] = True
    loss = loss + kl_coef * log_ratio.abs() * selected
    loss = torch.where(m, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))

    with torch.no_grad():
        stats = {
            "kl_cov_frac": _masked_mean(selected.to(logp.dtype), m),
            "abs_log_ratio": _masked_mean(log_ratio.abs(), m),
            "ratio_mean": _masked_mean(ratio, m),
        }
    return loss, stats


def clip_cov_mask(logp: Tensor, advantages: Tensor, mask: Tensor, *, clip_frac: float = 2e-4,
                  lb: float = 1.0, ub: float = 5.0, generator: torch.Generator | None = None,
                  exclude: Tensor | None = None) -> Tensor:
    """Bool (N, T): tokens whose gradient Clip-Cov detaches (arXiv 2505.22617).

    A uniform random subset of min(#candidates, max(1, floor(clip_frac * n_tokens))) of the unmasked tokens with
    lb < cov_t < ub, minus ``exclude``. Defaults (2e-4, lb 1, ub 5) are the authors'."""
    logp = _check_float_tensor("logp", logp, ndim=2)
    m = _check_mask(mask, logp.shape)
    check_range("clip_frac", clip_frac, 0.0, 1.0, lo_open=True)
    check_range("ub", ub)
    check_range("lb", lb, None, ub, hi_open=True)

    cov = token_covariance(logp, advantages, m)
    candidates = m & (cov > lb) & (cov < ub)
    if exclude is not None:
        candidates &= ~_check_mask(exclude, logp.shape, name="exclude")

    chosen = torch.zeros_like(m)
    idx = torch.nonzero(candidates.flatten()).squeeze(-1)
    if idx.numel() > 0:
        n_clip = max(1, int(clip_frac * int(m.sum())))
        perm_device = generator.device if generator is not None else idx.device
        perm = torch.randperm(idx.numel(), generator=generator, device=perm_device).to(idx.device)
        chosen.view(-1)[idx[perm[:n_clip]]] = True
    return chosen


def clip_cov_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *,
                  eps_low: float = 0.2, eps_high: float = 0.2, clip_frac: float = 2e-4,
                  lb: float = 1.0, ub: float = 5.0,
                  generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Clip-Cov (arXiv 2505.22617): :func:`ppo_clip_loss` with :func:`clip_cov_mask`'s tokens detached (not PPO-clipped ones).

    Stats: :func:`ppo_clip_loss`'s plus ``clip_cov_frac``."""
    loss, stats = ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high)
    m = _check_mask(mask, logp.shape)
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        low, high = _clip_regions(ratio, _seq_advantages(advantages, logp.shape), eps_low, eps_high)
    detached = clip_cov_mask(logp, advantages, m, clip_frac=clip_frac, lb=lb, ub=ub,
                             generator=generator, exclude=low | high)
    loss = torch.where(detached, loss.detach(), loss)
    stats["clip_cov_frac"] = _masked_mean(detached.to(loss.dtype), m)
    return loss, stats
