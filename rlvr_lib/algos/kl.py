"""Per-token KL estimators against a reference policy, on sampled tokens.

Inputs are the log-probs of the tokens actually sampled (from pi_theta):
``logp`` under the current policy and ``ref_logp`` under the reference, both
(N, T). Each estimator returns (N, T); mask and aggregate them with
:func:`rlvr_lib.algos.aggregate_loss`. ``ref_logp`` is treated as a constant.

Estimators (Schulman, "Approximating KL divergence", 2020), with
r = pi_ref / pi_theta = exp(ref_logp - logp) and samples from pi_theta:

* ``"k1"``: log(1/r) = logp - ref_logp; unbiased for KL(pi_theta || pi_ref), high variance.
* ``"k2"``: 0.5 * (logp - ref_logp)^2; biased, low variance.
* ``"k3"``: r - log r - 1; unbiased for KL(pi_theta || pi_ref), >= 0 (GRPO's choice).
* ``"forward"``: r log r - (r - 1); unbiased for the forward KL(pi_ref || pi_theta), >= 0.
* ``"none"``: zeros (no KL anchor).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .policy_loss import _check_float_tensor, _check_same_shape

__all__ = ["KL_ESTIMATORS", "forward_kl_penalty", "get_kl_estimator", "kl_penalty"]

# exp() of a log-ratio beyond this overflows in low precision and is meaningless
# as a penalty anyway; verl clamps at the same value.
_MAX_LOG_RATIO = 20.0


def _check_pair(logp: Tensor, ref_logp: Tensor) -> tuple[Tensor, Tensor]:
    logp = _check_float_tensor("logp", logp)
    ref_logp = _check_float_tensor("ref_logp", ref_logp)
    _check_same_shape("logp", logp, ref_logp=ref_logp)
    return logp, ref_logp.detach()


def _k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    return logp - ref_logp


def _k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    return 0.5 * (logp - ref_logp) ** 2


def _k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    log_r = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(log_r) - log_r - 1.0


def forward_kl_penalty(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Sampled-token estimator of the forward KL(pi_ref || pi_theta), samples from pi_theta.

    With w = pi_ref / pi_theta = exp(ref_logp - logp):
    KL(pi_ref || pi_theta) = E_ref[log w] = E_theta[w log w]. Since
    E_theta[w - 1] = 0, subtracting it keeps the estimator unbiased and makes
    every term non-negative (w log w - w + 1 >= 0, zero iff w = 1), which lowers
    the variance - the forward analogue of k3:

        forward_t = w_t * log w_t - (w_t - 1)

    The log-ratio is clamped to [-20, 20] before exp for numerical safety.
    This is the "forward KL" anchor SAGE (arXiv 2605.18864) compares against.

    Args:
        logp: (N, T) log-probs of sampled tokens under pi_theta.
        ref_logp: (N, T) log-probs of the same tokens under pi_ref.

    Returns:
        (N, T) tensor.
    """
    logp, ref_logp = _check_pair(logp, ref_logp)
    log_w = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    w = torch.exp(log_w)
    return w * log_w - (w - 1.0)


def _none(logp: Tensor, ref_logp: Tensor) -> Tensor:
    return torch.zeros_like(logp)


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": _k1,
    "k2": _k2,
    "k3": _k3,
    "forward": forward_kl_penalty,
    "none": _none,
}


def get_kl_estimator(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """Return the per-token KL estimator ``fn(logp, ref_logp) -> (N, T)`` named ``name``."""
    try:
        return KL_ESTIMATORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown KL estimator {name!r}; valid names: {sorted(KL_ESTIMATORS)}") from None


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL penalty against a reference policy, on sampled tokens.

    kind:
      * ``"k1"``: logp - ref_logp
      * ``"k2"``: 0.5 * (logp - ref_logp)^2
      * ``"k3"``: exp(ref_logp - logp) - (ref_logp - logp) - 1  (log-ratio clamped to [-20, 20])
      * ``"forward"``: see :func:`forward_kl_penalty`
      * ``"none"``: zeros

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
