"""Rollout engines by name (``TrainerConfig.engine``): ``"kvcache"`` (default), ``"hf"``, ``"vllm"`` (imported only when built)."""

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
    """The rollout engine ``name`` over ``model``; ValueError on an unknown name, ImportError for ``"vllm"`` without vLLM."""
    check_choice("engine", name, ENGINES)
    return _CLASSES[name](model, tokenizer, **engine_kwargs)
