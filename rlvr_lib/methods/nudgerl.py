"""NudgeRL: strategy nudging with hint dropout, inter/intra credit and hint-free self-distillation.

NudgeRL (arXiv 2605.15726; code tally0818/NudgeRL) rolls out each group from H hints of the task's pool
(R = G / H rollouts per hint; each rollout drops its hint with probability ``p_drop``, then sampled from the
hint-free prompt x0), credits rewards within and across hints, and distils the hinted rollouts into the
hint-free policy. A plug-in of the one GRPO loop (``hints``, the ``"hint"`` advantage estimator,
``extra_loss``). Per group, m the mean of all G rewards, m_z that of hint z's rollouts:

    hinted rollout i:  A_i = (r_i - m_{z(i)}) + lam * (m_{z(i)} - m);   no-hint rollout i:  A_i = r_i - m
    A_hat_i   = (A_i - mean_group(A)) / (std_group(A) + adv_eps)            (population std)
    L         = L_RL(x1) + lambda_distill * L_distill                       (x1 = x0 + hint)
    L_distill = -(1/n) sum_i w_i A_hat_i * s_i,  s_i = (1/|y_i|) sum_t log pi_theta(y_it | x0, y_i<t)

over the n rows of the minibatch, with no ratio and no clip in L_distill; w_i = 1 for every row
(``distill_rows="all"``) or for hinted rows only (``"hinted"``). lam = 1 is GRPO's credit.

Departures from the paper (details in docs/papers/nudgerl.md, "Departures"):

1. A problem with fewer than H hints sends the missing slots' rollouts to the no-hint sub-group (the
   authors' code raises), so every task trains at group size G.
2. ``dropout_unit="hint"`` (one dropout draw per hint) and ``distill_rows="hinted"`` are ablations the
   paper does not run.
3. The testbed's hint pool (`TaskHintPool`: 5 unverified hints, useful strategies mixed with distractors)
   stands in for the paper's hints.

Hint layout, dropout draws, distillation cost and diagnostics: docs/methods/nudgerl.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import Method, StepBatch, sample_problems
from rlvr_lib.methods.registry import register_method
from rlvr_lib.rollout.logprobs import sequence_logprobs
from rlvr_lib.schedules import paper_schedule
from rlvr_lib.tasks import CORRECT, get_task

__all__ = ["NUDGERL_SETTINGS", "NudgeRL", "NudgeRLOptions"]

_NO_ATTRIBUTE = object()


@dataclass(frozen=True)
class NudgeRLOptions(ConfigBase):
    """`NudgeRL`'s settings (see its docstring for what each one does)."""

    hints_per_problem: int = 2
    rollouts_per_hint: int | None = None
    hint_selection: str = "first"
    p_drop: float = 0.5
    dropout_unit: str = "rollout"
    lam: float = 1.1
    adv_eps: float = 1e-5
    lambda_distill: float = 0.1
    distill_rows: str = "all"

    def validate(self) -> None:
        self.check_positive_int("hints_per_problem", self.hints_per_problem)
        if self.rollouts_per_hint is not None:
            self.check_positive_int("rollouts_per_hint", self.rollouts_per_hint)
        self.check_choice("hint_selection", self.hint_selection, ("first", "random"))
        self.check_probability("p_drop", self.p_drop)
        self.check_choice("dropout_unit", self.dropout_unit, ("hint", "rollout"))
        self.check_nonnegative("lam", self.lam)
        self.check_nonnegative("adv_eps", self.adv_eps)
        self.check_nonnegative("lambda_distill", self.lambda_distill)
        self.check_choice("distill_rows", self.distill_rows, ("all", "hinted"))


