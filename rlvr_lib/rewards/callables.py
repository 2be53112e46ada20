"""Reward functions as plain callables, with TRL's signature, summed with weights beside or instead of the verifier.

A reward function is ``f(prompts, completions, **columns) -> list[float | None]`` (TRL's ``reward_funcs``): one
value per completion, ``None`` where the function has no reward for that sample. The trainer passes

* ``prompts``: the hint-free prompt of each completion (``Problem.prompt``), ``completions``: the completion texts;
* ``completion_ids``: each completion's token ids (a list of ints, padding removed), as TRL does;
* one keyword column per field of the task's `rlvr_lib.tasks.Problem` (``uid``, ``question``, ``answer``,
  ``family``, ``difficulty``, ``oracle_trace``, ``strategy``, ``operands``; a task's own problem class adds its
  fields), and ``hint`` (the hint the completion was sampled with, or ``None``).

A function should take ``**kwargs`` and read only the columns it needs, as with TRL.

Summing (`combine_rewards`), TRL's rule (``GRPOTrainer._calculate_rewards``): a ``None`` becomes NaN, and the
reward of a sample is the NaN-aware weighted sum ``nansum_f(w_f * r_f)``: a function without a reward for a sample
adds nothing to it; a sample none of the functions rewards gets 0 and a warning. A NaN a function returns counts
as ``None``.

A function is named in a config by its import path ``"module:function"`` (``module.sub:object.attr`` works too),
or by a name it was registered under (`register_reward_func`, e.g. by a plugin).
"""

from __future__ import annotations

import importlib
import logging
import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["REWARD_FUNCS", "RewardFunc", "call_reward_func", "combine_rewards", "register_reward_func",
           "resolve_reward_func", "reward_func_name"]

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., Sequence]
"""``f(prompts, completions, **columns) -> list[float | None]`` (one value per completion)."""

REWARD_FUNCS: dict[str, RewardFunc] = {}
"""Reward functions registered by name (`register_reward_func`); a config may name one instead of an import path."""


def register_reward_func(name: str, func: RewardFunc | None = None):
    """Register ``func`` under ``name`` (usable as ``@register_reward_func("name")``); returns ``func``.

    Raises ValueError for a name already registered to another function, or a name with a ``:`` (import paths'
    separator); TypeError when ``func`` is not callable.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"reward function name {name!r} is invalid: must be a non-empty string without ':' "
                         "(':' separates an import path's module from its function)")

    def add(f: RewardFunc) -> RewardFunc:
        if not callable(f):
            raise TypeError(f"register_reward_func({name!r}): {f!r} is not callable")
        if name in REWARD_FUNCS and REWARD_FUNCS[name] is not f:
            raise ValueError(f"reward function {name!r} is already registered (to {REWARD_FUNCS[name]!r})")
        REWARD_FUNCS[name] = f
        return f

    return add if func is None else add(func)


def resolve_reward_func(spec: str | RewardFunc) -> RewardFunc:
    """The callable named by ``spec``: a registered name, or an import path ``"module:function"``; a callable as is.

    Raises ValueError naming ``spec`` when it is neither, the module cannot be imported, the attribute is missing or
    is not callable.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"reward function {spec!r} is invalid: must be a callable, a registered name "
                         f"({sorted(REWARD_FUNCS)}) or an import path 'module:function'")
    if spec in REWARD_FUNCS:
        return REWARD_FUNCS[spec]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        from rlvr_lib.plugins import HOW_TO_IMPORT, load_entry_points

        load_entry_points()  # once per process: an installed package's rewards (`rlvr_lib.plugins`)
        if spec in REWARD_FUNCS:
            return REWARD_FUNCS[spec]
        raise ValueError(f"reward function {spec!r} is not registered (registered: {sorted(REWARD_FUNCS)}) and is "
                         f"not an import path 'module:function'; to add one, {HOW_TO_IMPORT}")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"reward function {spec!r}: cannot import module {module_name!r} ({err}); make it "
                         "importable (on PYTHONPATH, installed, or with the command line's --import)") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"reward function {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"reward function {spec!r}: {attr!r} in {module_name!r} is not callable "
                         f"({type(obj).__name__})")
    return obj


def reward_func_name(func: RewardFunc) -> str:
    """A short name for logs: the function's ``__name__`` (a partial's function's, else its class's)."""
    inner = getattr(func, "func", func)  # functools.partial
    return getattr(inner, "__name__", type(inner).__name__)


def call_reward_func(func: RewardFunc, prompts: list[str], completions: list[str], name: str | None = None,
                     **columns) -> np.ndarray:
    """``func(prompts, completions, **columns)`` as a float64 array, ``None`` (and NaN) as NaN.

    Raises TypeError naming the function when it returns something other than a sequence (list, tuple, 1-d array
    or tensor) of real numbers or ``None``, and ValueError when its length is not one per completion.
    """
    name = name or reward_func_name(func)
    out = func(prompts=prompts, completions=completions, **columns)
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().cpu().numpy()
    if isinstance(out, np.ndarray):
        if out.ndim != 1:
            raise TypeError(f"reward function {name!r} returned an array of shape {out.shape}: must return a list "
                            f"of {len(completions)} floats or None, one per completion")
        out = out.tolist()
    if isinstance(out, (str, bytes)) or not isinstance(out, Sequence):
        raise TypeError(f"reward function {name!r} returned {type(out).__name__}: must return a list of "
                        f"{len(completions)} floats or None, one per completion")
    if len(out) != len(completions):
        raise ValueError(f"reward function {name!r} returned {len(out)} rewards, but {len(completions)} were "
                         "expected (one per prompt-completion pair)")
    values = np.empty(len(out), dtype=np.float64)
    for i, r in enumerate(out):
        if r is None:
            values[i] = math.nan
        elif isinstance(r, numbers.Real) and not isinstance(r, bool):
            values[i] = float(r)
        else:
            raise TypeError(f"reward function {name!r} returned {r!r} ({type(r).__name__}) for completion {i}: "
                            "each reward must be a real number (int or float) or None")
    if np.isinf(values).any():
        i = int(np.flatnonzero(np.isinf(values))[0])
        raise ValueError(f"reward function {name!r} returned {values[i]} for completion {i}: rewards must be finite "
                         "(None or NaN for no reward)")
    return values


def combine_rewards(per_func: np.ndarray, weights: Sequence[float], names: Sequence[str] | None = None) -> np.ndarray:
    """TRL's weighted NaN-aware sum of ``per_func`` ``(N, F)`` over its columns: ``nansum_f(w_f * r_f)``, ``(N,)``.

    A row with no reward at all (every column NaN) gets 0 and a logged warning naming the functions, as TRL does.
    """
    per_func = np.asarray(per_func, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if per_func.ndim != 2 or per_func.shape[1] != len(weights):
        raise ValueError(f"combine_rewards: rewards of shape {per_func.shape} do not match {len(weights)} weights")
    empty = np.isnan(per_func).all(axis=1)
    if empty.any():
        logger.warning("%d of %d completions got no reward from any reward function (%s): their reward is 0; make "
                       "sure at least one function returns a value for every completion", int(empty.sum()),
                       len(per_func), ", ".join(names or []))
    return np.nansum(per_func * weights[None, :], axis=1)
