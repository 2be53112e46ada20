"""The RL loop: GRPO with plug-in hooks (see `rlvr_lib.methods.base.Method`); it never names a paper.

One step (`Trainer.step`):

1. draw ``prompts_per_step`` problems of the config's task (a function of seed and step);
2. hints, then G rollouts per problem, split across the method's weight samples (``perturbed(model, k)``);
3. verify and reward; if the method filters groups (``keep_groups``), refill from fresh prompts; advantages;
4. ``before_update``, then ``inner_epochs`` shuffled passes over ``minibatches``; per weight sample k of a
   minibatch, inside ``perturbed(model, k, train=True)``, with ``(n, T)`` per-token tensors:

       loss = aggregate(surrogate(logp, old_logp, A) + kl_coef * anchor(logp, ref_logp), mask) + extra_loss

   then clip the gradient, one optimizer step, one lr-schedule step (`rlvr_lib.schedules`);
5. log the diagnostics.

Everything random derives from ``(seed, step)``, so a resumed run replays the uninterrupted one on CPU.
Checkpoints are atomic with a sha256; ``checkpoint.prev.pt`` is the fallback. Details: docs/library/trainer.md.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from rlvr_lib.algos import aggregate_loss
from rlvr_lib.distributed import init_world, local_rows, weighted_mean
from rlvr_lib.eval.diagnostics import zero_advantage_fraction
from rlvr_lib.eval.policy_eval import evaluate_policy
from rlvr_lib.files import atomic_file
from rlvr_lib.lora import apply_lora, base_model
from rlvr_lib.methods.base import Method, StepBatch
from rlvr_lib.rewards.callables import call_reward_func, combine_rewards, resolve_reward_func, reward_func_name
from rlvr_lib.trainer_config import TrainerConfig
from rlvr_lib.rollout import ENGINES, Rollouts, SamplingParams, build_engine, sequence_logprobs
from rlvr_lib.schedules import lr_scheduler
from rlvr_lib.tasks import CORRECT, MALFORMED, TIMEOUT, UNVERIFIED, Verdict, get_task

logger = logging.getLogger(__name__)


TIMING_PREFIX = "time_"
"""History columns that measure wall-clock time (``time_rollout``, ``time_step``, ...), not the run."""


TOKEN_MEAN_STATS = frozenset({"entropy", "kl", "clip_frac_low", "clip_frac_high", "approx_kl", "ratio_mean",
                              "kl_cov_frac", "abs_log_ratio", "clip_cov_frac"})
"""Loss stats that are means over a minibatch's completion tokens (the trainer's ``entropy`` and ``kl``, the
policy losses' of `rlvr_lib.algos`; a method adds its own in ``Method.token_mean_stats``): with several processes,
or a sharded update's chunks, each is reduced as the token sum over the token count of the whole minibatch."""


def untimed(history: list[dict]) -> list[dict]:
    """``history`` without its wall-clock columns: what two runs of one config on one machine agree on bit for bit."""
    return [{k: v for k, v in row.items() if not k.startswith(TIMING_PREFIX)} for row in history]


def compute_spent(config: TrainerConfig, history: list[dict]) -> dict[str, int]:
    """Completions sampled and optimizer steps taken by a run, from its config and history: equal-compute accounting.

    Per step: ``prompts_per_step * group_size`` completions (or ``dynamic_completions``) and
    ``inner_epochs * minibatches`` optimizer steps (or ``optimizer_steps``). Raises ValueError on a step that
    filtered groups without ``dynamic_completions``.
    """
    completions = steps = 0
    for row in history:
        if "dynamic_kept_groups" in row and "dynamic_completions" not in row:
            raise ValueError(f"step {row.get('step')}: dynamic sampling without dynamic_completions in the history "
                             "(a record made before the trainer logged it): the step's completions are not known exactly")
        completions += int(row.get("dynamic_completions", config.prompts_per_step * config.group_size))
        steps += int(row.get("optimizer_steps", config.inner_epochs * config.minibatches))
    return {"completions": completions, "optimizer_steps": steps}


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


