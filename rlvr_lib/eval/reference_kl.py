"""How far a policy has moved from a reference: per-token KL on the policy's own samples.

Measured the same way for a run trained with a KL anchor (``kl_coef * KL(pi || pi_ref)``) or without one."""

from __future__ import annotations

from typing import Sequence

import torch

from rlvr_lib.rollout import SamplingParams
from rlvr_lib.rollout.logprobs import sequence_logprobs
from rlvr_lib.tasks import Problem
from rlvr_lib.validation import invalid


@torch.no_grad()
def reference_kl(engine, reference: torch.nn.Module, problems: Sequence[Problem], params: SamplingParams) -> dict:
    """Per-token KL(pi || pi_ref) of the engine's policy from ``reference``, on samples ``y ~ pi`` (mask ``m``)::

        KL_hat = sum_{n,t} m[n,t] (log pi(y_t | .) - log pi_ref(y_t | .)) / sum_{n,t} m[n,t]

    The k1 estimator (Schulman 2020); ``params`` must have temperature 1 and top_p 1 (else ValueError).
    Returns ``{"kl_per_token", "kl_per_sequence", "n_sequences", "n_tokens"}``."""
    problems = list(problems)
    if not problems:
        raise invalid("problems", problems, "a non-empty sequence of problems")
    if params.temperature != 1.0 or params.top_p != 1.0:
        raise invalid("params", params, "SamplingParams with temperature=1 and top_p=1 (samples from the policy itself)")
    rollouts = engine.generate([p.prompt for p in problems], params)
    device = next(reference.parameters()).device
    ro = rollouts.to(device)
    ref_logp, _ = sequence_logprobs(reference, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    mask = ro.completion_mask.to(ref_logp.dtype)
    per_token = (ro.logprobs.to(ref_logp.dtype) - ref_logp) * mask
    n_tokens = float(mask.sum())
    return {
        "kl_per_token": float(per_token.sum() / mask.sum().clamp(min=1)),
        "kl_per_sequence": float(per_token.sum(1).mean()),
        "n_sequences": len(rollouts),
        "n_tokens": int(n_tokens),
    }
