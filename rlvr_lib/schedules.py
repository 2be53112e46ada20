"""Learning-rate schedules of the RL loop: linear warm-up, then constant or cosine decay.

A schedule multiplies the optimizer's lr (AdamW's ``config.lr``, or e.g. 3PO's IVON lr) by a factor f(s)
of the optimizer step s = 0, 1, ..., S - 1 (S = :func:`total_optimizer_steps`: every RL step takes
``inner_epochs * minibatches`` optimizer steps). With W = :func:`warmup_steps` (``ceil(lr_warmup_ratio * S)``):

    f(s) = s / max(1, W)                                      for s < W   (linear warm-up from 0)
    f(s) = 1                                                  for s >= W  ("constant")
    f(s) = 0.5 * (1 + cos(pi * (s - W) / max(1, S - W)))      for s >= W  ("cosine", down to 0 at s = S)

as ``transformers.get_constant_schedule_with_warmup`` and ``get_cosine_schedule_with_warmup``, which the
papers' trainers use. A ``LambdaLR`` (:func:`lr_scheduler`) applies it after every ``optimizer.step()`` and
is checkpointed, so a resumed run replays the uninterrupted one exactly.

The papers' schedules (:data:`PAPER_SCHEDULES`, :func:`paper_schedule`), one rule for all: the warm-up
lasts the same fraction of the run's optimizer steps as in the authors' run (NudgeRL 5% and VIGOR 10%,
cosine; 3PO 34 / 1,629 = 2.1%, constant; SAGE constant, no warm-up).

Departures from the papers:

1. The warm-up is a fraction of the run, not the authors' step count, since the testbed's runs are far
   shorter.

Where each paper's fraction comes from: docs/library/schedules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr_lib.validation import check_choice, check_int, check_range

__all__ = [
    "LR_SCHEDULES",
    "PAPER_SCHEDULES",
    "PaperSchedule",
    "lr_factor",
    "lr_scheduler",
    "paper_schedule",
    "total_optimizer_steps",
    "warmup_steps",
]

LR_SCHEDULES = ("constant", "cosine")
"""Decays after the warm-up: ``"constant"`` (f = 1) or ``"cosine"`` (one half-cosine down to 0)."""


def warmup_steps(ratio: float, total: int) -> int:
    """W = ceil(``ratio`` x ``total``): the warm-up's optimizer steps (Hugging Face's rounding).

    ``ratio * total`` is rounded to 9 decimals before the ceiling, so that 0.05 x 40 gives 2, not 3.
    """
    check_range("ratio", ratio, 0.0, 1.0, hi_open=True)
    check_int("total", total, 1)
    return int(math.ceil(round(ratio * total, 9)))


def lr_factor(step: int, *, total: int, warmup: int, schedule: str = "constant") -> float:
    """f(``step``): the lr multiplier of optimizer step ``step`` (0-based; formulas in the module docstring).

    Args:
        step: Optimizer steps taken so far, >= 0.
        total: S, the run's optimizer steps, >= 1.
        warmup: W, warm-up steps, in [0, total].
        schedule: One of :data:`LR_SCHEDULES`.
    """
    check_int("step", step, 0)
    check_int("total", total, 1)
    check_int("warmup", warmup, 0, total)
    check_choice("schedule", schedule, LR_SCHEDULES)
    if step < warmup:
        return step / max(1, warmup)
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def total_optimizer_steps(config) -> int:
    """S = ``steps * inner_epochs * minibatches`` of a `TrainerConfig` (a minibatch left empty is not stepped)."""
    return config.steps * config.inner_epochs * config.minibatches


def lr_scheduler(optimizer: torch.optim.Optimizer, config) -> torch.optim.lr_scheduler.LambdaLR | None:
    """The ``LambdaLR`` that applies ``config``'s schedule to ``optimizer``, or ``None`` when it is constant.

    ``None`` (``lr_schedule="constant"``, ``lr_warmup_ratio=0``) leaves the
    optimizer exactly as before schedules existed. Building the scheduler
    sets every group's lr to its base lr x f(0) (0 with a warm-up).
    """
    if config.lr_schedule == "constant" and config.lr_warmup_ratio == 0:
        return None
    total = total_optimizer_steps(config)
    warmup = warmup_steps(config.lr_warmup_ratio, total)
    schedule = config.lr_schedule
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total=total, warmup=warmup, schedule=schedule))


@dataclass(frozen=True)
class PaperSchedule:
    """A paper's lr schedule as the rule of the module docstring scales it: decay, warm-up fraction, source."""

    schedule: str
    warmup_ratio: float
    source: str

    def fields(self) -> dict:
        """The `TrainerConfig` fields (``lr_schedule``, ``lr_warmup_ratio``) a preset sets."""
        return {"lr_schedule": self.schedule, "lr_warmup_ratio": self.warmup_ratio}


THREEPO_WARMUP_STEPS = 34
"""3PO's ``LR_WARMUP_STEPS`` (``verl/recipes/run_rl.sh``, DAPO-Math recipe)."""
THREEPO_OPTIMIZER_STEPS = 3 * (17_398 // 32)
"""The optimizer steps of that recipe's run: 3 epochs x 543 batches of 32 (module docstring): 1,629."""

PAPER_SCHEDULES: dict[str, PaperSchedule] = {
    "nudgerl": PaperSchedule("cosine", 0.05, "NudgeRL configs/train_config.yaml: cosine, warmup_ratio 0.05 (TRL)"),
    "vigor": PaperSchedule("cosine", 0.10, "VIGOR recipes/Qwen2.5-*/grpo/config_demo*.yaml: cosine, warmup_ratio 0.1 (TRL)"),
    "threepo": PaperSchedule("constant", THREEPO_WARMUP_STEPS / THREEPO_OPTIMIZER_STEPS,
                             "3PO verl/recipes/run_rl.sh: LR_WARMUP_STEPS=34 of 1,629 optimizer steps, then constant"),
}
"""Per paper, its schedule under the one scaling rule (warm-up as the same fraction of the run)."""


def paper_schedule(paper: str) -> dict:
    """The `TrainerConfig` fields of ``paper``'s schedule (:data:`PAPER_SCHEDULES`), for a preset."""
    return PAPER_SCHEDULES[check_choice("paper", paper, sorted(PAPER_SCHEDULES))].fields()
