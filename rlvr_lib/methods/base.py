"""The plug-in interface between the RL loop and a method: ``Method(config)`` *is* GRPO.

The trainer (``rlvr_lib.trainer``) never names a paper. A method overrides only the hooks it needs (each
default is plain GRPO), declares its settings as an ``Options`` dataclass and registers a preset with
`rlvr_lib.methods.registry.register_method`; no trainer edit is needed. The hooks decide:

* ``hints``: the hint appended to each rollout's prompt; ``sampling_temperature``: a step's temperature;
* ``weight_samples``, ``perturbed(model, k, train)``: weight samples per step (the G rollouts split among them);
* ``rewards``; ``keep_groups``, ``refill_rounds``: which groups to train on (dynamic sampling);
* ``advantages``; ``before_update``: per-row side data in ``batch.extras``;
* ``policy_loss``: the per-token surrogate; ``anchor``: the per-token reference anchor (KL);
  ``extra_loss``: added loss terms;
* ``make_optimizer``; ``tuning_lr``, ``with_tuning_lr``: the lr an lr-tuning grid scales;
* ``on_step_start``, ``on_step_end``: per-step method state; ``state_dict``: what a checkpoint keeps.

Randomness: only from generators keyed by (seed, step, stream) (:meth:`Method.generator`), never global.
Which method uses which hook, and composition: docs/methods/base.md.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import numpy as np
import torch

from rlvr_lib.algos import get_advantage_estimator, kl_penalty, ppo_clip_loss
from rlvr_lib.config import ConfigBase
from rlvr_lib.seeding import torch_generator


def _take(value, rows: torch.Tensor, row_list: list[int]):
    """Rows of a per-row field: tensors are indexed, lists picked, ``None`` kept."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value[rows.to(value.device)]
    if hasattr(value, "select"):  # Rollouts
        return value.select(rows)
    return [value[i] for i in row_list]


