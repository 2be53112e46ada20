"""Pure tensor functions of the GRPO family: no model, no I/O.

* advantages: GRPO, Dr.GRPO, NudgeRL hint, VIGOR rank, BNPO Beta; DAPO
  overlong shaping and dynamic-sampling filter.
* policy_loss: PPO-clip (clip-higher), KL-Cov, Clip-Cov, loss aggregation.
* kl: k1 / k2 / k3 / forward / reverse / none estimators against a reference
  (each documents what its value estimates and what its gradient as used is).
* regularizers: token entropy, entropy bonus, INTUITOR self-certainty.
* guides: SAGE branch / token / random guides and the shaped KL anchor.

Advantages, KL estimators and guides have a registry (name -> function) and a ``get_*`` that raises
``ValueError`` listing the valid names.
"""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    bnpo_beta_advantages,
    hint_advantages,
    dr_grpo_advantages,
    dynamic_sampling_keep_mask,
    get_advantage_estimator,
    grpo_advantages,
    overlong_reward_shaping,
    rank_advantages,
)
from .guides import (
    GUIDES,
    branch_guide,
    get_guide,
    guide_schedule,
    random_guide,
    shaped_kl,
    token_guide,
)
from .kl import KL_ESTIMATORS, forward_kl_penalty, get_kl_estimator, kl_penalty, reverse_kl_penalty
from .policy_loss import (
    LOSS_AGG_MODES,
    aggregate_loss,
    clip_cov_loss,
    clip_cov_mask,
    kl_cov_loss,
    ppo_clip_loss,
    token_covariance,
)
from .regularizers import entropy_bonus, self_certainty, token_entropy

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "GUIDES",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "aggregate_loss",
    "bnpo_beta_advantages",
    "branch_guide",
    "clip_cov_loss",
    "clip_cov_mask",
    "hint_advantages",
    "dr_grpo_advantages",
    "dynamic_sampling_keep_mask",
    "entropy_bonus",
    "forward_kl_penalty",
    "get_advantage_estimator",
    "get_guide",
    "get_kl_estimator",
    "grpo_advantages",
    "guide_schedule",
    "kl_cov_loss",
    "kl_penalty",
    "overlong_reward_shaping",
    "ppo_clip_loss",
    "random_guide",
    "rank_advantages",
    "reverse_kl_penalty",
    "self_certainty",
    "shaped_kl",
    "token_covariance",
    "token_entropy",
    "token_guide",
]
