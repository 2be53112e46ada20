"""VIGOR's verifier-free reward: the norm of a completion's own NLL gradient (arXiv 2605.09920).

For a completion y of prompt x, with l(y) the mean token NLL of y given x at
temperature 1 (EOS included) under the current weights theta,

    g(y) = grad_theta l(y)          (over every trainable parameter, detached)
    S(y) = -sqrt(T) * ||g(y)||_2    (T = |y|, ``sqrt_len``; S = -||g|| without it)

A completion the policy already "agrees with" has a small gradient, so a
larger S is a better completion. The ``sqrt(T)`` factor undoes the ``1/T`` of
the mean NLL, whose gradient norm otherwise falls with length (the paper's
length-hacking ablation removes it).

Two implementations with equal values (float64 accumulation; equal to 1e-6
relative in the tests):

* :func:`grad_norms_naive` -- the reference: one backward per completion
  (``torch.autograd.grad``), N backward passes.
* :func:`grad_norms_vmap` -- ``torch.func.vmap(grad(...))``: per-sample
  gradients in one vectorised pass. The model is called through
  ``torch.func.functional_call`` on one row at a time, with the causal and
  padding mask given as a 4-D additive mask (the Hugging Face mask builder
  branches on data, which ``vmap`` cannot trace). Memory: N copies of the
  gradient (N x parameters floats).
"""

from __future__ import annotations

import warnings

import torch
from torch.func import functional_call, grad, vmap

from rlvr_lib.rollout.logprobs import completion_forward, position_ids_from_mask
from rlvr_lib.validation import check, check_int, invalid

__all__ = ["GRAD_NORM_IMPLS", "grad_norm_scores", "grad_norms_naive", "grad_norms_vmap"]


def _check_rows(prompt_ids, prompt_mask, completion_ids, completion_mask) -> None:
    check(prompt_ids.dim() == 2 and prompt_ids.shape == prompt_mask.shape, "prompt_ids", tuple(prompt_ids.shape),
          f"an (N, P) tensor shaped like prompt_mask {tuple(prompt_mask.shape)}")
    check(completion_ids.dim() == 2 and completion_ids.shape == completion_mask.shape, "completion_ids",
          tuple(completion_ids.shape), f"an (N, T) tensor shaped like completion_mask {tuple(completion_mask.shape)}")
    check(prompt_ids.shape[0] == completion_ids.shape[0], "completion_ids", tuple(completion_ids.shape),
          f"one row per prompt ({prompt_ids.shape[0]})")
    lengths = completion_mask.sum(1)
    if bool((lengths == 0).any()):
        raise invalid("completion_mask", "<a row without tokens>", "at least one completion token per row")


def _trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    if not params:
        raise invalid("model", type(model).__name__, "a model with trainable parameters")
    return params


def _mean_nll(logits: torch.Tensor, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """Per row, the mean NLL of the completion tokens: ``(..., T, V)`` logits -> ``(...)``."""
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    mask = completion_mask.to(logp.dtype)
    return -(logp * mask).sum(-1) / mask.sum(-1)


def grad_norms_naive(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                     completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """``(N,)`` float64 ``||grad_theta l_i||_2``, one backward per row (the reference).

    Args:
        model: A causal LM; its trainable parameters are differentiated.
        prompt_ids, prompt_mask: ``(N, P)``, left-padded.
        completion_ids, completion_mask: ``(N, T)``, right-padded, >= 1 token per row.
    """
    _check_rows(prompt_ids, prompt_mask, completion_ids, completion_mask)
    params = list(_trainable(model).values())
    device = params[0].device
    out = []
    for i in range(prompt_ids.shape[0]):
        rows = [t[i:i + 1].to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask)]
        loss = _mean_nll(completion_forward(model, *rows), rows[2], rows[3])[0]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        out.append(torch.sqrt(sum((g.double() ** 2).sum() for g in grads if g is not None)))
    return torch.stack(out).cpu()


def _row_attention(valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(1, 1, L, L)`` additive mask of one row: causal, padded keys hidden (a padded query sees itself)."""
    length = valid.shape[0]
    allowed = torch.ones(length, length, dtype=torch.bool, device=valid.device).tril() & valid[None, :]
    allowed = allowed | torch.eye(length, dtype=torch.bool, device=valid.device)  # no all-masked row
    return torch.zeros(length, length, dtype=dtype, device=valid.device).masked_fill(
        ~allowed, torch.finfo(dtype).min)[None, None]


def grad_norms_vmap(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                    completion_ids: torch.Tensor, completion_mask: torch.Tensor, *,
                    chunk_size: int | None = None) -> torch.Tensor:
    """``(N,)`` float64 ``||grad_theta l_i||_2`` by ``torch.func.vmap(grad(l))`` over rows.

    The same quantity as :func:`grad_norms_naive` (the same forward: positions
    ``cumsum(mask) - 1``, causal attention over unpadded keys, logits at the
    positions that predict the completion). ``chunk_size`` rows are vectorised
    at a time (``None``: all), bounding memory at ``chunk_size`` x parameters.
    """
    _check_rows(prompt_ids, prompt_mask, completion_ids, completion_mask)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, 1)
    params = {name: p.detach() for name, p in _trainable(model).items()}
    device = next(iter(params.values())).device
    dtype = next(iter(params.values())).dtype
    t_len = completion_ids.shape[1]

    def loss(p, pi, pm, ci, cm):
        ids = torch.cat([pi, ci[:-1]])[None]
        valid = torch.cat([pm, cm[:-1]]).bool()
        logits = functional_call(model, p, args=(), kwargs=dict(
            input_ids=ids, attention_mask=_row_attention(valid, dtype),
            position_ids=position_ids_from_mask(valid[None].long()), use_cache=False)).logits[0, -t_len:]
        return _mean_nll(logits, ci, cm)

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0, 0, 0), chunk_size=chunk_size)
    with warnings.catch_warnings():
        # CPU attention has no vmap batching rule: torch loops over rows there and says so on every call.
        warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented")
        grads = per_sample(params, *(t.to(device) for t in (prompt_ids, prompt_mask, completion_ids,
                                                            completion_mask)))
    return torch.sqrt(sum((g.flatten(1).double() ** 2).sum(1) for g in grads.values())).cpu()


GRAD_NORM_IMPLS = {"naive": grad_norms_naive, "vmap": grad_norms_vmap}


def grad_norm_scores(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                     completion_ids: torch.Tensor, completion_mask: torch.Tensor, *, sqrt_len: bool = True,
                     impl: str = "vmap") -> torch.Tensor:
    """VIGOR's score ``S = -sqrt(T) ||g||`` (``-||g||`` with ``sqrt_len=False``), ``(N,)`` float32.

    Raises:
        ValueError: unknown ``impl`` (``"naive"`` or ``"vmap"``) or malformed rows.
    """
    if impl not in GRAD_NORM_IMPLS:
        raise invalid("impl", impl, f"one of {sorted(GRAD_NORM_IMPLS)}")
    was_training = model.training
    model.eval()  # no dropout: the norm is a function of the weights and the completion
    try:
        norms = GRAD_NORM_IMPLS[impl](model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    finally:
        model.train(was_training)
    if sqrt_len:
        norms = norms * completion_mask.sum(1).double().cpu().sqrt()
    return (-norms).float()