@dataclass
class StepBatch:
    """What the hooks see of one training step (``N = prompts * G`` rollouts), or of a minibatch of it.

    Per-row fields are sliced together by :meth:`select`; ``problems`` (one per group) is never sliced.

    Attributes:
        group_index, hint_index, weight_index: ``(N,)`` long: the row's group, hint (``-1``: none), weight sample.
        hints: ``N`` hint strings or ``None``.
        rollouts: The engine's `Rollouts` (prompt-major), prompts as rolled out (hint included).
        verdicts: The verifier's verdict per rollout (always computed).
        plain_prompt_ids, plain_prompt_mask: ``(N, P0)`` long, the hint-free prompt of each row, left-padded.
        rewards, advantages: ``(N,)`` float, once computed.
        ref_logprobs: ``(N, T)`` reference log-probs of the completion tokens, when ``kl_coef > 0``.
        extras: Per-row tensors a method adds (first dimension ``N``), sliced with the rows.
    """

    problems: list
    group_index: torch.Tensor
    hint_index: torch.Tensor
    hints: list
    rollouts: Any
    verdicts: list
    weight_index: torch.Tensor | None = None
    plain_prompt_ids: torch.Tensor | None = None
    plain_prompt_mask: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    ROW_FIELDS: ClassVar[tuple[str, ...]] = (
        "group_index", "hint_index", "hints", "rollouts", "verdicts", "weight_index",
        "plain_prompt_ids", "plain_prompt_mask", "rewards", "advantages", "ref_logprobs",
    )

    def __post_init__(self) -> None:
        n = len(self.group_index)
        if self.weight_index is None:
            self.weight_index = torch.zeros(n, dtype=torch.long)
        for name in self.ROW_FIELDS:
            value = getattr(self, name)
            if hasattr(value, "__len__") and len(value) != n:
                raise ValueError(f"StepBatch.{name} has {len(value)} rows; expected {n} (one per rollout)")
        for name, value in self.extras.items():
            if len(value) != n:
                raise ValueError(f"StepBatch.extras[{name!r}] has {len(value)} rows; expected {n} (one per rollout)")

    def __len__(self) -> int:
        return len(self.group_index)

    def select(self, rows) -> "StepBatch":
        """The batch restricted to ``rows`` (indices or a bool mask over the N rows), in that order."""
        rows = torch.as_tensor(rows)
        if rows.dtype == torch.bool:
            if rows.shape != (len(self),):
                raise ValueError(f"boolean row selection must have shape ({len(self)},), got {tuple(rows.shape)}")
            rows = rows.nonzero().flatten()
        rows = rows.long().reshape(-1)
        row_list = rows.tolist()
        sliced = {name: _take(getattr(self, name), rows, row_list) for name in self.ROW_FIELDS}
        extras = {name: _take(value, rows, row_list) for name, value in self.extras.items()}
        return StepBatch(problems=self.problems, **sliced, extras=extras)

    @classmethod
    def concat(cls, batches: list["StepBatch"]) -> "StepBatch":
        """Stack batches of different sampling rounds, offsetting group ids; per-step fields must not be set yet."""
        if len(batches) == 1:
            return batches[0]
        from rlvr_lib.rollout import Rollouts
        from rlvr_lib.rollout.base import _pad_to

        for b in batches:
            if b.advantages is not None or b.ref_logprobs is not None or b.extras:
                raise ValueError("StepBatch.concat joins sampling rounds, before advantages and extras exist")
        offsets = np.cumsum([0] + [len(b.problems) for b in batches[:-1]])
        width = max(b.plain_prompt_ids.shape[1] for b in batches)
        pad = batches[0].rollouts.pad_token_id
        return cls(
            problems=[p for b in batches for p in b.problems],
            group_index=torch.cat([b.group_index + int(o) for b, o in zip(batches, offsets)]),
            hint_index=torch.cat([b.hint_index for b in batches]),
            hints=[c for b in batches for c in b.hints],
            rollouts=Rollouts.concat([b.rollouts for b in batches]),
            verdicts=[v for b in batches for v in b.verdicts],
            weight_index=torch.cat([b.weight_index for b in batches]),
            plain_prompt_ids=torch.cat([_pad_to(b.plain_prompt_ids, width, pad, left=True) for b in batches]),
            plain_prompt_mask=torch.cat([_pad_to(b.plain_prompt_mask, width, 0, left=True) for b in batches]),
            rewards=None if any(b.rewards is None for b in batches) else torch.cat([b.rewards for b in batches]),
        )

    def select_groups(self, groups: torch.Tensor) -> "StepBatch":
        """The rollouts of ``groups`` (indices into ``problems``), renumbered 0..len(groups)-1, in that order."""
        groups = torch.as_tensor(groups).long()
        remap = torch.full((len(self.problems),), -1, dtype=torch.long)
        remap[groups] = torch.arange(len(groups))
        rows = (remap[self.group_index] >= 0).nonzero().flatten()
        rows = rows[torch.argsort(remap[self.group_index[rows]], stable=True)]
        out = self.select(rows)
        out.problems = [self.problems[g] for g in groups.tolist()]
        out.group_index = remap[out.group_index]
        return out


GRPO_KL_COEF = 0.04
"""GRPO's KL beta (DeepSeekMath, arXiv 2402.03300): the ``grpo`` preset's."""
GRPO_LR = 1e-6
"""GRPO's lr (DeepSeekMath; 3PO's GRPO baseline, arXiv 2608.09805): the ``grpo`` preset's."""
SAGE_KL_COEF = 0.05
"""SAGE's KL beta (arXiv 2605.18864, its code): every SAGE preset's and its anchor baselines' (``grpo_k1``...)."""
SAGE_LR = 5e-6
"""SAGE's lr (its code, LoRA r = 8): every SAGE preset's and its anchor baselines'."""


