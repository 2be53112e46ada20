"""Step time of each exploration method against the GRPO run it is compared with.

Each paper states its cost relative to plain GRPO (NudgeRL: one extra forward
of the hinted completions; 3PO: one weight sample per sub-group; SAGE: an
entropy-reshaped anchor). `bench_method_steps` measures it: one `Trainer` per
method and per reference, each with its registered preset at the same
prompts per step, G, completion budget and seed, on the shipped tiny policy.
Steps run round-robin (one step of every trainer, then the next), so a change
of machine load during the run hits every method alike; the first ``warmup``
steps are dropped and the median of the rest is reported, with the ratio
method / reference.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from rlvr_lib.study.bench.common import median
from rlvr_lib.validation import check_int, invalid

# Method -> the run its paper compares its cost with (the registered preset of each). SAGE's preset is
# GRPO's (kl_coef 0.05, kl_estimator "reverse") with the branch-guided anchor: the ratio is the guide's cost.
# C3PO (N = 2 weight samples, Seq-MIS, no KL) against `grpo` at the same G (both presets leave G to the
# config; here G = group_size for every trainer): the GRPO every notebook reports, whose reverse-KL anchor
# (beta 0.05) costs a teacher-forced reference forward per step, about what C3PO's Seq-MIS forward at the
# mean weights costs. The ratio is the cost of 3PO against the GRPO it is compared with, as NudgeRL's
# (no KL either) is; against `grpo_no_kl` (the authors' GRPO had no KL) it would be higher by that forward.
# VIGOR (KL 0.01, k3) against `grpo` (KL 0.05, reverse): the same reference forward (the two estimators cost
# the same elementwise work), so the ratio is the per-sample gradient norms' cost (the paper: 3h35m vs 2h34m, 1.4x; no target was set for it).
# B3PO (one weight sample per step) and M3PO (M = 2 samples, each with its own sub-groups) against `grpo` too.
PAIRS = {"nudgerl": "grpo", "sage": "grpo", "b3po": "grpo", "m3po": "grpo", "c3po": "grpo", "vigor": "grpo"}
# Method -> the largest step-time ratio accepted for it (C3PO: "<= 1.6x GRPO's at the same G"; paper ~1.5x).
TARGETS = {"nudgerl": 1.3, "sage": 1.1, "c3po": 1.6}


def bench_method_steps(pairs: Mapping[str, str] | None = None, *, prompts_per_step: int = 8, group_size: int = 8,
                       max_new_tokens: int = 48, warmup: int = 2, repeats: int = 7, seed: int = 0,
                       threads: int | None = None) -> dict:
    """Median seconds per `Trainer.step` of each method and of its reference, and their ratio.

    Args:
        pairs: ``{method: reference}`` (default `PAIRS`), registered method names.
        prompts_per_step, group_size, max_new_tokens, seed: Overrides of every
            preset (the rest of each preset is kept: KL, clip range, top-p, ...).
        warmup: Steps of each trainer dropped before timing, >= 0.
        repeats: Timed steps of each trainer, >= 1.
        threads: ``torch.set_num_threads`` during the run (restored after);
            ``None`` leaves it.

    Returns:
        ``{"steps": {name: {"step_seconds", "median_s", "mean_completion_tokens"}},
        "ratios": {method: {"reference", "ratio", "target", "met"}}, "settings"}``;
        ``target``/``met`` are ``None`` for a method without a `TARGETS` entry.

    Raises:
        ValueError: an unknown method, or an argument out of range.
    """
    from rlvr_lib.methods import METHODS
    from rlvr_lib.study.testbed import calibrated_config
    from rlvr_lib.policy import load_policy
    from rlvr_lib.trainer import Trainer

    pairs = dict(PAIRS if pairs is None else pairs)
    if not pairs:
        raise invalid("bench_method_steps: pairs", pairs, "a non-empty {method: reference} mapping")
    for name in (*pairs, *pairs.values()):
        if name not in METHODS:
            raise invalid("bench_method_steps: pairs", name, f"registered method names, among {sorted(METHODS)}")
    for arg, value, lo in (("prompts_per_step", prompts_per_step, 1), ("group_size", group_size, 2),
                           ("max_new_tokens", max_new_tokens, 1), ("warmup", warmup, 0), ("repeats", repeats, 1),
                           ("seed", seed, 0)):
        check_int(f"bench_method_steps: {arg}", value, lo)
    if threads is not None:
        check_int("bench_method_steps: threads", threads, 1)

    names = list(dict.fromkeys([*pairs.values(), *pairs]))
    previous = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        trainers = {}
        for name in names:
            config = calibrated_config(name, steps=warmup + repeats, prompts_per_step=prompts_per_step,
                                   group_size=group_size, max_new_tokens=max_new_tokens, seed=seed, checkpoint_every=0)
            trainers[name] = Trainer(config, *load_policy(None, device="cpu", dtype=torch.float32))
        seconds = {name: [] for name in names}
        lengths = {name: [] for name in names}
        for _ in range(warmup + repeats):
            for name, trainer in trainers.items():  # round robin: load drift hits every method alike
                t0 = time.perf_counter()
                metrics = trainer.step()
                seconds[name].append(time.perf_counter() - t0)
                lengths[name].append(float(metrics["response_length"]))
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)

    steps = {name: {"step_seconds": seconds[name][warmup:], "median_s": median(seconds[name][warmup:]),
                    "mean_completion_tokens": lengths[name][warmup:]} for name in names}
    ratios = {}
    for method, reference in pairs.items():
        ratio = steps[method]["median_s"] / steps[reference]["median_s"]
        target = TARGETS.get(method)
        ratios[method] = {"reference": reference, "ratio": ratio, "target": target,
                          "met": None if target is None else bool(ratio <= target)}
    settings = {"pairs": pairs, "prompts_per_step": prompts_per_step, "group_size": group_size,
                "max_new_tokens": max_new_tokens, "warmup": warmup, "repeats": repeats, "seed": seed,
                "threads": used_threads, "policy": "tiny (load_policy(None)), one fresh copy per trainer",
                "order": "round robin, one step of each trainer in turn"}
    return {"steps": steps, "ratios": ratios, "settings": settings}
