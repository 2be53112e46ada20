"""How far an optimiser moves the weights in each RL step of a run.

3PO (arXiv 2608.09805) replaces GRPO's AdamW with IVON, so any comparison of
the two depends on how the two step sizes are matched. Our rule
(`rlvr_lib.methods.threepo.matched_ivon_lr`) equalises the *largest*
per-weight step; this module measures the whole distribution, so the *mean*
steps can be compared too. For RL step ``s`` with trainable weights
``theta`` (all of them pooled, ``n`` entries; IVON's mean weights, which is
what the model holds between steps)::

    d_s        = |theta_{s+1} - theta_s|                  (per weight)
    mean_abs_s = sum_j d_sj / n
    max_abs_s  = max_j d_sj
    at_max_s   = #{j : d_sj >= (1 - rel_tol) * max_abs_s} / n

``at_max`` is the share of weights moved by (about) the step's largest move:
near 1 for a clipped or sign-like update (IVON with most weights at its clip
bound, AdamW's first bias-corrected step), small for AdamW later on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlvr_lib.validation import check_int, check_range

__all__ = ["WeightStepProfile", "weight_step_profile"]


@dataclass(frozen=True)
class WeightStepProfile:
    """Per-RL-step statistics of the weight update (the module docstring's ``mean_abs``, ``max_abs``, ``at_max``).

    Each array has one entry per measured step, steps ``0 .. len - 1`` of the run.
    """

    mean_abs: np.ndarray
    max_abs: np.ndarray
    at_max: np.ndarray

    def mean(self, skip: int = 0) -> dict[str, float]:
        """Each statistic averaged over the steps from ``skip`` on (e.g. skip AdamW's sign-like first step).

        Raises:
            ValueError: when ``skip`` leaves no step.
        """
        check_int("skip", skip, 0, len(self.mean_abs) - 1)
        return {name: float(getattr(self, name)[skip:].mean()) for name in ("mean_abs", "max_abs", "at_max")}


def weight_step_profile(config, steps: int, *, model=None, tokenizer=None, rel_tol: float = 0.01) -> WeightStepProfile:
    """Run the first ``steps`` RL steps of ``config`` and measure each step's weight update.

    The run is a fresh `rlvr_lib.trainer.Trainer` (no checkpoint, nothing
    written), so the steps are the first ``steps`` of the run ``config``
    describes, bit-identical to them. Memory: one extra copy of the
    trainable weights.

    Args:
        config: A `TrainerConfig`; its ``steps`` is not used.
        steps: How many RL steps to run and measure (>= 1).
        model, tokenizer: The initial policy (default: loaded from ``config.policy``); the model is trained in place.
        rel_tol: ``at_max`` counts weights within this relative distance of the step's largest move, in [0, 1).

    Returns:
        A `WeightStepProfile` with ``steps`` entries per statistic.

    Raises:
        ValueError: on ``steps < 1`` or ``rel_tol`` outside [0, 1).
    """
    from rlvr_lib.trainer import Trainer

    check_int("steps", steps, 1)
    check_range("rel_tol", rel_tol, 0.0, 1.0, hi_open=True)
    trainer = Trainer(config, model, tokenizer)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    mean_abs, max_abs, at_max = [], [], []
    for _ in range(steps):
        before = [p.detach().clone() for p in params]
        trainer.step()
        with torch.no_grad():
            deltas = [(p.detach() - b).abs_() for p, b in zip(params, before)]
            del before
            top = max(float(d.max()) for d in deltas)
            mean_abs.append(sum(float(d.double().sum()) for d in deltas) / n)
            max_abs.append(top)
            at_max.append(sum(int((d >= (1 - rel_tol) * top).sum()) for d in deltas) / n if top > 0 else 0.0)
    return WeightStepProfile(np.array(mean_abs), np.array(max_abs), np.array(at_max))
