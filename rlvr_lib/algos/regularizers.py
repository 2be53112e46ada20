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
    """Entropy of softmax(logits) over the last dimension.

        H = -sum_v p_v log p_v,   log p = logits - logsumexp(logits)

    Numerically stable for large logits; entries with p_v = 0 (including
    logits of -inf) contribute 0, with finite gradients. Computed in the
    input dtype; differentiable.

    Args:
        logits: (..., V) float, V >= 1.

    Returns:
        (...) entropies in nats.
    """
    logits = _check_float_tensor("logits", logits)
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a non-empty last (vocabulary) dim, got shape {tuple(logits.shape)}")
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    # p * log p -> 0 where p == 0 (log p may be -inf); masking logp first keeps the gradient finite.
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)


def entropy_bonus(entropy: Tensor, mask: Tensor, mode: str, *, normalizer: float | None = None) -> Tensor:
    """Aggregated token entropy for entropy regularisation: loss = pg_loss - coef * bonus.

    bonus = aggregate_loss(entropy, mask, mode), e.g. for ``"token_mean"`` the
    mean entropy over unmasked tokens. Use the same ``mode`` as the policy
    loss so the two terms are weighted alike. (Entropy regularisation baseline
    of 3PO, arXiv 2608.09805, coef 1e-3.)

    Args:
        entropy: (N, T) per-token entropies (e.g. from :func:`token_entropy`).
        mask: (N, T) 0/1.
        mode: a mode of :data:`rlvr_lib.algos.LOSS_AGG_MODES`.
        normalizer: passed to :func:`rlvr_lib.algos.aggregate_loss`.

    Returns:
        0-dim tensor (differentiable if ``entropy`` is).
    """
    return aggregate_loss(entropy, mask, mode, normalizer=normalizer)


def self_certainty(logits: Tensor, mask: Tensor) -> Tensor:
    """INTUITOR self-certainty (arXiv 2505.19590) of each completion.

    Mean over completion tokens of KL(U || pi(. | x, y_<t)), U uniform over V tokens:

        KL_t = sum_v (1/V) log((1/V) / p_v) = -log V - (1/V) sum_v log p_v
             = logsumexp(z) - mean_v(z) - log V          (z = logits, stable form)

        SC = sum_t m_t KL_t / max(1, sum_t m_t)

    Higher = more confident (further from uniform); >= 0. A zero-length
    completion gets 0. A logit of -inf makes KL infinite (p_v = 0), as the
    definition implies. Differentiable; detach it to use it as a reward.

    Args:
        logits: (N, T, V) completion logits.
        mask: (N, T) 0/1.

    Returns:
        (N,) self-certainty.
    """
    logits = _check_float_tensor("logits", logits, ndim=3)
    m = _check_mask(mask, logits.shape[:2])
    vocab = logits.shape[-1]
    kl = torch.logsumexp(logits, dim=-1) - logits.mean(dim=-1) - math.log(vocab)
    kl = torch.where(m, kl, torch.zeros((), dtype=kl.dtype, device=kl.device))
    return kl.sum(-1) / m.sum(-1).clamp(min=1)
