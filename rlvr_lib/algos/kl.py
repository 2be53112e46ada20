"""Per-token KL estimators against a reference policy, on sampled tokens.

Inputs: ``logp`` (current policy) and ``ref_logp`` (reference, a constant), the log-probs of the sampled
tokens, both ``(N, T)``; each estimator returns ``(N, T)`` (mask and aggregate with
:func:`rlvr_lib.algos.aggregate_loss`). With r = pi_ref / pi = exp(ref_logp - logp), an estimator's VALUE
estimates a KL (what is logged) and its GRADIENT AS USED (autograd through ``logp`` on tokens sampled from
pi) is E_pi[d est / d logp * grad logp]: log(1/r) there gives the reverse KL's gradient, 1 - r the
forward KL's. Values: Schulman, "Approximating KL divergence" (2020); gradients: Tang & Munos (2025,
arXiv:2506.09477).

===========  ==========================  =======================  =================================
name         per-token value             VALUE estimates          GRADIENT AS USED (expected)
===========  ==========================  =======================  =================================
``k1``       log(1/r) = logp - ref_logp  KL(pi || ref), unbiased  zero (d/dlogp = 1)
``k2``       0.5 * (logp - ref_logp)^2   KL(pi || ref), biased    reverse KL's (d/dlogp = log(1/r))
``k3``       r - log r - 1  (>= 0)       KL(pi || ref), unbiased  FORWARD KL's (d/dlogp = 1 - r)
``reverse``  k3's value  (>= 0)          KL(pi || ref), unbiased  reverse KL's (k2's gradient)
``forward``  r log r - (r - 1)  (>= 0)   KL(ref || pi), unbiased  forward KL's (k3's gradient)
``none``     0                           -                        zero
===========  ==========================  =======================  =================================

``k3`` is GRPO's and verl's "low_var_kl". ``reverse`` and ``forward`` combine a value and a surrogate
straight-through: ``value.detach() + (surrogate - surrogate.detach())``. The statements are per token, not
the sequence-level KL's gradient. The log-ratio inside exp() is clamped to [-20, 20] (``k3``, ``forward``,
``reverse``'s value); beyond it ``k3``'s and ``forward``'s gradients are zero, ``reverse``'s is not clamped.

Derivations: docs/library/kl.md.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from rlvr_lib.validation import check_choice

from .policy_loss import _check_float_tensor, _check_same_shape

__all__ = [
    "KL_ESTIMATORS",
    "forward_kl_penalty",
    "get_kl_estimator",
    "kl_penalty",
    "reverse_kl_penalty",
]

# exp() of a log-ratio beyond this overflows in low precision and is meaningless
# as a penalty anyway; verl clamps at the same value.
_MAX_LOG_RATIO = 20.0


def _check_pair(logp: Tensor, ref_logp: Tensor) -> tuple[Tensor, Tensor]:
    logp = _check_float_tensor("logp", logp)
    ref_logp = _check_float_tensor("ref_logp", ref_logp)
    _check_same_shape("logp", logp, ref_logp=ref_logp)
    return logp, ref_logp.detach()


def _straight_through(value: Tensor, surrogate: Tensor) -> Tensor:
    """``value`` in the forward pass (bit for bit), ``surrogate``'s gradient in the backward pass."""
    return value.detach() + (surrogate - surrogate.detach())


def _k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp = log(1/r). VALUE: KL(pi || ref), unbiased. GRADIENT AS USED: zero in expectation."""
    return logp - ref_logp


def _k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = 0.5 * (log r)^2. VALUE: KL(pi || ref), biased, >= 0. GRADIENT AS USED: d/dlogp = log(pi/pi_ref), the reverse KL's."""
    return 0.5 * (logp - ref_logp) ** 2


def _k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = r - log r - 1 (GRPO's "low_var_kl"). VALUE: KL(pi || ref), unbiased. GRADIENT AS USED: 1 - r, the FORWARD KL's."""
    log_r = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(log_r) - log_r - 1.0


def forward_kl_penalty(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Forward-KL penalty KL(pi_ref || pi_theta) on tokens sampled from pi_theta (SAGE's "forward KL" anchor).

    VALUE, with w = pi_ref / pi_theta = exp(ref_logp - logp) (log-ratio clamped to [-20, 20])::

        value_t = w_t * log w_t - (w_t - 1)          (unbiased, >= 0)

    GRADIENT AS USED: k3's, the forward KL's, the value unchanged bit for bit::

        forward_t = value_t.detach() + (k3_t - k3_t.detach()),   k3_t = w_t - log w_t - 1,
        d forward_t / d logp_t = 1 - w_t,   E_theta[(1 - w) grad logp] = grad KL(pi_ref || pi_theta)

    ``logp``, ``ref_logp``: (N, T); returns (N, T)."""
    logp, ref_logp = _check_pair(logp, ref_logp)
    log_w = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    w = torch.exp(log_w)
    value = w * log_w - (w - 1.0)
    return _straight_through(value, _k3(logp, ref_logp))


def reverse_kl_penalty(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Reverse-KL penalty KL(pi_theta || pi_ref), the KL the GRPO papers write, on tokens sampled from pi_theta.

    VALUE: k3's, r - log r - 1, unbiased, >= 0. GRADIENT AS USED: k2's, the reverse KL's::

        reverse_t = k3_t.detach() + (k2_t - k2_t.detach()),   k2_t = 0.5 * (logp_t - ref_logp_t)^2,
        d reverse_t / d logp_t = log(pi_theta / pi_ref)

    ``logp``, ``ref_logp``: (N, T); returns (N, T)."""
    logp, ref_logp = _check_pair(logp, ref_logp)
    return _straight_through(_k3(logp, ref_logp), _k2(logp, ref_logp))


def _none(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Zeros: no KL anchor. VALUE 0, GRADIENT AS USED zero (no graph to logp)."""
    return torch.zeros_like(logp)


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": _k1,
    "k2": _k2,
    "k3": _k3,
    "forward": forward_kl_penalty,
    "reverse": reverse_kl_penalty,
    "none": _none,
}


def get_kl_estimator(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """Return the per-token KL estimator ``fn(logp, ref_logp) -> (N, T)`` named ``name``."""
    return KL_ESTIMATORS[check_choice("kl_estimator", name, sorted(KL_ESTIMATORS))]


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL penalty ``(N, T)`` (not masked) of ``logp`` (N, T) against constant ``ref_logp`` (N, T).

    ``kind`` (r = pi_ref / pi_theta; value / expected gradient of ``kl_coef * penalty``):
    ``"k1"`` logp - ref_logp: reverse KL / zero; ``"k2"`` 0.5 (logp - ref_logp)^2: reverse KL (biased) /
    reverse KL's; ``"k3"`` r - log r - 1: reverse KL / FORWARD KL's; ``"reverse"``: k3's value, reverse KL's
    gradient; ``"forward"`` r log r - (r - 1): forward KL / forward KL's; ``"none"``: zeros."""
    fn = get_kl_estimator(kind)
    logp, ref_logp = _check_pair(logp, ref_logp)
    return fn(logp, ref_logp)
