"""Seeded random streams: every random draw of a run is a function of a key such as (seed, step, stream).

Nothing in the loop or a method reads or reseeds the global torch RNG. Code
that must draw from it (a library that calls ``torch.randn``, e.g. IVON's
weight noise) runs inside :func:`forked_torch_rng`, which seeds a forked copy
from the key and restores the global state afterwards.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch

__all__ = ["forked_torch_rng", "seed_from", "torch_generator"]


def seed_from(*key: int) -> int:
    """A 32-bit seed derived from the integer ``key`` (``np.random.SeedSequence(key)``'s first word)."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0])


def torch_generator(*key: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded by :func:`seed_from` ``(*key)``."""
    return torch.Generator(device=device).manual_seed(seed_from(*key))


@contextlib.contextmanager
def forked_torch_rng(*key: int) -> Iterator[None]:
    """Inside: the global torch RNG (CPU and CUDA) seeded by :func:`seed_from` ``(*key)``; outside: untouched."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed_from(*key))
        yield
