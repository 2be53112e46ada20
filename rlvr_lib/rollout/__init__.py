"""Rollout engines: turn prompts into groups of sampled completions.

Public API:
    SamplingParams: frozen, validated sampling configuration.
    Rollouts: the batch of completions (ids, masks, sampling log-probs, texts).
    RolloutEngine: the engine protocol (``generate(prompts, params)``).
    HFEngine: the default engine on ``transformers``' ``model.generate``.
    sequence_logprobs: teacher-forced per-token log-probs / entropies (the
        trainer's recomputation of what an engine reports).
    position_ids_from_mask: position ids for left-padded batches.
"""

from .base import FINISH_REASONS, RolloutEngine, Rollouts, SamplingParams
from .hf import HFEngine
from .logprobs import position_ids_from_mask, sequence_logprobs

__all__ = [
    "FINISH_REASONS",
    "HFEngine",
    "RolloutEngine",
    "Rollouts",
    "SamplingParams",
    "position_ids_from_mask",
    "sequence_logprobs",
]
