"""NudgeRL: strategy nudging with hint dropout, inter/intra credit and hint-free self-distillation.

NudgeRL (arXiv 2605.15726; code tally0818/NudgeRL) conditions rollouts on light
strategy hints so that sampling visits reasoning modes plain sampling misses,
credits rewards across hints, and distils what the hinted rollouts found back
into the hint-free policy. It is a plug-in of the one GRPO loop: ``hints``,
the ``"hint"`` advantage estimator (`rlvr_lib.algos.hint_advantages`,
through ``advantage_options``) and ``extra_loss``; no trainer edit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import Method, StepBatch
from rlvr_lib.methods.registry import register_method
from rlvr_lib.rollout.logprobs import sequence_logprobs
from rlvr_lib.schedules import paper_schedule
from rlvr_lib.tasks import CORRECT, get_task

__all__ = ["NUDGERL_SETTINGS", "NudgeRL", "NudgeRLOptions"]


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

    **Hints** (``hints``). Per problem x0 the task's ordered hint pool
    C(x0) = ``get_task(config.task).hints(x0)`` (the testbed's `TaskHintPool`:
    5 unverified hints, useful strategies mixed with distractors; any task may
    give hints, an `LMHintPool` plugs in as the task's pool). Empty hints are
    skipped. H = ``hints_per_problem`` hints are used: the first H
    (``hint_selection="first"``, the code's "sequential" sampler and its
    config default) or H drawn without replacement, redrawn every step
    (``"random"``). Each hint gets R = ``rollouts_per_hint`` rollouts, so
    G = H x R must equal ``config.group_size``; R = ``None`` (default) means
    G / H (4 at the preset's G = 8, H = 2), and G must then be divisible by H.
    The group is laid out hint by hint; ``hint_index`` is the hint's index
    in the problem's pool (so "random" gives indices up to |C(x0)| - 1).

    **Hint dropout** (the paper's "context dropout"). With ``dropout_unit="rollout"`` (default) each
    rollout drops its hint on its own draw with probability ``p_drop`` (the
    paper's "each rollout is generated without its hint with probability
    p_drop"; the authors' ``_get_rollout_counts`` draws Binomial(R, p_drop)
    dropped rollouts per hint, which is the same law). A dropped rollout is
    generated from the hint-free prompt x0, as ``(-1, None)``: together the
    dropped rollouts form the group's one "no-hint" sub-group. With
    ``dropout_unit="hint"`` there is one draw per hint: a dropped hint sends
    all its R rollouts to x0 (our first reading of "drawn per hint" in the
    authors' code; kept as an ablation, since it changes how often a group has
    both kinds of rollouts).
    Per step, the dropout uniforms U are drawn first, as one array
    (``(M, H)`` or ``(M, H, R)`` for the step's M problems), then the random
    selections: a slot is dropped iff U < p_drop, so the dropout pattern does
    not depend on ``hint_selection``, and runs that differ only in ``p_drop``
    are coupled (a hint dropped at p = 0.25 is dropped at p = 0.5 too).
    Randomness comes only from the ``rng`` the trainer passes
    (``np.random.default_rng([seed, step, 1])``).

    Fewer hints than H: every available hint is used, and the rollouts of the
    missing slots go to the no-hint sub-group (as if dropped; they are
    logged apart, ``nudge_missing_hint_share``); a problem without any hint is
    plain GRPO sampling (all G rollouts from x0). The authors' code raises
    instead; here the group size stays G so every task trains.

    **Inter/intra advantage** (``config.advantage="hint"``,
    `rlvr_lib.algos.hint_advantages`, options ``lam`` and ``adv_eps``).
    Within one problem's group, with m = mean of all G rewards and m_z the
    mean reward of the rollouts of hint z:

        hinted rollout i (hint z(i)):  A_i = (r_i - m_{z(i)}) + lam * (m_{z(i)} - m)
        no-hint rollout i:             A_i = r_i - m
        A_hat_i = (A_i - mean_group(A)) / (std_group(A) + adv_eps)

    with the population std (as the authors' code), lam = 1.1, adv_eps =
    1e-5. For binary rewards and lam in [0, 2] a higher reward never gets a
    lower advantage within a group. lam = 1 is GRPO's credit (with the
    population std).

    **Loss.** L = L_RL(x1) + ``lambda_distill`` * L_distill, L_RL the
    config's PPO-clip surrogate (eps 0.2, ``seq_mean_token_mean``: TRL's
    "grpo" loss, as the authors' ``loss_type="grpo"``) on the prompt each
    rollout was sampled from (x1 = x0 + hint), and, over the n rows of the
    minibatch,

        L_distill = -(1/n) sum_i w_i A_hat_i * s_i,
        s_i = (1/|y_i|) sum_t log pi_theta(y_{i,t} | x0, y_{i,<t})     (temperature = the step's)

    with no ratio and no clipping (``extra_loss``). ``distill_rows="all"``
    (default): w_i = 1 for every row, as the paper's "mean over rollouts"
    and the authors' code (which scores every row of its micro-batch under
    x0); for a no-hint row x0 is the prompt it was sampled from, so its
    term is an unclipped REINFORCE term on its own prompt, which adds
    ``lambda_distill`` x its policy gradient on the on-policy pass.
    ``distill_rows="hinted"``: w_i = 1 for hinted rows, 0 otherwise (still
    divided by n, so ``lambda_distill`` keeps its scale): distillation only.
    Cost: one extra teacher-forced forward (`sequence_logprobs`) of the
    minibatch's HINTED completions with a nonzero advantage (a row with
    A_hat_i = 0 adds exactly 0 to L_distill and to its gradient; whole
    zero-advantage groups are common) under ``batch.plain_prompt_ids``; a
    no-hint row's x0 log-probs are the trainer's ``logp`` of that row
    (same prompt, weights and temperature), reused with their graph. No
    forward at all when ``lambda_distill == 0`` or no row is hinted.

    **Logged** per step: ``distill_loss`` (L_distill, mean over minibatches),
    ``distill_term`` (lambda_distill x L_distill) and ``distill_share`` =
    |distill_term| / (|loss - distill_term| + |distill_term|), from the step's
    minibatch means (a surrogate's value says little about its gradient: at
    ratio 1 a minibatch of whole groups has L_RL = -mean(A_hat) = 0, so the
    share is near 1 on on-policy passes; read it as the size of the term,
    not of its gradient); ``nudge_share_hinted`` / ``nudge_share_none``
    (shares of rollouts with / without a hint), ``nudge_acc_hinted`` /
    ``nudge_acc_none`` (accuracy of each; absent on a step without such
    rollouts), ``nudge_mixed_groups`` (problems with both kinds of rollouts),
    ``nudge_solved_only_hinted`` (of those, problems with a correct hinted
    rollout and no correct hint-free one), ``nudge_solved_only_none`` (the
    reverse), ``nudge_drop_rate`` (realised share of dropped hint slots, or
    rollouts for ``dropout_unit="rollout"``, among slots with a hint) and
    ``nudge_missing_hint_share`` (share of hint slots the pool could not fill).

    Preset (:data:`NUDGERL_SETTINGS`, the authors' ``configs/train_config.yaml``):
    no KL, eps 0.2/0.2, temperature 1.0, top_p 0.95, ``advantage="hint"``,
    G = 8 (2 hints x 4), two optimizer steps per generation batch (``minibatches=2``,
    each a shuffled half of the step's rollouts, as the authors' TRL run: generation
    batch 8, train batch 4), cosine lr after a 5% linear warm-up (`rlvr_lib.schedules`).
    Compare with GRPO at the same settings (``method_config("grpo", **NUDGERL_SETTINGS)``).

    Options: ``hints_per_problem`` (int >= 1, default 2), ``rollouts_per_hint``
    (int >= 1 or None = G / hints_per_problem; default None), ``hint_selection``
    ("first" or "random", default "first"), ``p_drop`` (in [0, 1], default
    0.5), ``dropout_unit`` ("rollout" or "hint", default "rollout"), ``lam``
    (>= 0, default 1.1), ``adv_eps`` (>= 0, default 1e-5), ``lambda_distill``
    (>= 0, default 0.1), ``distill_rows`` ("all" or "hinted", default "all").
    """

    Options = NudgeRLOptions

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
        """Per problem, G pairs ``(pool index, hint)`` or ``(-1, None)``; see the class docstring."""
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
        """``lambda_distill`` x L_distill on the minibatch's rows (formula in the class docstring)."""
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
"""The `TrainerConfig` fields NudgeRL's runs share (the authors' ``configs/train_config.yaml``, every method of
their table): no KL, eps 0.2/0.2, temperature 1.0, top_p 0.95, G = 8, TRL's "grpo" loss, two optimizer steps
per generation batch (``minibatches=2``: TRL's ``generation_batch_size`` 8 over ``per_device_train_batch_size``
4, so the second step is off-policy and the PPO clip can bind), cosine lr decay after a linear warm-up over 5%
of the optimizer steps (``warmup_ratio`` 0.05). Its GRPO@8 comparator takes them too
(``method_config("grpo", **NUDGERL_SETTINGS)``)."""

register_method("nudgerl", NudgeRL,
                "NudgeRL: 2 hints x 4 rollouts, hint dropout 0.5, inter/intra credit lam 1.1, "
                "hint-free distillation 0.1, no KL, top_p 0.95",
                advantage="hint", **NUDGERL_SETTINGS)
