"""TRL backend: any registered method and task trained by TRL's ``GRPOTrainer``.

`MethodGRPOTrainer` is a ``trl.GRPOTrainer`` (TRL 1.16) driven by a `TrainerConfig`. The
method's hooks run unchanged because the backend reuses the native loop's step machinery
(`rlvr_lib.trainer.Trainer`, held as ``trainer.core``: sampling rounds, verification,
rewards, keep/refill, advantages, per-minibatch loss); TRL owns the dataloader and its split
among processes, generation (``generate`` or vLLM with ``use_vllm=True``), the optimizer
loop (clipping, optimizer and scheduler steps, logging, callbacks) and saving.

One RL step is ``inner_epochs * minibatches`` TRL optimizer steps (``num_iterations =
inner_epochs``, ``steps_per_generation = minibatches``, ``gradient_accumulation_steps = 1``);
the sampler yields the problems the native loop draws at that step, each repeated G times.
TRL's ``beta`` is 0: the method's anchor is the native loss's.

Departures from the native loop:

1. sampling: TRL's sampler, seeded per call with the native sampling seed (reproducible,
   different completions); vLLM draws its own seeds;
2. an empty minibatch still takes TRL's optimizer and scheduler step (no gradient);
3. resuming from TRL's checkpoints is refused (they miss the method's state);
4. vLLM ``colocate`` weight sync goes through `rlvr_lib.rollout.vllm_engine.load_weights_into`;
5. TRL's own loss-side metrics (clip ratios, entropy) are not computed.

Refused at construction (`check_hostable`): groups below 2, uneven splits among processes,
TRL arguments the config owns, evaluation in TRL's loop, DeepSpeed, ``use_vllm`` on FSDP (``engine="vllm-server"``,
rollouts from a vLLM server through the core's engine, is allowed there),
continuous batching, and dynamic sampling with vLLM ``server`` or multi-process TP ``colocate``.

Where each hook runs, the step mapping, FSDP and each departure in full: docs/library/trl_backend.md.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import os
import time
from typing import Any, Sequence

import numpy as np
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from rlvr_lib.distributed import DEEPSPEED_REFUSAL, sharded_launch
from rlvr_lib.methods.base import Method
from rlvr_lib.rollout import Rollouts, SamplingParams, sequence_logprobs
from rlvr_lib.rollout.batched import left_pad
from rlvr_lib.rollout.vllm_engine import load_weights_into
from rlvr_lib.trainer import Trainer, _rollout_metrics
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["MethodGRPOTrainer", "TRLEngine", "check_hostable", "grpo_args", "TRL_OWNED_ARGS"]

logger = logging.getLogger(__name__)

TRL_OWNED_ARGS: dict[str, str] = {
    "per_device_train_batch_size": "prompts_per_step * group_size / (processes * minibatches)",
    "gradient_accumulation_steps": "1 (one minibatch per optimizer step)",
    "steps_per_generation": "minibatches",
    "generation_batch_size": "prompts_per_step * group_size",
    "num_iterations": "inner_epochs",
    "max_steps": "steps * inner_epochs * minibatches",
    "num_generations": "group_size",
    "max_completion_length": "max_new_tokens",
    "temperature": "temperature (the method's sampling_temperature per step)",
    "top_p": "top_p",
    "top_k": "0 (the full vocabulary, as the native engines)",
    "min_p": "None",
    "repetition_penalty": "1.0",
    "learning_rate": "lr (the method's optimizer)",
    "weight_decay": "weight_decay (the method's optimizer)",
    "max_grad_norm": "max_grad_norm",
    "lr_scheduler_type": "lr_schedule / lr_warmup_ratio (the native scheduler is passed to TRL)",
    "warmup_steps": "lr_warmup_ratio",
    "warmup_ratio": "lr_warmup_ratio",
    "seed": "seed",
    "beta": "kl_coef (the method's anchor, over the backend's reference copy)",
    "loss_type": "loss_agg",
    "scale_rewards": "advantage",
    "epsilon": "eps_low",
    "epsilon_high": "eps_high",
    "num_generations_eval": "None (no evaluation in TRL's loop)",
    "shuffle_dataset": "the native prompt draw (the backend's train sampler)",
    "sync_ref_model": "False (the reference is the initial policy, frozen)",
    "disable_dropout": "False (the model is trained as given, as natively)",
    "remove_unused_columns": "False (the sampler's problem_index column)",
    "mask_truncated_completions": "False (the method's loss decides)",
    "importance_sampling_level": "the method's policy_loss",
    "top_entropy_quantile": "the method's policy_loss",
    "entropy_coef": "the method's extra_loss",
    "multi_objective_aggregation": "the method's rewards",
    "reward_weights": "the method's rewards",
}
"""``GRPOConfig`` fields the backend sets from the `TrainerConfig` (field -> where its value comes from).

