"""Rollout throughput of vLLM's CPU build against :class:`~rlvr_lib.rollout.KVCacheEngine` and ``generate``.

Runs in the second environment (``.venv-vllm``, vLLM's CPU build; ``make bench-vllm``, which ``make
bench`` calls). Three engines sample the same prompts in one process, alternately, under the same
thread count: :class:`~rlvr_lib.rollout.VLLMEngine` (``vllm.LLM`` with vLLM's defaults on a CPU, so
its model compiled with inductor, and a 1 GiB KV cache), :class:`~rlvr_lib.rollout.KVCacheEngine` and
:class:`~rlvr_lib.rollout.HFEngine` (``model.generate``). Every timed ``VLLMEngine`` call includes what it
costs in training: copying the weights into vLLM (``reload_weights``) and resetting its prefix cache.
Throughput is real completion tokens (EOS included) per second, from the median over ``repeats`` timed
calls after ``warmup`` untimed ones; the ratios divide vLLM's tokens/s by each baseline's.

Shapes (vLLM's CPU attention takes head sizes 32, 64, ...; the shipped policy's is 24):

* ``policy-3x32``: the shipped policy's weights in a Qwen2 with 3 heads of 32 instead of 4 of 24 (every
  matrix keeps its shape), on the RL batch: ``batch // group_size`` training prompts x ``group_size``;
* ``qwen2-0.5b-shaped``: a random Qwen2 with Qwen2-0.5B's widths (hidden 896, 14 heads / 2 KV heads of
  64, intermediate 4864, vocabulary 151,936, tied) and ``larger_layers`` of its 24 layers, on the same
  prompts (random weights rarely emit EOS, so its rows run to ``max_new_tokens``).

Before timing, greedy decoding of the RL batch's distinct prompts is compared between vLLM (compiled)
and ``KVCacheEngine`` (``greedy_tokens_equal``).
"""

from __future__ import annotations

import os
import time

import torch

from rlvr_lib.study.bench.common import check_rollout_args, machine_info, time_engines_alternating

__all__ = ["SHAPES", "bench_vllm_rollout"]

SHAPES = ("policy-3x32", "qwen2-0.5b-shaped")
KV_CACHE_BYTES = 1 << 30  # vLLM's CPU default (about a third of free memory) takes tens of seconds to allocate


def _model(shape: str, larger_layers: int):
    """The model of ``shape`` (module docstring), float32, eval mode, and the shipped tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlvr_lib.policy import load_policy

    policy, tokenizer = load_policy(None, device="cpu", dtype=torch.float32)
    if shape == "policy-3x32":
        config = Qwen2Config(**{**policy.config.to_dict(), "num_attention_heads": 3, "num_key_value_heads": 3})
        model = Qwen2ForCausalLM(config)
        model.load_state_dict(policy.state_dict())
        return model.eval(), tokenizer
    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=larger_layers,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, bos_token_id=tokenizer.eos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen2ForCausalLM(config).float().eval(), tokenizer


def bench_vllm_rollout(
    *, batch: int = 64, max_new_tokens: int = 64, group_size: int = 8, warmup: int = 1, repeats: int = 5,
    seed: int = 0, shapes: tuple[str, ...] = SHAPES, larger_layers: int = 4,
) -> dict:
    """Tokens per second of vLLM (CPU), ``KVCacheEngine`` and ``generate`` on each shape's RL batch.

    Args:
        batch: Sequences per call (``>= 1``; a multiple of ``group_size``).
        max_new_tokens: New-token budget per sequence (``>= 1``).
        group_size: Samples per prompt (``>= 1``).
        warmup: Untimed calls per engine and shape (``>= 0``).
        repeats: Timed calls per engine and shape (``>= 1``).
        seed: Sampling seed (the same for every call).
        shapes: Subset of :data:`SHAPES`.
        larger_layers: Layers of the ``qwen2-0.5b-shaped`` model (``>= 1``).

    Returns:
        JSON-serialisable dict: per shape, each engine's timed seconds, median, tokens per call and
        tokens/s, ``vllm_vs_kv_cache`` and ``vllm_vs_generate`` (vLLM's tokens/s over each baseline's),
        vLLM's start-up seconds and ``greedy_tokens_equal``; the settings, vLLM's version and the machine.

    Raises:
        ValueError: On a bad argument, naming it and what is allowed.
        ImportError: Where vLLM is not installed (run it in ``.venv-vllm``: ``make bench-vllm``).
    """
    check_rollout_args("bench_vllm_rollout", batch=batch, group_size=group_size,
                       extra_ints={"max_new_tokens": (max_new_tokens, 1), "warmup": (warmup, 0),
                                   "repeats": (repeats, 1), "seed": (seed, 0), "larger_layers": (larger_layers, 1)},
                       choices=shapes, allowed=SHAPES, choices_name="shapes")

    import vllm

    from rlvr_lib.rollout import HFEngine, KVCacheEngine, SamplingParams, VLLMEngine
    from rlvr_lib.tasks.arithmetic import family_problems

    prompts = [p.prompt_with(None) for p in family_problems("train", batch // group_size, seed=0)]
    params = SamplingParams(n=group_size, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
    greedy = SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    out: dict = {"shapes": {}}
    keep = []  # every LLM stays alive to the end: destroying one tears down vLLM's process-wide groups
    for shape in shapes:
        model, tokenizer = _model(shape, larger_layers)
        t0 = time.perf_counter()
        vllm_engine = VLLMEngine(model, tokenizer, batch_size=batch, llm_kwargs=dict(
            max_model_len=max(256, 64 + max_new_tokens), kv_cache_memory_bytes=KV_CACHE_BYTES))
        startup = time.perf_counter() - t0
        keep.append(vllm_engine)
        engines = {"vllm": vllm_engine, "kv_cache": KVCacheEngine(model, tokenizer, batch_size=batch),
                   "generate": HFEngine(model, tokenizer, batch_size=batch)}
        equal = torch.equal(vllm_engine.generate(prompts, greedy).completion_ids,
                            engines["kv_cache"].generate(prompts, greedy).completion_ids)
        row = time_engines_alternating(engines, prompts, params, warmup=warmup, repeats=repeats)
        row["vllm_vs_kv_cache"] = row["vllm"]["tokens_per_s"] / row["kv_cache"]["tokens_per_s"]
        row["vllm_vs_generate"] = row["vllm"]["tokens_per_s"] / row["generate"]["tokens_per_s"]
        row["vllm_startup_s"] = startup
        row["greedy_tokens_equal"] = bool(equal)
        row["parameters"] = sum(p.numel() for p in model.parameters())
        out["shapes"][shape] = row
    out["settings"] = {"batch": batch, "max_new_tokens": max_new_tokens, "group_size": group_size, "warmup": warmup,
                       "repeats": repeats, "seed": seed, "temperature": 1.0, "larger_layers": larger_layers,
                       "vllm_kv_cache_bytes": KV_CACHE_BYTES, "vllm_compiled": True,
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    out["vllm_version"] = vllm.__version__
    out["machine"] = machine_info()
    return out
