"""Rewards that need the model: verifier-free intrinsic rewards computed from the policy itself.

* :mod:`~rlvr_lib.rewards.self_certainty` -- INTUITOR's self-certainty (arXiv 2505.19590);
* :mod:`~rlvr_lib.rewards.grad_norm` -- VIGOR's gradient-norm score (arXiv 2605.09920),
  with a naive per-sample backward loop (the reference), ghost norms from one batched
  backward (the fast path) and a ``torch.func.vmap`` form.
"""

from rlvr_lib.rewards.grad_norm import (
    GRAD_NORM_IMPLS,
    ghost_supported,
    grad_norm_scores,
    grad_norms_ghost,
    grad_norms_naive,
    grad_norms_vmap,
)
from rlvr_lib.rewards.self_certainty import completion_logits, self_certainty_rewards

__all__ = ["GRAD_NORM_IMPLS", "completion_logits", "ghost_supported", "grad_norm_scores", "grad_norms_ghost",
           "grad_norms_naive", "grad_norms_vmap", "self_certainty_rewards"]