class NudgeRL(Method):
    """NudgeRL (arXiv 2605.15726, code tally0818/NudgeRL): hint-nudged rollouts, inter/intra credit, distillation.

    Formulas: the module docstring. ``hints``: the first (or H random) hints of the task's pool C(x0), R rollouts
    each, ``(-1, None)`` for a dropped hint; ``extra_loss``: ``lambda_distill`` x L_distill. Preset:
    :data:`NUDGERL_SETTINGS`.

    Options: ``hints_per_problem`` (2), ``rollouts_per_hint`` (None = G / H; H x R = G), ``hint_selection``
    ("first" or "random"), ``p_drop`` (0.5), ``dropout_unit`` ("rollout" or "hint"), ``lam`` (1.1), ``adv_eps``
    (1e-5), ``lambda_distill`` (0.1), ``distill_rows`` ("all" or "hinted").
    """

    Options = NudgeRLOptions
    summed_metrics = frozenset({"nudge_mixed_groups", "nudge_solved_only_hinted", "nudge_solved_only_none"})

    def __init__(self, config):
        super().__init__(config)
        if config.advantage != "hint":
            raise ValueError(f"{self.name}: TrainerConfig.advantage={config.advantage!r} is invalid: must be "
                             "'hint' (NudgeRL's inter/intra-hint advantage, `hint_advantages`; lam=1 gives GRPO's credit)")
        try:
            self.rollouts_per_hint(config.group_size)
        except ValueError as err:
            raise ValueError(f"{self.name}: method_options: {err}") from None
        self._task = get_task(config.task)
        self._stats: dict[str, float] = {}
        self._slots = {"hint_slots": 0, "dropped": 0, "droppable": 0, "missing": 0}

    def check_task(self, task) -> None:
        """Refuse a task without hints: one whose ``hint_pool`` is ``None`` (a `MathTask` built without one), or,
        for a task without that attribute, one whose first problems of ``train_family`` have no hint. On such a
        task every slot would fall to the no-hint sub-group (``nudge_missing_hint_share`` 1.0): GRPO plus the
        distillation term, not NudgeRL."""
        pool = getattr(task, "hint_pool", _NO_ATTRIBUTE)
        if pool is None:
            lacking = "has no hint pool (hint_pool=None)"
        elif pool is _NO_ATTRIBUTE and not any(" ".join(str(h).split()) for p in sample_problems(task, self.config.train_family)
                                                for h in task.hints(p)):
            lacking = f"gives no hints for its {self.config.train_family!r} problems (Task.hints returned [])"
        else:
            return
        raise ValueError(f"{self.name}: task {task.name!r} {lacking}: NudgeRL rolls out from the task's strategy "
                         "hints and would train with none (every rollout hint-free); give the task a hint pool "
                         "(e.g. MathTask(..., hint_pool=...), a Task whose hints() returns them) or use another method")

    # -- sampling ---------------------------------------------------------------------
    def rollouts_per_hint(self, group_size: int) -> int:
        """R for a group of ``group_size`` rollouts; raises ``ValueError`` unless H x R == G."""
        H, R = self.options.hints_per_problem, self.options.rollouts_per_hint
        if R is None:
            NudgeRLOptions.check(group_size % H == 0, "hints_per_problem", H,
                                 f"a divisor of group_size={group_size} (rollouts_per_hint=None means "
                                 "group_size / hints_per_problem)")
            return group_size // H
        NudgeRLOptions.check(H * R == group_size, "rollouts_per_hint", R,
                             f"group_size / hints_per_problem = {group_size} / {H} (the group is "
                             "hints_per_problem x rollouts_per_hint rollouts), or None")
        return R

    def hint_pool(self, problem) -> list[str]:
        """The problem's ordered hints from the task, empty ones skipped (indices are kept)."""
        return [str(h) for h in self._task.hints(problem)]

    def hints(self, problems: list, group_size: int, rng: np.random.Generator) -> list[list[tuple[int, str | None]]]:
        """Per problem, G pairs ``(pool index, hint)`` or ``(-1, None)``; see docs/methods/nudgerl.md."""
        opts = self.options
        H, R = opts.hints_per_problem, self.rollouts_per_hint(group_size)
        shape = (len(problems), H) if opts.dropout_unit == "hint" else (len(problems), H, R)
        dropped = rng.random(shape) < opts.p_drop  # drawn first: independent of the selection
        plan = []
        for m, problem in enumerate(problems):
            pool = self.hint_pool(problem)
            usable = [j for j, h in enumerate(pool) if " ".join(h.split())]
            if opts.hint_selection == "random" and len(usable) > H:
                chosen = [usable[j] for j in rng.choice(len(usable), H, replace=False).tolist()]
            else:
                chosen = usable[:H]
            row: list[tuple[int, str | None]] = []
            for k in range(H):
                if k >= len(chosen):  # the pool has fewer hints than H: no-hint rollouts
                    row += [(-1, None)] * R
                    self._slots["missing"] += 1
                    continue
                drops = np.broadcast_to(dropped[m, k], (R,))
                row += [(-1, None) if d else (chosen[k], pool[chosen[k]]) for d in drops.tolist()]
                self._slots["dropped"] += int(drops.sum()) if opts.dropout_unit == "rollout" else int(drops[0])
                self._slots["droppable"] += R if opts.dropout_unit == "rollout" else 1
            self._slots["hint_slots"] += H
            plan.append(row)
        return plan

    # -- credit assignment ------------------------------------------------------------
    def advantage_options(self) -> dict:
        return {"lam": self.options.lam, "eps": self.options.adv_eps}

    def before_update(self, batch: StepBatch, model) -> None:
        """Per-step diagnostics of the whole batch (hinted vs hint-free rollouts)."""
        hinted = batch.hint_index >= 0
        correct = torch.tensor([v.status == CORRECT for v in batch.verdicts], dtype=torch.bool)
        stats = {"nudge_share_hinted": float(hinted.float().mean()),
                 "nudge_share_none": float((~hinted).float().mean())}
        if hinted.any():
            stats["nudge_acc_hinted"] = float(correct[hinted].float().mean())
        if (~hinted).any():
            stats["nudge_acc_none"] = float(correct[~hinted].float().mean())
        n_groups = len(batch.problems)

        def per_group(mask):
            return torch.zeros(n_groups, dtype=torch.long).index_add_(0, batch.group_index, mask.long())

        mixed = (per_group(hinted) > 0) & (per_group(~hinted) > 0)
        solved_hinted, solved_none = per_group(correct & hinted) > 0, per_group(correct & ~hinted) > 0
        stats["nudge_mixed_groups"] = float(mixed.sum())
        stats["nudge_solved_only_hinted"] = float((mixed & solved_hinted & ~solved_none).sum())
        stats["nudge_solved_only_none"] = float((mixed & solved_none & ~solved_hinted).sum())
        slots = self._slots
        if slots["droppable"]:
            stats["nudge_drop_rate"] = slots["dropped"] / slots["droppable"]
        if slots["hint_slots"]:
            stats["nudge_missing_hint_share"] = slots["missing"] / slots["hint_slots"]
        self._stats = stats

    # -- loss -----------------------------------------------------------------------------
    def extra_loss(self, batch: StepBatch, model, logp, entropy, mask) -> tuple[torch.Tensor | float, dict]:
        """``lambda_distill`` x L_distill on the minibatch's rows (formula in the module docstring)."""
        coef = self.options.lambda_distill
        if coef == 0:
            return 0.0, {"distill_term": 0.0}
        device, n = logp.device, len(batch)
        hinted = (batch.hint_index >= 0).to(device)
        weight = batch.advantages.to(device=device)
        # A row with A_hat = 0 adds exactly 0 to the term and to its gradient: no x0 forward for it.
        rows = (hinted & (weight != 0)).nonzero().flatten()
        x0_logp = logp  # a hint-free row's prompt is x0 already
        if len(rows):
            ro = batch.rollouts
            idx = rows.cpu()
            lp, _ = sequence_logprobs(
                model, batch.plain_prompt_ids[idx].to(device), batch.plain_prompt_mask[idx].to(device),
                ro.completion_ids[idx].to(device), ro.completion_mask[idx].to(device),
                temperature=self.sampling_temperature(self.step),
            )
            x0_logp = logp.index_copy(0, rows, lp.to(logp.dtype))
        seq = (x0_logp * mask).sum(1) / mask.sum(1).clamp(min=1)
        weight = weight.to(seq.dtype)
        if self.options.distill_rows == "hinted":
            weight = weight * hinted.to(seq.dtype)
        distill = -(weight * seq).sum() / max(n, 1)
        term = coef * distill
        return term, {"distill_loss": distill.detach(), "distill_term": term.detach()}

    # -- per-step state ---------------------------------------------------------------
    def on_step_start(self, step: int) -> None:
        super().on_step_start(step)
        self._stats = {}
        self._slots = {"hint_slots": 0, "dropped": 0, "droppable": 0, "missing": 0}

    def on_step_end(self, step: int, metrics: dict) -> None:
        metrics.update(self._stats)
        if "distill_term" in metrics and "loss" in metrics:
            term = abs(metrics["distill_term"])
            total = abs(metrics["loss"] - metrics["distill_term"]) + term
            metrics["distill_share"] = term / total if total > 0 else 0.0


NUDGERL_SETTINGS = {"kl_coef": 0.0, "eps_low": 0.2, "eps_high": 0.2, "temperature": 1.0, "top_p": 0.95,
                    "group_size": 8, "loss_agg": "seq_mean_token_mean", "minibatches": 2,
                    **paper_schedule("nudgerl")}
"""NudgeRL's runs' `TrainerConfig` fields (the authors' ``configs/train_config.yaml``): no KL, eps 0.2/0.2,
temperature 1.0, top_p 0.95, G = 8, two optimizer steps per generation batch, cosine lr after a 5% warm-up.
"""

NUDGERL_LR = 2e-5
"""NudgeRL's lr (the authors' config: cosine, LoRA r = 32): the ``nudgerl`` and ``pope`` presets'."""

register_method("nudgerl", NudgeRL,
                "NudgeRL: 2 hints x 4 rollouts, hint dropout 0.5, inter/intra credit lam 1.1, "
                "hint-free distillation 0.1, no KL, top_p 0.95",
                advantage="hint", lr=NUDGERL_LR, **NUDGERL_SETTINGS)