Passing one of them in ``trl_args`` is refused: set the `TrainerConfig` field instead."""

_FIXED = dict(top_k=0, min_p=None, repetition_penalty=1.0, beta=0.0, gradient_accumulation_steps=1,
              sync_ref_model=False, disable_dropout=False, remove_unused_columns=False,
              mask_truncated_completions=False, shuffle_dataset=False, lr_scheduler_type="constant",
              loss_type="grpo", scale_rewards="group")


def _checkpointing_field() -> str:
    """The activation-checkpointing switch of ``GRPOConfig`` (transformers 5 renamed ``gradient_checkpointing``)."""
    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def grpo_args(config: TrainerConfig, output_dir: str, *, processes: int = 1, trl_args: dict | None = None):
    """TRL's ``GRPOConfig`` for ``config`` on ``processes`` processes: `TRL_OWNED_ARGS` from ``config``, the rest
    TRL's (quiet, save-nothing defaults that ``trl_args`` may override).

    Raises ValueError when ``trl_args`` sets a field the config owns or no ``GRPOConfig`` field, or the batch does
    not split.
    """
    from trl import GRPOConfig

    trl_args = dict(trl_args or {})
    owned = sorted(set(trl_args) & set(TRL_OWNED_ARGS))
    if owned:
        name = owned[0]
        raise ValueError(f"trl_args[{name!r}] is set by the TrainerConfig ({TRL_OWNED_ARGS[name]}); "
                         "set that TrainerConfig field instead")
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(trl_args) - fields)
    if unknown:
        raise ValueError(f"trl_args[{unknown[0]!r}] is not a GRPOConfig field (TRL {_trl_version()})")
    _check_split(config, processes)
    rows = config.prompts_per_step * config.group_size
    quiet = dict(report_to="none", logging_strategy="steps", logging_steps=1, save_strategy="no",
                 eval_strategy="no", log_completions=False, disable_tqdm=True, dataloader_num_workers=0,
                 dataloader_pin_memory=False, bf16=False, fp16=False, **{_checkpointing_field(): False})
    if not torch.cuda.is_available():
        quiet["use_cpu"] = True
    owned_values = dict(
        _FIXED,
        per_device_train_batch_size=rows // (processes * config.minibatches),
        steps_per_generation=config.minibatches,
        num_iterations=config.inner_epochs,
        max_steps=config.steps * config.inner_epochs * config.minibatches,
        num_generations=config.group_size,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        learning_rate=config.lr,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        seed=config.seed,
        epsilon=config.eps_low,
        epsilon_high=config.eps_high,
    )
    return GRPOConfig(output_dir=str(output_dir), **{**quiet, **trl_args, **owned_values})


def _trl_version() -> str:
    import trl

    return trl.__version__


def _check_split(config: TrainerConfig, processes: int) -> None:
    """The batch splits into equal per-process shares of whole groups and equal minibatches (TRL's batching)."""
    if config.group_size < 2:
        raise ValueError(f"TRL backend: group_size={config.group_size}: TRL's GRPOTrainer needs num_generations >= 2")
    if config.prompts_per_step % processes:
        raise ValueError(f"TRL backend: prompts_per_step={config.prompts_per_step} must be divisible by the "
                         f"number of processes ({processes}): each process rolls out whole groups")
    rows = config.prompts_per_step * config.group_size // processes
    if rows % config.minibatches:
        raise ValueError(f"TRL backend: each process's {rows} rows (prompts_per_step * group_size / processes) "
                         f"must split into minibatches={config.minibatches} equal TRL micro-batches")


def _overrides(method: Method, hook: str) -> bool:
    """Whether ``method`` overrides the default (GRPO) ``hook`` of `Method`."""
    return getattr(type(method), hook) is not getattr(Method, hook)


def check_hostable(method: Method, config: TrainerConfig, args, processes: int) -> None:
    """Refuse, with one ``ValueError`` line naming the method, the setting and what is allowed, what the backend cannot host."""
    name = method.name
    _check_split(config, processes)
    native_only = {"lora": "train adapters with the native backend",
                   "eval_every": "evaluate afterwards with rlvr_lib.eval, or use the native backend",
                   "report_to": "give TRL's own: --trl-set report_to=tensorboard"}
    for field, instead in native_only.items():
        if getattr(config, field) not in (None, 0, ()):
            raise ValueError(f"TRL backend: TrainerConfig.{field}={getattr(config, field)!r} is the native loop's "
                             f"and is not hosted here: {instead}")
    if args.eval_strategy != "no":
        raise ValueError(f"TRL backend: eval_strategy={getattr(args.eval_strategy, 'value', args.eval_strategy)!r} "
                         "is not hosted (the method's loss "
                         "runs only in training): use eval_strategy='no' and rlvr_lib.eval for evaluation")
    if getattr(args, "deepspeed", None) or getattr(args, "fsdp", None) or "DeepSpeed" in sharded_launch():
        raise ValueError(f"TRL backend: method {name!r}: DeepSpeed, and FSDP given as TRL arguments, are not "
                         f"hosted (FSDP comes from an accelerate FSDP launch, which the native loop's sharding "
                         f"serves); {DEEPSPEED_REFUSAL}")
    if "FSDP" in sharded_launch() and processes > 1 and args.use_vllm:
        raise ValueError(f"TRL backend: method {name!r}: use_vllm is not hosted on an FSDP launch (the weight sync "
                         "reads whole parameters): use transformers generate (the default), or rollouts from a "
                         "vLLM server (engine='vllm-server', docs/scaling-out.md)")
    if getattr(args, "use_transformers_continuous_batching", False):
        raise ValueError(f"TRL backend: method {name!r}: use_transformers_continuous_batching is not hosted "
                         "(its generate_batch takes no per-call seed, temperature or weight sample): use "
                         "transformers generate (the default) or use_vllm=True")
    if args.use_vllm and processes > 1 and _overrides(method, "keep_groups"):
        mode = args.vllm_mode
        if mode == "server" or (mode == "colocate" and args.vllm_tensor_parallel_size > 1):
            raise ValueError(f"TRL backend: method {name!r} overrides keep_groups (dynamic sampling) and TRL's vLLM "
                             f"{mode!r} mode (tensor_parallel_size={args.vllm_tensor_parallel_size}) on "
                             f"{processes} processes: refill rounds give processes unequal numbers of prompts, "
                             "which that vLLM mode's collective generate cannot take; use vllm_mode='colocate' "
                             "with vllm_tensor_parallel_size=1, one process, or use_vllm=False")


class _NativeDrawSampler(torch.utils.data.Sampler):
    """TRL's train sampler: per RL step, the problems the native loop draws, each repeated G times.

    Step ``s`` yields ``Trainer._rng(s, 0).choice(pool, prompts_per_step, replace=False)``, each index repeated
    ``group_size`` times, ``inner_epochs * minibatches`` times over.
    """

    def __init__(self, core: Trainer):
        self.core = core
        cfg = core.config
        self.repeats = cfg.inner_epochs * cfg.minibatches

    def step_indices(self, step: int) -> list[int]:
        """The pool indices of step ``step``'s round-0 problems, in draw order."""
        cfg = self.core.config
        return self.core._rng(step, 0).choice(len(self.core.train_problems), cfg.prompts_per_step,
                                              replace=False).tolist()

    def __iter__(self):
        G = self.core.config.group_size
        for step in range(self.core.config.steps):
            rows = [i for i in self.step_indices(step) for _ in range(G)]
            for _ in range(self.repeats):
                yield from rows

    def __len__(self) -> int:
        cfg = self.core.config
        return cfg.steps * self.repeats * cfg.prompts_per_step * cfg.group_size


class TRLEngine:
    """A `rlvr_lib.rollout.RolloutEngine` over the ``GRPOTrainer``'s own generation (``transformers`` or vLLM).

    Returns `Rollouts` on the CPU, completions cut after the first EOS. ``perturbs``: the method overrides
    ``perturbed``, so the vLLM weights are synced before every call (else once per optimizer step).
    """

    def __init__(self, perturbs: bool = False):
        self.trainer = None
        self.perturbs = perturbs

    def bind(self, trainer) -> None:
        """Attach the ``GRPOTrainer`` whose generation this engine uses (after its construction)."""
        self.trainer = trainer

    @property
    def pad_token_id(self) -> int:
        tok = self.trainer._tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else self.trainer.eos_token_ids[0])

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        ids, _, _ = self.trainer._tokenize_prompts(list(prompts))
        return [list(map(int, row)) for row in ids]

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, mask)``: ``prompts`` tokenised as `generate` tokenises them, left-padded."""
        return left_pad(self._encode(prompts), self.pad_token_id)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> Rollouts:
        """``params.n`` completions per prompt (prompt-major), sampled by TRL's generation."""
        if self.trainer is None:
            raise RuntimeError("TRLEngine.generate: no GRPOTrainer bound (MethodGRPOTrainer binds it)")
        tr = self.trainer
        rows = [p for p in prompts for _ in range(params.n)]
        prompt_ids = self._encode(rows)
        if tr.use_vllm:
            completion_ids, logprobs = self._vllm(prompt_ids, params)
        else:
            completion_ids, logprobs = self._transformers(prompt_ids, params), None
        pad = self.pad_token_id
        p_ids, p_mask = left_pad(prompt_ids, pad)
        width = max(1, max(len(c) for c in completion_ids))
        c_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        c_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, c in enumerate(completion_ids):
            c_ids[i, :len(c)] = torch.tensor(c, dtype=torch.long)
            c_mask[i, :len(c)] = 1
        if logprobs is None:  # transformers generate records none: a teacher-forced forward of the sampling weights
            model = tr.model
            was_training = model.training
            model.eval()
            device = next(model.parameters()).device
            with torch.no_grad():
                lp, _ = sequence_logprobs(model, p_ids.to(device), p_mask.to(device), c_ids.to(device),
                                          c_mask.to(device), temperature=params.logprob_temperature)
            model.train(was_training)
            lp = lp.float().cpu()
        else:
            lp = torch.zeros((len(rows), width), dtype=torch.float32)
            for i, row in enumerate(logprobs):
                lp[i, :len(row)] = torch.tensor([float("nan") if x is None else float(x) for x in row])
        eos = set(tr.eos_token_ids)
        texts = tr._tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return Rollouts(
            prompt_index=torch.arange(len(prompts)).repeat_interleave(params.n),
            prompt_ids=p_ids, prompt_mask=p_mask, completion_ids=c_ids, completion_mask=c_mask,
            logprobs=lp * c_mask, texts=list(texts),
            finish_reasons=["stop" if c and c[-1] in eos else "length" for c in completion_ids],
            pad_token_id=pad,
        )

    def _transformers(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[int]]:
        tr = self.trainer
        settings = dict(temperature=params.temperature, top_p=params.top_p, max_new_tokens=params.max_new_tokens,
                        do_sample=not params.greedy)
        saved = tr.generation_config, tr.generation_kwargs
        config = copy.deepcopy(tr.generation_config)
        config.update(**settings)
        tr.generation_config, tr.generation_kwargs = config, {**tr.generation_kwargs, **settings}
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        try:
            with torch.random.fork_rng(devices=devices):
                if params.seed is not None:
                    torch.manual_seed(params.seed)
                completion_ids, _ = tr._generate_single_turn(prompt_ids, None, {}, 1)
        finally:
            tr.generation_config, tr.generation_kwargs = saved
        return [list(map(int, c)) for c in completion_ids]

    def _vllm(self, prompt_ids: list[list[int]], params: SamplingParams):
        tr = self.trainer
        vg = tr.vllm_generation
        if self.perturbs:  # the weights of this draw's sample reach the engine before it samples
            vg.sync_weights()
            tr._last_loaded_step = tr.state.global_step
        saved = vg.temperature, vg.top_p, vg.max_completion_length
        vg.temperature = 0.0 if params.greedy else params.temperature  # vLLM: temperature 0 is argmax
        vg.top_p, vg.max_completion_length = (1.0 if params.greedy else params.top_p), params.max_new_tokens
        try:
            completion_ids, logprobs = tr._generate_single_turn(prompt_ids, None, {}, 1)
        finally:
            vg.temperature, vg.top_p, vg.max_completion_length = saved
        return [list(map(int, c)) for c in completion_ids], logprobs