class Trainer:
    """Runs one method from a config.

    Args:
        config: The run's settings.
        model, tokenizer: The initial policy; loaded from ``config.policy`` when omitted.
        checkpoint_dir: Where ``checkpoint.pt`` (and ``checkpoint.prev.pt``) go; a checkpoint of the same config
            there is resumed from.
        engine: Rollout engine over ``model`` (default: from ``config.engine``).
        log_dir: The run folder for the periodic evaluations (``eval/step_<k>.json``) and the file-writing trackers
            (``logs/``) (default: ``checkpoint_dir``).

    With ``config.lora``, ``model`` gets LoRA adapters (in place: peft injects them into its modules) and
    ``self.model`` is the `peft.PeftModel` around it; only the adapters train (`rlvr_lib.lora`).
    """

    def __init__(self, config: TrainerConfig, model=None, tokenizer=None, *, checkpoint_dir=None, engine=None,
                 log_dir=None):
        from rlvr_lib.methods import build_method
        from rlvr_lib.policy import load_policy

        self._started = time.perf_counter()
        self.earlier_s = 0.0  # seconds earlier processes spent on this run up to its checkpoint (`load_checkpoint`)
        self.resumed_at_step: int | None = None
        self.config = config
        self.world = init_world()  # one process unless started by a launcher (rlvr_lib.distributed)
        if model is None:
            model, tokenizer = load_policy(config.policy, device=self.world.device)
        if config.lora is not None:
            if self.world.sharded:
                raise ValueError("lora cannot run on a sharded (FSDP) launch: train adapters on one process or "
                                 "DDP-style processes (the adapters are small)")
            model = apply_lora(model, config.lora, seed=config.seed)
        self.model, self.tokenizer = model, tokenizer
        self.method: Method = build_method(config)
        if self.world.sharded:
            check_shardable(config)
        self.world.broadcast_parameters(model)  # every process starts from rank 0's weights
        self.reference = None  # with lora: the model with its adapters off (`_reference_logprobs`), no copy
        if config.kl_coef > 0 and config.lora is None:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        if self.world.sharded:
            self.world.shard_model(model)
            if self.reference is not None:
                self.world.shard_model(self.reference)
        self.optimizer = self.method.make_optimizer(model)
        self.scheduler = lr_scheduler(self.optimizer, config)  # None: the optimizer's lr throughout
        self.engine = engine or build_engine(config.engine, model, tokenizer, batch_size=config.rollout_batch_size)
        self.task = get_task(config.task)
        pool_size = min(config.train_pool_size, self.task.family_capacity(config.train_family))
        self.train_problems = self.task.family_problems(config.train_family, pool_size, seed=0)
        self.step_count = 0
        self.history: list[dict] = []
        self._warned_unverified = False
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.log_dir = Path(log_dir) if log_dir else self.checkpoint_dir
        # reward functions (config.reward_funcs), named in the logs; a repeated name gets its position appended
        self.reward_funcs = [resolve_reward_func(spec) for spec in config.reward_funcs]
        names = [reward_func_name(f) for f in self.reward_funcs]
        self.reward_func_names = [n if names.count(n) == 1 else f"{n}_{i}" for i, n in enumerate(names)]
        self._step_rewards: list[np.ndarray] = []  # this step's per-function rewards, per sampling round
        self.evaluations: list[dict] = []  # the periodic evaluations of this process (`config.eval_every`)
        self._tracking = None  # started on the first step that logs (`config.report_to`)
        if config.eval_every and self.world.sharded:
            raise ValueError("eval_every cannot run on a sharded (FSDP) launch: the evaluation samples from the "
                             "whole model on one process; evaluate the saved model afterwards (python -m rlvr_lib "
                             "evaluate)")
        if self.checkpoint_dir and self.world.is_main:
            _remove_stale_temps(self.checkpoint_dir / "checkpoint.pt")  # a run that resumes and has no step left
        if self.checkpoint_dir and self._checkpoint_seen_by_every_process(self.checkpoint_dir / "checkpoint.pt"):
            self.load_checkpoint(self.checkpoint_dir / "checkpoint.pt")

    def _checkpoint_seen_by_every_process(self, path: Path) -> bool:
        """Whether to resume from ``path``: every process must see the same answer, else their weights would part.

        Rank 0 writes checkpoints; on several machines without a shared file system the others never see them.
        Raises ValueError naming the ranks that do and do not see ``path``."""
        seen = self.world.gather(path.exists())  # one process: [exists], no collective
        if any(seen) and not all(seen):
            have = [r for r, s in enumerate(seen) if s]
            lack = [r for r, s in enumerate(seen) if not s]
            raise ValueError(f"checkpoint {path} is seen by ranks {have} but not by ranks {lack}: put checkpoint_dir "
                             "on a file system every process shares, or remove the checkpoint to start over")
        return seen[0]

    # ----------------------------------------------------------------- one step
    def _rng(self, step: int, stream: int, round_: int = 0) -> np.random.Generator:
        # Round 0 keeps the original three-part key, so runs without refills are unchanged.
        key = [self.config.seed, step, stream] if round_ == 0 else [self.config.seed, step, stream, round_]
        return np.random.default_rng(key)

    def _rollout(self, problems, plan, step: int, round_: int = 0) -> dict:
        """G rollouts per problem with the hints of ``plan``, slice k of every group from weight sample k."""
        cfg, G = self.config, self.config.group_size
        K = self.method.weight_samples()
        if G % K:
            raise ValueError(f"group_size={G} is not divisible by the method's weight samples ({K})")
        temperature = self.method.sampling_temperature(step)
        parts, order, weight_index = [], [], []
        for k in range(K):  # slice k of every group comes from weight sample k
            rows = [(i, j) for i in range(len(problems)) for j in range(k * G // K, (k + 1) * G // K)]
            prompts = [problems[i].prompt_with(plan[i][j][1]) for i, j in rows]
            params = SamplingParams(
                n=1,
                temperature=temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                seed=self.world.sampling_seed(int(self._rng(step, 2 + k, round_).integers(2**31))),
            )
            with self._weight_sample(k, train=False):
                parts.append(self.engine.generate(prompts, params))
            order += [i * G + j for i, j in rows]
            weight_index += [k] * len(rows)
        back = torch.tensor(np.argsort(order))  # back to prompt-major
        rollouts = (Rollouts.concat(parts) if K > 1 else parts[0]).select(back)
        flat = [plan[i][j] for i in range(len(problems)) for j in range(G)]
        hints = [c for _, c in flat]
        group_index = torch.arange(len(problems)).repeat_interleave(G)
        if all(c is None for c in hints):
            plain_ids, plain_mask = rollouts.prompt_ids, rollouts.prompt_mask
        else:
            plain_ids, plain_mask = self.engine.encode_prompts([problems[g].prompt for g in group_index.tolist()])
        return dict(
            problems=problems,
            group_index=group_index,
            hint_index=torch.tensor([ci for ci, _ in flat], dtype=torch.long),
            hints=hints,
            rollouts=rollouts,
            weight_index=torch.tensor(weight_index, dtype=torch.long)[back],
            plain_prompt_ids=plain_ids,
            plain_prompt_mask=plain_mask,
        )

    def _sample(self, problems, step: int, round_: int) -> tuple[StepBatch, float]:
        """Hints -> roll out -> verify -> reward for this process's share of ``problems``, gathered; and rollout seconds."""
        plan = self.method.hints(problems, self.config.group_size, self._rng(step, 1, round_))
        mine = self.world.shard(len(problems))
        batch, seconds = None, 0.0
        with self.world.gathered(self.model):  # sharded: every process enters, whatever its share
            if len(mine):
                batch, seconds = self._sample_share([problems[i] for i in mine], [plan[i] for i in mine], step,
                                                    round_)
            elif self.world.sharded and self.method.reads_parameters:
                for k in range(self.method.weight_samples()):  # the weight samples' re-gathers are collectives
                    with self._weight_sample(k, train=False):
                        pass
        return self.world.gather_batch(batch), seconds

    def _weight_sample(self, k: int, *, train: bool):
        """``method.perturbed(model, k, train)``, made visible to a sharded model (`World.sampled_weights`: for
        rollouts, inside `World.gathered`; for gradients, to FSDP's forward)."""
        scope = self.method.perturbed(self.model, k, train=train)
        if not self.method.reads_parameters:  # perturbed writes no weight: nothing to re-gather
            return scope
        return self.world.sampled_weights(self.model, scope, gathered=not train)

    def _sample_share(self, problems, plan, step: int, round_: int) -> tuple[StepBatch, float]:
        """`_sample` of this process's groups (``problems`` and their ``plan``): the batch and its rollout seconds."""
        t0 = time.perf_counter()
        fields = self._rollout(problems, plan, step, round_)
        seconds = time.perf_counter() - t0
        verify = self.task.verify if self.method.uses_verifier_reward else self._verify_or_record
        verdicts = [verify(problems[g], text) for g, text in zip(fields["group_index"].tolist(), fields["rollouts"].texts)]
        batch = StepBatch(**fields, verdicts=verdicts)
        batch.rewards = self._rewards(batch)  # inside `gathered`
        if self.method.credits_hint_free:  # before the reference and the update read the prompts
            batch = self._on_hint_free_prompts(batch, self.method.sampling_temperature(step))
        return batch, seconds

    def _rewards(self, batch: StepBatch) -> torch.Tensor:
        """``(N,)`` float rewards: the method's (``use_verifier``, times ``verifier_weight``) and the reward functions'
        (times ``reward_weights``), summed as TRL sums them (`rlvr_lib.rewards.callables.combine_rewards`: a
        ``None`` adds nothing). Without reward functions and at weight 1, the method's rewards unchanged."""
        cfg = self.config
        model = self.world.unsharded(self.model)
        if not self.reward_funcs and cfg.use_verifier and cfg.verifier_weight == 1.0:
            return self.method.rewards(batch, model).float()
        columns, weights, names = [], [], []
        if cfg.use_verifier:
            columns.append(self.method.rewards(batch, model).double().cpu().numpy())
            weights.append(cfg.verifier_weight)
            names.append("verifier")
        if self.reward_funcs:
            kwargs = reward_columns(batch)
            for func, name, weight in zip(self.reward_funcs, self.reward_func_names,
                                          cfg.reward_weights or [1.0] * len(self.reward_funcs)):
                columns.append(call_reward_func(func, name=name, **kwargs))
                weights.append(weight)
                names.append(name)
        per_func = np.stack(columns, axis=1)
        self._step_rewards.append(per_func[:, -len(self.reward_funcs):] if self.reward_funcs else per_func[:, :0])
        return torch.from_numpy(combine_rewards(per_func, weights, names)).float()

    def _verify_or_record(self, problem, completion) -> Verdict:
        """The verifier's verdict, or an ``"unverified"`` one (reward NaN) if it raises and the reward does not read it."""
        try:
            return self.task.verify(problem, completion)
        except Exception as err:  # noqa: BLE001 - any verifier failure; KeyboardInterrupt etc. still propagate
            reason = f"the verifier raised {type(err).__name__}: {err}"
            if not self._warned_unverified:
                self._warned_unverified = True
                warnings.warn(f"{reason} (problem {problem.uid!r}); method {self.method.name!r} does not use the "
                              "verifier's reward, so training goes on and such completions are logged as "
                              "'unverified' (left out of accuracy, counted in unverified_rate); warned once",
                              RuntimeWarning, stacklevel=2)
            return Verdict(float("nan"), UNVERIFIED, None, reason)

    def _collect(self, step: int, rng: np.random.Generator) -> tuple[StepBatch, list[StepBatch], dict, float]:
        """The step's batch: roll out -> verify -> reward -> keep, refilling dropped groups.

        Refill round r draws up to ``prompts_per_step`` unused problems from the ``(seed, step, r)`` stream, until
        ``prompts_per_step`` groups are kept or ``method.refill_rounds()`` rounds were spent; with none kept, round 0's.

        Returns (batch without advantages, every round's batch, dynamic-sampling metrics or ``{}``, rollout seconds).
        """
        want, pool = self.config.prompts_per_step, self.train_problems
        self._step_rewards = []  # the reward functions' columns of this step's rounds (logged by `step`)
        drawn = rng.choice(len(pool), want, replace=False)
        batch, t_rollout = self._sample([pool[i] for i in drawn], step, 0)
        keep = self.method.keep_groups(batch)
        if keep is None:  # the method does not filter: plain GRPO sampling
            return batch, [batch], {}, t_rollout

        sampled, kept, used = [batch], [], set(drawn.tolist())
        n_kept = n_dropped = rounds = 0
        cap = self.method.refill_rounds()
        while True:
            keep = torch.as_tensor(keep, dtype=torch.bool)
            if keep.shape != (len(batch.problems),):
                raise ValueError(f"keep_groups returned shape {tuple(keep.shape)}; expected ({len(batch.problems)},)")
            kept_ids = keep.nonzero().flatten()[: want - n_kept]
            if len(kept_ids):
                kept.append(batch.select_groups(kept_ids))
            n_kept += len(kept_ids)
            n_dropped += int((~keep).sum())
            fresh = np.setdiff1d(np.arange(len(pool)), np.fromiter(used, dtype=np.int64))
            if n_kept >= want or rounds >= cap or fresh.size == 0:
                break
            rounds += 1
            drawn = self._rng(step, 0, rounds).choice(fresh, min(want, fresh.size), replace=False)
            used.update(drawn.tolist())
            batch, seconds = self._sample([pool[i] for i in drawn], step, rounds)
            sampled.append(batch)
            t_rollout += seconds
            keep = self.method.keep_groups(batch)

        if n_kept < want:
            why = f"the cap of {cap} refill rounds" if rounds >= cap else "the end of the training pool"
            what = f"training on those {n_kept} groups" if n_kept else "training on round 0's groups unfiltered"
            logger.warning(
                "step %d: dynamic sampling kept %d of %d groups (%d dropped) before reaching %s; %s",
                step, n_kept, want, n_dropped, why, what,
            )
        # every round's rollouts, dropped groups included: the step's sampling cost (`compute_spent`)
        stats = {"dynamic_refill_rounds": rounds, "dynamic_dropped_groups": n_dropped, "dynamic_kept_groups": n_kept,
                 "dynamic_completions": sum(len(b) for b in sampled)}
        return (StepBatch.concat(kept) if kept else sampled[0]), sampled, stats, t_rollout

    def step(self) -> dict:
        cfg, step = self.config, self.step_count
        t0 = time.perf_counter()
        rng = self._rng(step, 0)
        self.method.on_step_start(step)
        temperature = self.method.sampling_temperature(step)
        batch, sampled, sampling_stats, t_rollout = self._collect(step, rng)  # roll out -> verify -> reward -> keep
        batch.advantages = self.method.advantages(batch).float()
        t_reward = time.perf_counter()

        # The rows this process trains on (all of them on one process) and where each row of batch is among them.
        local, local_index = self.world.split_rows(batch)
        if cfg.kl_coef > 0:
            local.ref_logprobs = self._reference_logprobs(local.rollouts, temperature)
        stats = self._update(batch, local, local_index, temperature, rng)
        t_end = time.perf_counter()

        # What was sampled describes the policy; with dynamic sampling the trained (kept) subset is logged as kept_*.
        metrics = {
            "step": step,
            **_rollout_metrics(sampled, self.task.strategies),
            "advantage_abs_mean": float(batch.advantages.abs().mean()),
            "temperature": temperature,
            **sampling_stats,
            **stats,
            "time_rollout": t_rollout,
            "time_reward": t_reward - t0 - t_rollout,
            "time_update": t_end - t_reward,
            "time_step": t_end - t0,
        }
        if sampling_stats:
            kept = _rollout_metrics([batch])
            metrics.update({f"kept_{k}": kept[k] for k in ("reward_mean", "accuracy", "zero_adv_frac")})
        if self.reward_funcs:  # each function's mean reward over the step's samples (its None left out)
            per_func = np.concatenate(self._step_rewards)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a function that rewarded nothing: NaN
                means = np.nanmean(per_func, axis=0)
            metrics.update({f"reward_fn_{n}": float(m) for n, m in zip(self.reward_func_names, means)})
        self.method.on_step_end(step, metrics)
        metrics = self.world.merge_metrics(metrics, rows=len(local), summed=self.method.summed_metrics)
        self.history.append(metrics)
        self.step_count += 1
        self._log(metrics, self.step_count)
        if cfg.eval_every and self.step_count % cfg.eval_every == 0:
            self.evaluate()
        if cfg.checkpoint_every and self.checkpoint_dir and self.step_count % cfg.checkpoint_every == 0:
            self.save_checkpoint(self.checkpoint_dir / "checkpoint.pt")
        return metrics

    def _reference_logprobs(self, ro: Rollouts, temperature: float) -> torch.Tensor:
        """``(n, T)`` log-probs of the completion tokens under the reference model: the initial weights' copy, or
        with ``config.lora`` the model with its adapters off (`rlvr_lib.lora.base_model`)."""
        if self.reference is not None:
            model, scope = self.reference, contextlib.nullcontext()
        else:
            model, scope = self.model, base_model(self.model)
        with torch.no_grad(), scope:
            logprobs, _ = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                            ro.completion_mask, temperature=temperature)
        return logprobs

    def _on_hint_free_prompts(self, batch: StepBatch, temperature: float) -> StepBatch:
        """``batch`` with every row on its hint-free prompt, behaviour log-probs re-scored there
        (`Method.credits_hint_free`); rows without a hint are unchanged."""
        hinted = (batch.hint_index >= 0).nonzero().flatten()
        if not len(hinted):
            return batch
        if self.method.reads_parameters or self.method.weight_samples() > 1 or self.world.sharded:
            raise ValueError(f"method {self.method.name!r} credits hinted rollouts to the hint-free prompt, which "
                             "needs rollouts at the model's own weights (no weight samples, no hook that reads the "
                             "parameters) and an unsharded model: the behaviour log-probs are re-scored with the "
                             "model as it is")
        ro = batch.rollouts
        with torch.no_grad():
            lp, _ = sequence_logprobs(self.model, batch.plain_prompt_ids[hinted], batch.plain_prompt_mask[hinted],
                                      ro.completion_ids[hinted], ro.completion_mask[hinted], temperature=temperature)
        logprobs = ro.logprobs.clone()
        logprobs[hinted] = lp.to(logprobs.dtype) * ro.completion_mask[hinted].to(logprobs.dtype)
        batch.rollouts = dataclasses.replace(ro, prompt_ids=batch.plain_prompt_ids, prompt_mask=batch.plain_prompt_mask,
                                             logprobs=logprobs)
        return batch

    def _update(self, batch: StepBatch, local: StepBatch, local_index: torch.Tensor | None, temperature: float,
                rng: np.random.Generator) -> dict:
        """``inner_epochs`` shuffled passes of ``minibatches`` optimizer steps; returns the mean of each stat.

        Per minibatch: its gradients (`minibatch_backward`) on this process's rows, one clip, one ``optimizer.step()``,
        one schedule step (the lr logged as ``lr``).
        """
        cfg = self.config
        self.method.before_update(local, self.model)
        self.model.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        lengths = batch.rollouts.completion_mask.sum(1)  # tokens per row of the whole batch: the shares' denominators
        sums: dict[str, list[float]] = {}
        n_steps = 0
        for _ in range(cfg.inner_epochs):
            perm = torch.from_numpy(rng.permutation(len(batch))) if cfg.minibatches > 1 else torch.arange(len(batch))
            # tensor_split always gives `minibatches` pieces (chunk may give fewer when dynamic sampling kept
            # fewer rows); they equal chunk's when the count divides the rows.
            for rows in torch.tensor_split(perm, cfg.minibatches):
                if len(rows) == 0:
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                for stats in self.minibatch_backward(batch, local, local_index, rows, lengths, temperature, params):
                    for key, value in stats.items():
                        sums.setdefault(key, []).append(value)
                grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                grad_norm = getattr(grad_norm, "full_tensor", lambda: grad_norm)()  # sharded: a DTensor
                self.optimizer.step()
                sums.setdefault("grad_norm", []).append(float(grad_norm))
                if self.scheduler is not None:  # logged only under a schedule: unscheduled histories are unchanged
                    sums.setdefault("lr", []).append(float(self.optimizer.param_groups[0]["lr"]))
                    self.scheduler.step()
                n_steps += 1
        self.model.eval()
        out = {k: float(np.mean(v)) for k, v in sums.items()}
        if n_steps != cfg.inner_epochs * cfg.minibatches:
            out["optimizer_steps"] = n_steps
        return out

    def _loss(self, batch: StepBatch, temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
        """Scalar loss of a (mini)batch under the current weights, and its stats (diagnostics next to the loss)."""
        cfg, ro = self.config, batch.rollouts
        mask = ro.completion_mask.float()
        logp, entropy = sequence_logprobs(
            self.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
            temperature=temperature, with_entropy=True,
        )
        per_token, pg_stats = self.method.policy_loss(batch, logp, entropy, mask)
        stats = {k: float(v) for k, v in pg_stats.items()}
        if batch.ref_logprobs is not None:
            kl, anchor_stats = self.method.anchor(batch, logp, entropy.detach(), mask)
            per_token = per_token + cfg.kl_coef * kl
            stats["kl"] = _masked_mean(kl.detach(), mask)
            stats.update({k: float(v) for k, v in anchor_stats.items()})
        normalizer = (cfg.loss_normalizer or float(cfg.max_new_tokens)) if cfg.loss_agg == "seq_mean_token_sum_norm" \
            else None
        loss = aggregate_loss(per_token, mask, cfg.loss_agg, normalizer=normalizer)
        extra, extra_stats = self.method.extra_loss(batch, self.model, logp, entropy, mask)
        loss = loss + extra
        stats.update({"loss": float(loss.detach()), "entropy": _masked_mean(entropy.detach(), mask)})
        stats.update({k: float(v) for k, v in extra_stats.items()})
        return loss, stats

    def minibatch_backward(self, batch: StepBatch, local: StepBatch, local_index: torch.Tensor | None,
                           rows: torch.Tensor, lengths: torch.Tensor, temperature: float,
                           params: list[torch.nn.Parameter]) -> list[dict[str, float]]:
        """Gradients of the minibatch ``rows`` (row ids of ``batch``), accumulated into ``params``; its stats.

        Per weight sample k, forward, loss and backward inside ``method.perturbed(model, k, train=True)`` on this
        process's rows, weighted by their share of the minibatch (rows, or tokens for ``token_mean``), so the summed
        gradients are the whole minibatch's. Returns per weight sample its stats averaged over the processes (token
        means by their token counts, the others by those shares: `_stat_weights`).
        """
        minibatch = local.select(local_rows(rows, local_index))
        samples = batch.weight_index[rows].unique().tolist()
        records = []  # (share of sample k's rows, stats) per weight sample
        for k in samples:
            part = minibatch if len(samples) == 1 else minibatch.select(minibatch.weight_index == k)
            sample_rows = rows if len(samples) == 1 else rows[batch.weight_index[rows] == k]
            stats = {}
            with self._weight_sample(k, train=True), self.world.summed_gradients(params):
                if self.world.sharded:
                    stats = self._chunked_backward(part, rows, lengths, temperature)
                elif len(part):  # another process may hold all of this sample's rows
                    loss, stats = self._loss(part, temperature)
                    if len(samples) > 1 or self.world.distributed:
                        loss = loss * self._share(part, rows, lengths)
                    loss.backward()
            records.append((self._stat_weights(part, self._share(part, sample_rows, lengths), stats), stats))
        return self.world.weighted_means(records)

    def _chunked_backward(self, part: StepBatch, rows: torch.Tensor, lengths: torch.Tensor,
                          temperature: float) -> dict[str, float]:
        """Loss and backward of ``part`` in chunks of ``rollout_batch_size`` rows, each weighted by its share of
        ``rows`` (sharded world); returns the chunks' stats averaged with those shares (token means: by tokens).
        """
        chunks = torch.arange(len(part)).split(self.config.rollout_batch_size)
        weighted = []
        for chunk in chunks:
            piece = part if len(chunks) == 1 else part.select(chunk)
            loss, stats = self._loss(piece, temperature)
            share = self._share(piece, rows, lengths)
            (loss * share).backward()
            weighted.append((self._stat_weights(piece, share, stats), stats))
        return weighted_mean(weighted)

    def _stat_weights(self, part: StepBatch, share: float, stats: dict[str, float]) -> dict[str, float]:
        """Per key of ``part``'s ``stats``, its weight when reduced with other processes' or chunks' (`weighted_mean`):
        ``part``'s completion-token count for a token mean (`TOKEN_MEAN_STATS`, ``method.token_mean_stats``), so
        the result is the token sum over the token count; ``share`` (its share of the loss) for any other."""
        tokens = float(part.rollouts.completion_mask.sum())
        token_means = TOKEN_MEAN_STATS | self.method.token_mean_stats
        return {key: tokens if key in token_means else share for key in stats}

    def _share(self, part: StepBatch, whole: torch.Tensor, lengths: torch.Tensor) -> float:
        """``part``'s weight in the loss of the rows ``whole``: its share of tokens for ``token_mean``, else of rows."""
        if self.config.loss_agg == "token_mean":
            return float(part.rollouts.completion_mask.sum()) / float(lengths[whole].sum().clamp(min=1))
        return len(part) / len(whole)

    # ----------------------------------------------------------------- logging and evaluation
    def _log(self, values: dict, step: int) -> None:
        """Send ``values`` to the trackers of ``config.report_to`` (main process; started on first use) at ``step``,
        the number of steps done (TensorBoard's global step: 1 after the first step)."""
        if not self.config.report_to or not self.world.is_main:
            return
        if self._tracking is None:
            from rlvr_lib.tracking import Tracking, build_trackers

            logs = None if self.log_dir is None else self.log_dir / "logs"
            name = self.log_dir.name if self.log_dir is not None else self.method.name
            self._tracking = Tracking(build_trackers(self.config.report_to, name, logs))
            self._tracking.store_config(self.config.to_dict())
        self._tracking.log(values, step)

    def close_trackers(self) -> None:
        """Finish the trackers (flush and close their files); `train` calls it at its end."""
        if self._tracking is not None:
            self._tracking.finish()
            self._tracking = None

    def evaluate(self) -> dict | None:
        """Evaluate the policy now with ``config.eval_spec`` (`rlvr_lib.eval.evaluate_policy`) on the main process.

        The record ``{"step", "spec", "time_s", "families", "average"}`` (``step``: steps done) is appended to
        ``evaluations``, written to ``<log_dir>/eval/step_<step>.json`` when there is a run folder, and logged to
        the trackers as ``eval/pass@<k>``, ``eval/<metric>`` (the average) and ``eval/<family>/pass@1``.
        Returns it (``None`` on other processes). The evaluation samples with its own seed (``spec.seed``), so
        training after it is the same as without it.
        """
        spec = self.config.eval_spec
        if spec is None:
            raise ValueError("Trainer.evaluate needs TrainerConfig.eval_spec (an rlvr_lib.eval.EvalSpec)")
        if not self.world.is_main:
            return None
        t0 = time.perf_counter()
        self.model.eval()
        result = evaluate_policy(self.engine, spec)
        record = {"step": self.step_count, "spec": spec.to_dict(), "time_s": time.perf_counter() - t0,
                  **_nan_to_none_deep(result)}
        self.evaluations.append(record)
        if self.log_dir is not None:
            path = self.log_dir / "eval" / f"step_{self.step_count}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(path, "w") as f:
                f.write(json.dumps(record, indent=1, allow_nan=False) + "\n")
        self._log(eval_scalars(result), self.step_count)
        return record

    # ----------------------------------------------------------------- the loop
    def train(self, *, progress: bool = True) -> list[dict]:
        """Run until ``config.steps``; returns the metric history (one dict per step).

        ``progress``: a tqdm bar with each step's reward, KL (with a reference model) and entropy; shown on the main
        process, and only on a terminal (or in a notebook).
        """
        bar = tqdm(total=self.config.steps, initial=self.step_count, desc=self.method.name,
                   disable=True if not progress or not self.world.is_main else None)  # None: off without a TTY
        try:
            while self.step_count < self.config.steps:
                m = self.step()
                bar.update(1)
                shown = {"reward": m["reward_mean"], "kl": m.get("kl"), "ent": m["entropy"]}
                bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items() if v is not None})
        finally:
            bar.close()
            self.close_trackers()
        return self.history

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: str | Path) -> None:
        """Atomically write weights, optimizer, lr schedule, method state, step and history to ``path``.

        Ends with a sha256; the replaced checkpoint is kept as ``<stem>.prev<suffix>``. Every process calls it; rank 0
        writes. Raises OSError naming the file when the write fails (``path`` left as it was).
        """
        model_state, optimizer_state = self.world.full_state_dict(self.model, self.optimizer)  # sharded: collective
        if not self.world.is_main:
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        prev = previous_checkpoint(path)
        _remove_stale_temps(path)
        state = {
            "config": self.config.to_dict(),
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "method": self.method.state_dict(),
            "step": self.step_count,
            "history": self.history,
            "elapsed_s": self.elapsed_s,
        }
        if self.world.sharded:  # its optimizer state is keyed by parameter name, an unsharded one's by position
            state["sharded"] = True
        if path.exists():
            try:
                read_checkpoint(path, load=False)
            except CheckpointError as bad:  # keep the good previous one rather than replace it by a bad file
                logger.warning("not keeping %s as the previous checkpoint: %s", path, bad)
            else:
                _keep_copy(path, prev)
        with atomic_file(path, "wb") as f:
            writer = _HashingWriter(f)
            try:
                torch.save(state, writer)
            except Exception:
                if writer.error is not None:  # torch's end-of-file step hides a failed write (disk full) behind
                    raise writer.error  # its own RuntimeError: raise the write's OSError, which names the cause
                raise
            f.write(_TRAILER_MAGIC + writer.sha256.digest())

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from the checkpoint ``path``, or (with a warning) from its previous one if ``path`` is damaged.

        Raises CheckpointError when there is no sound checkpoint; ValueError when it was written by a different config.
        """
        path = Path(path)
        try:
            state = read_checkpoint(path)
        except CheckpointError as bad:
            prev = previous_checkpoint(path)
            if not prev.exists():
                raise CheckpointError(f"{bad}; there is no previous checkpoint {prev} to resume from: "
                                      f"delete {path} to start over") from bad
            try:
                state = read_checkpoint(prev)
            except CheckpointError as worse:  # no warning first: the error alone says it all
                raise CheckpointError(f"{bad}; and the previous checkpoint is unusable too: {worse}; "
                                      f"delete {path} and {prev} to start over") from worse
            warnings.warn(f"{bad}; resuming from the previous checkpoint {prev} instead", RuntimeWarning,
                          stacklevel=2)
            path = prev
        if state["config"] != self.config.to_dict():
            raise ValueError(f"checkpoint {path} was written by a different config; remove it or change checkpoint_dir")
        if state.get("sharded", False) != self.world.sharded:
            kind = "a sharded (FSDP)" if state.get("sharded", False) else "an unsharded"
            raise ValueError(f"checkpoint {path} was written by {kind} run; resume it with the same kind of launch")
        self.world.load_full_state_dict(self.model, state["model"], self.optimizer, state["optimizer"])
        if self.scheduler is not None:  # the config (checked equal above) says whether there is one
            self.scheduler.load_state_dict(state["scheduler"])
        self.method.load_state_dict(state["method"])
        self.step_count, self.history = state["step"], state["history"]
        # Checkpoints written before they carried elapsed_s: the restored steps' own time is the best account left.
        self.earlier_s = state.get("elapsed_s", sum(m.get("time_step") or 0.0 for m in self.history))
        self.resumed_at_step = self.step_count

    @property
    def elapsed_s(self) -> float:
        """Wall seconds this run has taken so far: this process's since the trainer was built, plus
        ``earlier_s``, what the interrupted processes it resumed from had spent up to their last checkpoint
        (the work after it was lost and is done again here, so counted once)."""
        return self.earlier_s + time.perf_counter() - self._started

    def resumed(self) -> dict | None:
        """``{"at_step", "earlier_s"}`` for a run resumed from a checkpoint, else ``None`` (the run record's
        ``extra["resumed"]``: `rlvr_lib.study.runs.cached_run` adds ``earlier_s`` to its ``wall_time_s``)."""
        if self.resumed_at_step is None:
            return None
        return {"at_step": self.resumed_at_step, "earlier_s": self.earlier_s}


def check_shardable(config: TrainerConfig) -> None:
    """Refuses, in a sharded world, what FSDP cannot host: ``config.engine == "vllm"`` (ValueError)."""
    if config.engine == "vllm":
        others = " or ".join(repr(name) for name in ENGINES if not name.startswith("vllm"))  # in-process engines
        raise ValueError("engine='vllm' cannot run on a sharded (FSDP) launch: its weight sync reads the whole "
                         f"parameters; use engine {others} (--engine {ENGINES[0]})")


class CheckpointError(ValueError):
    """A checkpoint file is truncated, corrupted or not a `Trainer` checkpoint (the message names it)."""


_TRAILER_MAGIC = b"RLVRSHA2"
"""Marks the last 40 bytes of a checkpoint: this, then the sha256 of the bytes before it."""
_TRAILER_SIZE = len(_TRAILER_MAGIC) + 32
_CHECKPOINT_KEYS = ("config", "model", "optimizer", "scheduler", "method", "step", "history")


def previous_checkpoint(path: str | Path) -> Path:
    """Where `Trainer.save_checkpoint` keeps the checkpoint that ``path`` replaced: ``checkpoint.prev.pt``
    for ``checkpoint.pt``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def read_checkpoint(path: str | Path, *, load: bool = True) -> dict | None:
    """The state in the checkpoint file ``path`` (``None`` with ``load=False``), after checking its sha256 trailer.

    A file without the trailer is accepted only if ``torch.load`` reads a whole checkpoint from it. Raises
    CheckpointError naming the file and what is wrong; OSError when it cannot be read.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(size - _TRAILER_SIZE, 0))
        tail = f.read()
        if tail.startswith(_TRAILER_MAGIC) and len(tail) == _TRAILER_SIZE:
            f.seek(0)
            sha, left = hashlib.sha256(), size - _TRAILER_SIZE
            while left:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                sha.update(chunk)
                left -= len(chunk)
            if left or sha.digest() != tail[len(_TRAILER_MAGIC):]:
                raise CheckpointError(f"checkpoint {path} is corrupted: its content does not match the sha256 "
                                      "written with it (the file changed after it was written)")
            trailer = True
        else:
            trailer = False
    if not load and trailer:
        return None
    try:
        # torch's zip reader finds its index from the end and skips the trailer after it.
        state = torch.load(path, weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unpickling or zip error means the same: unusable
        why = "" if trailer else " (it has no sha256 trailer: cut short, or not written by Trainer.save_checkpoint)"
        first = str(err).split(". ")[0]  # torch's zip errors go on for a paragraph
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted{why}: torch.load failed with "
                              f"{type(err).__name__}: {first}") from err
    missing = [k for k in _CHECKPOINT_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} is not a Trainer checkpoint: it lacks {missing}")
    return state if load else None


class _HashingWriter:
    """File-like object for ``torch.save``: writes through to ``file``, hashes what it wrote and keeps the
    first ``OSError`` of a write (``error``)."""

    def __init__(self, file):
        self.file, self.sha256, self.error = file, hashlib.sha256(), None

    def write(self, data) -> int:
        self.sha256.update(data)
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.file.flush()


def _remove_stale_temps(path: Path) -> None:
    """Remove the temp files that a write of checkpoint ``path`` or of its previous copy, killed midway, left."""
    prev = previous_checkpoint(path)
    for stale in [*path.parent.glob(f".{path.name}.*.tmp"), *path.parent.glob(f".{prev.name}.*.tmp")]:
        stale.unlink(missing_ok=True)


def _keep_copy(path: Path, copy_path: Path) -> None:
    """Atomically make ``copy_path`` a copy of ``path``: a hard link (no data written), else a real copy."""
    if copy_path.exists() and os.path.samefile(path, copy_path):
        # Already a link of it (the write that was to replace ``path`` was killed): rename() of one link onto
        # another of the same file does nothing, and would leave the temp link behind.
        return
    tmp = copy_path.with_name(f".{copy_path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        try:
            os.link(path, tmp)
        except OSError:  # a file system without hard links
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
                dst.flush()
                os.fsync(dst.fileno())
        os.replace(tmp, copy_path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise OSError(err.errno, f"{err.strerror or err} while keeping {path} as {copy_path} "
                                     f"(both are left as they were, the temp file removed)") from err
        raise

def _rollout_metrics(batches: list[StepBatch], strategies: tuple[str, ...] = ()) -> dict[str, float]:
    """Outcome and length metrics of every rollout in ``batches``, and ``strategy_share_<s>`` per task strategy."""
    rewards = torch.cat([b.rewards for b in batches])
    verdicts = [v for b in batches for v in b.verdicts]
    offsets = np.cumsum([0] + [len(b.problems) for b in batches[:-1]])
    groups = np.concatenate([b.group_index.numpy() + o for b, o in zip(batches, offsets)])
    lengths = torch.cat([b.rollouts.completion_mask.sum(1) for b in batches]).float()
    # Verdicts of a verifier that raised (only kept for methods whose reward ignores it) count in no rate
    # but unverified_rate, logged only when there are some; NaN when nothing was verified.
    verified = [v for v in verdicts if v.status != UNVERIFIED]
    rate = lambda status: float(np.mean([v.status == status for v in verified])) if verified else float("nan")
    metrics = {
        "reward_mean": float(rewards.mean()),
        "accuracy": rate(CORRECT),
        "malformed_rate": rate(MALFORMED),
        "zero_adv_frac": zero_advantage_fraction(rewards.numpy(), groups),
        "response_length": float(lengths.mean()),
        "truncated_rate": float(np.mean([r == "length" for b in batches for r in b.rollouts.finish_reasons])),
    }
    for strategy in strategies:
        metrics[f"strategy_share_{strategy}"] = float(np.mean([v.strategy == strategy for v in verdicts]))
    if len(verified) < len(verdicts):
        metrics["unverified_rate"] = 1.0 - len(verified) / len(verdicts)
    if any(v.status == TIMEOUT for v in verified):  # logged only when some grading timed out (reward 0)
        metrics["timeout_rate"] = rate(TIMEOUT)
    corr = reward_accuracy_correlation(rewards.numpy(), verdicts)
    if not math.isnan(corr):  # undefined when every reward or every verdict is the same: not logged
        metrics["reward_acc_corr"] = corr
    return metrics


def reward_accuracy_correlation(rewards: np.ndarray, verdicts) -> float:
    """Pearson correlation of the rewards with the verifier's correctness (0/1) over one step's verified rollouts.

    NaN when either is constant or fewer than two were verified.
    """
    verified = np.array([v.status != UNVERIFIED for v in verdicts], dtype=bool)
    correct = np.array([v.status == CORRECT for v in verdicts], dtype=np.float64)[verified]
    rewards = np.asarray(rewards, dtype=np.float64)[verified]
    if rewards.size < 2:
        return float("nan")
    if rewards.std() == 0 or correct.std() == 0:
        return float("nan")
    return float(np.corrcoef(rewards, correct)[0, 1])


def reward_columns(batch: StepBatch) -> dict:
    """The arguments of a reward function (`rlvr_lib.rewards.callables`) for ``batch``'s rows: ``prompts`` (hint-free),
    ``completions``, ``completion_ids`` (unpadded), ``hint``, and one list per field of the task's problems."""
    problems = [batch.problems[g] for g in batch.group_index.tolist()]
    ro = batch.rollouts
    columns = {
        "prompts": [p.prompt for p in problems],
        "completions": list(ro.texts),
        "completion_ids": [ids[mask.bool()].tolist() for ids, mask in zip(ro.completion_ids, ro.completion_mask)],
        "hint": list(batch.hints),
    }
    for f in dataclasses.fields(problems[0]) if problems else ():
        columns.setdefault(f.name, [getattr(p, f.name) for p in problems])
    return columns


def eval_scalars(result: dict) -> dict[str, float]:
    """The scalars of an `evaluate_policy` result that the trackers get: ``eval/pass@<k>`` and ``eval/<metric>`` of
    the average, and ``eval/<family>/pass@1`` per family."""
    average = result["average"]
    out = {f"eval/pass@{k}": v for k, v in average["pass_at_k"].items()}
    out.update({f"eval/{k}": v for k, v in average.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    for family, summary in result["families"].items():
        if "1" in summary["pass_at_k"]:
            out[f"eval/{family}/pass@1"] = summary["pass_at_k"]["1"]
    return out


def _nan_to_none_deep(value):
    """``value`` with every float NaN (nested in dicts and lists) replaced by None, numpy scalars as Python's."""
    if isinstance(value, dict):
        return {k: _nan_to_none_deep(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none_deep(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def nan_to_none(history: list[dict]) -> list[dict]:
    """History rows with NaN replaced by None (for JSON)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in history]
