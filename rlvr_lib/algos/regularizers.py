"""Entropy-based terms: token entropy, the entropy bonus, and INTUITOR's self-certainty.

Logits are (..., V) (for completions: (N, T, V)); masks are (N, T) 0/1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .policy_loss import _check_float_tensor, _check_mask, aggregate_loss

__all__ = ["entropy_bonus", "self_certainty", "token_entropy"]


def token_entropy(logits: Tensor) -> Tensor:
    """``H = -sum_v p_v log p_v``, ``log p = logits - logsumexp(logits)``: (..., V) -> (...) nats; p_v = 0 adds 0."""
    logits = _check_float_tensor("logits", logits)
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a non-empty last (vocabulary) dim, got shape {tuple(logits.shape)}")
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    # p * log p -> 0 where p == 0 (log p may be -inf); masking logp first keeps the gradient finite.
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)


def entropy_bonus(entropy: Tensor, mask: Tensor, mode: str, *, normalizer: float | None = None) -> Tensor:
    """0-dim ``bonus = aggregate_loss(entropy (N, T), mask, mode)`` for ``loss = pg_loss - coef * bonus`` (3PO's baseline)."""
    return aggregate_loss(entropy, mask, mode, normalizer=normalizer)


def self_certainty(logits: Tensor, mask: Tensor) -> Tensor:
    """INTUITOR self-certainty (arXiv 2505.19590): (N,) from logits (N, T, V) and mask (N, T)::

        KL_t = sum_v (1/V) log((1/V) / p_v) = logsumexp(z) - mean_v(z) - log V
        SC = sum_t m_t KL_t / max(1, sum_t m_t)

    >= 0, higher = more confident; differentiable (detach it to use it as a reward)."""
    logits = _check_float_tensor("logits", logits, ndim=3)
    m = _check_mask(mask, logits.shape[:2])
    vocab = logits.shape[-1]
    kl = torch.logsumexp(logits, dim=-1) - logits.mean(dim=-1) - math.log(vocab)
    kl = torch.where(m, kl, torch.zeros((), dtype=kl.dtype, device=kl.device))
    return kl.sum(-1) / m.sum(-1).clamp(min=1)
