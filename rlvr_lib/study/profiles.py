"""The full profile the method notebooks (02-06) share, stated once.

Every rule here was fixed before the recompute's first run (README, "Budget"):

* **Steps**: `full_profile_steps` -- the dynamics calibration's chosen count (200 on testbed v7), as in
  notebook 01, so each notebook's GRPO is notebook 01's.
* **Seeds**: 5 training seeds for a main arm (a method's headline row, its comparators, the base), 3 for an
  ablation or sweep arm, 3 sampling seeds for the base policy.
* **Evaluation**: 200 problems x 32 samples per family; pass@1 claims use every family.
* **Wide evaluation** (pass@k claims at k = 256): 50 problems x 256 samples of ``rare_mix`` (only the
  rare strategy works) and of the two hardest in-distribution families, ``hard_mix`` and ``hardest_mix``
  (the last two of `EVAL_FAMILIES`, which are ordered by difficulty). It is an extra evaluation of the
  trained policy, stored under the label :data:`WIDE` (`rlvr_lib.study.pipeline.train_and_evaluate`), and
  only arms that a pass@k claim reads carry it (it costs more than a G = 8 run's training). 50 problems, not
  the first recompute's 100: the second recompute's first cut (README, "Budget"), decided before its first run.

The quick profiles stay in each notebook: they are smoke tests, not a budget.
"""

from __future__ import annotations

from typing import Any

from rlvr_lib.eval.policy_eval import EvalSpec
from rlvr_lib.study.dynamics import full_profile_steps
from rlvr_lib.tasks.arithmetic import EVAL_FAMILIES, RARE_FAMILIES

__all__ = ["ABLATION_SEEDS", "BASELINES_WITH_WIDE", "BASE_SEEDS", "MAIN_SEEDS", "WIDE", "WIDE_FAMILIES",
           "baseline_extra_specs", "full_profile", "wide_spec"]

MAIN_SEEDS = (0, 1, 2, 3, 4)
ABLATION_SEEDS = (0, 1, 2)
BASE_SEEDS = (0, 1, 2)
WIDE = "wide"
"""The label of the wide evaluation in a record's extra evaluations (``record.extra["evals"]``)."""
WIDE_FAMILIES = (*EVAL_FAMILIES[-2:], *RARE_FAMILIES)
BASELINES_WITH_WIDE = ("grpo", "grpo_no_kl", "grpo_forward_kl", "bnpo_loss")
"""Notebook 02's arms that also get the wide evaluation: the pass@256 claims of notebooks 02 and 05 read them."""


def baseline_extra_specs(name: str, profile: dict[str, Any]) -> dict[str, EvalSpec] | None:
    """The extra evaluations of notebook 02's run ``name`` under ``profile``: a notebook that reads one of
    notebook 02's runs passes these, so its call is notebook 02's and reads the cached run (the extra
    evaluations are part of a run's cache key)."""
    return {WIDE: profile["wide_spec"]} if name in BASELINES_WITH_WIDE else None


def wide_spec(problems: int = 50, samples: int = 256, seed: int = 0) -> EvalSpec:
    """The wide evaluation: ``problems`` x ``samples`` on :data:`WIDE_FAMILIES` (clustering is the main
    evaluation's job, so one problem keeps its diversity pass cheap)."""
    return EvalSpec(families=WIDE_FAMILIES, problems_per_family=problems, samples=samples, seed=seed,
                    diversity_problems=1, diversity_samples=1)


def full_profile(**extra: Any) -> dict[str, Any]:
    """The shared full profile as a notebook's ``PROFILES["full"]``, with a notebook's own ``extra`` keys.

    Keys: ``seeds``, ``ablation_seeds``, ``base_seeds`` (lists), ``steps``, ``prompts_per_step``, ``spec``
    (the main evaluation) and ``wide_spec``.
    """
    profile = dict(seeds=list(MAIN_SEEDS), ablation_seeds=list(ABLATION_SEEDS), base_seeds=list(BASE_SEEDS),
                   steps=full_profile_steps(), prompts_per_step=8, spec=EvalSpec(problems_per_family=200, samples=32),
                   wide_spec=wide_spec())
    clash = sorted(set(extra) & set(profile))
    if clash:
        raise ValueError(f"full_profile: {clash} are the shared profile's keys and are not overridden per notebook; "
                         f"a notebook adds only keys of its own")
    return {**profile, **extra}
