"""Triton kernels for the fused log-prob + entropy of :mod:`rlvr_lib.kernels.logprobs`.

Same computation and same gradients as
:func:`rlvr_lib.kernels.logprobs.chunked_logprob_entropy`:

    z = (hidden @ weight.T + bias) / T,   logp = z_t - logZ,   H = logZ - E_p[z]

Forward (fully fused, :func:`_fwd_kernel`): a grid of (row blocks of ``block_n``)
x (``num_splits`` vocabulary splits); each program walks its split in
``block_v``-column tiles (``tl.dot`` over ``block_h`` slices, float32
accumulation) and keeps an online logsumexp in registers::

    m = running max,  s = sum exp(z - m),  a = sum exp(z - m) (z - m),  z_t

No logits tile is written to memory; the (4, num_splits, N) float32 partials are
merged as the torch path's chunk update (``M = max_k m_k``,
``s = sum_k s_k e^{m_k - M}``, ``a = sum_k e^{m_k - M} (a_k + s_k (m_k - M))``).

Backward: the torch path's recompute-per-chunk backward, with
:func:`_dlogits_kernel` turning each chunk's logits in place into::

    dL/dlogits_v = (g_l 1[v = t] - p_v (g_l + g_h (z_v - E_p[z]))) / T

Memory stays O(N * chunk_size). Importable without Triton (``HAS_TRITON`` False;
:func:`triton_logprob_entropy` then raises ``RuntimeError``). Without CUDA the
kernels run under ``TRITON_INTERPRET=1`` (set before import), where bf16 tiles
are upcast to float32 before ``tl.dot`` (``UPCAST_DOT``; the same product).

Design choices and the interpreter in full: docs/library/kernels.md.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr_lib.validation import check, check_int, is_int

from .logprobs import chunked_backward_from_ctx, _validate

try:  # pragma: no cover - depends on the environment
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # ImportError, or a broken install
    triton = None
    tl = None
    HAS_TRITON = False

__all__ = ["HAS_TRITON", "TritonLogProbEntropy", "triton_interpret_mode", "triton_logprob_entropy"]

_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


if HAS_TRITON:

    @triton.jit
    def _fwd_kernel(
        h_ptr, w_ptr, b_ptr, t_ptr, part_ptr,
        N, V, H, v_per_split,
        stride_hn, stride_hh, stride_wv, stride_wh,
        inv_temp,
        HAS_BIAS: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
        INPUT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
    ):
        """Partials (m, s, a, z_t) of rows [pid_n * BLOCK_N, +BLOCK_N) over one vocabulary split.

        part_ptr: (4, num_splits, N) float32, contiguous.
        """
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        num_splits = tl.num_programs(1)
        rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_mask = rows < N
        rows64 = rows.to(tl.int64)
        tgt = tl.load(t_ptr + rows64, mask=row_mask, other=-1)
        v_begin = pid_s * v_per_split
        v_end = tl.minimum(v_begin + v_per_split, V)

        m = tl.full([BLOCK_N], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        a = tl.zeros([BLOCK_N], tl.float32)
        z_t = tl.zeros([BLOCK_N], tl.float32)
        for v0 in range(v_begin, v_end, BLOCK_V):
            cols = v0 + tl.arange(0, BLOCK_V)
            col_mask = cols < v_end
            cols64 = cols.to(tl.int64)
            acc = tl.zeros([BLOCK_N, BLOCK_V], tl.float32)
            for h0 in range(0, H, BLOCK_H):
                hk = h0 + tl.arange(0, BLOCK_H)
                h_mask = hk < H
                x = tl.load(
                    h_ptr + rows64[:, None] * stride_hn + hk[None, :] * stride_hh,
                    mask=row_mask[:, None] & h_mask[None, :], other=0.0,
                )  # (BLOCK_N, BLOCK_H)
                w = tl.load(
                    w_ptr + cols64[None, :] * stride_wv + hk[:, None] * stride_wh,
                    mask=col_mask[None, :] & h_mask[:, None], other=0.0,
                )  # (BLOCK_H, BLOCK_V) = W_tile.T
                if UPCAST_DOT:  # interpreter only: its tl.dot multiplies bf16's raw uint16 bits
                    x = x.to(tl.float32)
                    w = w.to(tl.float32)
                acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
            if HAS_BIAS:
                bias = tl.load(b_ptr + cols64, mask=col_mask, other=0.0).to(tl.float32)
                acc = acc + bias[None, :]
            z = acc * inv_temp
            z = tl.where(col_mask[None, :], z, float("-inf"))
            z_t += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), axis=1)
            m_new = tl.maximum(m, tl.max(z, axis=1))
            # shift by m' (by 0 while every logit so far is -inf: padding / fully masked tile)
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            d = z - m_sub[:, None]
            e = tl.exp(d)
            ed = e * tl.where(e > 0.0, d, 0.0)  # exp(-inf) * -inf -> 0
            r = tl.exp(m - m_sub)
            shift = s * tl.where(s > 0.0, m - m_sub, 0.0)  # s == 0 while m == -inf
            a = r * (a + shift) + tl.sum(ed, axis=1)
            s = r * s + tl.sum(e, axis=1)
            m = m_new

        out = part_ptr + pid_s * N + rows64
        plane = num_splits * N
        tl.store(out, m, mask=row_mask)
        tl.store(out + plane, s, mask=row_mask)
        tl.store(out + 2 * plane, a, mask=row_mask)
        tl.store(out + 3 * plane, z_t, mask=row_mask)

    @triton.jit
    def _dlogits_kernel(
        z_ptr, t_ptr, logz_ptr, ez_ptr, gl_ptr, gh_ptr,
        N, C, stride_zn, v_start, inv_temp,
        HAS_GL: tl.constexpr, HAS_GH: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr,
    ):
        """In place: z (N, C) scaled chunk logits -> dL/dlogits of the chunk (columns v_start + [0, C))."""
        pid_n = tl.program_id(0)
        pid_c = tl.program_id(1)
        rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
        row_mask = rows < N
        mask = row_mask[:, None] & (cols < C)[None, :]
        rows64 = rows.to(tl.int64)
        ptrs = z_ptr + rows64[:, None] * stride_zn + cols[None, :]
        z = tl.load(ptrs, mask=mask, other=0.0)
        logz = tl.load(logz_ptr + rows64, mask=row_mask, other=0.0)
        p = tl.exp(z - logz[:, None])
        coef = tl.zeros([BLOCK_N, BLOCK_C], tl.float32)
        if HAS_GL:
            g_l = tl.load(gl_ptr + rows64, mask=row_mask, other=0.0)
            coef += g_l[:, None]
        if HAS_GH:
            g_h = tl.load(gh_ptr + rows64, mask=row_mask, other=0.0)
            ez = tl.load(ez_ptr + rows64, mask=row_mask, other=0.0)
            coef += g_h[:, None] * (z - ez[:, None])
        dz = -p * tl.where(p > 0.0, coef, 0.0)  # p = 0 (-inf logit): coef may be -inf
        if HAS_GL:
            tgt = tl.load(t_ptr + rows64, mask=row_mask, other=-1)
            hit = (cols[None, :] + v_start) == tgt[:, None]
            dz += tl.where(hit, g_l[:, None], 0.0)
        tl.store(ptrs, dz * inv_temp, mask=mask)


def triton_interpret_mode() -> bool:
    """True when the kernels were built for the Triton interpreter (``TRITON_INTERPRET=1`` at import)."""
    return HAS_TRITON and type(_fwd_kernel).__name__ == "InterpretedFunction"


def _check_runnable(device: torch.device) -> None:
    if not HAS_TRITON:
        raise RuntimeError("triton is not installed (pip install triton); use backend='torch'")
    if device.type != "cuda" and not triton_interpret_mode():
        raise RuntimeError(
            f"the Triton kernels need CUDA tensors (got {device}); on CPU they run only under the "
            "interpreter: set TRITON_INTERPRET=1 before importing rlvr_lib.kernels"
        )


def _dlogits_triton(z, start, targets, logz, ez, g_logp, g_ent, temperature, block_n=32, block_c=128):
    """Drop-in for :func:`rlvr_lib.kernels.logprobs._dlogits_torch`, one fused pass, in place on ``z``."""
    n_rows, width = z.shape
    if n_rows == 0:
        return z
    z = z.contiguous()
    grid = (triton.cdiv(n_rows, block_n), triton.cdiv(width, block_c))
    _dlogits_kernel[grid](
        z, targets, logz, ez,
        g_logp if g_logp is not None else logz,
        g_ent if g_ent is not None else logz,
        n_rows, width, z.stride(0), start, 1.0 / temperature,
        HAS_GL=g_logp is not None, HAS_GH=g_ent is not None,
        BLOCK_N=block_n, BLOCK_C=block_c,
    )
    return z


def _merge_splits(part: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(4, S, N) partials -> (logp, entropy, logZ, E_p[z]), each (N,) float32."""
    m, s, a, z_t = part[0], part[1], part[2], part[3]
    big_m = m.amax(dim=0)  # (N,)
    diff = m - big_m
    r = torch.exp(diff)
    s_tot = (r * s).sum(0)
    a_tot = (r * (a + torch.where(s > 0, s * diff, 0.0))).sum(0)
    log_s = s_tot.log()
    logz = big_m + log_s
    ez = big_m + a_tot / s_tot
    logp = z_t.sum(0) - logz
    entropy = log_s - a_tot / s_tot
    return logp, entropy, logz, ez


