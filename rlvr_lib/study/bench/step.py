"""Wall time of one GRPO step: our `rlvr_lib.trainer.Trainer` against TRL's `GRPOTrainer`.

`bench_step_time` runs ``warmup + repeats`` optimizer steps of each trainer on the same work and reports the
median seconds per step (warm-up steps dropped) and the ratio ours / TRL.

Both sides run the same work: the shipped tiny policy (CPU, float32, no gradient checkpointing), the same
``prompts_per_step`` training prompts, G = ``group_size`` samples at temperature 1.0 with no top-p/top-k, the
testbed verifier's 0/1 reward, ``grpo_no_kl`` (group-normalised advantages, PPO clip ``[0.8, 1.2]``,
per-sequence token mean then batch mean: TRL ``loss_type="grpo"``), AdamW at lr 1e-4 with clipping at norm 1.0
and a constant lr, one optimizer step per generation batch. A step is timed with ``time.perf_counter()``
around ``Trainer.step()`` (ours) and between TRL's ``on_step_begin`` and ``on_step_end`` (generation included).

What cannot be matched exactly: the sampled completions (each side's own random numbers; mean completion
lengths are reported beside the times), per-step bookkeeping, the advantage epsilon (1e-4 vs 1e-6), our
sampling log-probs, TRL's ``accelerate`` overhead, and CPU noise (compare medians made under the same load).

Every matched setting and what each side does inside the timed window: docs/study/bench_step.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from rlvr_lib.study.bench.common import median, time_repeats
from rlvr_lib.tasks import CORRECT, Problem
from rlvr_lib.tasks.arithmetic import family_problems, verify
from rlvr_lib.validation import check, check_int

__all__ = ["bench_step_time"]

TRAIN_FAMILY = "train"
OUR_METHOD = "grpo_no_kl"
LEARNING_RATE = 1e-4
WEIGHT_DECAY = 0.0
MAX_GRAD_NORM = 1.0
TEMPERATURE = 1.0
TOP_P = 1.0
CLIP_EPS = 0.2
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8

EngineFactory = Callable[[Any, Any], Any]


# ------------------------------------------------------------------------------ validation
def _validate(*, prompts_per_step, group_size, max_new_tokens, warmup, repeats, seed, engine, threads) -> None:
    """Check every argument of `bench_step_time`; raise ``ValueError`` naming the bad one."""
    # TRL refuses num_generations < 2 (a group of one has no advantage).
    for name, value, lo in (("prompts_per_step", prompts_per_step, 1), ("group_size", group_size, 2),
                            ("max_new_tokens", max_new_tokens, 1), ("warmup", warmup, 0), ("repeats", repeats, 1),
                            ("seed", seed, 0)):
        check_int(f"bench_step_time: {name}", value, lo)
    if threads is not None:
        check_int("bench_step_time: threads", threads, 1)
    check(
        engine is None or callable(engine), "bench_step_time: engine", engine,
        "None (the Trainer's default engine) or a callable (model, tokenizer) -> engine",
    )


# ------------------------------------------------------------------------------ shared pieces
def _problems(prompts_per_step: int) -> list[Problem]:
    """The benchmark's problems: the first ``prompts_per_step`` training problems (seed 0)."""
    return family_problems(TRAIN_FAMILY, prompts_per_step, seed=0)


def _prompt(problem: Problem) -> str:
    """The prompt text our trainer sends for a method without hints (``Trainer._rollout``)."""
    return problem.prompt_with(None)


