"""Evaluation: unbiased pass@k, reasoning-mode diversity, exploration diagnostics.

* :mod:`rlvr_lib.eval.passk` -- pass@k (Chen et al. 2021), curves, per-family averages.
* :mod:`rlvr_lib.eval.diversity` -- TF-IDF + scikit-learn clustering of traces
  into reasoning modes (NudgeRL Fig. 1), ARI against strategy labels, entropy.
* :mod:`rlvr_lib.eval.diagnostics` -- zero-advantage groups, rescued / lost
  groups (3PO Fig. 3), outcome rates, length statistics.
* The statistics over run records (bootstrap intervals, paired differences,
  rescued / lost problems, strategy shares) are the study harness's:
  :mod:`rlvr_lib.study.stats`; so are the paper-specific probes
  (:mod:`rlvr_lib.study.probes`) and the tables over run records
  (:mod:`rlvr_lib.study.summaries`). This package measures a policy and
  imports neither the study harness, the methods nor the trainer.
"""

from rlvr_lib.eval.diagnostics import (
    CRITERIA,
    STATUSES,
    RescuedLostGroups,
    dead_group_mask,
    length_stats,
    outcome_rates,
    rescued_lost_groups,
    zero_advantage_fraction,
)
from rlvr_lib.eval.diversity import (
    CLUSTER_METHODS,
    ModeCounts,
    build_vectorizer,
    cluster_features,
    cluster_traces,
    digit_mask,
    distinct_fraction,
    featurize_traces,
    mode_ari,
    mode_counts_per_problem,
    strategy_entropy,
)
from rlvr_lib.eval.sampling import ScoredSamples, sample_and_score
from rlvr_lib.eval.policy_eval import EvalSpec, evaluate_policy
from rlvr_lib.eval.passk import (
    AVERAGE_KEY,
    default_ks,
    pass_at_k,
    pass_at_k_array,
    pass_at_k_curve,
    per_family_pass_at_k,
)

__all__ = [
    "EvalSpec",
    "ScoredSamples",
    "evaluate_policy",
    "sample_and_score",
    "AVERAGE_KEY",
    "CLUSTER_METHODS",
    "CRITERIA",
    "STATUSES",
    "ModeCounts",
    "RescuedLostGroups",
    "build_vectorizer",
    "cluster_features",
    "cluster_traces",
    "dead_group_mask",
    "default_ks",
    "digit_mask",
    "distinct_fraction",
    "featurize_traces",
    "length_stats",
    "mode_ari",
    "mode_counts_per_problem",
    "outcome_rates",
    "pass_at_k",
    "pass_at_k_array",
    "pass_at_k_curve",
    "per_family_pass_at_k",
    "rescued_lost_groups",
    "strategy_entropy",
    "zero_advantage_fraction",
]