def _sync_colocated(generation) -> None:
    """TRL's colocated ``VLLMGeneration.sync_weights``, through `load_weights_into` (docs/library/trl_backend.md).

    Pushes TRL's parameters, then (plain model) the ``state_dict`` entries that are not parameters (tied
    ``lm_head.weight``, buffers).
    """
    if generation.enable_sleep_mode:
        generation.llm.wake_up(tags=["weights"])
        generation._llm_weights_sleeping = False
    load_weights_into(generation.llm, _colocated_weights(generation))


def _colocated_weights(generation):
    """``(name, tensor)`` pairs of one colocated sync: TRL's parameters, then a plain model's other ``state_dict`` entries."""
    yield from generation._iter_named_params()
    model = generation.model
    if getattr(model, "peft_config", None) is None:  # PEFT names differ; TRL merges its adapters itself
        parameters = {name for name, _ in model.named_parameters()}
        for name, tensor in model.state_dict().items():
            if name not in parameters:
                yield name, tensor


def _verifier_reward(task, problems):
    """TRL reward function: the task verifier's reward of each completion (TRL requires one; training uses ``method.rewards``)."""

    def task_verifier(prompts, completions, problem_index, **kwargs) -> list[float]:
        return [float(task.verify(problems[int(i)], text).reward)
                for i, text in zip(problem_index, completions, strict=True)]

    return task_verifier


