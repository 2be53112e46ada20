"""Rollout engines: turn prompts into groups of sampled completions.

``SamplingParams``, ``Rollouts`` and the ``RolloutEngine`` protocol (:mod:`.base`); ``BatchedEngine`` (shared
in-process code), ``HFEngine`` (reference), ``KVCacheEngine`` (fast), ``VLLMEngine`` (GPU extra), ``VLLMServerEngine``
(a vLLM server in another process or on another machine); ``ENGINES`` and
``build_engine``; ``sequence_logprobs`` and ``position_ids_from_mask`` (teacher-forced recomputation)."""

from .base import FINISH_REASONS, RolloutEngine, Rollouts, SamplingParams
from .batched import BatchedEngine
from .engines import ENGINES, build_engine
from .hf import HFEngine
from .kvcache import KVCacheEngine
from .logprobs import position_ids_from_mask, sequence_logprobs
from .vllm_engine import VLLMEngine
from .vllm_server import VLLMServerEngine

__all__ = [
    "ENGINES",
    "FINISH_REASONS",
    "BatchedEngine",
    "HFEngine",
    "KVCacheEngine",
    "RolloutEngine",
    "Rollouts",
    "SamplingParams",
    "VLLMEngine",
    "VLLMServerEngine",
    "build_engine",
    "position_ids_from_mask",
    "sequence_logprobs",
]
