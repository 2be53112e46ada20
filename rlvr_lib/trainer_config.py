"""`TrainerConfig`: the settings of the RL loop, apart from `rlvr_lib.trainer` so presets build configs without the loop."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_lib.algos import LOSS_AGG_MODES
from rlvr_lib.algos.advantages import ADVANTAGE_ESTIMATORS
from rlvr_lib.algos.kl import KL_ESTIMATORS
from rlvr_lib.config import OMIT_IF_DEFAULT, ConfigBase
from rlvr_lib.eval.policy_eval import EvalSpec
from rlvr_lib.lora import LoraSettings
from rlvr_lib.rollout.engines import ENGINES
from rlvr_lib.schedules import LR_SCHEDULES
from rlvr_lib.tasks import DEFAULT_TASK, get_task
from rlvr_lib.tasks.registry import check_task_name

__all__ = ["INT_BOUNDS", "TrainerConfig"]

INT_BOUNDS: dict[str, tuple[int, int]] = {
    "steps": (1, 1_000_000), "train_pool_size": (1, 10_000_000), "prompts_per_step": (1, 100_000),
    "group_size": (1, 100_000), "max_new_tokens": (1, 1_000_000), "inner_epochs": (1, 10_000),
    "minibatches": (1, 10_000_000), "rollout_batch_size": (1, 1_000_000), "seed": (0, 2**32 - 1),
    "checkpoint_every": (0, 1_000_000), "eval_every": (0, 1_000_000),
}
"""The allowed range ``(lowest, highest)`` of every integer `TrainerConfig` field, however the config is built (in
Python, from a settings file, ``--set`` or a flag): beyond any run this library is meant for, below what would
overflow or never end."""


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
        reward_funcs: Reward functions with TRL's signature (`rlvr_lib.rewards.callables`), each a registered
            name or an import path ``"module:function"``, summed with ``reward_weights`` (*, none).
        reward_weights: One weight per reward function (*, ``None``: all 1.0).
        use_verifier: Whether the method's own reward (the verifier's, with any shaping the method adds, e.g.
            DAPO's overlong penalty) is a term of the sum, weighted by ``verifier_weight`` (*, True). False needs
            ``reward_funcs``. The sum is TRL's NaN-aware one: a ``None`` reward adds nothing.
        verifier_weight: Weight of the method's reward in the sum (*, 1.0).
            Methods whose reward is model-based and ignores the verifier (VIGOR's gradient norm, INTUITOR's
            self-certainty; ``Method.uses_verifier_reward`` False) refuse ``reward_funcs``, ``use_verifier=False``
            and another ``verifier_weight``: their reward is the method itself (VIGOR ranks its own scores), so a
            summed external reward would silently make a different method; write a method to combine them.
        report_to: Trackers the loop logs each step's metrics to (`rlvr_lib.tracking.TRACKERS`: "tensorboard",
            "wandb", "trackio", "mlflow", ...) (*, none).
        eval_every: Evaluate the policy with ``eval_spec`` after every ``eval_every`` steps (*, 0 = never); the
            results go to ``<run folder>/eval/step_<k>.json`` and to the trackers as ``eval/...``.
        eval_spec: The evaluation (`rlvr_lib.eval.EvalSpec`) run every ``eval_every`` steps (*, ``None``).
        lora: Train LoRA adapters (`rlvr_lib.lora.LoraSettings`: r, alpha, target modules, dropout) instead of the
            whole model; the KL anchor's reference is then the adapter-free base (*, ``None``: full fine-tuning).
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
    reward_funcs: tuple[str, ...] = field(default=(), metadata={OMIT_IF_DEFAULT: True})
    reward_weights: tuple[float, ...] | None = field(default=None, metadata={OMIT_IF_DEFAULT: True})
    use_verifier: bool = field(default=True, metadata={OMIT_IF_DEFAULT: True})
    verifier_weight: float = field(default=1.0, metadata={OMIT_IF_DEFAULT: True})
    report_to: tuple[str, ...] = field(default=(), metadata={OMIT_IF_DEFAULT: True})
    eval_every: int = field(default=0, metadata={OMIT_IF_DEFAULT: True})
    eval_spec: EvalSpec | None = field(default=None, metadata={OMIT_IF_DEFAULT: True})
    lora: LoraSettings | None = field(default=None, metadata={OMIT_IF_DEFAULT: True})

    def __post_init__(self) -> None:
        # Settings layers (config files, --set) pass lists and mappings: the list fields as tuples, the spec as one.
        for name in ("reward_funcs", "reward_weights", "report_to"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if isinstance(self.eval_spec, dict):
            object.__setattr__(self, "eval_spec", EvalSpec.from_dict(self.eval_spec))
        if isinstance(self.lora, dict):
            object.__setattr__(self, "lora", LoraSettings.from_dict(self.lora))
        super().__post_init__()

    def validate(self) -> None:
        # importing the registry runs rlvr_lib.methods: every method is registered
        from rlvr_lib.methods.registry import METHODS, resolve_name, unknown_method

        resolve_name(self.method)  # a composite "a+b" is composed on first use (rlvr_lib.methods.compose)
        if not isinstance(self.method, str) or self.method not in METHODS:  # plugins' entry points are loaded
            raise unknown_method(self.method, "TrainerConfig.method")
        check_task_name(self.task, "TrainerConfig.task")  # loads `rlvr_lib.plugins` entry points when missing
        self.check_choice("engine", self.engine, ENGINES)
        self.check_choice("train_family", self.train_family, list(get_task(self.task).families))
        for name, (lo, hi) in INT_BOUNDS.items():
            self.check_int_in(name, getattr(self, name), lo, hi)
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
        self._validate_rewards(METHODS[self.method].cls)
        self._validate_logging()
        self.check(self.lora is None or isinstance(self.lora, LoraSettings), "lora", self.lora,
                   "None or an rlvr_lib.lora.LoraSettings (or its dict: r, alpha, target_modules, dropout)")
        self.check(self.lora is None or self.engine not in ("vllm", "vllm-server"), "engine", self.engine,
                   "an in-process engine ('kvcache' or 'hf') with lora: the vLLM engines sync whole weights, "
                   "not adapters")

    def _validate_rewards(self, method_cls) -> None:
        from rlvr_lib.rewards.callables import resolve_reward_func

        self.check(isinstance(self.reward_funcs, tuple) and all(isinstance(f, str) for f in self.reward_funcs),
                   "reward_funcs", self.reward_funcs, "a list of reward-function names or import paths "
                   "'module:function'")
        for spec in self.reward_funcs:
            resolve_reward_func(spec)  # ValueError naming it when it cannot be found
        if self.reward_weights is not None:
            self.check(isinstance(self.reward_weights, tuple) and len(self.reward_weights) == len(self.reward_funcs),
                       "reward_weights", self.reward_weights,
                       f"None or one weight per reward function ({len(self.reward_funcs)})")
            for w in self.reward_weights:
                self.check_range("reward_weights", w, None, None)
        self.check(isinstance(self.use_verifier, bool), "use_verifier", self.use_verifier, "a bool")
        self.check_range("verifier_weight", self.verifier_weight, None, None)
        self.check(self.use_verifier or bool(self.reward_funcs), "use_verifier", self.use_verifier,
                   "True when there are no reward_funcs (a run needs a reward)")
        custom = bool(self.reward_funcs) or not self.use_verifier or self.verifier_weight != 1.0
        if custom and not method_cls.uses_verifier_reward:
            raise ValueError(f"method {self.method!r} computes its own model-based reward (not the verifier's), "
                             "which reward_funcs / use_verifier / verifier_weight cannot be combined with: leave "
                             "them unset, or use a verifier-reward method (e.g. 'grpo')")

    def _validate_logging(self) -> None:
        from rlvr_lib.tracking import check_report_to

        self.check(isinstance(self.report_to, tuple), "report_to", self.report_to, "a list of tracker names")
        check_report_to(self.report_to)
        self.check(self.eval_spec is None or isinstance(self.eval_spec, EvalSpec), "eval_spec", self.eval_spec,
                   "None or an rlvr_lib.eval.EvalSpec (or its dict)")
        self.check(self.eval_every == 0 or self.eval_spec is not None, "eval_every", self.eval_every,
                   "0 unless eval_spec is given (what to evaluate: an rlvr_lib.eval.EvalSpec)")
        self.check(self.eval_every > 0 or self.eval_spec is None, "eval_spec", self.eval_spec,
                   "None unless eval_every > 0 (how often to evaluate)")
