"""VIGOR: a verifier-free reward from the norm of a completion's own NLL gradient (arXiv 2605.09920; code ZJUSCL/VIGOR).

The reward hook replaces the verifier's reward by VIGOR's score (`rlvr_lib.rewards.grad_norm_scores`), at
the weights that sampled the batch; per completion i of G in its group:

    S_i = -sqrt(T_i) * ||grad_theta l_i||_2,   l_i = mean token NLL of y_i given x_i (temperature 1)
    u_i = 2 (rank_i - 1) / (G - 1) - 1,    A_i = (u_i - mean_g u) / (std_g u + 1e-4)   (rank_shaping=True)
    A_i = (S_i - mean_g S) / (std_g S + 1e-4)                                          (rank_shaping=False)

ranks by a stable argsort, ties in row order, unbiased std. An empty completion gets ``min - 1e-3``
(:func:`empty_below_group_min`). The verifier still runs for ``accuracy`` but never enters the reward.
Preset (:data:`VIGOR_SETTINGS`): G = 8, TRL's k3 KL at beta 0.01, cosine lr after a 10% linear warm-up.

Options: ``sqrt_len`` (bool, default True; False: the "without sqrt(T)" ablation), ``rank_shaping``
(bool, default True; False: the "without rank shaping" ablation), ``impl`` (``"auto"``, ``"ghost"``,
``"naive"`` or ``"vmap"``; default ``"auto"``: ghost norms where the model allows them, else the naive loop;
equal values, `rlvr_lib.rewards.grad_norm`). ``config.advantage`` must be ``"rank"``.

Departures from the paper (details in docs/papers/vigor.md, "Departures"):

1. A truncated completion keeps its own score, as the authors' code (the paper: the group minimum); only
   empty completions get ``min - 1e-3``.
2. Completions are tens of tokens long, not hundreds, so length effects are measured over short outputs.

Edge cases, the KL term and diagnostics: docs/methods/vigor.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr_lib.algos import grpo_advantages
from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import Method, StepBatch
from rlvr_lib.methods.registry import register_method
from rlvr_lib.rewards import GRAD_NORM_IMPLS, grad_norm_scores
from rlvr_lib.schedules import paper_schedule
from rlvr_lib.tasks import CORRECT, UNVERIFIED
from rlvr_lib.validation import check_range

__all__ = ["EMPTY_MARGIN", "RANK_EPS", "VIGOR", "VIGOR_SETTINGS", "VIGOROptions", "accuracy_by_rank",
           "correct_by_rank", "empty_below_group_min"]

RANK_EPS = 1e-4
"""The eps of VIGOR's group normalisation, with or without rank shaping (the paper's, `rank_advantages`' default)."""


@dataclass(frozen=True)
class VIGOROptions(ConfigBase):
    """`VIGOR`'s settings (see its docstring)."""

    sqrt_len: bool = True
    rank_shaping: bool = True
    impl: str = "auto"

    def validate(self) -> None:
        self.check(isinstance(self.sqrt_len, bool), "sqrt_len", self.sqrt_len, "a bool")
        self.check(isinstance(self.rank_shaping, bool), "rank_shaping", self.rank_shaping, "a bool")
        self.check_choice("impl", self.impl, sorted((*GRAD_NORM_IMPLS, "auto")))


EMPTY_MARGIN = 1e-3
"""How far below its group's lowest score an empty completion is put (the authors' ``min - 1e-3``)."""


def empty_below_group_min(scores: torch.Tensor, empty: torch.Tensor, group_index: torch.Tensor,
                          margin: float = EMPTY_MARGIN) -> torch.Tensor:
    """``scores`` ``(N,)`` with every ``empty`` ``(N,)`` row set to ``min - margin``, min over its group's non-empty rows.

    A group with no scored completion gives its empty rows ``-margin``; other rows keep their scores.
    """
    check_range("margin", margin, 0.0)
    out = scores.clone()
    for g in torch.unique(group_index).tolist():
        rows = group_index == g
        scored = scores[rows & ~empty]
        low = scored.min() if len(scored) else torch.zeros((), dtype=scores.dtype)
        out[rows & empty] = low - margin
    return out


