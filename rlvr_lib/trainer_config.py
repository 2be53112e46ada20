"""`TrainerConfig`: the settings of the RL loop, apart from `rlvr_lib.trainer` so presets build configs without the loop."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_lib.algos import LOSS_AGG_MODES
from rlvr_lib.algos.advantages import ADVANTAGE_ESTIMATORS
from rlvr_lib.algos.kl import KL_ESTIMATORS
from rlvr_lib.config import OMIT_IF_DEFAULT, ConfigBase
from rlvr_lib.rollout.engines import ENGINES
from rlvr_lib.schedules import LR_SCHEDULES
from rlvr_lib.tasks import DEFAULT_TASK, get_task, task_names

__all__ = ["TrainerConfig"]


@dataclass(frozen=True)
class TrainerConfig(ConfigBase):
    """Settings of the RL loop; a method's preset overrides some of them.

    Fields marked (*) are left out of ``to_dict`` (so of config hashes) while they hold their default.

    Attributes:
        method: Registered method name (``rlvr_lib.methods.METHODS``), or a composite ``"a+b"`` (composed here).
        policy: Hub name or local path of the initial policy; ``None`` = the embedded tiny policy.
        task: Registered task (`rlvr_lib.tasks.TASKS`) of the problems and the verifier (*, ``"arith"``).
        train_family, train_pool_size: The task's family of the training prompts, and its distinct problems.
        steps: RL steps (each does ``inner_epochs * minibatches`` optimizer steps).
        prompts_per_step, group_size: Problems (groups) per step, rollouts per problem (G).
        temperature, top_p, max_new_tokens: Rollout sampling.
        lr, weight_decay, max_grad_norm: Optimizer (AdamW unless the method says otherwise).
        lr_schedule: ``"constant"`` or ``"cosine"`` after the warm-up (`rlvr_lib.schedules`) (*).
        lr_warmup_ratio: Linear warm-up over ``ceil(ratio * steps * inner_epochs * minibatches)`` optimizer steps (*, 0).
        inner_epochs, minibatches: Passes over each step's rollouts (mu), optimizer steps per pass.
        eps_low, eps_high: PPO clip range ``[1 - eps_low, 1 + eps_high]``.
        loss_agg: Loss aggregation mode (``rlvr_lib.algos.LOSS_AGG_MODES``).
        loss_normalizer: Constant of ``seq_mean_token_sum_norm`` (default ``max_new_tokens``).
        advantage: Advantage estimator name (``rlvr_lib.algos.ADVANTAGE_ESTIMATORS``).
        kl_coef: beta of the KL anchor; 0 loads no reference model.
        kl_estimator: Per-token KL estimator (``rlvr_lib.algos.KL_ESTIMATORS``).
        method_options: Method-specific settings, checked against the method's ``Options``.
        seed: Fixes prompts, sampling and every other random choice.
        checkpoint_every: Steps between checkpoints (0 = never).
        rollout_batch_size: Sequences per generation call.
        engine: Rollout engine (`rlvr_lib.rollout.ENGINES`) built when none is given (*, ``"kvcache"``).
    """

    method: str = "grpo"
    policy: str | None = None
    train_family: str = "train"
    train_pool_size: int = 600
    steps: int = 30
    prompts_per_step: int = 8
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    inner_epochs: int = 1
    minibatches: int = 1
    eps_low: float = 0.2
    eps_high: float = 0.2
    loss_agg: str = "seq_mean_token_mean"
    loss_normalizer: float | None = None
    advantage: str = "grpo"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    method_options: dict | None = None
    seed: int = 0
    checkpoint_every: int = 0
    rollout_batch_size: int = 512
    task: str = field(default=DEFAULT_TASK, metadata={OMIT_IF_DEFAULT: True})
    lr_schedule: str = field(default="constant", metadata={OMIT_IF_DEFAULT: True})
    lr_warmup_ratio: float = field(default=0.0, metadata={OMIT_IF_DEFAULT: True})
    engine: str = field(default="kvcache", metadata={OMIT_IF_DEFAULT: True})

    def validate(self) -> None:
        # importing the registry runs rlvr_lib.methods: every method is registered
        from rlvr_lib.methods.registry import METHODS, resolve_name

        resolve_name(self.method)  # a composite "a+b" is composed on first use (rlvr_lib.methods.compose)
        self.check_choice("method", self.method, sorted(METHODS))
        self.check_choice("task", self.task, task_names())
        self.check_choice("engine", self.engine, ENGINES)
        self.check_choice("train_family", self.train_family, list(get_task(self.task).families))
        for name in ("train_pool_size", "steps", "prompts_per_step", "group_size", "max_new_tokens"):
            self.check_positive_int(name, getattr(self, name))
        for name in ("inner_epochs", "minibatches", "rollout_batch_size"):
            self.check_positive_int(name, getattr(self, name))
        self.check_nonnegative_int("seed", self.seed)
        self.check_nonnegative_int("checkpoint_every", self.checkpoint_every)
        self.check_range("temperature", self.temperature, 0, None, lo_open=True)
        self.check_range("top_p", self.top_p, 0, 1, lo_open=True)
        self.check_range("lr", self.lr, 0, 1, lo_open=True)
        self.check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        self.check_range("lr_warmup_ratio", self.lr_warmup_ratio, 0, 1, hi_open=True)
        self.check_nonnegative("weight_decay", self.weight_decay)
        self.check_range("max_grad_norm", self.max_grad_norm, 0, None, lo_open=True)
        self.check_range("eps_low", self.eps_low, 0, 1, lo_open=True, hi_open=True)
        self.check_range("eps_high", self.eps_high, 0, None, lo_open=True)
        self.check_choice("loss_agg", self.loss_agg, LOSS_AGG_MODES)
        if self.loss_normalizer is not None:
            self.check_positive("loss_normalizer", self.loss_normalizer)
        self.check_choice("advantage", self.advantage, sorted(ADVANTAGE_ESTIMATORS))
        self.check_nonnegative("kl_coef", self.kl_coef)
        self.check_choice("kl_estimator", self.kl_estimator, sorted(KL_ESTIMATORS))
        self.check(
            (self.prompts_per_step * self.group_size) % self.minibatches == 0,
            "minibatches",
            self.minibatches,
            f"a divisor of prompts_per_step * group_size = {self.prompts_per_step * self.group_size}",
        )
        self.check(self.method_options is None or isinstance(self.method_options, dict),
                   "method_options", self.method_options, "None or a dict")
        try:  # checked here, not first when the method is built: a bad option never starts a run or a sweep
            METHODS[self.method].cls.Options.from_dict(self.method_options or {})
        except ValueError as err:
            raise ValueError(f"{self.method}: method_options: {err}") from None  # as the method's own checks say it