class _FinishRLStep(TrainerCallback):
    """After each TRL optimizer step: close the RL step when it was the step's last (method.on_step_end, metrics)."""

    def __init__(self, trainer: "MethodGRPOTrainer"):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._finish_rl_step()


class MethodGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` driven by a registered method and task (see the module docstring).

    Args:
        config: The run's settings; validated.
        model, tokenizer: The initial policy; loaded from ``config.policy`` when omitted.
        output_dir: TRL's ``output_dir``.
        trl_args: Further ``GRPOConfig`` fields (`grpo_args`).
        engine: A `rlvr_lib.rollout.RolloutEngine` instead of TRL's generation; default `TRLEngine`.
        callbacks: Extra ``transformers.TrainerCallback`` objects.

    Attributes: ``core`` (the native `Trainer` whose step and loss run), ``method``, ``history`` (per RL step).
    Raises ValueError on what `check_hostable` refuses, a bad ``trl_args`` key or a bad config value.
    """

    def __init__(self, config: TrainerConfig, model=None, tokenizer=None, *, output_dir: str,
                 trl_args: dict | None = None, engine=None, callbacks: Sequence[Any] = ()):
        from datasets import Dataset

        if not isinstance(config, TrainerConfig):
            raise ValueError(f"MethodGRPOTrainer: config must be a TrainerConfig, got {type(config).__name__}")
        processes = int(os.environ.get("WORLD_SIZE", "1"))  # the launcher's; accelerate's state is built by args
        args = grpo_args(config, output_dir, processes=processes, trl_args=trl_args)
        if args.world_size != processes:
            raise RuntimeError(f"TRL backend: the launcher started {processes} processes but accelerate sees "
                               f"{args.world_size}")
        from rlvr_lib.methods import build_method

        check_hostable(build_method(config), config, args, processes)
        # engine="vllm-server": rollouts from a vLLM server (rlvr_lib.rollout.vllm_server), built by the core over
        # the policy it loads; TRL's own vllm_mode="server" syncs weights over NCCL, which needs CUDA.
        server = engine is None and config.engine == "vllm-server"
        self._engine = engine if engine is not None or server else TRLEngine()
        # The native trainer: world, policy (loaded on this process's device), method, frozen reference
        # (copied before TRL patches the model's forward), the method's optimizer and lr schedule, task, pool.
        self.core = Trainer(config, model, tokenizer, engine=self._engine)
        self._engine = self.core.engine
        if isinstance(self._engine, TRLEngine):
            self._engine.perturbs = _overrides(self.core.method, "perturbed")
        core = self.core
        scheduler = core.scheduler or torch.optim.lr_scheduler.LambdaLR(core.optimizer, lambda _: 1.0)
        pool = core.train_problems
        dataset = Dataset.from_dict({"prompt": [p.prompt_with(None) for p in pool],
                                     "problem_index": list(range(len(pool)))})
        self._sampler = _NativeDrawSampler(core)
        super().__init__(model=core.model, reward_funcs=[_verifier_reward(core.task, pool)], args=args,
                         train_dataset=dataset, processing_class=core.tokenizer,
                         callbacks=[*callbacks], optimizers=(core.optimizer, scheduler))
        if core.world.sharded:
            # The core sharded the policy (FSDP2) and owns its gradient reduction: transformers then prepares the
            # model without wrapping it in DDP or sharding it again (its path for a model sharded at load time).
            self.is_distributed_loading_by_transformers = True
        self.add_callback(_FinishRLStep(self))
        if getattr(self, "use_vllm", False) and getattr(self.vllm_generation, "mode", None) == "colocate":
            generation = self.vllm_generation
            generation.sync_weights = lambda: _sync_colocated(generation)
        if isinstance(self._engine, TRLEngine):
            self._engine.bind(self)
        if core.reference is not None:
            core.reference.to(self.accelerator.device)
        self._rl: dict | None = None  # the RL step in progress

    # ------------------------------------------------------------------ accessors
    @property
    def config(self) -> TrainerConfig:
        return self.core.config

    @property
    def method(self) -> Method:
        return self.core.method

    @property
    def history(self) -> list[dict]:
        return self.core.history

    def _get_train_sampler(self, dataset=None):
        return self._sampler

    # ------------------------------------------------------------------ what TRL's loop calls
    def train(self, resume_from_checkpoint=None, **kwargs):
        """TRL's training loop for ``config.steps`` RL steps; ValueError on ``resume_from_checkpoint``."""
        if resume_from_checkpoint:
            raise ValueError(f"TRL backend: resume_from_checkpoint is not hosted: TRL's checkpoints do not hold "
                             f"method {self.method.name!r}'s state nor the RL step; train anew, or use the "
                             "native Trainer (it resumes exactly)")
        return super().train(**kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """One TRL optimizer step's backward: the loss (detached) of one minibatch of the RL step.

        The RL step's first optimizer step rolls out and computes advantages (`_begin_rl_step`); the gradients are
        `Trainer.minibatch_backward`'s.
        """
        cfg, core = self.config, self.core
        per_step = cfg.inner_epochs * cfg.minibatches
        if self._step % per_step == 0:
            self._begin_rl_step(inputs)
        rl = self._rl
        rows = rl["minibatches"][self._step % per_step]
        self._step += 1
        core.optimizer.zero_grad(set_to_none=True)
        if len(rows) == 0:  # dynamic sampling kept fewer rows than minibatches: no gradient
            return torch.zeros((), device=self.args.device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        per_sample = core.minibatch_backward(rl["batch"], rl["local"], rl["local_index"], rows, rl["lengths"],
                                             rl["temperature"], params)
        losses = []
        for stats in per_sample:
            for key, value in stats.items():
                rl["sums"].setdefault(key, []).append(value)
            if "loss" in stats:
                losses.append(stats["loss"])
        return torch.tensor(float(np.mean(losses)) if losses else 0.0, device=self.args.device)

    def _clip_grad_norm(self, model):
        norm = super()._clip_grad_norm(model)
        norm = getattr(norm, "full_tensor", lambda: norm)()  # sharded: a DTensor
        if self._rl is not None:  # logged as the native loop logs them: per optimizer step
            self._rl["sums"].setdefault("grad_norm", []).append(float(norm))
            if self.core.scheduler is not None:
                self._rl["sums"].setdefault("lr", []).append(float(self.core.optimizer.param_groups[0]["lr"]))
        return norm

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        raise RuntimeError("MethodGRPOTrainer computes its loss in training_step (the method's loss hooks); "
                           "TRL's compute_loss is not used")

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        raise ValueError("TRL backend: evaluation inside TRL's loop is not hosted; evaluate with rlvr_lib.eval")

    # ------------------------------------------------------------------ one RL step
    def _begin_rl_step(self, inputs: list[dict]) -> None:
        """Steps 1-4 of `Trainer.step` up to the update: roll out, verify, reward, keep, advantages, reference."""
        core, cfg, method = self.core, self.config, self.method
        step = core.step_count
        t0 = time.perf_counter()
        rng = core._rng(step, 0)
        method.on_step_start(step)
        temperature = method.sampling_temperature(step)
        self.model.eval()  # rollouts and rewards in eval mode, the update in train mode, as natively
        batch, sampled, sampling_stats, t_rollout = core._collect(step, rng)
        self._check_rows(inputs, sampled[0].problems, step)
        batch.advantages = method.advantages(batch).float()
        t_reward = time.perf_counter()
        local, local_index = core.world.split_rows(batch)
        if core.reference is not None:
            ro = local.rollouts
            with torch.no_grad():
                local.ref_logprobs, _ = sequence_logprobs(
                    core.reference, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                    temperature=temperature,
                )
        method.before_update(local, self.model)
        self.model.train()
        minibatches = []
        for _ in range(cfg.inner_epochs):  # the native schedule (Trainer._update)
            perm = torch.from_numpy(rng.permutation(len(batch))) if cfg.minibatches > 1 else torch.arange(len(batch))
            minibatches += list(torch.tensor_split(perm, cfg.minibatches))
        self._rl = dict(step=step, batch=batch, local=local, local_index=local_index, sampled=sampled,
                        sampling_stats=sampling_stats, temperature=temperature, t0=t0, t_rollout=t_rollout,
                        t_reward=t_reward, minibatches=minibatches, sums={},
                        lengths=batch.rollouts.completion_mask.sum(1))

    def _check_rows(self, inputs: list[dict], problems: list, step: int) -> None:
        """This process's dataloader rows are its share of the step's problems, each G times."""
        core = self.core
        mine = core.world.shard(len(problems))
        want = [problems[i].uid for i in mine for _ in range(core.config.group_size)]
        got = [core.train_problems[int(row["problem_index"])].uid for row in inputs]
        if got != want:
            raise RuntimeError(f"TRL backend, step {step}: the dataloader gave this process (rank "
                               f"{core.world.rank}) other prompts than its share of the step's draw; "
                               f"got {got[:4]}..., expected {want[:4]}...")

    def _finish_rl_step(self) -> None:
        """After the RL step's last optimizer step: its metrics (as `Trainer.step`), ``on_step_end``, history."""
        cfg, core, rl = self.config, self.core, self._rl
        if rl is None or self._step % (cfg.inner_epochs * cfg.minibatches):
            return
        t_end = time.perf_counter()
        batch = rl["batch"]
        stats = {k: float(np.mean(v)) for k, v in rl["sums"].items()}
        metrics = {
            "step": rl["step"],
            **_rollout_metrics(rl["sampled"], core.task.strategies),
            "advantage_abs_mean": float(batch.advantages.abs().mean()),
            "temperature": rl["temperature"],
            **rl["sampling_stats"],
            **stats,
            "time_rollout": rl["t_rollout"],
            "time_reward": rl["t_reward"] - rl["t0"] - rl["t_rollout"],
            "time_update": t_end - rl["t_reward"],
            "time_step": t_end - rl["t0"],
        }
        empty = sum(len(rows) == 0 for rows in rl["minibatches"])
        if empty:
            metrics["empty_minibatches"] = empty
        if rl["sampling_stats"]:
            kept = _rollout_metrics([batch])
            metrics.update({f"kept_{k}": kept[k] for k in ("reward_mean", "accuracy", "zero_adv_frac")})
        self.method.on_step_end(rl["step"], metrics)
        metrics = core.world.merge_metrics(metrics, rows=len(rl["local"]), summed=self.method.summed_metrics)
        core.history.append(metrics)
        core.step_count += 1
        self._rl = None
        for key, value in metrics.items():  # logged through TRL's log (averaged over its logging window)
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and math.isfinite(value):
                self._metrics["train"][f"rlvr/{key}"].append(float(value))