def _load_policy():
    """A fresh copy of the shipped tiny policy on CPU, float32: ``(model, tokenizer)``."""
    from rlvr_lib.policy import load_policy

    with _quiet():
        return load_policy(None, device="cpu", dtype=torch.float32)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence TRL / transformers / accelerate / datasets warnings irrelevant to a timing run.

    Restores the previous logging levels and warning filters on exit.
    """
    import transformers

    names = ("trl", "accelerate", "datasets", "transformers")
    levels = {name: logging.getLogger(name).level for name in names}
    verbosity = transformers.logging.get_verbosity()
    progress_bars = transformers.utils.logging.is_progress_bar_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        for module in ("trl", "transformers", "accelerate", "datasets", "torch"):
            warnings.filterwarnings("ignore", category=UserWarning, module=rf"{module}(\.|$)")
        try:
            transformers.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars
            for name in names:
                logging.getLogger(name).setLevel(logging.ERROR)
            yield
        finally:
            transformers.logging.set_verbosity(verbosity)
            if progress_bars:
                transformers.utils.logging.enable_progress_bar()
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


# ------------------------------------------------------------------------------ ours
def _our_config(*, prompts_per_step: int, group_size: int, max_new_tokens: int, steps: int, seed: int):
    """Our `TrainerConfig` for the benchmark (``grpo_no_kl`` with every matched setting spelled out)."""
    from rlvr_lib.study.testbed import calibrated_config

    return calibrated_config(
        OUR_METHOD,
        policy=None,
        train_family=TRAIN_FAMILY,
        train_pool_size=prompts_per_step,
        steps=steps,
        prompts_per_step=prompts_per_step,
        group_size=group_size,
        temperature=TEMPERATURE,
        top_p=TOP_P,
        max_new_tokens=max_new_tokens,
        lr=LEARNING_RATE,
        weight_decay=WEIGHT_DECAY,
        max_grad_norm=MAX_GRAD_NORM,
        inner_epochs=1,
        minibatches=1,
        eps_low=CLIP_EPS,
        eps_high=CLIP_EPS,
        loss_agg="seq_mean_token_mean",
        advantage="grpo",
        kl_coef=0.0,
        seed=seed,
        checkpoint_every=0,
    )


def _run_ours(problems: list[Problem], *, group_size: int, max_new_tokens: int, warmup: int, repeats: int,
              seed: int, engine: EngineFactory | None, threads: int | None) -> dict:
    """Time ``warmup + repeats`` calls of ``Trainer.step()``; the warm-up ones are dropped."""
    from rlvr_lib.trainer import Trainer

    config = _our_config(prompts_per_step=len(problems), group_size=group_size, max_new_tokens=max_new_tokens,
                         steps=warmup + repeats, seed=seed)
    model, tokenizer = _load_policy()
    trainer = Trainer(config, model, tokenizer, engine=engine(model, tokenizer) if engine is not None else None)
    if [p.uid for p in trainer.train_problems] != [p.uid for p in problems]:  # the pool is exactly our problems
        raise RuntimeError("our trainer's training pool differs from the benchmark's problems")
    if threads is not None:
        torch.set_num_threads(threads)
    seconds, history = time_repeats(trainer.step, warmup=0, repeats=warmup + repeats)  # warm-up kept, reported apart
    lengths = [float(m["response_length"]) for m in history]
    return {
        "step_seconds": seconds[warmup:],
        "median_s": median(seconds[warmup:]),
        "engine": type(trainer.engine).__name__,
        "mean_completion_tokens": lengths[warmup:],
        "warmup_step_seconds": seconds[:warmup],
        "threads": torch.get_num_threads(),
    }


# ------------------------------------------------------------------------------ TRL
def _make_reward_func(problems: Sequence[Problem]) -> Callable[..., list[float]]:
    """TRL reward function: 1.0 if the testbed verifier says ``CORRECT`` else 0.0.

    TRL calls it with ``prompts``, ``completions`` (decoded, special tokens
    stripped) and every other dataset column as a list keyword argument; the
    problem is found through the ``problem_index`` column.
    """
    problems = list(problems)

    def testbed_verifier(prompts, completions, problem_index, **kwargs) -> list[float]:
        return [1.0 if verify(problems[int(i)], text).status == CORRECT else 0.0
                for i, text in zip(problem_index, completions, strict=True)]

    return testbed_verifier


def _trl_dataset(problems: Sequence[Problem]):
    """In-memory ``datasets.Dataset``: plain-text ``prompt`` and the ``problem_index`` the reward reads."""
    from datasets import Dataset

    return Dataset.from_dict({
        "prompt": [_prompt(p) for p in problems],
        "problem_index": list(range(len(problems))),
    })


def _checkpointing_field() -> str:
    """Name of the activation-checkpointing switch of ``GRPOConfig`` (TRL's default turns it on).

    transformers 5.x renamed ``gradient_checkpointing`` to ``activation_checkpointing``
    (the old name still works, with a deprecation warning).
    """
    import dataclasses

    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def _trl_args(*, prompts_per_step: int, group_size: int, max_new_tokens: int, steps: int, seed: int) -> dict:
    """Keyword arguments of TRL's ``GRPOConfig`` (all but ``output_dir``); JSON-serialisable."""
    return dict(
        # one optimizer step per generation batch of prompts_per_step x G completions, one pass over it
        per_device_train_batch_size=prompts_per_step * group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        max_steps=steps,
        num_generations=group_size,
        # sampling
        max_completion_length=max_new_tokens,
        temperature=TEMPERATURE,
        top_p=TOP_P,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        use_vllm=False,
        # objective: grpo_no_kl
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        epsilon=CLIP_EPS,
        epsilon_high=CLIP_EPS,
        mask_truncated_completions=False,
        # optimizer
        optim="adamw_torch",
        learning_rate=LEARNING_RATE,
        weight_decay=WEIGHT_DECAY,
        adam_beta1=ADAM_BETAS[0],
        adam_beta2=ADAM_BETAS[1],
        adam_epsilon=ADAM_EPS,
        max_grad_norm=MAX_GRAD_NORM,
        lr_scheduler_type="constant",
        warmup_steps=0,
        # precision / device / memory
        use_cpu=True,
        bf16=False,
        fp16=False,
        **{_checkpointing_field(): False},
        # no logging, saving or evaluation overhead
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        log_completions=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        seed=seed,
    )


class _StepTimer(TrainerCallback):
    """Times each optimizer step of a ``transformers.Trainer`` (see the module docstring).

    Attributes:
        trainer: The ``GRPOTrainer`` (set after it is built); read for completion lengths.
        seconds: Wall time of each step, ``on_step_begin`` to ``on_step_end``.
        lengths: Mean completion length of each step (TRL's own metric), or ``None``.
        threads: ``torch.get_num_threads()`` at the start of each step.
    """

    def __init__(self):
        self.trainer = None
        self.seconds: list[float] = []
        self.lengths: list[float | None] = []
        self.threads: list[int] = []
        self._t0: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.threads.append(torch.get_num_threads())
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self._t0)
        self._t0 = None
        lengths = None
        if self.trainer is not None:  # TRL's internal metric store (never cleared: logging is off)
            lengths = self.trainer._metrics["train"].get("completions/mean_length")
        self.lengths.append(float(lengths[-1]) if lengths else None)


