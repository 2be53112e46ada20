"""The RL loop: GRPO with plug-in hooks (see `rlvr_lib.methods.base.Method`).

One step, read top to bottom in `Trainer.step`:

1. draw ``prompts_per_step`` training problems (stateless: a function of seed and step);
2. ask the method for each rollout's hint, and roll out G completions per problem,
   split across the method's weight perturbations;
3. verify every completion; the method turns verdicts into rewards. If the method
   filters groups (``keep_groups``, DAPO's dynamic sampling), steps 1-3 repeat on
   fresh prompts ("refill rounds") until ``prompts_per_step`` groups are kept or
   the method's cap on refill rounds is reached. The method turns the kept
   groups' rewards into advantages;
4. ``inner_epochs`` passes over ``minibatches``: recompute log-probs (and entropy)
   under the current weights, PPO-clip surrogate against the rollout log-probs,
   ``kl_coef`` x the method's per-token anchor to a frozen reference (no
   reference is loaded when ``kl_coef == 0``), aggregate, add the method's extra
   terms, clip the gradient and step;
5. log the diagnostics next to where they are computed.

Everything random is derived from ``(seed, step)`` (and the refill round), so a resumed run replays the
uninterrupted one exactly on CPU: a checkpoint holds only the weights, the
optimizer, the method's state, the step and the history.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from rlvr_lib.algos import LOSS_AGG_MODES, aggregate_loss
from rlvr_lib.algos.advantages import ADVANTAGE_ESTIMATORS
from rlvr_lib.algos.kl import KL_ESTIMATORS
from rlvr_lib.config import ConfigBase
from rlvr_lib.eval.diagnostics import zero_advantage_fraction
from rlvr_lib.methods.base import Method, StepBatch
from rlvr_lib.rollout import KVCacheEngine, Rollouts, SamplingParams, sequence_logprobs
from rlvr_lib.tasks import CORRECT, FAMILIES, MALFORMED, family_capacity, family_problems, verify

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainerConfig(ConfigBase):
    """Settings of the RL loop; a method's preset overrides some of them.

    Attributes:
        method: Registered method name (``rlvr_lib.methods.METHODS``).
        policy: Hub name or local path of the initial policy; ``None`` = the embedded tiny policy.
        train_family: Testbed family the training prompts come from.
        train_pool_size: Distinct training problems drawn from it (fewer if the family holds fewer).
        steps: RL steps (each does ``inner_epochs * minibatches`` optimizer steps).
        prompts_per_step: Problems (groups) per step.
        group_size: Rollouts per problem (G).
        temperature, top_p, max_new_tokens: Rollout sampling.
        lr, weight_decay, max_grad_norm: Optimizer (AdamW unless the method says otherwise).
        inner_epochs: Passes over each step's rollouts (mu).
        minibatches: Optimizer steps per pass.
        eps_low, eps_high: PPO clip range ``[1 - eps_low, 1 + eps_high]``.
        loss_agg: Loss aggregation mode (``rlvr_lib.algos.LOSS_AGG_MODES``).
        loss_normalizer: Constant of ``seq_mean_token_sum_norm`` (default ``max_new_tokens``).
        advantage: Advantage estimator name (``rlvr_lib.algos.ADVANTAGE_ESTIMATORS``).
        kl_coef: beta of the KL anchor; 0 loads no reference model.
        kl_estimator: Per-token KL estimator (``rlvr_lib.algos.KL_ESTIMATORS``).
        method_options: Method-specific settings as a JSON object; the method's class
            validates them when it is built (unknown keys and bad values raise ``ValueError``).
        seed: Fixes prompts, sampling and every other random choice.
        checkpoint_every: Steps between checkpoints (0 = never).
        rollout_batch_size: Sequences per generation call.
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

    def validate(self) -> None:
        from rlvr_lib.methods import METHODS

        self.check_choice("method", self.method, sorted(METHODS))
        self.check_choice("train_family", self.train_family, sorted(FAMILIES))
        for name in ("train_pool_size", "steps", "prompts_per_step", "group_size", "max_new_tokens"):
            self.check_positive_int(name, getattr(self, name))
        for name in ("inner_epochs", "minibatches", "rollout_batch_size"):
            self.check_positive_int(name, getattr(self, name))
        self.check_nonnegative_int("seed", self.seed)
        self.check_nonnegative_int("checkpoint_every", self.checkpoint_every)
        self.check_range("temperature", self.temperature, 0, None, lo_open=True)
        self.check_range("top_p", self.top_p, 0, 1, lo_open=True)
        self.check_range("lr", self.lr, 0, 1, lo_open=True)
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


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


