"""3PO's Figure 1 measurement through the run cache: :func:`rlvr_lib.eval.weight_noise.branch_reorder` computed
once per (weights, prompts, noise, samples) and stored as a run record, so a notebook re-executed from the
committed cache reads it instead of recomputing it (notebook 04: about 3 minutes per sweep on the CPU).

The record's key is everything the measurement depends on: a sha256 of the model's weights (names, dtypes, shapes,
bytes) and of the prompts, the noise scale ``sigma``, the samples, temperatures, candidate tokens, ``k`` and the
seed. Its ``final`` holds :class:`~rlvr_lib.eval.weight_noise.BranchReorder` as JSON (arrays as nested lists, read
back with their dtypes: floats round-trip exactly through JSON's shortest repr).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from rlvr_lib.eval.weight_noise import BranchReorder, branch_reorder
from rlvr_lib.study.runs import RunRecord, cached_run

__all__ = ["NAME", "cached_branch_reorder", "from_jsonable", "to_jsonable", "weights_sha256"]

NAME = "branch-reorder"
"""The records' run name (``<NAME>-<hash>-s<seed>``)."""
_ARRAYS = ("weight", "temperature", "probs", "weight_probs", "temperature_probs")


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over the model's state dict: each entry's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def to_jsonable(result: BranchReorder) -> dict:
    """``result`` as JSON types (arrays as nested lists, their dtypes under ``"dtypes"``)."""
    out = {name: getattr(result, name).tolist() for name in _ARRAYS}
    out["dtypes"] = {name: str(getattr(result, name).dtype) for name in _ARRAYS}
    out.update(temperatures=list(result.temperatures), sigma=result.sigma, k=result.k, tokens=list(result.tokens))
    return out


def from_jsonable(data: dict) -> BranchReorder:
    """The :class:`BranchReorder` :func:`to_jsonable` wrote."""
    arrays = {name: np.asarray(data[name], dtype=data["dtypes"][name]) for name in _ARRAYS}
    return BranchReorder(**arrays, temperatures=tuple(float(t) for t in data["temperatures"]),
                         sigma=float(data["sigma"]), k=int(data["k"]), tokens=tuple(int(t) for t in data["tokens"]))


def cached_branch_reorder(experiment: str, model, tokenizer, prompts: Sequence[str], *, sigma: float,
                          samples: int, tokens: Sequence[int], k: int, seed: int = 0,
                          temperatures: Sequence[float] = (0.6, 1.0, 1.4), root: str | Path | None = None):
    """:func:`~rlvr_lib.eval.weight_noise.branch_reorder` ``(model, tokenizer, prompts, ...)`` through the run cache
    of ``experiment``; returns its :class:`BranchReorder` (in plan mode, `rlvr_lib.study.plan`, the stand-in record).
    """
    key = {"probe": NAME, "weights_sha256": weights_sha256(model),
           "prompts_sha256": hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest(),
           "prompts": len(prompts), "sigma": float(sigma), "samples": int(samples),
           "temperatures": [float(t) for t in temperatures], "tokens": [int(t) for t in tokens], "k": int(k)}

    def run():
        result = branch_reorder(model, tokenizer, prompts, sigma=sigma, samples=samples, temperatures=temperatures,
                                tokens=tokens, k=k, seed=seed)
        return [], {"branch_reorder": to_jsonable(result)}

    record = cached_run(experiment, NAME, key, seed, run, root=root)
    if not isinstance(record, RunRecord):  # a plan's stand-in (rlvr_lib.study.plan): nothing to read
        return record
    return from_jsonable(record.final["branch_reorder"])