def sample_problems(task, family: str, n: int = 8) -> list:
    """Up to ``n`` problems of ``family`` (seed 0), for a `Method.check_task` that must look at problems (``[]``
    for a family the task lacks, which `TrainerConfig` refuses); a task's error drawing them is raised."""
    if family not in task.families:
        return []
    return task.family_problems(family, min(n, task.family_capacity(family)), seed=0)


@dataclass(frozen=True)
class NoOptions(ConfigBase):
    """The options of a method that takes none: any key in ``method_options`` is an error."""


class Method:
    """GRPO (DeepSeekMath, arXiv 2402.03300): every hook at its default. Subclasses override what their paper changes.

    A_i = (r_i - mean_g r) / (std_g r + eps) over each prompt's group of G rollouts; per token the PPO-clip
    surrogate -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) plus beta times the configured KL estimator
    against the reference policy, aggregated by ``loss_agg``. ``config.method_options`` is parsed into
    ``self.options`` (an instance of ``Options``).
    """

    Options: ClassVar[type[ConfigBase]] = NoOptions
    uses_verifier_reward: ClassVar[bool] = True
    """Whether the reward reads the verifier; False (intrinsic rewards): a verifier that raises gives
    the verdict ``"unverified"`` (reward NaN) and training goes on.
    """

    reads_parameters: ClassVar[bool] = False
    """Whether a hook reads or writes the parameters themselves (IVON samples, per-completion gradients):
    on a sharded launch the trainer then gathers the weights around ``perturbed`` and ``rewards``.
    """

    credits_hint_free: ClassVar[bool] = False
    """Whether hinted rollouts are trained as completions of the hint-free prompt (re-scored on
    ``batch.plain_prompt_ids``; `rlvr_lib.methods.oracle`).
    """

    token_mean_stats: ClassVar[frozenset[str]] = frozenset()
    """Keys of its loss-hook stats (``policy_loss``, ``anchor``, ``extra_loss``) that are means over the
    minibatch's completion tokens, besides the trainer's own (`rlvr_lib.trainer.TOKEN_MEAN_STATS`): reduced
    across processes as token sums over token counts. Read only with several processes.
    """

    summed_metrics: ClassVar[frozenset[str]] = frozenset()
    """Keys it logs (``on_step_end``) that count over the rows ``before_update`` got: summed across processes
    (each trains on its own rows) rather than averaged. Read only with several processes.
    """

    def __init__(self, config):
        self.config = config
        try:
            self.options = self.Options.from_dict(config.method_options or {})
        except ValueError as err:
            raise ValueError(f"{self.name}: method_options: {err}") from None
        self.step = 0
        from rlvr_lib.tasks import get_task

        self.check_task(get_task(config.task))

    def check_task(self, task) -> None:
        """Refuse a task this method cannot run on as it is defined, rather than train a degraded method
        silently: raise ValueError, one line naming the method, the task and what it lacks. Called once, when the
        method is built (so ``python -m rlvr_lib train`` refuses before loading a model; a composite's components
        each check theirs). `sample_problems` draws a few problems to look at. Default: any task."""

    @property
    def name(self) -> str:
        """The registered name this hook object was built for (``config.method``): one class can serve several."""
        return self.config.method

    def generator(self, step: int, stream: int, device: str | torch.device = "cpu") -> torch.Generator:
        """A torch generator seeded by ``(config.seed, step, stream)``: a method's one source of randomness."""
        return torch_generator(self.config.seed, step, stream, device=device)

    # -- sampling ---------------------------------------------------------------------
    def hints(self, problems: list, group_size: int, rng: np.random.Generator) -> list[list[tuple[int, str | None]]]:
        """Per problem, ``group_size`` pairs ``(hint_index, hint)``; default: no hints."""
        return [[(-1, None)] * group_size for _ in problems]

    def sampling_temperature(self, step: int) -> float:
        """Temperature for this step's rollouts (and the matching log-probs)."""
        return self.config.temperature

    def weight_samples(self) -> int:
        """Number of weight samples per step; the G rollouts of each group are split evenly among them."""
        return 1

    @contextlib.contextmanager
    def perturbed(self, model: torch.nn.Module, index: int, train: bool = False) -> Iterator[None]:
        """Scope in which ``model`` has the weights of sample ``index`` of this step (default: as they are).

        Entered for rollouts (``train=False``) and, in the update, around each weight sample's forward and backward.
        """
        yield

    # -- credit assignment ------------------------------------------------------------
    def rewards(self, batch: StepBatch, model: torch.nn.Module) -> torch.Tensor:
        """``(N,)`` rewards; default: the verifier's. Per process and round: must not depend on other groups."""
        return torch.tensor([v.reward for v in batch.verdicts], dtype=torch.float32)

    def keep_groups(self, batch: StepBatch) -> torch.Tensor | None:
        """``(M,)`` bool over the batch's groups: True = train on it; ``None`` (default) keeps all.

        Dropped groups are refilled from fresh prompts for up to :meth:`refill_rounds` rounds.
        """
        return None

    def refill_rounds(self) -> int:
        """Cap on the refill rounds that replace groups dropped by :meth:`keep_groups`."""
        return 0

    def advantage_options(self) -> dict:
        """Keyword options of the configured advantage estimator (e.g. NudgeRL's ``lam``); default none."""
        return {}

    def advantages(self, batch: StepBatch) -> torch.Tensor:
        """``(N,)`` advantages from the configured estimator (default GRPO mean/std)."""
        estimator = get_advantage_estimator(self.config.advantage)
        return estimator(batch.rewards, batch.group_index, hint_index=batch.hint_index,
                         **self.advantage_options())

    def before_update(self, batch: StepBatch, model: torch.nn.Module) -> None:
        """Called once per step before the update with this process's rows to train on; fills ``batch.extras``."""

    # -- loss (each hook gets the minibatch as a StepBatch) ------------------------------
    def policy_loss(self, batch: StepBatch, logp: torch.Tensor, entropy: torch.Tensor,
                    mask: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Per-token surrogate ``(n, T)`` and its stats; default PPO-clip against the rollout log-probs.

        ``logp``, ``entropy``: ``(n, T)`` with gradient; ``mask``: ``(n, T)`` float completion mask.
        """
        return ppo_clip_loss(logp, batch.rollouts.logprobs, batch.advantages, mask,
                             eps_low=self.config.eps_low, eps_high=self.config.eps_high)

    def anchor(self, batch: StepBatch, logp: torch.Tensor, entropy: torch.Tensor,
               mask: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Per-token anchor ``(n, T)`` to ``batch.ref_logprobs`` and its stats; scaled by ``kl_coef``, logged as ``kl``."""
        return kl_penalty(logp, batch.ref_logprobs, self.config.kl_estimator), {}

    def extra_loss(self, batch: StepBatch, model, logp, entropy, mask) -> tuple[torch.Tensor | float, dict]:
        """Extra scalar loss terms on the minibatch and their stats; default none."""
        return 0.0, {}

    @classmethod
    def tuning_lr(cls, config) -> float:
        """The learning rate an lr-tuning grid scales (`rlvr_lib.study.tuning`); default the optimizer's, ``config.lr``."""
        return config.lr

    @classmethod
    def with_tuning_lr(cls, config, lr: float):
        """``config`` with :meth:`tuning_lr` set to ``lr`` (a validated copy)."""
        return config.replace(lr=lr)

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        cfg = self.config
        return torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
        )

    # -- method state (checkpointed) --------------------------------------------------
    def on_step_start(self, step: int) -> None:
        """Called at the start of each step, before any rollout (e.g. to seed a per-step generator)."""
        self.step = step

    def on_step_end(self, step: int, metrics: dict) -> None:
        """Called after each step with its logged metrics; keys added to ``metrics`` are logged."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

