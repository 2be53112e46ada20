"""Where a rollout and a GRPO step spend their time, and what bounds them.

The headline ratios (`bench_rollout`, `bench_step_time`) say how fast; this
says why not faster. On the shipped tiny policy (CPU, float32):

* **Decode.** `KVCacheEngine` samples the RL batch (``batch // group_size``
  training prompts x ``group_size``); the median call time is divided by the
  decode steps taken (the longest completion) and the policy's layers, and by
  the tokens produced: microseconds per layer per step and per layer per
  token (both include the prefill and sampling, so they are upper bounds).
  ``torch.profiler`` attributes the self CPU time of the same calls to
  :data:`OP_GROUPS` (the profiler adds a few microseconds to every op, so
  it overstates small ops). The unbiased floor is ``matmul_replay``: every
  matrix product of one call (``mm``, ``addmm``, ``bmm``, logged with their
  shapes and strides by a ``TorchDispatchMode``) replayed alone on fresh
  tensors and timed. Its share of the call is what no removal of per-op
  overhead can go below: removing every other op would speed the call up by
  at most ``1 / share``.
* **Compiled decode** (``compile_decode``): the lean decoder's forward under
  ``torch.compile(dynamic=True)`` (CPU inductor fuses the norms, rotary and
  softmax into C++ kernels; the matmuls stay library calls): first-call
  seconds (compilation), median call time, and whether greedy tokens are
  unchanged. It is measured here and not used by the engine unless it pays.
* **GRPO step.** ``Trainer.step`` of the benchmark's ``grpo_no_kl`` config
  (`rlvr_lib.study.bench.step`), split into the rollout (the engine's
  ``generate``) and the rest (verification, advantages, the update's forward
  and backward, the optimizer), with the op-group shares and the matmul
  replay of the whole step (backward products included).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlvr_lib.study.bench.common import machine_info, median, time_repeats
from rlvr_lib.validation import check, check_int

__all__ = ["OP_GROUPS", "bench_profile", "matmul_replay", "op_group_shares"]

OP_GROUPS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
               "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "copies": ("aten::index_select", "aten::copy_", "aten::cat", "aten::index", "aten::index_put_",
               "aten::masked_scatter", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::fill_",
               "aten::zero_", "aten::empty", "aten::empty_strided"),
    "sampling": ("aten::exponential_", "aten::argmax", "aten::sort", "aten::isin", "aten::multinomial"),
}
"""ATen ops per group; every other op is counted as ``elementwise_and_other`` (norms, rotary, activations,
softmax, views and the dispatcher's per-op cost that shows up in them)."""


def op_group_shares(events) -> dict:
    """Shares of self CPU time per :data:`OP_GROUPS` group (and ``elementwise_and_other``).

    Args:
        events: ``torch.profiler.profile(...).key_averages()`` (objects with
            ``key``, ``self_cpu_time_total`` and ``count``).

    Returns:
        ``{"shares": {group: fraction}, "self_cpu_ms": total, "op_calls": n, "top_ops": [...]}``;
        the shares sum to 1; ``top_ops`` lists the 12 ops with the most self time.
    """
    owner = {op: group for group, ops in OP_GROUPS.items() for op in ops}
    totals = {group: 0.0 for group in (*OP_GROUPS, "elementwise_and_other")}
    rows = [e for e in events if e.key.startswith("aten::")]
    for e in rows:
        totals[owner.get(e.key, "elementwise_and_other")] += e.self_cpu_time_total
    whole = sum(totals.values()) or 1.0
    top = sorted(rows, key=lambda e: -e.self_cpu_time_total)[:12]
    return {
        "shares": {g: t / whole for g, t in totals.items()},
        "self_cpu_ms": whole / 1e3,
        "op_calls": int(sum(e.count for e in rows)),
        "top_ops": [{"op": e.key, "share": e.self_cpu_time_total / whole, "calls": int(e.count),
                     "mean_us": e.self_cpu_time_total / max(e.count, 1)} for e in top],
    }


class _MatmulLog(TorchDispatchMode):
    """Logs ``(op, [(shape, stride) of each tensor argument])`` of every matrix product run under it."""

    OPS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.OPS:
            self.calls.append((func, [(tuple(a.shape), tuple(a.stride())) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def matmul_replay(fn: Callable[[], object], repeats: int) -> dict:
    """Seconds of ``fn``'s matrix products alone: logged once, then replayed ``repeats`` times on fresh tensors.

    Returns:
        ``{"products": n, "gflop": per call, "median_s": replay seconds per call}``.
    """
    log = _MatmulLog()
    with log:
        fn()
    def fresh(shape, stride):  # broadcast operands (stride 0, e.g. addmm's bias) share elements, as logged
        return torch.randn(1 + sum((n - 1) * st for n, st in zip(shape, stride))).as_strided(shape, stride)

    operands = [(func, [fresh(shape, stride) for shape, stride in args]) for func, args in log.calls]
    flop = 0
    for func, args in operands:
        m, k = args[-2].shape[-2:]
        n = args[-1].shape[-1]
        flop += 2 * m * k * n * (args[-2].shape[0] if func is torch.ops.aten.bmm.default else 1)

    def replay():
        for func, args in operands:
            func(*args)

    seconds, _ = time_repeats(replay, warmup=1, repeats=repeats)
    return {"products": len(operands), "gflop": flop / 1e9, "median_s": median(seconds)}


def _profiled(fn: Callable[[], object], calls: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    return op_group_shares(prof.key_averages())


def _decode(model, tokenizer, *, batch, group_size, max_new_tokens, warmup, repeats, seed, compile_decode) -> dict:
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams
    from rlvr_lib.rollout import kvcache
    from rlvr_lib.tasks.arithmetic import family_problems

    prompts = [p.prompt_with(None) for p in family_problems("train", batch // group_size, seed=0)]
    engine = KVCacheEngine(model, tokenizer)
    sampled = SamplingParams(n=group_size, max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
    greedy = SamplingParams(n=1, max_new_tokens=max_new_tokens, greedy=True, seed=seed)
    layers = model.config.num_hidden_layers
    with torch.no_grad():
        seconds, outs = time_repeats(lambda: engine.generate(prompts, sampled), warmup=warmup, repeats=repeats)
        out = outs[-1]
        steps, tokens = int(out.completion_lengths.max()), int(out.completion_mask.sum())
        eager_s = median(seconds)
        result = {
            "lean_decoder": engine.uses_lean_decoder,
            "call_seconds": seconds, "median_s": eager_s, "decode_steps": steps, "tokens": tokens,
            "us_per_layer_per_step": eager_s / (steps * layers) * 1e6,
            "us_per_layer_per_token": eager_s / (tokens * layers) * 1e6,
            "profile": _profiled(lambda: engine.generate(prompts, sampled), repeats),
            "matmul_replay": matmul_replay(lambda: engine.generate(prompts, sampled), repeats),
        }
        result["matmul_replay"]["share_of_call"] = result["matmul_replay"]["median_s"] / eager_s
        if compile_decode and engine.uses_lean_decoder:
            greedy_eager = engine.generate(prompts, greedy).completion_ids
            plain = kvcache._LeanDecoder.forward
            try:
                kvcache._LeanDecoder.forward = torch.compile(plain, dynamic=True)
                t0 = time.perf_counter()
                engine.generate(prompts, sampled)  # compiles
                first = time.perf_counter() - t0
                engine.generate(prompts, greedy)  # the greedy batch's shapes compile too, untimed
                compiled, _ = time_repeats(lambda: engine.generate(prompts, sampled), warmup=warmup, repeats=repeats)
                greedy_equal = torch.equal(engine.generate(prompts, greedy).completion_ids, greedy_eager)
            finally:
                kvcache._LeanDecoder.forward = plain
                torch._dynamo.reset()
            result["compiled"] = {"first_call_s": first, "call_seconds": compiled, "median_s": median(compiled),
                                  "speedup_vs_eager": eager_s / median(compiled), "greedy_tokens_equal": greedy_equal}
    return result


def _step(*, prompts_per_step, group_size, max_new_tokens, warmup, repeats, seed) -> dict:
    from rlvr_lib.study.bench.step import _load_policy, _our_config
    from rlvr_lib.trainer import Trainer

    config = _our_config(prompts_per_step=prompts_per_step, group_size=group_size, max_new_tokens=max_new_tokens,
                         steps=2 * (warmup + repeats), seed=seed)
    model, tokenizer = _load_policy()
    trainer = Trainer(config, model, tokenizer)
    rollout_seconds = []
    generate = trainer.engine.generate

    def timed_generate(*args, **kwargs):
        t0 = time.perf_counter()
        out = generate(*args, **kwargs)
        rollout_seconds.append(time.perf_counter() - t0)
        return out

    trainer.engine.generate = timed_generate  # this trainer's engine only
    seconds, _ = time_repeats(trainer.step, warmup=warmup, repeats=repeats)
    rollout = rollout_seconds[warmup:]
    step_s, rollout_s = median(seconds), median(rollout)
    replay = matmul_replay(trainer.step, repeats)
    return {
        "step_seconds": seconds, "median_s": step_s, "rollout_median_s": rollout_s,
        "rollout_share": rollout_s / step_s, "update_and_rest_median_s": step_s - rollout_s,
        "profile": _profiled(trainer.step, repeats),
        "matmul_replay": {**replay, "share_of_call": replay["median_s"] / step_s},
    }


def bench_profile(*, batch: int = 64, group_size: int = 8, max_new_tokens: int = 64, warmup: int = 1,
                  repeats: int = 5, seed: int = 0, compile_decode: bool = True, threads: int | None = None) -> dict:
    """Decode and GRPO-step time per op group, per layer and per phase (module docstring).

    Args:
        batch: Sequences per rollout (a multiple of ``group_size``); the step uses
            ``batch // group_size`` prompts per step.
        group_size, max_new_tokens, seed: As in :func:`~rlvr_lib.study.bench.rollout.bench_rollout`.
        warmup: Untimed calls before timing (``>= 0``).
        repeats: Timed (and, separately, profiled) calls (``>= 1``).
        compile_decode: Also time the lean decoder under ``torch.compile`` (minutes on 2 cores).
        threads: ``torch.set_num_threads`` during the run (restored after); ``None`` leaves it.

    Returns:
        ``{"decode": {...}, "step": {...}, "settings": {...}, "machine": {...}}``.

    Raises:
        ValueError: On a bad argument, naming it and what is allowed.
    """
    for name, value, lo in (("batch", batch, 1), ("group_size", group_size, 1), ("max_new_tokens", max_new_tokens, 1),
                            ("warmup", warmup, 0), ("repeats", repeats, 1), ("seed", seed, 0)):
        check_int(f"bench_profile: {name}", value, lo)
    check(batch % group_size == 0, "bench_profile: batch", batch, f"a multiple of group_size={group_size}")
    from rlvr_lib.study.bench.step import _load_policy

    previous = torch.get_num_threads()
    if threads is not None:
        check_int("bench_profile: threads", threads, 1)
        torch.set_num_threads(threads)
    try:
        model, tokenizer = _load_policy()
        model.eval()
        decode = _decode(model, tokenizer, batch=batch, group_size=group_size, max_new_tokens=max_new_tokens,
                         warmup=warmup, repeats=repeats, seed=seed, compile_decode=compile_decode)
        step = _step(prompts_per_step=batch // group_size, group_size=group_size, max_new_tokens=max_new_tokens,
                     warmup=warmup, repeats=repeats, seed=seed)
        machine = machine_info()
    finally:
        torch.set_num_threads(previous)
    settings = {"batch": batch, "group_size": group_size, "max_new_tokens": max_new_tokens, "warmup": warmup,
                "repeats": repeats, "seed": seed, "compile_decode": compile_decode,
                "policy": "shipped tiny policy", "layers": model.config.num_hidden_layers,
                "hidden_size": model.config.hidden_size}
    return {"decode": decode, "step": step, "settings": settings, "machine": machine}