def correct_by_rank(scores: torch.Tensor, correct: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """``(groups, G)`` float: row g holds group g's correctness in score order (column 0 = highest score).

    ``scores``, ``correct`` (NaN: unknown) and ``group_index`` are ``(N,)``; ties keep rollout order.
    Raises ValueError on groups of different sizes.
    """
    groups = torch.unique(group_index)
    sizes = {int((group_index == g).sum()) for g in groups.tolist()}
    if len(sizes) != 1:
        raise ValueError(f"group_index has groups of sizes {sorted(sizes)}: must be groups of one size G")
    rows = []
    for g in groups.tolist():
        idx = (group_index == g).nonzero().flatten()
        order = torch.sort(scores[idx], descending=True, stable=True).indices
        rows.append(correct[idx][order].double())
    return torch.stack(rows)


def accuracy_by_rank(scores: torch.Tensor, correct: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """``(G,)`` accuracy of the completions ranked 1..G by score within their group, NaN ``correct`` left out."""
    return correct_by_rank(scores, correct, group_index).nanmean(0)


class VIGOR(Method):
    """VIGOR (arXiv 2605.09920): reward = -sqrt(T) x the norm of the completion's NLL gradient; see the module."""

    reads_parameters = True  # per-completion NLL gradients over the parameters

    Options = VIGOROptions
    uses_verifier_reward = False  # a verifier that raises leaves an "unverified" verdict, training goes on

    def __init__(self, config):
        super().__init__(config)
        if config.advantage != "rank":
            raise ValueError(f"{self.name}: TrainerConfig.advantage={config.advantage!r} is invalid: must be 'rank' "
                             "(VIGOR's rank shaping; for the ablation without it use "
                             "method_options={'rank_shaping': False})")
        self._stats: dict[str, float] = {}

    def rewards(self, batch: StepBatch, model) -> torch.Tensor:
        ro = batch.rollouts
        scores = grad_norm_scores(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                  sqrt_len=self.options.sqrt_len, impl=self.options.impl)
        truncated = torch.tensor([r == "length" for r in ro.finish_reasons], dtype=torch.bool)
        lengths = ro.completion_mask.sum(1).double().cpu()
        empty = lengths == 0
        norms = -scores.double() / (lengths.sqrt() if self.options.sqrt_len else 1.0)
        # 1/0 by the verdict; NaN for an "unverified" one (its verifier raised), left out of the rank accuracies.
        correct = torch.tensor([math.nan if v.status == UNVERIFIED else float(v.status == CORRECT)
                                for v in batch.verdicts], dtype=torch.float64)
        stats = {"vigor_grad_norm": float(norms[~empty].mean()) if (~empty).any() else float("nan"),
                 "vigor_truncated_frac": float(truncated.double().mean()),
                 "vigor_empty_frac": float(empty.double().mean())}
        shaped = empty_below_group_min(scores, empty, batch.group_index.cpu())
        by_rank = accuracy_by_rank(shaped, correct, batch.group_index.cpu())
        stats.update({f"vigor_acc_rank_{r + 1}": float(a) for r, a in enumerate(by_rank)})
        self._stats = stats
        return shaped

    def advantages(self, batch: StepBatch) -> torch.Tensor:
        """Rank-shaped advantages (the ``"rank"`` estimator), or with ``rank_shaping=False`` the raw scores
        group-normalised with eps 1e-4 (`grpo_advantages`); see the module."""
        if self.options.rank_shaping:
            return super().advantages(batch)
        return grpo_advantages(batch.rewards, batch.group_index, eps=RANK_EPS)

    def on_step_start(self, step: int) -> None:
        super().on_step_start(step)
        self._stats = {}

    def on_step_end(self, step: int, metrics: dict) -> None:
        metrics.update(self._stats)


VIGOR_SETTINGS = {"kl_coef": 0.01, "kl_estimator": "k3", "group_size": 8, **paper_schedule("vigor")}
"""VIGOR's runs' `TrainerConfig` fields (the authors' TRL config): k3 KL at beta 0.01, G = 8, cosine lr
after a 10% linear warm-up; its GRPO and INTUITOR comparators take them too.
"""

VIGOR_LR = 2e-6
"""VIGOR's lr (the authors' config): the ``vigor`` and ``intuitor`` presets'."""

register_method("vigor", VIGOR,
                "VIGOR: reward -sqrt(T) ||grad NLL|| (no verifier), rank-shaped group advantage, k3 KL 0.01, G = 8",
                advantage="rank", lr=VIGOR_LR, **VIGOR_SETTINGS)
