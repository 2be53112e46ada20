"""Teacher-forced log-probabilities of completions under a causal LM.

This is the trainer's side of the rollout contract: the log-probs an engine
returns at sampling time are what :func:`sequence_logprobs` recomputes (with
the same temperature) from the same ids, up to floating-point noise.
"""

from __future__ import annotations

import inspect

import torch

__all__ = ["sequence_logprobs", "position_ids_from_mask"]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded sequences.

    ``cumsum(mask) - 1`` clamped at 0, so the first real token of every row has
    position 0 whatever its padding. This is what ``transformers``'
    ``generate`` builds from the attention mask
    (``GenerationMixin._prepare_position_ids_for_generation``), whereas a plain
    ``forward`` without ``position_ids`` (Qwen2 in transformers 5) uses
    ``arange(L)`` and would shift the rotary positions of left-padded rows.

    Args:
        attention_mask: ``(N, L)`` 0/1 mask.

    Returns:
        ``(N, L)`` long position ids.
    """
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return False


def sequence_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of completions, teacher-forced.

    One forward pass over ``[prompt; completion[:, :-1]]`` (the last completion
    token predicts nothing) with attention mask ``[prompt_mask;
    completion_mask]`` and explicit position ids ``cumsum(mask) - 1`` (clamped
    at 0) so left padding does not shift positions. Only the ``T`` positions
    that predict completion tokens go through the LM head (``logits_to_keep``
    when the model supports it) and the log-softmax, in float32. Gradients
    flow to the model parameters; the caller chooses ``train()``/``eval()``
    mode and ``torch.no_grad()``.

    Formulas, for completion token ``y_t`` with logits ``z_t``::

        logp[n, t]    = log softmax(z_t / temperature)[y_t]
        entropy[n, t] = -sum_v p_v log p_v,  p = softmax(z_t / temperature)

    Args:
        model: A causal LM returning ``.logits`` (e.g. ``Qwen2ForCausalLM``).
        prompt_ids: ``(N, P)`` long, LEFT-padded, ``P >= 1``.
        prompt_mask: ``(N, P)`` 0/1, 1 on real prompt tokens.
        completion_ids: ``(N, T)`` long, RIGHT-padded.
        completion_mask: ``(N, T)`` 0/1, 1 on real completion tokens.
        temperature: Temperature dividing the logits, ``> 0``.
        with_entropy: Also return per-token entropies.

    Returns:
        ``(logp, entropy)``: ``logp`` is ``(N, T)`` float32, 0 where
        ``completion_mask`` is 0; ``entropy`` is ``(N, T)`` float32 (0 on
        padding) if ``with_entropy`` else ``None``.

    Raises:
        ValueError: On inconsistent shapes, an empty prompt width, or a
            non-positive temperature.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if prompt_ids.dim() != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(
            f"prompt_ids {tuple(prompt_ids.shape)} and prompt_mask {tuple(prompt_mask.shape)} "
            "must be the same (N, P) shape"
        )
    if completion_ids.dim() != 2 or completion_ids.shape != completion_mask.shape:
        raise ValueError(
            f"completion_ids {tuple(completion_ids.shape)} and completion_mask "
            f"{tuple(completion_mask.shape)} must be the same (N, T) shape"
        )
    if completion_ids.shape[0] != prompt_ids.shape[0]:
        raise ValueError(f"prompt rows {prompt_ids.shape[0]} != completion rows {completion_ids.shape[0]}")
    if prompt_ids.shape[1] < 1:
        raise ValueError("prompt width P must be >= 1 (the first completion token needs a context)")

    n_rows, t_len = completion_ids.shape
    device = prompt_ids.device
    if t_len == 0:
        empty = torch.zeros(n_rows, 0, device=device, dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)

    input_ids = torch.cat([prompt_ids, completion_ids[:, :-1]], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1).long()
    position_ids = position_ids_from_mask(attention_mask)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    if _accepts_logits_to_keep(model):
        logits = model(**kwargs, logits_to_keep=t_len).logits
    else:
        logits = model(**kwargs).logits[:, -t_len:]
    # (N, T, V): position P-1+t predicts completion token t.
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    mask = completion_mask.to(log_probs.dtype)
    logp = log_probs.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1) * mask
    entropy = None
    if with_entropy:
        entropy = -(log_probs.exp() * log_probs).sum(-1) * mask
    return logp, entropy
