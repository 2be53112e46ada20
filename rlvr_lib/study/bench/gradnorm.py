"""Per-sample gradient norms (VIGOR's reward): ghost norms against the per-sample backward loop.

VIGOR (arXiv 2605.09920) needs ``||grad_theta l_i||`` for every completion
of a step; its cost is the method's overhead (the paper: 3h35m vs GRPO's
2h34m). `bench_gradnorm` times, on the same rows, `grad_norms_naive` (one
backward per completion, the reference) and `grad_norms_ghost` (one batched
backward with hooks), reports the medians after warm-up, the speedup
naive / ghost and whether the values agree (1e-4 relative). Two models:

* ``tiny``: the shipped tiny policy (tied embeddings), its own rollouts of
  the ``train`` family at temperature 1;
* ``qwen2-0.5b-shaped``: a randomly initialised Qwen2 with Qwen2-0.5B's
  widths (hidden 896, 14 heads / 2 KV heads, intermediate 4864, vocabulary
  151,936, tied embeddings) and ``layers`` layers, on random token rows of
  the same shape as the tiny rollouts (prompt 8, completion ``tokens``).
"""

from __future__ import annotations

import time

import torch

from rlvr_lib.study.bench.common import median
from rlvr_lib.validation import check_int, invalid

__all__ = ["MODELS", "bench_gradnorm"]

MODELS = ("tiny", "qwen2-0.5b-shaped")


def _tiny_rows(completions: int, tokens: int):
    from rlvr_lib.policy import load_policy
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams
    from rlvr_lib.tasks.arithmetic import family_problems

    model, tokenizer = load_policy(None, device="cpu", dtype=torch.float32)
    groups = max(1, completions // 8)
    problems = family_problems("train", groups, seed=0)
    ro = KVCacheEngine(model, tokenizer).generate([p.prompt for p in problems],
                                                  SamplingParams(n=completions // groups, max_new_tokens=tokens, seed=0))
    return model, (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)


def _shaped_rows(completions: int, tokens: int, layers: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).float().eval()
        prompt_ids = torch.randint(0, cfg.vocab_size, (completions, 8))
        completion_ids = torch.randint(0, cfg.vocab_size, (completions, tokens))
        lengths = torch.randint(tokens // 2, tokens + 1, (completions,))
    completion_mask = (torch.arange(tokens)[None] < lengths[:, None]).long()
    return model, (prompt_ids, torch.ones_like(prompt_ids), completion_ids * completion_mask, completion_mask)


def bench_gradnorm(*, models: tuple[str, ...] = MODELS, completions: int = 64, tokens: int = 48, layers: int = 2,
                   warmup: int = 1, repeats: int = 3, shaped_repeats: int = 1) -> dict:
    """Median seconds of the naive loop and of ghost norms per model, their ratio, and whether they agree.

    Args:
        models: Among `MODELS`.
        completions: Rows per call (the RL batch: 8 prompts x G = 8).
        tokens: Completion length (the tiny policy's rollouts stop at EOS earlier).
        layers: Decoder layers of the 0.5B-shaped model.
        warmup, repeats: Untimed and timed calls of each implementation on the tiny policy.
        shaped_repeats: Timed calls on the 0.5B-shaped model, no warm-up (one naive
            call there takes minutes at 64 rows: each row's backward builds the
            151,936 x 896 embedding gradient; measured 14x at 8 rows and 1 layer).

    Returns:
        ``{"models": {name: {"naive_median_s", "ghost_median_s", "speedup", "values_equal",
        "max_rel_diff", "parameters"}}, "per_sample_gradnorm_speedup": the first model's speedup,
        "settings": {...}}``.
    """
    from rlvr_lib.rewards import grad_norms_ghost, grad_norms_naive

    if isinstance(models, str) or not models or any(m not in MODELS for m in models):
        raise invalid("bench_gradnorm: models", models, f"a non-empty tuple of {list(MODELS)}")
    for arg, value, lo in (("completions", completions, 1), ("tokens", tokens, 2), ("layers", layers, 1),
                           ("warmup", warmup, 0), ("repeats", repeats, 1), ("shaped_repeats", shaped_repeats, 1)):
        check_int(f"bench_gradnorm: {arg}", value, lo)
    out = {}
    for name in models:
        model, rows = _tiny_rows(completions, tokens) if name == "tiny" else _shaped_rows(completions, tokens, layers)
        seconds, values = {}, {}
        n_warm, n_timed = (warmup, repeats) if name == "tiny" else (0, shaped_repeats)
        for impl, fn in (("naive", grad_norms_naive), ("ghost", grad_norms_ghost)):
            for _ in range(n_warm):
                fn(model, *rows)
            times = []
            for _ in range(n_timed):
                t0 = time.perf_counter()
                values[impl] = fn(model, *rows)
                times.append(time.perf_counter() - t0)
            seconds[impl] = median(times)
        rel = float(((values["ghost"] - values["naive"]).abs() / values["naive"]).max())
        out[name] = {"naive_median_s": seconds["naive"], "ghost_median_s": seconds["ghost"],
                     "speedup": seconds["naive"] / seconds["ghost"], "values_equal": rel <= 1e-4,
                     "max_rel_diff": rel, "parameters": sum(p.numel() for p in model.parameters()),
                     "rows": int(rows[0].shape[0]), "completion_tokens": int(rows[3].sum())}
    return {"models": out, "per_sample_gradnorm_speedup": out[models[0]]["speedup"],
            "settings": {"models": list(models), "completions": completions, "tokens": tokens, "layers": layers,
                         "warmup": warmup, "repeats": repeats, "shaped_repeats": shaped_repeats,
                         "threads": torch.get_num_threads()}}
