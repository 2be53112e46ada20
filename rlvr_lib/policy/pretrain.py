"""Pretraining (SFT) of the embedded tiny policy on a skewed mixture of strategies.

The SFT data are the testbed's ``"sft"`` pool (`rlvr_lib.tasks.arithmetic.split_of`) with oracle traces whose
strategy is drawn from ``PRETRAIN_STRATEGY_PRIOR`` (``split`` dominant, ``round`` rare); a share of prompts
carry a hint, mostly naming the trace's strategy (drawn from ``PRETRAIN_HINT_PRIOR``), sometimes a distractor.
With ``hold_out_fact`` no example multiplies by 9. The loss is next-token cross-entropy on completion tokens
only. Deterministic for a seed on CPU; resumable every ``save_every`` steps. Why: docs/study/testbed.md.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlvr_lib.config import ConfigBase, to_jsonable
from rlvr_lib.policy.tokenizer import build_char_tokenizer
from rlvr_lib.tasks.arithmetic import (
    DIFFICULTIES,
    DISTRACTOR_HINTS,
    FAMILIES,
    PRETRAIN_HINT_PRIOR,
    PRETRAIN_STRATEGY_PRIOR,
    STRATEGIES,
    TRAIN_FAMILY,
    make_problem,
    problem_pool,
    round_only,
    uses_held_out_fact,
)
from rlvr_lib.tasks import subtraction


# Share of (easy, medium, hard) problems in pretraining, for both skills (not the RL pool's mix).
PRETRAIN_DIFFICULTY_MIX = (0.35, 0.35, 0.30)


@dataclass(frozen=True)
class PretrainConfig(ConfigBase):
    """Pretraining settings (the defaults rebuild the shipped checkpoint).

    Attributes:
        seed, steps, batch_size: Data order and initialisation; optimizer steps; examples per step.
        lr, warmup_steps, weight_decay: Peak AdamW lr (linear warm-up, cosine decay to 10%), warm-up, decay.
        hint_share: Share of prompts that carry a hint.
        distractor_share: Share of hinted prompts whose hint names no strategy.
        strategy_prior: Probability of (direct, split, round) traces on unhinted prompts.
        hint_prior: Probability that a strategy hint names (direct, split, round).
        sub_share: Share of examples from the subtraction skill (`rlvr_lib.tasks.subtraction`).
        hidden_size, num_layers, num_heads, intermediate_size: Model shape.
        save_every: Steps between resumable state files.
        hold_out_fact: Never show a product by 9 (`rlvr_lib.tasks.arithmetic.uses_held_out_fact`).
        round_only_rare_share: Share of ``round`` among unhinted traces of round-only items (None: the prior's).
    """

    seed: int = 0
    steps: int = 1200
    batch_size: int = 128
    lr: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    hint_share: float = 0.5
    distractor_share: float = 0.2
    strategy_prior: tuple[float, float, float] = tuple(PRETRAIN_STRATEGY_PRIOR[s] for s in STRATEGIES)
    hint_prior: tuple[float, float, float] = tuple(PRETRAIN_HINT_PRIOR[s] for s in STRATEGIES)
    sub_share: float = 0.15
    hidden_size: int = 96
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    save_every: int = 250
    hold_out_fact: bool = True
    round_only_rare_share: float | None = field(default=None, metadata={"omit_if_default": True})

    def validate(self) -> None:
        for name in ("steps", "batch_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "save_every"):
            self.check_positive_int(name, getattr(self, name))
        for name in ("hint_share", "distractor_share", "sub_share"):
            self.check_probability(name, getattr(self, name))
        self.check_positive("lr", self.lr)
        self.check_nonnegative_int("seed", self.seed)
        self.check_nonnegative_int("warmup_steps", self.warmup_steps)
        self.check_nonnegative("weight_decay", self.weight_decay)
        for name in ("strategy_prior", "hint_prior"):
            prior = getattr(self, name)
            try:
                prior_ok = (len(prior) == len(STRATEGIES) and abs(sum(prior) - 1) <= 1e-6
                            and all(p >= 0 for p in prior))
            except TypeError:  # not a sequence of numbers
                prior_ok = False
            self.check(prior_ok, name, prior, f"{len(STRATEGIES)} probabilities for {STRATEGIES} summing to 1")
        if self.round_only_rare_share is not None:
            self.check_range("round_only_rare_share", self.round_only_rare_share, 0, self.strategy_prior[2])
        self.check(self.hidden_size % self.num_heads == 0, "hidden_size", self.hidden_size,
                   f"a multiple of num_heads={self.num_heads}")


POLICY_SIZES: dict[str, dict] = {
    "tiny": {},
    "small": {"hidden_size": 192, "intermediate_size": 768},
}
"""Model shapes pretrained here: ``"tiny"`` (the shipped policy, `PretrainConfig`'s defaults, 0.62M parameters)
and ``"small"`` (width doubled: hidden 192, MLP 768; 2.41M parameters); all else equal.
"""


def size_config(size: str, **overrides) -> PretrainConfig:
    """The `PretrainConfig` of model size ``size`` (`POLICY_SIZES`) with ``overrides``; ValueError on an unknown size."""
    if size not in POLICY_SIZES:
        raise ValueError(f"size={size!r} is invalid: must be one of {sorted(POLICY_SIZES)}")
    return PretrainConfig(**{**POLICY_SIZES[size], **overrides})


def model_config(config: PretrainConfig, vocab_size: int, pad_id: int, eos_id: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
    )


class PretrainingMixture:
    """Samples (prompt, completion) pairs of the SFT mixture from the pretraining pool ("sft")."""

    def __init__(self, config: PretrainConfig, rng: np.random.Generator):
        spec = FAMILIES[TRAIN_FAMILY]
        self.pools = [problem_pool("sft", d, spec.first_factors) for d in DIFFICULTIES]
        self.mix = np.asarray(PRETRAIN_DIFFICULTY_MIX)
        self.sub_pools = ([subtraction.problem_pool("sft", d) for d in DIFFICULTIES]
                          if config.sub_share > 0 else None)
        self.config, self.rng = config, rng

    def _problem(self) -> tuple[int, int]:
        pool = self.pools[self.rng.choice(len(self.pools), p=self.mix)]
        a, b = pool[self.rng.integers(len(pool))]
        return int(a), int(b)

    def _strategy_and_hint(self) -> tuple[str, str | None]:
        rng, cfg = self.rng, self.config
        hint = None
        strategy = STRATEGIES[rng.choice(len(STRATEGIES), p=np.asarray(cfg.strategy_prior))]
        if rng.random() < cfg.hint_share:
            if rng.random() < cfg.distractor_share:
                hint = DISTRACTOR_HINTS[rng.integers(len(DISTRACTOR_HINTS))]
            else:
                # A strategy hint names a strategy from hint_prior, and the trace uses it: every
                # strategy is practised when asked for, while unhinted prompts keep the skewed prior.
                strategy = hint = STRATEGIES[rng.choice(len(STRATEGIES), p=np.asarray(cfg.hint_prior))]
        return strategy, hint

    def sample(self) -> tuple[str, str]:
        rng, cfg = self.rng, self.config
        if self.sub_pools is not None and rng.random() < cfg.sub_share:
            pool = self.sub_pools[rng.choice(len(self.sub_pools), p=self.mix)]
            a, b = pool[rng.integers(len(pool))]
            strategy, hint = self._strategy_and_hint()
            problem = subtraction.make_problem(int(a), int(b), strategy=strategy)
            return problem.prompt_with(hint), problem.oracle_trace
        strategy, hint = self._strategy_and_hint()
        # Redraw the problem, not the strategy, so the strategy shares stay the prior's.
        while True:
            a, b = self._problem()
            shown = strategy
            if strategy == "split" and hint not in STRATEGIES and round_only(a, b):
                # Unhinted, a round-only problem is shown with `direct` where the prior drew `split` (whose
                # trace needs the held-out 9 row): `round` keeps its prior share there, so nothing ties the
                # rare strategy to these problems, and the policy still sees their first factors.
                shown = "direct"
            if (cfg.round_only_rare_share is not None and strategy == "round" and hint not in STRATEGIES
                    and round_only(a, b) and rng.random() >= cfg.round_only_rare_share / cfg.strategy_prior[2]):
                shown = "direct"  # design d3: round rarer on round-only items than its prior
            if not (cfg.hold_out_fact and uses_held_out_fact(a, b, shown)):
                break
        problem = make_problem(a, b, strategy=shown)
        return problem.prompt_with(hint), problem.oracle_trace

    def batch(self, size: int) -> list[tuple[str, str]]:
        """``size`` samples sorted by length (prompt + completion), as a pretraining step draws them."""
        return sorted((self.sample() for _ in range(size)), key=lambda pc: len(pc[0]) + len(pc[1]))


def sft_loss(model, pairs, tokenizer) -> torch.Tensor:
    """Mean next-token NLL per label token of a :meth:`PretrainingMixture.batch`: ``sum(token_loss_sum(chunk)) / n_labels``."""
    n_labels = sum(len(c) + 1 for _, c in pairs)
    device = next(model.parameters()).device
    loss = 0.0
    for chunk in (pairs[: len(pairs) // 2], pairs[len(pairs) // 2 :]):
        batch = {k: v.to(device) for k, v in collate(chunk, tokenizer).items()}
        loss = loss + token_loss_sum(model, batch) / n_labels
    return loss


def pretraining_config(policy_dir: str | Path) -> PretrainConfig:
    """The `PretrainConfig` in ``policy_dir``'s ``pretrain_log.json`` (ValueError when there is none)."""
    log = Path(policy_dir) / "pretrain_log.json"
    if not log.is_file():
        raise ValueError(f"policy_dir={str(policy_dir)!r} is invalid: must be a checkpoint written by "
                         f"rlvr_lib.policy.pretrain.pretrain (with a pretrain_log.json naming its SFT config); "
                         f"{log} does not exist, so the policy's SFT data are unknown")
    return PretrainConfig.from_dict(json.loads(log.read_text())["config"])


def collate(pairs, tokenizer) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 off the completion)."""
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p, _ in pairs]
    completions = [tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for _, c in pairs]
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        n = len(p) + len(c)
        ids[i, :n] = torch.tensor(p + c)
        labels[i, len(p) : n] = torch.tensor(c)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def token_loss_sum(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Summed next-token cross-entropy over the labelled (completion) tokens."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1), ignore_index=-100, reduction="sum"
    )


def lr_at(step: int, config: PretrainConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(config: PretrainConfig, out_dir: str | Path, *, progress: bool = True) -> dict:
    """Train the tiny policy and save it (model + tokenizer) to ``out_dir``; resumes a same-config state file.

    Returns the training log written to ``out_dir/pretrain_log.json``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state_path = out_dir / ".pretrain_state.pt"
    torch.manual_seed(config.seed)
    tokenizer = build_char_tokenizer()
    model = Qwen2ForCausalLM(
        model_config(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=(0.9, 0.98), weight_decay=config.weight_decay
    )
    rng = np.random.default_rng(config.seed)
    start, history, elapsed = 0, [], 0.0
    if state_path.exists():
        state = torch.load(state_path, weights_only=False)
        # to_jsonable: state files written before configs were ConfigBase hold tuples, not lists.
        if to_jsonable(state["config"]) == config.to_dict():
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            rng.bit_generator.state = state["numpy_rng"]
            torch.set_rng_state(state["torch_rng"])
            start, history, elapsed = state["step"], state["history"], state["elapsed_s"]
    mixture = PretrainingMixture(config, rng)
    model.train()
    t0 = time.perf_counter() - elapsed
    bar = tqdm(range(start, config.steps), initial=start, total=config.steps, desc="pretrain", disable=not progress)
    for step in bar:
        pairs = mixture.batch(config.batch_size)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        optimizer.zero_grad(set_to_none=True)
        loss = sft_loss(model, pairs, tokenizer)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 25 == 0 or step == config.steps - 1:
            history.append({"step": step, "loss": round(loss.item(), 5)})
            bar.set_postfix(loss=f"{loss.item():.4f}")
        if (step + 1) % config.save_every == 0 and step + 1 < config.steps:
            tmp = state_path.with_suffix(".tmp")
            torch.save(
                {
                    "config": config.to_dict(),
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "numpy_rng": rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(),
                    "step": step + 1,
                    "history": history,
                    "elapsed_s": time.perf_counter() - t0,
                },
                tmp,
            )
            os.replace(tmp, state_path)
    log = {
        "config": config.to_dict(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(time.perf_counter() - t0, 1),
        "torch_threads": torch.get_num_threads(),
        "final_loss": history[-1]["loss"] if history else None,
        "history": history,
    }
    # Write into a sibling folder, then swap, so an interrupted save never leaves half a checkpoint.
    staging = out_dir.with_name(out_dir.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    model.eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "pretrain_log.json").write_text(json.dumps(log, indent=1) + "\n")
    for name in ("README.md",):
        if (out_dir / name).exists():
            shutil.copy(out_dir / name, staging / name)
    shutil.rmtree(out_dir)
    staging.rename(out_dir)
    return log


def mixture_shares(config: PretrainConfig = PretrainConfig(), n: int = 20000, seed: int = 0) -> dict:
    """Measured composition of ``n`` SFT examples: strategy shares overall, unhinted and per hint."""
    mixture = PretrainingMixture(config, np.random.default_rng(seed))
    rows = []
    for _ in range(n):
        prompt, completion = mixture.sample()
        hint = prompt.split(" hint: ", 1)[1].strip() if " hint: " in prompt else None
        rows.append((hint, completion.split(":", 1)[0]))
    hinted = [r for r in rows if r[0] is not None]
    unhinted = [s for h, s in rows if h is None]
    return {
        "examples": n,
        "hinted_share": len(hinted) / n,
        "strategy_share": {s: sum(x == s for _, x in rows) / n for s in STRATEGIES},
        "unhinted_strategy_share": {s: unhinted.count(s) / max(1, len(unhinted)) for s in STRATEGIES},
        "hint_share_by_word": {
            h: sum(x == h for x, _ in hinted) / max(1, len(hinted)) for h in sorted({x for x, _ in hinted})
        },
    }
