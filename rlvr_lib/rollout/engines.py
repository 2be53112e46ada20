"""Rollout engines by name (``TrainerConfig.engine``): ``"kvcache"`` (default), ``"hf"``, ``"vllm"`` (imported only when
built), ``"vllm-server"`` (a vLLM server in another process or machine: `rlvr_lib.rollout.vllm_server`)."""

from __future__ import annotations

from rlvr_lib.validation import check_choice

from .base import RolloutEngine
from .hf import HFEngine
from .kvcache import KVCacheEngine
from .vllm_engine import VLLMEngine
from .vllm_server import VLLMServerEngine

__all__ = ["ENGINES", "build_engine"]

_CLASSES = {"kvcache": KVCacheEngine, "hf": HFEngine, "vllm": VLLMEngine, "vllm-server": VLLMServerEngine}

ENGINES = tuple(_CLASSES)
"""Engine names, in the order ``("kvcache", "hf", "vllm", "vllm-server")``."""


def build_engine(name: str, model, tokenizer, **engine_kwargs) -> RolloutEngine:
    """The rollout engine ``name`` over ``model``; ValueError on an unknown name, ImportError for ``"vllm"`` without vLLM;
    ``"vllm-server"`` reads its server's URL from ``RLVR_VLLM_SERVER_URL`` unless ``engine_kwargs`` name it."""
    check_choice("engine", name, ENGINES)
    return _CLASSES[name](model, tokenizer, **engine_kwargs)
