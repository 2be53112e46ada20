"""SAGE guides and the shaped KL anchor (arXiv 2605.18864; authors' code tally0818/SAGE).

SAGE replaces pi_ref in the reverse-KL anchor by q * pi_ref with a per-token guide q > 0, large on
under-explored plausible choices: shaped anchor log-prob = ref_logp + log q, in the k3 estimator
(:func:`shaped_kl`), loss term beta * kl (beta = 0.05). Guides return q, detached, clamped to [q_min, q_max]
(default [0.6, 1.4]):

* :func:`branch_guide` (main variant): q = 1 + gamma * relu(H - tau), H the current policy's token entropy;
* :func:`token_guide`: q rises with the per-sequence normalised surprisal -log p;
* :func:`random_guide`: random perturbation of q on a random subset of tokens.

:func:`shaped_anchor` applies any estimator of `rlvr_lib.algos.kl` to ref_logp + log q; the token and random
guides follow :func:`guide_schedule`. Gradients of the shaped anchor: docs/methods/sage.md."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr_lib.validation import check_choice, check_int, check_range

from .kl import kl_penalty
from .policy_loss import _check_float_tensor, _check_mask, _check_same_shape

__all__ = [
    "GUIDES",
    "branch_guide",
    "get_guide",
    "guide_schedule",
    "random_guide",
    "shaped_anchor",
    "shaped_kl",
    "token_guide",
]

_MAX_LOG_RATIO = 20.0  # same safety clamp as rlvr_lib.algos.kl


def branch_guide(entropy: Tensor, *, gamma: float = 0.3, tau: float = 1.2,
                 q_min: float = 0.6, q_max: float = 1.4) -> Tensor:
    """q_t = clamp(1 + gamma * relu(H_t - tau), q_min, q_max), detached, shape of ``entropy`` (N, T).

    H is the current policy's entropy; defaults are the paper's (gamma 0.3, tau 1.2 nats, [0.6, 1.4])."""
    entropy = _check_float_tensor("entropy", entropy)
    check_range("gamma", gamma, 0.0)
    check_range("tau", tau)
    check_range("q_max", q_max, 0.0, lo_open=True)
    check_range("q_min", q_min, 0.0, q_max, lo_open=True)
    return (1.0 + gamma * torch.relu(entropy.detach() - tau)).clamp(q_min, q_max)


def token_guide(logp: Tensor, mask: Tensor, *, alpha: float = 0.3, sigma: float = 0.25,
                q_min: float = 0.6, q_max: float = 1.4, quantile: float = 0.05,
                generator: torch.Generator | None = None) -> Tensor:
    """SAGE token guide, q (N, T) detached; per sequence over unmasked tokens ("minmax")::

        s_t = -logp_t
        lo, hi = quantile(s, quantile), quantile(s, 1 - quantile)
        w_t = (clamp(s_t, lo, hi) - lo) / max(hi - lo, 1e-6)
        q_t = clamp(1 + alpha * w_t + sigma * w_t * xi_t, q_min, q_max),  xi_t ~ N(0, 1)

    Masked positions get q = 1; ``quantile`` in [0, 0.5)."""
    logp = _check_float_tensor("logp", logp, ndim=2)
    m = _check_mask(mask, logp.shape)
    check_range("alpha", alpha, 0.0)
    check_range("sigma", sigma, 0.0)
    check_range("q_max", q_max, 0.0, lo_open=True)
    check_range("q_min", q_min, 0.0, q_max, lo_open=True)
    check_range("quantile", quantile, 0.0, 0.5, hi_open=True)

    s = (-logp.detach()).masked_fill(~m, float("nan"))  # NaN = ignored by nanquantile
    levels = torch.tensor([quantile, 1.0 - quantile], dtype=s.dtype, device=s.device)
    lo, hi = torch.nanquantile(s, levels, dim=1, keepdim=True)  # (N, 1) each; NaN on empty rows
    w = (torch.minimum(torch.maximum(s, lo), hi) - lo) / (hi - lo).clamp(min=1e-6)
    noise = torch.randn(logp.shape, generator=generator, dtype=logp.dtype,
                        device=generator.device if generator is not None else logp.device).to(logp.device)
    q = (1.0 + alpha * w + sigma * w * noise).clamp(q_min, q_max)
    return torch.where(m, q, torch.ones_like(q))


def random_guide(shape: Sequence[int], generator: torch.Generator | None = None, *, eps: float = 0.1,
                 sigma: float = 0.15, q_min: float = 0.6, q_max: float = 1.4,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Tensor:
    """SAGE random guide of ``shape``::

        perturb_t ~ Bernoulli(eps),  xi_t ~ N(0, 1)
        q_t = clamp(perturb_t ? 1 + sigma * xi_t : 1, q_min, q_max)"""
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"shape must have non-negative sizes, got {shape}")
    check_range("eps", eps, 0.0, 1.0)
    check_range("sigma", sigma, 0.0)
    check_range("q_max", q_max, 0.0, lo_open=True)
    check_range("q_min", q_min, 0.0, q_max, lo_open=True)
    dtype = dtype or torch.float32
    gen_device = generator.device if generator is not None else (device or "cpu")
    perturb = torch.rand(shape, generator=generator, dtype=dtype, device=gen_device) < eps
    noise = torch.randn(shape, generator=generator, dtype=dtype, device=gen_device)
    q = torch.where(perturb, 1.0 + sigma * noise, torch.ones_like(noise)).clamp(q_min, q_max)
    return q.to(device) if device is not None else q


def guide_schedule(step: int, *, max_steps: int, start: float, end: float, num_cycles: int = 8,
                   decay_rate: float = 0.9) -> float:
    """Cosine annealing with warm restarts (SAGE's token and random guides)::

        C = max(1, max_steps // num_cycles),  c = min(step // C, num_cycles - 1),  t = (step mod C) / C
        value = end + (start * decay_rate**c - end) * 0.5 * (1 + cos(pi * t))

    Authors': token alpha 0.3 -> 0.1, sigma 0.25 -> 0.1; random eps 0.1 -> 0, sigma 0.15 -> 0.05; 8 cycles, decay 0.9."""
    step = check_int("step", step, 0)
    max_steps = check_int("max_steps", max_steps, 1)
    num_cycles = check_int("num_cycles", num_cycles, 1)
    check_range("start", start)
    check_range("end", end)
    check_range("decay_rate", decay_rate, 0.0)
    cycle_len = max(1, max_steps // num_cycles)
    cycle = min(step // cycle_len, num_cycles - 1)
    t = (step % cycle_len) / cycle_len
    return end + (start * decay_rate ** cycle - end) * 0.5 * (1.0 + math.cos(math.pi * t))


def shaped_kl(logp: Tensor, ref_logp: Tensor, log_q: Tensor) -> Tensor:
    """SAGE shaped-anchor KL, k3 form, (N, T) not masked, from ``logp``, ``ref_logp``, ``log_q`` (N, T)::

        D_t = (ref_logp_t + log q_t) - logp_t
        kl_t = exp(D_t) - D_t - 1            (>= 0, zero iff pi_theta = q * pi_ref on the token)

    Log-ratio clamped to [-20, 20]; ``ref_logp`` and ``log_q`` are detached."""
    logp = _check_float_tensor("logp", logp)
    _check_float_tensor("ref_logp", ref_logp)
    _check_float_tensor("log_q", log_q)
    _check_same_shape("logp", logp, ref_logp=ref_logp, log_q=log_q)
    d = (ref_logp.detach() + log_q.detach() - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(d) - d - 1.0


def shaped_anchor(logp: Tensor, ref_logp: Tensor, q: Tensor, estimator: str = "k3") -> Tensor:
    """Any KL estimator against the shaped reference q * pi_ref, (N, T) not masked::

        shaped_ref_t = ref_logp_t + log q_t
        anchor_t     = kl_penalty(logp_t, shaped_ref_t, estimator)

    ``"k3"`` equals :func:`shaped_kl` bit for bit; where q = 1 it equals ``kl_penalty(logp, ref_logp, estimator)``
    bit for bit. q (N, T) > 0 and ref_logp are detached. Raises ValueError on mismatched shapes, a non-positive or
    non-finite q, or an unknown estimator."""
    logp = _check_float_tensor("logp", logp)
    _check_float_tensor("ref_logp", ref_logp)
    q = _check_float_tensor("q", q)
    _check_same_shape("logp", logp, ref_logp=ref_logp, q=q)
    q = q.detach()
    if not bool(torch.all((q > 0) & torch.isfinite(q))):
        raise ValueError("q must be finite and > 0 everywhere (a guide's q is clamped to [q_min, q_max], q_min > 0)")
    return kl_penalty(logp, ref_logp.detach() + torch.log(q), estimator)


GuideFn = Callable[..., Tensor]
"""The registry's one signature: ``guide(logp, entropy, mask, *, generator=None, **options) -> q (N, T)``."""


def _branch(logp: Tensor, entropy: Tensor, mask: Tensor, *, generator=None, **options) -> Tensor:
    return branch_guide(entropy, **options)


def _token(logp: Tensor, entropy: Tensor, mask: Tensor, *, generator=None, **options) -> Tensor:
    return token_guide(logp, mask, generator=generator, **options)


def _random(logp: Tensor, entropy: Tensor, mask: Tensor, *, generator=None, **options) -> Tensor:
    return random_guide(logp.shape, generator, dtype=logp.dtype, device=logp.device, **options)


# Every entry takes the minibatch's (logp, entropy, mask) and a generator; each reads what its guide needs.
GUIDES: dict[str, GuideFn] = {
    "branch": _branch,
    "token": _token,
    "random": _random,
}


def get_guide(name: str) -> Callable[..., Tensor]:
    """Return ``guide(logp, entropy, mask, *, generator=None, **options) -> q`` named ``name`` (:data:`GUIDES`)."""
    return GUIDES[check_choice("guide", name, sorted(GUIDES))]
