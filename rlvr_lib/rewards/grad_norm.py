"""VIGOR's verifier-free reward: the norm of a completion's own NLL gradient (arXiv 2605.09920).

For a completion y of prompt x, with l(y) the mean token NLL of y given x at
temperature 1 (EOS included) under the current weights theta,

    g(y) = grad_theta l(y)          (over every trainable parameter, detached)
    S(y) = -sqrt(T) * ||g(y)||_2    (T = |y|, ``sqrt_len``; S = -||g|| without it)

A completion the policy already "agrees with" has a small gradient, so a
larger S is a better completion. The ``sqrt(T)`` factor undoes the ``1/T`` of
the mean NLL, whose gradient norm otherwise falls with length (the paper's
length-hacking ablation removes it).

Three implementations with equal values (equal to 1e-5 relative in the tests):

* :func:`grad_norms_naive` -- the reference: one backward per completion
  (``torch.autograd.grad``), N backward passes.
* :func:`grad_norms_ghost` -- one batched backward with hooks, norms from
  the layers' inputs and output gradients without building per-sample
  gradients (Llama-family models: linear, embedding, RMSNorm; tied weights).
* :func:`grad_norms_vmap` -- ``torch.func.vmap(grad(...))``: per-sample
  gradients in one vectorised pass. The model is called through
  ``torch.func.functional_call`` on one row at a time, with the causal and
  padding mask given as a 4-D additive mask (the Hugging Face mask builder
  branches on data, which ``vmap`` cannot trace). Memory: N copies of the
  gradient (N x parameters floats).
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import torch
from torch.func import functional_call, grad, vmap

from rlvr_lib.rollout.logprobs import completion_forward, position_ids_from_mask
from rlvr_lib.validation import check, check_int, invalid

__all__ = ["GRAD_NORM_IMPLS", "ghost_supported", "grad_norm_scores", "grad_norms_ghost", "grad_norms_naive",
           "grad_norms_vmap"]


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


def _is_rmsnorm(module: torch.nn.Module) -> bool:
    """A Llama-family RMSNorm: ``weight * (x * rsqrt(mean(x^2) + variance_epsilon))`` (Qwen2, Llama, Qwen3)."""
    return (type(module).__name__.endswith("RMSNorm") and getattr(module, "weight", None) is not None
            and module.weight.dim() == 1 and hasattr(module, "variance_epsilon"))

def grad_norms_ghost(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                     completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """``(N,)`` float64 ``||grad_theta l_i||_2`` from ONE batched backward, without per-sample gradients.

    Rows are independent (attention stays within a row), so the backward of
    ``sum_i l_i`` gives, at every module, row i's share of its gradient.
    Hooks keep each parameter-owning module's input ``a`` and output
    gradient ``g``; a row's gradient is then a sum over its tokens t, and its
    squared norm is taken without building it ("ghost norms"):

    * linear weight ``sum_t g_t a_t^T``: ``||.||^2 = sum_{t,s} (g_t . g_s)(a_t . a_s)``;
    * linear bias ``sum_t g_t``; RMSNorm weight ``sum_t g_t * xhat_t`` (small: built);
    * embedding ``sum_t e_{x_t} g_t^T``: ``sum_{t,s} [x_t = x_s] (g_t . g_s)``;
    * a parameter used by several modules (tied input/output embeddings) adds
      the cross terms ``2 <G_1, G_2>``, e.g. ``sum_{t,s} b_s[x_t] (g_t . a_s)``
      between the embedding and the LM head.

    Cost: one forward and backward of the batch plus ``O(N T^2 (d_in + d_out))``
    per linear layer. Supported parameter owners: ``nn.Linear``,
    ``nn.Embedding`` and Llama-family RMSNorm (Qwen2, Llama, Qwen3); anything
    else (e.g. GPT-2's ``Conv1D``, ``LayerNorm``) raises ``ValueError``, and
    `grad_norm_scores` with ``impl="auto"`` then uses :func:`grad_norms_naive`.
    """
    _check_rows(prompt_ids, prompt_mask, completion_ids, completion_mask)
    owners = defaultdict(list)
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                owners[id(p)].append((module, pname))
    modules = {id(m): m for lst in owners.values() for m, _ in lst}
    unsupported = sorted({type(m).__name__ for m in modules.values()
                          if not isinstance(m, (torch.nn.Linear, torch.nn.Embedding)) and not _is_rmsnorm(m)})
    if unsupported:
        raise invalid("model", type(model).__name__, "a model whose parameters all sit in nn.Linear, nn.Embedding or "
                      f"Llama-family RMSNorm modules for ghost norms (found {unsupported}; use impl='naive')")
    saved_in, saved_gout = {}, {}

    def keep(module, inputs, output):  # the input now, the output's gradient when the backward reaches it
        saved_in[id(module)] = inputs[0].detach()
        output.register_hook(lambda grad, key=id(module): saved_gout.__setitem__(key, grad.detach()))

    handles = [m.register_forward_hook(keep) for m in modules.values()]
    try:
        device = next(model.parameters()).device
        rows = [t.to(device) for t in (prompt_ids, prompt_mask, completion_ids, completion_mask)]
        loss = _mean_nll(completion_forward(model, *rows), rows[2], rows[3]).sum()
        # autograd.grad, not backward: the hooks see the output gradients and no .grad is touched.
        torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    N = prompt_ids.shape[0]
    sq = torch.zeros(N, dtype=torch.float64)

    def flat(t):
        return t.reshape(N, -1, t.shape[-1]).float()

    for pid, lst in owners.items():
        # Each owner's per-sample gradient in a "factored" form: ("outer", G (N,T,o), A (N,T,i)) for sum_t g_t a_t^T,
        # ("rows", ids (N,T), G (N,T,d)) for an embedding, ("dense", V (N, ...)) otherwise.
        parts = []
        for m, pname in lst:
            x, g = saved_in[id(m)], saved_gout[id(m)]
            if isinstance(m, torch.nn.Linear):
                parts.append(("outer", flat(g), flat(x)) if pname == "weight" else ("dense", flat(g).sum(1)))
            elif isinstance(m, torch.nn.Embedding):
                parts.append(("rows", x.reshape(N, -1), flat(g)))
            else:
                xf = x.float()
                normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + m.variance_epsilon)).to(x.dtype)
                parts.append(("dense", (flat(g) * flat(normed)).sum(1)))
        for i, p in enumerate(parts):
            for j, q in enumerate(parts[i:], start=i):
                sq += (1.0 if i == j else 2.0) * _inner(p, q).double()
    return sq.sqrt().cpu()


def _inner(p, q):
    """Per-sample Frobenius inner product <P_n, Q_n> of two factored per-sample gradients, (N,)."""
    kinds = (p[0], q[0])
    if kinds == ("dense", "dense"):
        return (p[1] * q[1]).flatten(1).sum(1)
    if kinds == ("outer", "outer"):  # <sum_t g_t a_t^T, sum_s h_s b_s^T> = sum_{t,s} (g_t.h_s)(a_t.b_s)
        return ((p[1] @ q[1].transpose(1, 2)) * (p[2] @ q[2].transpose(1, 2))).sum((1, 2))
    if kinds == ("rows", "rows"):  # <sum_t e_{x_t} g_t^T, sum_s e_{y_s} h_s^T> = sum_{t,s} [x_t = y_s] (g_t.h_s)
        same = (p[1][:, :, None] == q[1][:, None, :]).float()
        return (same * (p[2] @ q[2].transpose(1, 2))).sum((1, 2))
    if kinds == ("outer", "rows"):
        p, q = q, p
    if (p[0], q[0]) == ("rows", "outer"):  # <sum_t e_{x_t} g_t^T, sum_s b_s a_s^T> = sum_{t,s} b_s[x_t] (g_t.a_s)
        ids, g = p[1], p[2]
        b_at_ids = torch.gather(q[1], 2, ids[:, None, :].expand(-1, q[1].shape[1], -1))  # (N, S, T): b_s[x_t]
        return (b_at_ids.transpose(1, 2) * (g @ q[2].transpose(1, 2))).sum((1, 2))
    raise ValueError(f"no inner product between {kinds}")


def ghost_supported(model: torch.nn.Module) -> bool:
    """Whether :func:`grad_norms_ghost` handles every trainable parameter of ``model``."""
    return all(isinstance(m, (torch.nn.Linear, torch.nn.Embedding)) or _is_rmsnorm(m)
               for m in model.modules() if any(p.requires_grad for p in m.parameters(recurse=False)))


GRAD_NORM_IMPLS = {"naive": grad_norms_naive, "vmap": grad_norms_vmap, "ghost": grad_norms_ghost}


def grad_norm_scores(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                     completion_ids: torch.Tensor, completion_mask: torch.Tensor, *, sqrt_len: bool = True,
                     impl: str = "auto") -> torch.Tensor:
    """VIGOR's score ``S = -sqrt(T) ||g||`` (``-||g||`` with ``sqrt_len=False``), ``(N,)`` float32.

    ``impl``: ``"ghost"``, ``"naive"``, ``"vmap"`` (equal values), or ``"auto"``
    (default): ghost norms when every parameter owner supports them
    (:func:`ghost_supported`), else the naive loop (e.g. GPT-2's ``Conv1D``
    and ``LayerNorm``). The fallback is the loop, not ``vmap``, for memory:
    ``vmap`` materialises one full gradient per row at once (N x parameters
    floats: 64 completions of a 0.5B model are 32B floats, 128 GB in
    float32), while the loop holds one gradient at a time (one backward's
    memory). Ask for ``impl="vmap"`` where that memory is there (or call
    :func:`grad_norms_vmap` with ``chunk_size`` to bound it).

    Raises:
        ValueError: unknown ``impl`` or malformed rows.
    """
    if impl not in (*GRAD_NORM_IMPLS, "auto"):
        raise invalid("impl", impl, f"one of {sorted((*GRAD_NORM_IMPLS, 'auto'))}")
    if impl == "auto":
        impl = "ghost" if ghost_supported(model) else "naive"
    was_training = model.training
    model.eval()  # no dropout: the norm is a function of the weights and the completion
    try:
        with torch.enable_grad():  # a caller may hold no_grad (a sharded trainer's rollout scope)
            norms = GRAD_NORM_IMPLS[impl](model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    finally:
        model.train(was_training)
    if sqrt_len:
        norms = norms * completion_mask.sum(1).double().cpu().sqrt()
    return (-norms).float()
