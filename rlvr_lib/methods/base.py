"""The plug-in interface between the RL loop and a method.

The trainer (``rlvr_lib.trainer``) is one GRPO loop that never names a paper.
A method changes it only through the hooks below; each hook's default is plain
GRPO, so ``Method()`` *is* GRPO. A paper's method overrides the few hooks it
needs:

========================  ===========================================  =====================
hook                      what it decides                              used by
========================  ===========================================  =====================
``contexts``              the hint appended to each rollout's prompt   NudgeRL, POPE
``weight_samples``        how many weight perturbations per group,     3PO
``perturbed``             and the weights a slice is rolled out from
``rewards``               rewards (verifier or intrinsic)              VIGOR, INTUITOR, DAPO
``keep_groups``           which groups to train on (dynamic sampling)  DAPO
``refill_rounds``         cap on refilling dropped groups              DAPO
``advantages``            advantages from rewards and group/context    NudgeRL, Dr.GRPO
``anchor``                the per-token reference anchor (KL)          SAGE
``policy_loss``           the per-token surrogate                      KL-Cov, Clip-Cov
``extra_loss``            added loss terms (distillation, entropy)     NudgeRL, EntReg
``sampling_temperature``  sampling temperature of a step               Polaris
``make_optimizer``        the optimizer                                3PO (IVON)
``on_step_start``         per-step method state (seeded generators)    Clip-Cov
``on_step_end``           per-step method state (latches)              Polaris
``state_dict``            the method state a checkpoint keeps          Polaris
========================  ===========================================  =====================
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch

from rlvr_lib.algos import get_advantage_estimator, kl_penalty, ppo_clip_loss


@dataclass
class StepBatch:
    """What the hooks see of one training step (``N = prompts * G`` rollouts).

    Attributes:
        problems: The step's problems, one per group.
        group_index: ``(N,)`` long, the problem (group) of each rollout.
        context_index: ``(N,)`` long, index of the rollout's hint in its
            problem's hint list, ``-1`` for none.
        contexts: ``N`` hint strings or ``None``.
        rollouts: The engine's `Rollouts` (prompt-major).
        verdicts: The verifier's verdict per rollout (always computed, also
            for intrinsic rewards, so accuracy is logged honestly).
        rewards: ``(N,)`` float rewards, once computed.
        advantages: ``(N,)`` float advantages, once computed.
    """

    problems: list
    group_index: torch.Tensor
    context_index: torch.Tensor
    contexts: list
    rollouts: Any
    verdicts: list
    rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None


class Method:
    """GRPO: every hook at its default. Subclasses override what their paper changes.

    Args:
        config: The trainer config (`rlvr_lib.trainer.TrainerConfig`); a
            method reads its own settings from its own config object.
    """

    name = "grpo"

    def __init__(self, config):
        self.config = config

    # -- sampling ---------------------------------------------------------------------
    def contexts(self, problems: list, group_size: int, rng: np.random.Generator) -> list[list[tuple[int, str | None]]]:
        """Per problem, ``group_size`` pairs ``(context_index, context)``; default: no hints."""
        return [[(-1, None)] * group_size for _ in problems]

    def sampling_temperature(self, step: int) -> float:
        """Temperature for this step's rollouts (and the matching log-probs)."""
        return self.config.temperature

    def weight_samples(self) -> int:
        """Number of weight perturbations per step; the G rollouts of each group are split among them."""
        return 1

    @contextlib.contextmanager
    def perturbed(self, model: torch.nn.Module, index: int) -> Iterator[None]:
        """Context in which rollouts (and, for 3PO, gradients) use perturbed weights."""
        yield

    # -- credit assignment ------------------------------------------------------------
    def rewards(self, batch: StepBatch, model: torch.nn.Module) -> torch.Tensor:
        """``(N,)`` rewards; default: the verifier's."""
        return torch.tensor([v.reward for v in batch.verdicts], dtype=torch.float32)

    def keep_groups(self, batch: StepBatch) -> torch.Tensor | None:
        """``(M,)`` bool over the batch's groups: True = train on it (dynamic sampling).

        Called once per sampling round, after rewards and before advantages. The
        default ``None`` keeps every group and turns dynamic sampling off (one
        round, no ``dynamic_*`` metrics): plain GRPO. When a mask is returned, the
        trainer refills dropped groups from fresh prompts for up to
        :meth:`refill_rounds` rounds (see ``Trainer._collect``).
        """
        return None

    def refill_rounds(self) -> int:
        """Cap on the refill rounds that replace groups dropped by :meth:`keep_groups`."""
        return 0

    def advantages(self, batch: StepBatch) -> torch.Tensor:
        """``(N,)`` advantages from the configured estimator (default GRPO mean/std)."""
        estimator = get_advantage_estimator(self.config.advantage)
        if self.config.advantage == "context":  # NudgeRL's inter/intra needs the hint of each rollout
            return estimator(batch.rewards, batch.group_index, batch.context_index)
        return estimator(batch.rewards, batch.group_index)

    # -- loss -------------------------------------------------------------------------
    def policy_loss(self, logp, old_logp, advantages, mask) -> tuple[torch.Tensor, dict]:
        """Per-token surrogate ``(N, T)`` and its stats; default PPO-clip."""
        return ppo_clip_loss(
            logp, old_logp, advantages, mask, eps_low=self.config.eps_low, eps_high=self.config.eps_high
        )

    def anchor(self, logp, ref_logp, entropy, mask) -> torch.Tensor:
        """Per-token KL anchor ``(N, T)`` to the reference; scaled by ``kl_coef`` in the loop."""
        return kl_penalty(logp, ref_logp, self.config.kl_estimator)

    def extra_loss(self, batch: StepBatch, model, logp, entropy, mask) -> tuple[torch.Tensor | float, dict]:
        """Extra scalar loss terms and their stats; default none."""
        return 0.0, {}

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        cfg = self.config
        return torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
        )

    # -- method state (checkpointed) --------------------------------------------------
    def on_step_start(self, step: int) -> None:
        """Called at the start of each step, before any rollout (e.g. to seed a per-step generator)."""

    def on_step_end(self, step: int, metrics: dict) -> None:
        """Called after each step with its logged metrics (e.g. to latch a temperature).

        Keys a method adds to ``metrics`` here are logged with the step.
        """

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