def _build_trl_trainer(problems: Sequence[Problem], *, group_size: int, max_new_tokens: int, steps: int,
                       seed: int, output_dir: str, callbacks: Sequence[Any] = ()):
    """TRL's ``GRPOTrainer`` on a fresh tiny policy, configured as in the module docstring.

    Args:
        problems: The prompts' problems (the dataset holds one row per problem).
        group_size: ``num_generations`` (G).
        max_new_tokens: ``max_completion_length``.
        steps: ``max_steps`` (optimizer steps of ``trainer.train()``).
        seed: TRL's ``seed``.
        output_dir: TRL's ``output_dir`` (nothing is saved there; pass a temporary directory).
        callbacks: Extra ``TrainerCallback`` objects.

    Returns:
        The ``GRPOTrainer``; call ``.train()`` to run ``steps`` steps.
    """
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = _load_policy()
    with _quiet():
        args = GRPOConfig(output_dir=output_dir, **_trl_args(
            prompts_per_step=len(problems), group_size=group_size, max_new_tokens=max_new_tokens,
            steps=steps, seed=seed,
        ))
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=_make_reward_func(problems),
            args=args,
            train_dataset=_trl_dataset(problems),
            processing_class=tokenizer,
            callbacks=list(callbacks),
        )
    trainer.remove_callback(PrinterCallback)  # with tqdm off it prints the end-of-training summary
    return trainer


def _run_trl(problems: list[Problem], *, group_size: int, max_new_tokens: int, warmup: int, repeats: int,
             seed: int, threads: int | None) -> dict:
    """Time ``warmup + repeats`` optimizer steps of TRL's ``GRPOTrainer``; the warm-up ones are dropped."""
    import trl

    timer = _StepTimer()
    with tempfile.TemporaryDirectory(prefix="rlvr_bench_trl_") as output_dir:
        trainer = _build_trl_trainer(problems, group_size=group_size, max_new_tokens=max_new_tokens,
                                     steps=warmup + repeats, seed=seed, output_dir=output_dir, callbacks=[timer])
        timer.trainer = trainer
        if threads is not None:
            torch.set_num_threads(threads)
        with _quiet():
            trainer.train()
    if len(timer.seconds) != warmup + repeats:
        raise RuntimeError(f"TRL ran {len(timer.seconds)} optimizer steps; expected {warmup + repeats}")
    return {
        "step_seconds": timer.seconds[warmup:],
        "median_s": median(timer.seconds[warmup:]),
        "trl_version": trl.__version__,
        "mean_completion_tokens": timer.lengths[warmup:],
        "warmup_step_seconds": timer.seconds[:warmup],
        "threads": timer.threads[-1],
    }


