"""Fused log-prob + entropy of an LM head over a large vocabulary (torch reference).

For hidden states ``h`` (N, H), an LM head ``W`` (V, H) (optionally a bias
``b`` (V,)), targets ``t`` (N,) and a temperature ``T``, with ``p = softmax(z)``::

    z_v = (h . W_v + b_v) / T                                    (N, V)
    logp_t = z_t - logZ,          logZ = log sum_v exp(z_v)
    H      = -sum_v p_v log p_v = logZ - E_p[z],   E_p[z] = sum_v p_v z_v.

:func:`chunked_logprob_entropy` never builds the (N, V) logits: it walks the
vocabulary in chunks of ``chunk_size`` columns with an online logsumexp, and
backward recomputes each chunk's logits (extra memory O(N * chunk_size)). Per
row, after the chunks seen so far::

    m = max_v z_v,   s = sum_v exp(z_v - m),   a = sum_v exp(z_v - m) (z_v - m)

A new chunk with max ``c`` gives ``m' = max(m, c)``, ``r = exp(m - m')`` and::

    s' = r s + sum_chunk exp(z_v - m')
    a' = r (a + s (m - m')) + sum_chunk exp(z_v - m') (z_v - m')

and at the end ``logZ = m + log s``, ``E_p[z] = m + a / s``, ``H = log s - a / s``.
Gradients, with ``g_l = dL/dlogp`` and ``g_h = dL/dH``::

    dL/dz_v = g_l (1[v = t] - p_v) - g_h p_v (z_v - E_p[z]),   dL/dlogits = dL/dz / T

Why chunk, and the gradient derivation: docs/library/kernels.md.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr_lib.validation import check_int, check_range

__all__ = [
    "ChunkedLogProbEntropy",
    "chunked_logprob_entropy",
    "naive_logprob_entropy",
]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# --------------------------------------------------------------------------- validation


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation (and output) dtype: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _validate(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    bias: Tensor | None,
    temperature: float,
    chunk_size: int | None,
) -> tuple[int, int, int]:
    """Check the arguments; return ``(N, H, V)`` (N = product of the leading dims).

    Raises:
        ValueError: naming the offending argument, its value/shape/dtype and
            what is allowed.
    """
    if not isinstance(hidden, Tensor):
        raise ValueError(f"hidden must be a torch.Tensor, got {type(hidden).__name__}")
    if not isinstance(weight, Tensor):
        raise ValueError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if not isinstance(targets, Tensor):
        raise ValueError(f"targets must be a torch.Tensor, got {type(targets).__name__}")
    if hidden.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"hidden must be float16/bfloat16/float32/float64, got dtype {hidden.dtype}")
    if hidden.dim() < 2:
        raise ValueError(f"hidden must have shape (N, H) (or (..., H)), got shape {tuple(hidden.shape)}")
    if weight.dim() != 2:
        raise ValueError(f"weight must have shape (V, H), got shape {tuple(weight.shape)}")
    if weight.dtype != hidden.dtype:
        raise ValueError(f"weight dtype {weight.dtype} must equal hidden dtype {hidden.dtype}")
    n_hidden = hidden.shape[-1]
    vocab = weight.shape[0]
    if n_hidden < 1:
        raise ValueError(f"hidden must have a non-empty last (hidden) dim, got shape {tuple(hidden.shape)}")
    if weight.shape[1] != n_hidden:
        raise ValueError(
            f"weight must have shape (V, H={n_hidden}) to match hidden {tuple(hidden.shape)}, "
            f"got {tuple(weight.shape)}"
        )
    if vocab < 1:
        raise ValueError(f"weight must have at least one vocabulary row, got shape {tuple(weight.shape)}")
    if weight.device != hidden.device:
        raise ValueError(f"weight is on {weight.device} but hidden is on {hidden.device}")
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        raise ValueError(f"targets must be an integer tensor, got dtype {targets.dtype}")
    if tuple(targets.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(
            f"targets must have shape {tuple(hidden.shape[:-1])} (hidden's leading dims), got {tuple(targets.shape)}"
        )
    if targets.device != hidden.device:
        raise ValueError(f"targets is on {targets.device} but hidden is on {hidden.device}")
    if bias is not None:
        if not isinstance(bias, Tensor):
            raise ValueError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if tuple(bias.shape) != (vocab,):
            raise ValueError(f"bias must have shape (V={vocab},), got {tuple(bias.shape)}")
        if bias.dtype != hidden.dtype:
            raise ValueError(f"bias dtype {bias.dtype} must equal hidden dtype {hidden.dtype}")
        if bias.device != hidden.device:
            raise ValueError(f"bias is on {bias.device} but hidden is on {hidden.device}")
    check_range("temperature", temperature, 0, lo_open=True)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, 1)
    n_rows = targets.numel()
    if n_rows > 0:
        # One host sync; an out-of-range target would otherwise silently give logp = -logZ.
        t_min, t_max = int(targets.min()), int(targets.max())
        if t_min < 0 or t_max >= vocab:
            raise ValueError(f"targets must lie in [0, V={vocab}), got values in [{t_min}, {t_max}]")
    return n_rows, n_hidden, vocab


# --------------------------------------------------------------------------- reference


def naive_logprob_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    *,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Reference: materialise the full (N, V) log-softmax (plain autograd).

        z = (hidden @ weight.T + bias) / temperature          (N, V), float32
        logp = log_softmax(z)[n, targets[n]]
        entropy = -sum_v exp(log_softmax(z)) * log_softmax(z)

    Uses O(N * V) memory (and autograd keeps it for backward); use it only
    for tests and small vocabularies.

    Args:
        hidden: (N, H) or (..., H), float16/bfloat16/float32/float64.
        weight: (V, H), same dtype as ``hidden``.
        targets: (N,) (or hidden's leading dims) integer ids in [0, V).
        temperature: > 0; the logits are divided by it.
        bias: optional (V,), same dtype.

    Returns:
        ``(logp, entropy)``, each of shape ``targets.shape``, in float32
        (float64 for float64 inputs).
    """
    _validate(hidden, weight, targets, bias, temperature, None)
    acc = _acc_dtype(hidden.dtype)
    logits = hidden.to(acc) @ weight.to(acc).T
    if bias is not None:
        logits = logits + bias.to(acc)
    logsm = torch.log_softmax(logits / float(temperature), dim=-1)
    logp = logsm.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    p = logsm.exp()
    entropy = -(p * logsm.masked_fill(p == 0, 0.0)).sum(-1)
    return logp, entropy