class Trainer:
    """Runs one method from a config.

    Args:
        config: The run's settings.
        model, tokenizer: The initial policy; loaded from ``config.policy`` when omitted.
        checkpoint_dir: Where checkpoints go; a checkpoint found there for the same
            config is resumed from.
        engine: Rollout engine over ``model`` (default: `KVCacheEngine`; any `RolloutEngine` works).
    """

    def __init__(self, config: TrainerConfig, model=None, tokenizer=None, *, checkpoint_dir=None, engine=None):
        from rlvr_lib.methods import build_method
        from rlvr_lib.policy import load_policy

        self.config = config
        if model is None:
            model, tokenizer = load_policy(config.policy)
        self.model, self.tokenizer = model, tokenizer
        self.method: Method = build_method(config)
        self.reference = None
        if config.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.optimizer = self.method.make_optimizer(model)
        self.engine = engine or KVCacheEngine(model, tokenizer, batch_size=config.rollout_batch_size)
        pool_size = min(config.train_pool_size, family_capacity(config.train_family))
        self.train_problems = family_problems(config.train_family, pool_size, seed=0)
        self.step_count = 0
        self.history: list[dict] = []
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        if self.checkpoint_dir and (self.checkpoint_dir / "checkpoint.pt").exists():
            self.load_checkpoint(self.checkpoint_dir / "checkpoint.pt")

    # ----------------------------------------------------------------- one step
    def _rng(self, step: int, stream: int, round_: int = 0) -> np.random.Generator:
        # Round 0 keeps the original three-part key, so runs without refills are unchanged.
        key = [self.config.seed, step, stream] if round_ == 0 else [self.config.seed, step, stream, round_]
        return np.random.default_rng(key)

    def _rollout(self, problems, step: int, round_: int = 0) -> tuple[Rollouts, list, torch.Tensor, torch.Tensor]:
        cfg, G = self.config, self.config.group_size
        plan = self.method.contexts(problems, G, self._rng(step, 1, round_))
        K = self.method.weight_samples()
        if G % K:
            raise ValueError(f"group_size={G} is not divisible by the method's weight samples ({K})")
        temperature = self.method.sampling_temperature(step)
        parts, order = [], []
        for k in range(K):  # slice k of every group comes from perturbation k
            rows = [(i, j) for i in range(len(problems)) for j in range(k * G // K, (k + 1) * G // K)]
            prompts = [problems[i].prompt_with(plan[i][j][1]) for i, j in rows]
            params = SamplingParams(
                n=1,
                temperature=temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                seed=int(self._rng(step, 2 + k, round_).integers(2**31)),
            )
            with self.method.perturbed(self.model, k):
                parts.append(self.engine.generate(prompts, params))
            order += [i * G + j for i, j in rows]
        rollouts = Rollouts.concat(parts) if K > 1 else parts[0]
        rollouts = rollouts.select(torch.tensor(np.argsort(order)))  # back to prompt-major
        flat = [plan[i][j] for i in range(len(problems)) for j in range(G)]
        contexts = [c for _, c in flat]
        context_index = torch.tensor([ci for ci, _ in flat], dtype=torch.long)
        group_index = torch.arange(len(problems)).repeat_interleave(G)
        return rollouts, contexts, group_index, context_index

    def _sample(self, problems, step: int, round_: int) -> tuple[StepBatch, float]:
        """Roll out -> verify -> reward for ``problems``; also returns the seconds spent rolling out."""
        t0 = time.perf_counter()
        rollouts, contexts, group_index, context_index = self._rollout(problems, step, round_)
        seconds = time.perf_counter() - t0
        verdicts = [verify(problems[g], text) for g, text in zip(group_index.tolist(), rollouts.texts)]
        batch = StepBatch(problems, group_index, context_index, contexts, rollouts, verdicts)
        batch.rewards = self.method.rewards(batch, self.model).float()
        return batch, seconds

    def _collect(self, step: int, rng: np.random.Generator) -> tuple[StepBatch, dict, float]:
        """The step's batch: roll out -> verify -> reward -> keep, refilling dropped groups.

        Round 0 draws ``prompts_per_step`` problems with ``rng``. A method whose
        ``keep_groups`` returns ``None`` (the default) trains on them as they are.
        Otherwise the groups it drops are replaced by refill rounds: round r draws
        up to ``prompts_per_step`` problems not yet used this step from the
        stateless ``(seed, step, r)`` stream (as DAPO over-samples a whole batch),
        until ``prompts_per_step`` groups are kept (the surplus is cut, in draw
        order) or ``method.refill_rounds()`` rounds were spent; then the step
        trains on the kept groups, with a logged warning. If no group at all was
        kept, it trains on round 0's groups unfiltered (the filter saw no signal in
        them), so that a step always has a batch and logs every metric.

        Returns:
            (batch without advantages, dynamic-sampling metrics or ``{}``, seconds spent rolling out).
        """
        want, pool = self.config.prompts_per_step, self.train_problems
        drawn = rng.choice(len(pool), want, replace=False)
        batch, t_rollout = self._sample([pool[i] for i in drawn], step, 0)
        keep = self.method.keep_groups(batch)
        if keep is None:  # the method does not filter: plain GRPO sampling
            return batch, {}, t_rollout

        first, kept, used = batch, [], set(drawn.tolist())
        n_kept = n_dropped = rounds = 0
        cap = self.method.refill_rounds()
        while True:
            keep = torch.as_tensor(keep, dtype=torch.bool)
            if keep.shape != (len(batch.problems),):
                raise ValueError(f"keep_groups returned shape {tuple(keep.shape)}; expected ({len(batch.problems)},)")
            kept_ids = keep.nonzero().flatten()[: want - n_kept]
            if len(kept_ids):
                kept.append(_select_groups(batch, kept_ids))
            n_kept += len(kept_ids)
            n_dropped += int((~keep).sum())
            fresh = np.setdiff1d(np.arange(len(pool)), np.fromiter(used, dtype=np.int64))
            if n_kept >= want or rounds >= cap or fresh.size == 0:
                break
            rounds += 1
            drawn = self._rng(step, 0, rounds).choice(fresh, min(want, fresh.size), replace=False)
            used.update(drawn.tolist())
            batch, seconds = self._sample([pool[i] for i in drawn], step, rounds)
            t_rollout += seconds
            keep = self.method.keep_groups(batch)

        if n_kept < want:
            why = f"the cap of {cap} refill rounds" if rounds >= cap else "the end of the training pool"
            what = f"training on those {n_kept} groups" if n_kept else "training on round 0's groups unfiltered"
            logger.warning(
                "step %d: dynamic sampling kept %d of %d groups (%d dropped) before reaching %s; %s",
                step, n_kept, want, n_dropped, why, what,
            )
        stats = {"dynamic_refill_rounds": rounds, "dynamic_dropped_groups": n_dropped, "dynamic_kept_groups": n_kept}
        return (_concat_batches(kept) if kept else first), stats, t_rollout

    def step(self) -> dict:
        cfg, step = self.config, self.step_count
        t0 = time.perf_counter()
        rng = self._rng(step, 0)
        self.method.on_step_start(step)
        temperature = self.method.sampling_temperature(step)
        batch, sampling_stats, t_rollout = self._collect(step, rng)  # roll out -> verify -> reward -> keep
        rollouts, verdicts, group_index = batch.rollouts, batch.verdicts, batch.group_index
        batch.advantages = self.method.advantages(batch).float()
        t_reward = time.perf_counter()

        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logp, _ = sequence_logprobs(
                    self.reference, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids,
                    rollouts.completion_mask, temperature=temperature,
                )
        stats = self._update(batch, ref_logp, temperature, rng)
        t_end = time.perf_counter()

        lengths = rollouts.completion_mask.sum(1).float()
        metrics = {
            "step": step,
            "reward_mean": float(batch.rewards.mean()),
            "accuracy": float(np.mean([v.status == CORRECT for v in verdicts])),
            "malformed_rate": float(np.mean([v.status == MALFORMED for v in verdicts])),
            "zero_adv_frac": zero_advantage_fraction(batch.rewards.numpy(), group_index.numpy()),
            "advantage_abs_mean": float(batch.advantages.abs().mean()),
            "response_length": float(lengths.mean()),
            "truncated_rate": float(np.mean([r == "length" for r in rollouts.finish_reasons])),
            "temperature": temperature,
            **sampling_stats,
            **stats,
            "time_rollout": t_rollout,
            "time_reward": t_reward - t0 - t_rollout,
            "time_update": t_end - t_reward,
            "time_step": t_end - t0,
        }
        self.method.on_step_end(step, metrics)
        self.history.append(metrics)
        self.step_count += 1
        if cfg.checkpoint_every and self.checkpoint_dir and self.step_count % cfg.checkpoint_every == 0:
            self.save_checkpoint(self.checkpoint_dir / "checkpoint.pt")
        return metrics

    def _update(self, batch: StepBatch, ref_logp, temperature: float, rng: np.random.Generator) -> dict:
        cfg, ro = self.config, batch.rollouts
        normalizer = cfg.loss_normalizer or float(cfg.max_new_tokens)
        self.model.train()
        sums: dict[str, list[float]] = {}
        for _ in range(cfg.inner_epochs):
            perm = torch.from_numpy(rng.permutation(len(ro))) if cfg.minibatches > 1 else torch.arange(len(ro))
            for idx in perm.chunk(cfg.minibatches):
                mask = ro.completion_mask[idx].float()
                logp, entropy = sequence_logprobs(
                    self.model, ro.prompt_ids[idx], ro.prompt_mask[idx], ro.completion_ids[idx],
                    ro.completion_mask[idx], temperature=temperature, with_entropy=True,
                )
                per_token, pg_stats = self.method.policy_loss(logp, ro.logprobs[idx], batch.advantages[idx], mask)
                if ref_logp is not None:
                    kl = self.method.anchor(logp, ref_logp[idx], entropy.detach(), mask)
                    per_token = per_token + cfg.kl_coef * kl
                    sums.setdefault("kl", []).append(_masked_mean(kl.detach(), mask))
                loss = aggregate_loss(per_token, mask, cfg.loss_agg, normalizer=normalizer if cfg.loss_agg == "seq_mean_token_sum_norm" else None)
                extra, extra_stats = self.method.extra_loss(batch, self.model, logp, entropy, mask)
                loss = loss + extra
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    [p for p in self.model.parameters() if p.requires_grad], cfg.max_grad_norm
                )
                self.optimizer.step()
                for key, value in {
                    "loss": float(loss.detach()),
                    "entropy": _masked_mean(entropy.detach(), mask),
                    "grad_norm": float(grad_norm),
                    **{k: float(v) for k, v in pg_stats.items()},
                    **{k: float(v) for k, v in extra_stats.items()},
                }.items():
                    sums.setdefault(key, []).append(value)
        self.model.eval()
        return {k: float(np.mean(v)) for k, v in sums.items()}

    # ----------------------------------------------------------------- the loop
    def train(self, *, progress: bool = True) -> list[dict]:
        """Run until ``config.steps``; returns the metric history (one dict per step)."""
        bar = tqdm(total=self.config.steps, initial=self.step_count, desc=self.method.name, disable=not progress)
        while self.step_count < self.config.steps:
            m = self.step()
            bar.update(1)
            bar.set_postfix(reward=f"{m['reward_mean']:.3f}", ent=f"{m['entropy']:.3f}")
        bar.close()
        return self.history

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: str | Path) -> None:
        """Atomically write weights, optimizer, method state, step and history."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(
            {
                "config": self.config.to_dict(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "method": self.method.state_dict(),
                "step": self.step_count,
                "history": self.history,
            },
            tmp,
        )
        os.replace(tmp, path)

    def load_checkpoint(self, path: str | Path) -> None:
        state = torch.load(path, weights_only=False)
        if state["config"] != self.config.to_dict():
            raise ValueError(f"checkpoint {path} was written by a different config; remove it or change checkpoint_dir")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state_dict(state["method"])
        self.step_count, self.history = state["step"], state["history"]


def _select_groups(batch: StepBatch, groups: torch.Tensor) -> StepBatch:
    """The rollouts of ``groups`` (indices into ``batch.problems``), renumbered 0..len(groups)-1."""
    groups = groups.long()
    remap = torch.full((len(batch.problems),), -1, dtype=torch.long)
    remap[groups] = torch.arange(len(groups))
    rows = (remap[batch.group_index] >= 0).nonzero().flatten()
    rows = rows[torch.argsort(remap[batch.group_index[rows]], stable=True)]  # in the order of ``groups``
    return StepBatch(
        problems=[batch.problems[g] for g in groups.tolist()],
        group_index=remap[batch.group_index[rows]],
        context_index=batch.context_index[rows],
        contexts=[batch.contexts[i] for i in rows.tolist()],
        rollouts=batch.rollouts.select(rows),
        verdicts=[batch.verdicts[i] for i in rows.tolist()],
        rewards=None if batch.rewards is None else batch.rewards[rows],
    )


def _concat_batches(batches: list[StepBatch]) -> StepBatch:
    """Stack batches of different rounds; group ids are offset so they stay distinct.

    ``rollouts.prompt_index`` keeps each round's own numbering (the trainer reads ``group_index``).
    """
    if len(batches) == 1:
        return batches[0]
    offsets = np.cumsum([0] + [len(b.problems) for b in batches[:-1]])
    return StepBatch(
        problems=[p for b in batches for p in b.problems],
        group_index=torch.cat([b.group_index + int(o) for b, o in zip(batches, offsets)]),
        context_index=torch.cat([b.context_index for b in batches]),
        contexts=[c for b in batches for c in b.contexts],
        rollouts=Rollouts.concat([b.rollouts for b in batches]),
        verdicts=[v for b in batches for v in b.verdicts],
        rewards=torch.cat([b.rewards for b in batches]),
    )


def nan_to_none(history: list[dict]) -> list[dict]:
    """History rows with NaN replaced by None (for JSON)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in history]
