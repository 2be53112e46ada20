"""What the benchmarks share: medians, timing, the machine's description.

Arguments are checked with :mod:`rlvr_lib.validation`, naming the value
``"<benchmark>: <argument>"``, e.g. ``bench_rollout: repeats=0 is invalid: must
be an integer >= 1``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlvr_lib.validation import check, check_int

__all__ = ["check_rollout_args", "machine_info", "median", "time_repeats"]


def check_rollout_args(bench: str, *, batch: int, group_size: int, extra_ints: dict[str, tuple[int, int]],
                       choices: Sequence[str], allowed: Sequence[str], choices_name: str) -> None:
    """The argument checks both rollout benchmarks share.

    ``batch`` and ``group_size`` are integers >= 1 with ``batch`` a multiple
    of ``group_size``; every ``extra_ints`` entry ``name: (value, lowest)`` is
    an integer >= ``lowest``; ``choices`` is a non-empty subset of ``allowed``.

    Raises:
        ValueError: naming ``"<bench>: <argument>"`` and what is allowed.
    """
    for name, (value, lo) in {"batch": (batch, 1), "group_size": (group_size, 1), **extra_ints}.items():
        check_int(f"{bench}: {name}", value, lo)
    check(batch % group_size == 0, f"{bench}: batch", batch, f"a multiple of group_size={group_size}")
    unknown = [c for c in choices if c not in allowed]
    check(len(choices) > 0 and not unknown, f"{bench}: {choices_name}", choices,
          f"a non-empty subset of {tuple(allowed)}")


def median(values: Sequence[float]) -> float:
    """The median as a float."""
    return float(statistics.median(values))


def time_engines_alternating(engines: dict, prompts: list[str], params, *, warmup: int,
                             repeats: int) -> dict[str, dict]:
    """Rollout throughput of each engine on the same call, the engines taking turns in every repeat.

    Taking turns lets every engine see the same machine state (a background load hits all of them alike).

    Returns:
        ``{name: {"seconds": [per timed call], "median_s", "tokens_per_call", "tokens_per_s"}}``.
    """
    timings: dict[str, list[float]] = {name: [] for name in engines}
    tokens: dict[str, int] = {}
    for repeat in range(warmup + repeats):
        for name, engine in engines.items():
            t0 = time.perf_counter()
            rollouts = engine.generate(prompts, params)
            if repeat >= warmup:
                timings[name].append(time.perf_counter() - t0)
                tokens[name] = int(rollouts.completion_mask.sum())
    row = {}
    for name in engines:
        med = median(timings[name])
        row[name] = {"seconds": timings[name], "median_s": med, "tokens_per_call": tokens[name],
                     "tokens_per_s": tokens[name] / med}
    return row


def time_repeats(fn: Callable[[], Any], *, warmup: int, repeats: int) -> tuple[list[float], list[Any]]:
    """Call ``fn`` ``warmup`` times untimed, then ``repeats`` times timed with ``perf_counter``.

    Returns:
        ``(seconds, results)`` of the timed calls.
    """
    for _ in range(warmup):
        fn()
    seconds, results = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        results.append(fn())
        seconds.append(time.perf_counter() - t0)
    return seconds, results


def machine_info() -> dict:
    """Where a benchmark ran: CPU, core count, torch threads, library versions, GPU if any."""
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