def _triton_forward(hidden, weight, bias, targets, temperature, block_n, block_v, block_h, num_splits,
                    input_precision, num_warps, num_stages):
    n_rows, n_hidden = hidden.shape
    vocab = weight.shape[0]
    row_blocks = triton.cdiv(max(n_rows, 1), block_n)
    v_tiles = triton.cdiv(vocab, block_v)
    if num_splits is None:
        if hidden.device.type == "cuda":
            sms = torch.cuda.get_device_properties(hidden.device).multi_processor_count
            num_splits = max(1, min(v_tiles, triton.cdiv(2 * sms, row_blocks)))
        else:
            num_splits = 1
    num_splits = max(1, min(int(num_splits), v_tiles))
    v_per_split = triton.cdiv(v_tiles, num_splits) * block_v  # a whole number of tiles
    num_splits = triton.cdiv(vocab, v_per_split)  # every split non-empty
    part = torch.empty(4, num_splits, n_rows, dtype=torch.float32, device=hidden.device)
    if n_rows > 0:
        launch = {}
        if num_warps is not None:
            launch["num_warps"] = num_warps
        if num_stages is not None:
            launch["num_stages"] = num_stages
        _fwd_kernel[(row_blocks, num_splits)](
            hidden, weight, bias if bias is not None else weight, targets, part,
            n_rows, vocab, n_hidden, v_per_split,
            hidden.stride(0), hidden.stride(1), weight.stride(0), weight.stride(1),
            1.0 / temperature,
            HAS_BIAS=bias is not None,
            BLOCK_N=block_n, BLOCK_V=block_v, BLOCK_H=block_h,
            INPUT_PRECISION=input_precision,
            UPCAST_DOT=triton_interpret_mode() and hidden.dtype == torch.bfloat16,
            **launch,
        )
    return _merge_splits(part)


