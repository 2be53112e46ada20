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
    """``value`` in the forward pass, ``surrogate``'s gradient in the backward pass.

    ``surrogate - surrogate.detach()`` is exactly zero for finite values, so the
    result equals ``value`` bit for bit.
    """
    return value.detach() + (surrogate - surrogate.detach())


def _k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp = log(1/r).

    VALUE: unbiased for the reverse KL(pi_theta || pi_ref); can be negative,
    high variance. GRADIENT AS USED: d/dlogp = 1, so E_theta[grad logp] = 0 -
    it exerts no pull towards pi_ref in expectation (only noise).
    """
    return logp - ref_logp


def _k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = 0.5 * (logp - ref_logp)^2 = 0.5 * (log r)^2.

    VALUE: a biased (low-variance, >= 0) estimate of the reverse
    KL(pi_theta || pi_ref). GRADIENT AS USED: d/dlogp = log(pi_theta / pi_ref),
    so E_theta[log(pi_theta/pi_ref) grad logp] = grad KL(pi_theta || pi_ref):
    exactly the reverse KL's gradient.
    """
    return 0.5 * (logp - ref_logp) ** 2


def _k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = r - log r - 1, r = pi_ref / pi_theta (GRPO's / verl's "low_var_kl").

    VALUE: unbiased for the reverse KL(pi_theta || pi_ref), >= 0.
    GRADIENT AS USED: d/dlogp = 1 - r, so E_theta[(1 - r) grad logp]
    = grad KL(pi_ref || pi_theta): the FORWARD KL's gradient, not the reverse
    KL's its value estimates. Use ``"reverse"`` for the reverse KL's gradient.
    The log-ratio is clamped to [-20, 20] before exp.
    """
    log_r = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(log_r) - log_r - 1.0


def forward_kl_penalty(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Sampled-token forward-KL penalty KL(pi_ref || pi_theta), samples from pi_theta.

    VALUE. With w = pi_ref / pi_theta = exp(ref_logp - logp):
    KL(pi_ref || pi_theta) = E_ref[log w] = E_theta[w log w]. Since
    E_theta[w - 1] = 0, subtracting it keeps the estimator unbiased and makes
    every term non-negative (w log w - w + 1 >= 0, zero iff w = 1), which lowers
    the variance - the forward analogue of k3:

        value_t = w_t * log w_t - (w_t - 1)

    GRADIENT AS USED: k3's, the forward KL's (differentiating value_t itself would give neither KL's
    gradient; docs/library/kl.md), the value unchanged bit for bit:

        forward_t = value_t.detach() + (k3_t - k3_t.detach()),   k3_t = w_t - log w_t - 1,
        d forward_t / d logp_t = 1 - w_t,   E_theta[(1 - w) grad logp] = grad KL(pi_ref || pi_theta).

    The log-ratio is clamped to [-20, 20] before exp. SAGE's (arXiv 2605.18864) "forward KL" anchor.

    Args:
        logp: (N, T) log-probs of sampled tokens under pi_theta.
        ref_logp: (N, T) log-probs of the same tokens under pi_ref.

    Returns:
        (N, T) tensor.
    """
    logp, ref_logp = _check_pair(logp, ref_logp)
    log_w = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    w = torch.exp(log_w)
    value = w * log_w - (w - 1.0)
    return _straight_through(value, _k3(logp, ref_logp))


def reverse_kl_penalty(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Sampled-token reverse-KL penalty KL(pi_theta || pi_ref), samples from pi_theta.

    This is the KL the GRPO papers write down ("KL(pi_theta || pi_ref)"), with
    both its value and its gradient.

    VALUE: k3's, r - log r - 1 with r = pi_ref / pi_theta: unbiased for
    KL(pi_theta || pi_ref), >= 0 per token (Schulman 2020).

    GRADIENT AS USED: k2's,

        reverse_t = k3_t.detach() + (k2_t - k2_t.detach()),
        k2_t = 0.5 * (logp_t - ref_logp_t)^2,
        d reverse_t / d logp_t = logp_t - ref_logp_t = log(pi_theta / pi_ref),

    and E_theta[log(pi_theta/pi_ref) grad logp] = grad KL(pi_theta || pi_ref),
    the reverse KL's gradient (k3 alone would give the forward KL's).

    Args:
        logp: (N, T) log-probs of sampled tokens under pi_theta.
        ref_logp: (N, T) log-probs of the same tokens under pi_ref.

    Returns:
        (N, T) tensor.
    """
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
    """Per-token KL penalty against a reference policy, on sampled tokens.

    With r = pi_ref / pi_theta. "Value" is what the mean over pi_theta samples
    estimates; "gradient" is the expected gradient of ``kl_coef * penalty`` as
    used in the loss (autograd through ``logp`` only). See the module docstring.

    kind:
      * ``"k1"``: logp - ref_logp. Value: KL(pi_theta || pi_ref), unbiased.
        Gradient: zero in expectation.
      * ``"k2"``: 0.5 * (logp - ref_logp)^2. Value: KL(pi_theta || pi_ref), biased.
        Gradient: the reverse KL(pi_theta || pi_ref)'s.
      * ``"k3"``: exp(ref_logp - logp) - (ref_logp - logp) - 1 (log-ratio clamped
        to [-20, 20]). Value: KL(pi_theta || pi_ref), unbiased, >= 0.
        Gradient: the FORWARD KL(pi_ref || pi_theta)'s.
      * ``"reverse"``: k3's value with k2's gradient, see :func:`reverse_kl_penalty`.
        Value: KL(pi_theta || pi_ref), unbiased, >= 0. Gradient: the reverse KL's.
      * ``"forward"``: r log r - (r - 1) with k3's gradient, see
        :func:`forward_kl_penalty`. Value: KL(pi_ref || pi_theta), unbiased, >= 0.
        Gradient: the forward KL's.
      * ``"none"``: zeros. Gradient: zero.

    Args:
        logp: (N, T) current-policy log-probs of the sampled tokens (carries the gradient).
        ref_logp: (N, T) reference log-probs of the same tokens (treated as constant).
        kind: a key of :data:`KL_ESTIMATORS`.

    Returns:
        (N, T) tensor; not masked.
    """
    fn = get_kl_estimator(kind)
    logp, ref_logp = _check_pair(logp, ref_logp)
    return fn(logp, ref_logp)
