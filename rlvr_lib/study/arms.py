"""What the method notebooks share: train the arms of a table, then compare them problem by problem.

* :class:`Arms` -- a notebook's run settings (experiment folder, results root, evaluation, steps,
  prompts per step, group size); :meth:`Arms.train` trains one arm on several seeds and
  :meth:`Arms.base` evaluates the base policy, both through the run cache
  (`rlvr_lib.study.pipeline`), so an arm another notebook already trained is read, not retrained.
* :class:`Paired` -- an evaluation's families and samples; :meth:`Paired.scores` gives the
  ``(seeds, problems)`` pass@k matrix of an arm and :meth:`Paired.versus` the paired difference of two
  arms over seeds x problems (`rlvr_lib.study.stats.paired_difference_ci`), the interval of every
  "A beats B" row of the claims tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_lib.eval.policy_eval import EvalSpec
from rlvr_lib.study.testbed import calibrated_config
from rlvr_lib.study.pipeline import evaluate_base, train_and_evaluate
from rlvr_lib.study.stats import paired_difference_ci, per_problem_scores
from rlvr_lib.validation import check_int

__all__ = ["Arms", "Paired"]


@dataclass(frozen=True)
class Arms:
    """A notebook's run settings; every arm it trains shares them unless a call overrides a field.

    Attributes:
        experiment: Results folder of the notebook's own runs.
        root: Results root (a scratch folder at the quick profile).
        spec: The evaluation every trained arm gets.
        steps, prompts_per_step, group_size: Trainer settings of every arm.
    """

    experiment: str
    root: Path | str | None
    spec: EvalSpec
    steps: int
    prompts_per_step: int
    group_size: int = 8

    def train(self, name: str, seeds: Sequence[int], experiment: str | None = None, label: str | None = None, *,
              extra_specs: dict | None = None, **overrides: Any) -> list:
        """One run record per seed of registered method ``name``, cached as run ``label`` (default ``name``).

        The config is ``calibrated_config(name, steps, prompts_per_step, group_size, seed, **overrides)``;
        ``overrides`` may set any `TrainerConfig` field, the group size included. ``experiment`` reads
        or writes another notebook's folder (shared arms).
        """
        fields = {"steps": self.steps, "prompts_per_step": self.prompts_per_step, "group_size": self.group_size,
                  **overrides}
        return [train_and_evaluate(experiment or self.experiment, label or name,
                                   calibrated_config(name, **fields, seed=seed), self.spec, root=self.root,
                                   extra_specs=extra_specs)
                for seed in seeds]

    def base(self, seeds: Sequence[int], experiment: str | None = None, *, name: str = "base",
             spec: EvalSpec | None = None, policy: str | None = None, **spec_fields: Any) -> list:
        """The base policy's evaluation per sampling seed (``spec``, default the arms', with ``spec_fields``);
        ``policy`` as `TrainerConfig.policy` (``None``: the embedded tiny policy)."""
        spec = spec or self.spec
        return [evaluate_base(experiment or self.experiment, spec.replace(seed=s, **spec_fields), policy,
                              root=self.root, name=name)
                for s in seeds]


@dataclass(frozen=True)
class Paired:
    """Per-problem scores of arms evaluated on the same problems, and their paired differences.

    Attributes:
        families: The families a score averages over by default.
        samples: Samples per problem of the evaluation (``n`` of pass@k).
    """

    families: Sequence[str]
    samples: int

    def scores(self, records: Sequence, k: int = 1, families: Sequence[str] | None = None,
               samples: int | None = None) -> np.ndarray:
        """``(S, P)`` per-seed, per-problem pass@k (`rlvr_lib.study.stats.per_problem_scores`)."""
        n = self.samples if samples is None else check_int("samples", samples, 1)
        return per_problem_scores(records, self.families if families is None else families, samples=n, k=k)[0]

    def versus(self, a: Sequence, b: Sequence, k: int = 1, families: Sequence[str] | None = None) -> dict:
        """pass@k of arm ``a`` minus arm ``b``: a paired bootstrap over seeds x problems (scores in [0, 1])."""
        return paired_difference_ci(self.scores(a, k, families), self.scores(b, k, families), bounds=(0, 1))