# ------------------------------------------------------------------------------ public
def bench_step_time(*, prompts_per_step: int = 8, group_size: int = 8, max_new_tokens: int = 64,
                    warmup: int = 2, repeats: int = 5, seed: int = 0, engine: EngineFactory | None = None,
                    threads: int | None = None) -> dict:
    """Median wall time of one GRPO step, ours against TRL's ``GRPOTrainer``, on the same work.

    Each side loads its own copy of the tiny policy and runs ``warmup + repeats``
    optimizer steps on the same ``prompts_per_step`` problems with ``group_size``
    completions each; the first ``warmup`` steps are dropped. What is matched and
    what is not: the module docstring and docs/study/bench_step.md. Our side runs first.

    Args:
        prompts_per_step: Problems (groups) per step, >= 1.
        group_size: Completions per problem (G), >= 2 (TRL needs two per group).
        max_new_tokens: Maximum completion length in tokens, >= 1.
        warmup: Steps run first and not reported, >= 0.
        repeats: Timed steps per side, >= 1.
        seed: Seed of both trainers (ours: ``TrainerConfig.seed``; TRL: ``GRPOConfig.seed``), >= 0.
        engine: Factory ``(model, tokenizer) -> engine`` for our side (an object with
            ``generate(prompts, params)``, as `rlvr_lib.rollout.HFEngine`), passed as
            ``Trainer(..., engine=...)``; ``None`` = the Trainer's default engine.
        threads: ``torch.set_num_threads(threads)`` for both sides; ``None`` leaves the
            current setting. The previous thread count is restored on return.

    Returns:
        A JSON-serialisable dict::

            {"ours": {"step_seconds": [...], "median_s": float, "engine": str,
                      "mean_completion_tokens": [...], "warmup_step_seconds": [...], "threads": int},
             "trl": {"step_seconds": [...], "median_s": float, "trl_version": str,
                     "mean_completion_tokens": [...], "warmup_step_seconds": [...], "threads": int},
             "step_time_ratio_vs_trl": ours median / TRL median,
             "settings": {every setting of the run}}

        ``mean_completion_tokens`` is the mean completion length of each timed step.

    Raises:
        ValueError: If an argument is out of range or of the wrong type (the message
            names it and says what is allowed).
    """
    _validate(prompts_per_step=prompts_per_step, group_size=group_size, max_new_tokens=max_new_tokens,
              warmup=warmup, repeats=repeats, seed=seed, engine=engine, threads=threads)
    import trl

    problems = _problems(prompts_per_step)
    steps = warmup + repeats
    previous_threads = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        ours = _run_ours(problems, group_size=group_size, max_new_tokens=max_new_tokens, warmup=warmup,
                         repeats=repeats, seed=seed, engine=engine, threads=threads)
        theirs = _run_trl(problems, group_size=group_size, max_new_tokens=max_new_tokens, warmup=warmup,
                          repeats=repeats, seed=seed, threads=threads)
    finally:
        torch.set_num_threads(previous_threads)

    ratio = ours["median_s"] / theirs["median_s"] if theirs["median_s"] > 0 else math.inf
    our_config = _our_config(prompts_per_step=prompts_per_step, group_size=group_size,
                             max_new_tokens=max_new_tokens, steps=steps, seed=seed)
    settings = {
        "prompts_per_step": prompts_per_step,
        "group_size": group_size,
        "max_new_tokens": max_new_tokens,
        "warmup": warmup,
        "repeats": repeats,
        "seed": seed,
        "threads": threads,
        "engine_factory": None if engine is None else getattr(engine, "__qualname__", type(engine).__qualname__),
        "policy": "tiny (rlvr_lib.policy.load_policy(None)), a fresh copy per side",
        "device": "cpu",
        "dtype": "float32",
        "train_family": TRAIN_FAMILY,
        "problem_uids": [p.uid for p in problems],
        "prompt": "problem.prompt_with(None), plain text, no chat template",
        "temperature": TEMPERATURE,
        "top_p": TOP_P,
        "top_k": None,
        "reward": "1.0 if rlvr_lib.tasks.arithmetic.verify(problem, completion).status == CORRECT else 0.0",
        "optimizer": "AdamW",
        "lr": LEARNING_RATE,
        "lr_schedule": "constant",
        "weight_decay": WEIGHT_DECAY,
        "adam_betas": list(ADAM_BETAS),
        "adam_eps": ADAM_EPS,
        "max_grad_norm": MAX_GRAD_NORM,
        "kl_coef": 0.0,
        "clip_eps_low": CLIP_EPS,
        "clip_eps_high": CLIP_EPS,
        "loss_aggregation": "per-sequence token mean, then batch mean",
        "advantages": "group mean/std normalised",
        "optimizer_steps_per_generation_batch": 1,
        "ours_method": OUR_METHOD,
        "ours_config": our_config.to_dict(),
        "trl_version": trl.__version__,
        "trl_args": _trl_args(prompts_per_step=prompts_per_step, group_size=group_size,
                              max_new_tokens=max_new_tokens, steps=steps, seed=seed),
    }
    return {"ours": ours, "trl": theirs, "step_time_ratio_vs_trl": ratio, "settings": settings}
