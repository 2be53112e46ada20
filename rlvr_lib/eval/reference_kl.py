"""How far a policy has moved from a reference policy: per-token KL on the policy's own samples.

The KL anchor of GRPO-style training (``kl_coef * KL(pi || pi_ref)``) is meant
to keep the trained policy near the base; whether it does is a measurement,
not a setting. This module measures it the same way for any policy, trained
with an anchor or without one (a run with ``kl_coef = 0`` loads no reference
and logs no KL), so the two are comparable.
"""

from __future__ import annotations

from typing import Sequence

import torch

from rlvr_lib.rollout import SamplingParams
from rlvr_lib.rollout.logprobs import sequence_logprobs
from rlvr_lib.tasks import Problem
from rlvr_lib.validation import invalid


@torch.no_grad()
def reference_kl(engine, reference: torch.nn.Module, problems: Sequence[Problem], params: SamplingParams) -> dict:
    """Per-token KL(pi || pi_ref) of the engine's policy ``pi`` from ``reference``, on samples of ``pi``.

    With ``y ~ pi`` sampled at temperature 1 (no top-p) and ``m`` the completion mask::

        KL_hat = sum_{n,t} m[n,t] (log pi(y_t | .) - log pi_ref(y_t | .)) / sum_{n,t} m[n,t]

    the k1 estimator (Schulman, "Approximating KL divergence", 2020): unbiased
    for the token-averaged KL of the sampled sequences, and exactly 0 when
    ``pi = pi_ref``. ``log pi`` comes from the engine (its sampling log-probs),
    ``log pi_ref`` from a teacher-forced pass of ``reference``. Also returned
    is the sequence-level mean ``sum_t m (log pi - log pi_ref)`` per completion.

    Args:
        engine: A rollout engine of the policy (``engine.generate(prompts, params)``).
        reference: The reference causal LM (same tokenizer as the engine's policy).
        problems: Prompts to sample from (hint-free).
        params: Sampling; ``temperature`` must be 1 and ``top_p`` 1, so that the
            engine's log-probs are the policy's and the samples come from it.

    Returns:
        ``{"kl_per_token", "kl_per_sequence", "n_sequences", "n_tokens"}``.

    Raises:
        ValueError: on no problems, or sampling that is not from ``pi`` itself.
    """
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