# --------------------------------------------------------------------------- chunked core


def _chunk_logits(h: Tensor, weight: Tensor, bias: Tensor | None, start: int, end: int, temperature: float) -> Tensor:
    """Scaled logits z = (h @ W[start:end].T + b[start:end]) / T of one chunk, (N, end - start), h's dtype."""
    z = h @ weight[start:end].to(h.dtype).T
    if bias is not None:
        z += bias[start:end].to(h.dtype)
    if temperature != 1.0:
        z /= temperature
    return z


def _chunked_forward(
    h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, temperature: float, chunk_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Online logsumexp over vocabulary chunks.

    Args:
        h: (N, H) in the accumulation dtype.
        weight, bias: the LM head (any float dtype; chunks are upcast).
        targets: (N,) int64.

    Returns:
        ``(logp (N,), entropy (N,), stats (2, N))`` in h's dtype, with
        ``stats = [logZ; E_p[z]]`` (what backward needs besides the inputs).
    """
    n_rows = h.shape[0]
    vocab = weight.shape[0]
    acc = h.dtype
    m = s = a = None
    z_t = torch.zeros(n_rows, dtype=acc, device=h.device)
    for start in range(0, vocab, chunk_size):
        end = min(start + chunk_size, vocab)
        z = _chunk_logits(h, weight, bias, start, end, temperature)  # (N, c)
        # Target logit, if the target falls in this chunk.
        in_chunk = (targets >= start) & (targets < end)
        idx = (targets - start).clamp_(0, end - start - 1).unsqueeze(1)
        z_t += torch.where(in_chunk, z.gather(1, idx).squeeze(1), 0.0)
        c_max = z.amax(dim=1)
        if m is None:
            m_new = c_max
        else:
            m_new = torch.maximum(m, c_max)
        # Shift by m' (by 0 while every logit so far is -inf, i.e. a fully masked chunk).
        m_sub = torch.where(m_new == float("-inf"), 0.0, m_new)
        d = z.sub_(m_sub.unsqueeze(1))  # z - m', in place: (N, c)
        e = d.exp()
        ed = e * d
        ed.masked_fill_(e == 0, 0.0)  # exp(-inf) * -inf -> 0 for masked (-inf) logits
        if m is None:
            s = e.sum(1)
            a = ed.sum(1)
        else:
            r = torch.exp(m - m_sub)
            shift = torch.where(s > 0, s * (m - m_sub), 0.0)  # s == 0 while m == -inf
            a = r * (a + shift) + ed.sum(1)
            s = r * s + e.sum(1)
        m = m_new
        del z, d, e, ed
    log_s = s.log()
    logz = m + log_s
    ez = m + a / s
    logp = z_t - logz
    entropy = log_s - a / s
    return logp, entropy, torch.stack([logz, ez])


def _dlogits_torch(
    z: Tensor,
    start: int,
    targets: Tensor,
    logz: Tensor,
    ez: Tensor,
    g_logp: Tensor | None,
    g_ent: Tensor | None,
    temperature: float,
) -> Tensor:
    """dL/dlogits of one chunk, in place on ``z`` (the chunk's scaled logits, (N, c)).

        dL/dz_v = g_l (1[v = t] - p_v) - g_h p_v (z_v - E_p[z]),   dL/dlogits = dL/dz / T
    """
    width = z.shape[1]
    p = torch.exp(z - logz.unsqueeze(1))
    if g_ent is not None:
        # coef_v = g_l + g_h (z_v - E_p[z])
        coef = z.sub_(ez.unsqueeze(1)).mul_(g_ent.unsqueeze(1))
        if g_logp is not None:
            coef += g_logp.unsqueeze(1)
        dz = coef.mul_(p).neg_()
        dz.masked_fill_(p == 0, 0.0)  # -inf logits: p = 0 and z - E[z] = -inf
    else:
        dz = p.mul_(g_logp.unsqueeze(1)).neg_()
    if g_logp is not None:
        # + g_l at the target column; rows whose target is in another chunk add 0 (no host sync).
        in_chunk = (targets >= start) & (targets < start + width)
        idx = (targets - start).clamp_(0, width - 1).unsqueeze(1)
        dz.scatter_add_(1, idx, torch.where(in_chunk, g_logp, 0.0).unsqueeze(1))
    if temperature != 1.0:
        dz /= temperature
    return dz


def _chunked_backward(
    h: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    stats: Tensor,
    g_logp: Tensor | None,
    g_ent: Tensor | None,
    temperature: float,
    chunk_size: int,
    need_h: bool,
    need_w: bool,
    need_b: bool,
    dlogits_fn=_dlogits_torch,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Recompute each chunk's logits and accumulate the gradients.

    Returns ``(grad_h (N, H) acc dtype, grad_w (V, H) weight dtype, grad_b (V,) bias dtype)``,
    ``None`` where not needed.
    """
    n_rows, n_hidden = h.shape
    vocab = weight.shape[0]
    logz, ez = stats[0], stats[1]
    grad_h = torch.zeros_like(h) if need_h else None
    grad_w = torch.empty_like(weight) if need_w else None
    grad_b = torch.empty_like(bias) if need_b else None
    for start in range(0, vocab, chunk_size):
        end = min(start + chunk_size, vocab)
        z = _chunk_logits(h, weight, bias, start, end, temperature)
        dz = dlogits_fn(z, start, targets, logz, ez, g_logp, g_ent, temperature)  # (N, c), acc dtype
        if need_h:
            grad_h.addmm_(dz, weight[start:end].to(h.dtype))
        if need_w:
            if weight.dtype == h.dtype:
                torch.mm(dz.T, h, out=grad_w[start:end])
            else:
                grad_w[start:end] = (dz.T @ h).to(weight.dtype)
        if need_b:
            grad_b[start:end] = dz.sum(0).to(bias.dtype)
        del z, dz
    return grad_h, grad_w, grad_b


class ChunkedLogProbEntropy(torch.autograd.Function):
    """Autograd function for :func:`chunked_logprob_entropy` on flattened (N, H) inputs.

    Forward saves only the inputs and two (N,) statistics, ``logZ`` and
    ``E_p[z]`` (no (N, V) tensor); backward recomputes each chunk's logits.

    Gradients (per row; z = logits / T, p = softmax(z), t the target; derived in
    docs/library/kernels.md), with ``g_l = dL/dlogp`` and ``g_h = dL/dH``::

          dlogp/dz_v = 1[v = t] - p_v,   dH/dz_v = -p_v (z_v - E_p[z])
          dL/dz_v = g_l 1[v = t] - p_v (g_l + g_h (z_v - E_p[z]))
          dL/dlogits = dL/dz / T
          dL/dhidden = (dL/dlogits) @ W          (N, H), summed over chunks
          dL/dW      = (dL/dlogits).T @ hidden    (V, H), one block per chunk
          dL/db      = sum_n dL/dlogits           (V,)

    Double backward is not supported (``once_differentiable``).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size):  # noqa: D102
        acc = _acc_dtype(hidden.dtype)
        h = hidden.to(acc)
        logp, entropy, stats = _chunked_forward(h, weight, bias, targets, temperature, chunk_size)
        ctx.save_for_backward(hidden, weight, bias, targets, stats)
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_logp, g_ent):  # noqa: D102
        return chunked_backward_from_ctx(ctx, g_logp, g_ent, n_extra=3)


def chunked_backward_from_ctx(ctx, g_logp, g_ent, *, n_extra: int, dlogits_fn=_dlogits_torch) -> tuple:
    """The ``backward`` of the chunked autograd Functions (torch and Triton).

    ``ctx`` saved ``(hidden, weight, bias, targets, stats)`` and holds
    ``temperature`` and ``chunk_size``; the Function's inputs are ``hidden,
    weight, bias`` then ``n_extra`` non-differentiable ones. Upstream gradients
    are cast to the accumulation dtype (``stats``'), each chunk's logits are
    recomputed and ``dlogits_fn`` turns them into dL/dlogits.

    Returns:
        ``(grad_hidden, grad_weight, grad_bias)`` followed by ``n_extra`` ``None``.
    """
    hidden, weight, bias, targets, stats = ctx.saved_tensors
    need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
    extra = (None,) * n_extra
    if (g_logp is None and g_ent is None) or not (need_h or need_w or need_b):
        return (None, None, None) + extra
    acc = stats.dtype
    g_logp = None if g_logp is None else g_logp.to(acc).contiguous()
    g_ent = None if g_ent is None else g_ent.to(acc).contiguous()
    grad_h, grad_w, grad_b = _chunked_backward(
        hidden.to(acc), weight, bias, targets, stats, g_logp, g_ent,
        ctx.temperature, ctx.chunk_size, need_h, need_w, need_b and bias is not None,
        dlogits_fn=dlogits_fn,
    )
    if grad_h is not None:
        grad_h = grad_h.to(hidden.dtype)
    return (grad_h, grad_w, grad_b) + extra


def chunked_logprob_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 4096,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Log-prob of ``targets`` and entropy under softmax(hidden @ weight.T / T), chunked over V.

        z = (hidden @ weight.T + bias) / temperature
        logp[n] = z[n, t_n] - logsumexp_v z[n, v]
        entropy[n] = logsumexp_v z[n, v] - sum_v softmax(z[n])_v z[n, v]

    Equal to :func:`naive_logprob_entropy` (to float32 rounding), with exact gradients for both
    outputs, in O(N * chunk_size) extra memory (module docstring). Matmuls and accumulation run
    in float32 (float64 for float64 inputs): ``hidden`` upcast once, ``weight`` per chunk.

    Args:
        hidden: (N, H) (or (..., H)) float16/bfloat16/float32/float64 hidden
            states (the LM head input).
        weight: (V, H) LM-head weight, same dtype as ``hidden``.
        targets: (N,) (or ``hidden.shape[:-1]``) integer ids in [0, V).
        temperature: > 0; logits are divided by it (sampling temperature).
        chunk_size: vocabulary columns per chunk (>= 1; may exceed V).
        bias: optional (V,) LM-head bias, same dtype.

    Returns:
        ``(logp, entropy)``, each of shape ``targets.shape``, float32
        (float64 for float64 inputs); differentiable w.r.t. ``hidden``,
        ``weight`` and ``bias``.

    Raises:
        ValueError: on a wrong shape, dtype, device, target range,
            temperature or chunk size (the message names the argument).
    """
    n_rows, n_hidden, _ = _validate(hidden, weight, targets, bias, temperature, chunk_size)
    out_shape = targets.shape
    h2 = hidden.reshape(n_rows, n_hidden)
    t1 = targets.reshape(n_rows).long()
    logp, entropy = ChunkedLogProbEntropy.apply(h2, weight, bias, t1, float(temperature), int(chunk_size))
    if targets.dim() == 1:
        return logp, entropy  # no view node: the outputs' grad_fn is the Function's node
    return logp.reshape(out_shape), entropy.reshape(out_shape)