class TritonLogProbEntropy(torch.autograd.Function):
    """Triton forward, chunked-recompute backward (see the module docstring and
    :class:`rlvr_lib.kernels.logprobs.ChunkedLogProbEntropy` for the gradient formulas)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, kw):  # noqa: D102
        logp, entropy, logz, ez = _triton_forward(hidden, weight, bias, targets, temperature, **kw)
        ctx.save_for_backward(hidden, weight, bias, targets, torch.stack([logz, ez]))
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_logp, g_ent):  # noqa: D102
        return chunked_backward_from_ctx(ctx, g_logp, g_ent, n_extra=4, dlogits_fn=_dlogits_triton)


def triton_logprob_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 4096,
    bias: Tensor | None = None,
    block_n: int = 64,
    block_v: int = 128,
    block_h: int = 64,
    num_splits: int | None = None,
    allow_tf32: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Triton version of :func:`rlvr_lib.kernels.chunked_logprob_entropy` (same math, same outputs).

        z = (hidden @ weight.T + bias) / temperature
        logp[n] = z[n, t_n] - logsumexp_v z[n, v],   entropy[n] = logsumexp_v z[n] - E_softmax(z[n])[z[n]]

    Args:
        hidden: (N, H) (or (..., H)) float16/bfloat16/float32, CUDA (or CPU
            under ``TRITON_INTERPRET=1``).
        weight: (V, H), same dtype and device.
        targets: (N,) (or ``hidden.shape[:-1]``) integer ids in [0, V).
        temperature: > 0.
        chunk_size: vocabulary chunk of the (torch-matmul) backward; peak
            backward memory O(N * chunk_size).
        bias: optional (V,), same dtype.
        block_n, block_v, block_h: forward tile sizes (powers of two >= 16).
        num_splits: vocabulary splits of the forward grid; ``None`` picks
            enough to give ~2 programs per SM on CUDA (1 on the interpreter).
        allow_tf32: let float32 inputs use TF32 tensor cores in the forward
            (faster, ~1e-3 relative error in the logits); default exact fp32.
        num_warps, num_stages: Triton launch options (``None``: Triton's defaults).

    Returns:
        ``(logp, entropy)`` of shape ``targets.shape``, float32, differentiable
        w.r.t. ``hidden``, ``weight`` and ``bias``.

    Raises:
        ValueError: bad shapes / dtypes (float64 is not supported here: use
            the torch path) / block sizes.
        RuntimeError: Triton missing, or CPU tensors without the interpreter.
    """
    n_rows, n_hidden, _ = _validate(hidden, weight, targets, bias, temperature, chunk_size)
    if hidden.dtype not in _TRITON_DTYPES:
        raise ValueError(
            f"hidden dtype {hidden.dtype} is not supported by the Triton kernel (float16/bfloat16/float32)"
        )
    for name, value in (("block_n", block_n), ("block_v", block_v), ("block_h", block_h)):
        check(is_int(value) and value >= 16 and not value & (value - 1), name, value, "a power of two >= 16")
    if num_splits is not None:
        check_int("num_splits", num_splits, 1)
    _check_runnable(hidden.device)
    out_shape = targets.shape
    h2 = hidden.reshape(n_rows, n_hidden)
    t1 = targets.reshape(n_rows).long().contiguous()
    kw = dict(
        block_n=block_n, block_v=block_v, block_h=block_h, num_splits=num_splits,
        # "ieee" = exact fp32 dot for float32 operands; for 16-bit operands the setting is moot
        # (tensor cores with fp32 accumulation either way), so keep Triton's default there.
        input_precision="ieee" if (hidden.dtype == torch.float32 and not allow_tf32) else "tf32",
        num_warps=num_warps, num_stages=num_stages,
    )
    logp, entropy = TritonLogProbEntropy.apply(h2, weight, bias, t1, float(temperature), int(chunk_size), kw)
    if targets.dim() == 1:
        return logp, entropy  # no view node: the outputs' grad_fn is the Function's node
    return logp.reshape(out_shape), entropy.reshape(out_shape)
