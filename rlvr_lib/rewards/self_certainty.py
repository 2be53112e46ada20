"""INTUITOR's verifier-free reward: the policy's self-certainty of its own completion (arXiv 2505.19590).

    r(y) = SC(y) = (1/|y|) sum_t KL(U || pi_theta(. | x, y_<t))
         = (1/|y|) sum_t [logsumexp(z_t) - mean_v z_t - log V]

with z_t the current policy's logits (temperature 1) at the position that
predicts completion token t, EOS included (`rlvr_lib.algos.self_certainty`),
computed under ``no_grad`` in teacher-forced forwards of ``forward_batch_size``
rows.
"""

from __future__ import annotations

import torch

from rlvr_lib.algos import self_certainty
from rlvr_lib.rollout.logprobs import completion_forward

__all__ = ["completion_logits", "self_certainty_rewards"]


def completion_logits(model: torch.nn.Module, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """``(N, T, V)`` float32 logits at the positions that predict the completion tokens.

    :func:`rlvr_lib.rollout.logprobs.completion_forward` (the teacher-forced
    forward of ``sequence_logprobs``) without temperature, on the model's
    device: ``log_softmax(logits)[y_t]`` equals its temperature-1 ``logp``.
    The caller chooses ``no_grad``.
    """
    device = next(model.parameters()).device
    if completion_ids.shape[1] == 0:
        return torch.zeros(completion_ids.shape[0], 0, 0, device=device)
    tensors = (t.to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask))
    return completion_forward(model, *tensors).float()


def self_certainty_rewards(model: torch.nn.Module, rollouts, forward_batch_size: int = 64) -> torch.Tensor:
    """``(N,)`` float32 self-certainty of each completion of ``rollouts`` (a `Rollouts` batch)."""
    out = []
    with torch.no_grad():
        for rows in torch.arange(len(rollouts)).split(forward_batch_size):
            logits = completion_logits(model, rollouts.prompt_ids[rows], rollouts.prompt_mask[rows],
                                       rollouts.completion_ids[rows], rollouts.completion_mask[rows])
            mask = rollouts.completion_mask[rows].to(logits.device)
            out.append(self_certainty(logits, mask).cpu())
    return torch.cat(out).float()
