"""Oracle exploration: GRPO in which some rollouts of each target problem are forced onto a known strategy.

For every problem of ``target_family``, the last ``forced`` of its G rollouts are sampled with ``hint`` and all
are credited to the hint-free prompt x0 (``credits_hint_free``)::

    A_i = (r_i - mean_G r) / (std_G r + eps)      over the G rollouts of x0, forced ones included
    L   = GRPO's loss on log pi(y_i | x0)

Not a paper's method: a privileged upper-reference arm for the discovery premise of NudgeRL (arXiv 2605.15726)
and 3PO (arXiv 2608.09805), on GRPO (DeepSeekMath, arXiv 2402.03300). Preset: GRPO's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import Method
from rlvr_lib.methods.registry import METHODS, register_method

__all__ = ["OracleExploration", "OracleOptions"]


@dataclass(frozen=True)
class OracleOptions(ConfigBase):
    """`OracleExploration`'s settings: ``forced`` rollouts per target group (int >= 0), the strategy ``hint``
    (a non-empty str) and the ``target_family`` label of the problems it is forced on."""

    forced: int = 2
    hint: str = "round"
    target_family: str = "targets_train"

    def validate(self) -> None:
        self.check_nonnegative_int("forced", self.forced)
        self.check(isinstance(self.hint, str) and self.hint.strip(), "hint", self.hint, "a non-empty str")
        self.check(isinstance(self.target_family, str) and self.target_family, "target_family", self.target_family,
                   "a non-empty family name")


class OracleExploration(Method):
    """Oracle exploration (the module docstring; for the discovery premise of NudgeRL, arXiv 2605.15726, and 3PO,
    arXiv 2608.09805). Options: ``forced`` (default 2), ``hint`` ("round"), ``target_family``."""

    Options = OracleOptions
    credits_hint_free = True

    def check_task(self, task) -> None:
        """Refuse a task without the family ``target_family``: no problem would be forced onto the hint, and the arm
        would train as plain GRPO (one line naming the method, the task, the family and the task's families)."""
        target = self.options.target_family
        if target not in task.families:
            raise ValueError(f"{self.name}: task {task.name!r} has no family {target!r} (method_options.target_family)"
                             ": the oracle forces its hint only on that family's problems and would train as plain "
                             f"GRPO; use a task with that family (e.g. 'arith_discovery') or set target_family to one "
                             f"of {list(task.families)}")

    def hints(self, problems: list, group_size: int, rng: np.random.Generator) -> list[list[tuple[int, str | None]]]:
        forced = self.options.forced
        OracleOptions.check(forced <= group_size, "forced", forced, f"at most group_size={group_size}")
        plan = []
        for p in problems:
            n = forced if p.family == self.options.target_family else 0
            plan.append([(-1, None)] * (group_size - n) + [(0, self.options.hint)] * n)
        return plan


register_method("oracle_explore", OracleExploration,
                "Oracle exploration: GRPO with 2 of 8 rollouts of each target problem forced onto the rare strategy, "
                "credited to the hint-free prompt (the discovery regime's gate)",
                # GRPO's settings, on the task that has the default target family (check_task refuses others)
                **{**METHODS["grpo"].preset, "task": "arith_discovery"})
