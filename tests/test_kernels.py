"""Tests for ``rlvr_lib.kernels``: chunked log-prob + entropy against the naive reference.

All cases are tiny (V <= 5000) so the file runs in seconds on one thread. The
Triton kernels are checked under ``TRITON_INTERPRET=1`` in a subprocess
(Triton picks interpreter vs compiler when ``@triton.jit`` runs, i.e. at
import, so the flag cannot be flipped inside this process).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rlvr_lib.kernels import (
    HAS_TRITON,
    chunked_logprob_entropy,
    logprob_entropy,
    naive_logprob_entropy,
    triton_interpret_mode,
    triton_logprob_entropy,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def _case(n, h, v, *, seed=0, dtype=torch.float32, with_bias=False, w_scale=0.5):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g).to(dtype)
    weight = (torch.randn(v, h, generator=g) * w_scale).to(dtype)
    targets = torch.randint(0, v, (n,), generator=g)
    bias = (torch.randn(v, generator=g) * 0.5).to(dtype) if with_bias else None
    return hidden, weight, targets, bias


# (N, H, V, chunk_size, temperature, bias)
FORWARD_CASES = [
    (8, 16, 128, 32, 1.0, False),  # V divisible by chunk
    (13, 8, 257, 64, 0.7, True),  # V not divisible by chunk, T < 1
    (5, 12, 50, 128, 1.0, False),  # chunk > V (one chunk)
    (9, 6, 37, 1, 1.5, True),  # chunk of one column
    (6, 32, 5000, 1024, 2.0, True),  # larger vocabulary, T > 1
]


@pytest.mark.parametrize("n,h,v,chunk,temp,with_bias", FORWARD_CASES)
def test_forward_matches_naive(n, h, v, chunk, temp, with_bias):
    hidden, weight, targets, bias = _case(n, h, v, with_bias=with_bias)
    logp, ent = chunked_logprob_entropy(hidden, weight, targets, temperature=temp, chunk_size=chunk, bias=bias)
    ref_logp, ref_ent = naive_logprob_entropy(hidden, weight, targets, temp, bias=bias)
    assert logp.shape == ent.shape == (n,)
    assert logp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-6)
    assert (logp <= 0).all() and (ent >= -1e-6).all() and (ent <= torch.log(torch.tensor(float(v))) + 1e-5).all()


def test_naive_matches_definition():
    hidden, weight, targets, _ = _case(4, 3, 7)
    logp, ent = naive_logprob_entropy(hidden, weight, targets, 0.5)
    probs = torch.softmax(hidden @ weight.T / 0.5, dim=-1)
    torch.testing.assert_close(logp, probs[torch.arange(4), targets].log())
    torch.testing.assert_close(ent, -(probs * probs.log()).sum(-1))


def test_leading_dims_and_empty():
    hidden, weight, targets, _ = _case(12, 8, 40)
    logp, ent = chunked_logprob_entropy(hidden.view(3, 4, 8), weight, targets.view(3, 4), chunk_size=16)
    ref_logp, ref_ent = chunked_logprob_entropy(hidden, weight, targets, chunk_size=16)
    assert logp.shape == ent.shape == (3, 4)
    torch.testing.assert_close(logp.reshape(-1), ref_logp, rtol=0, atol=0)
    torch.testing.assert_close(ent.reshape(-1), ref_ent, rtol=0, atol=0)
    e_logp, e_ent = chunked_logprob_entropy(hidden[:0], weight, targets[:0], chunk_size=16)
    assert e_logp.shape == e_ent.shape == (0,)


def test_bfloat16_inputs_accumulate_in_float32():
    hidden, weight, targets, bias = _case(10, 16, 300, dtype=torch.bfloat16, with_bias=True)
    hidden.requires_grad_()
    weight.requires_grad_()
    logp, ent = chunked_logprob_entropy(hidden, weight, targets, chunk_size=64, bias=bias, temperature=0.9)
    assert logp.dtype == ent.dtype == torch.float32
    # The naive reference upcasts the same bf16 values, so the two agree to float32 rounding.
    ref_logp, ref_ent = naive_logprob_entropy(hidden, weight, targets, 0.9, bias=bias)
    torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-6)
    gh, gw = torch.autograd.grad((logp + ent).sum(), [hidden, weight])
    assert gh.dtype == gw.dtype == torch.bfloat16
    rh, rw = torch.autograd.grad((ref_logp + ref_ent).sum(), [hidden, weight])
    torch.testing.assert_close(gh, rh, rtol=1e-2, atol=1e-2)  # bf16 rounding of the final grads
    torch.testing.assert_close(gw, rw, rtol=1e-2, atol=1e-2)


def test_masked_vocabulary_with_minus_inf_bias():
    """-inf logits (a masked vocabulary entry) contribute p = 0 and give finite values and grads."""
    masked = list(range(8)) + [17, 29]  # the whole first chunk, and two more
    hidden, weight, targets, bias = _case(7, 6, 30, with_bias=True)
    bias[masked] = float("-inf")
    targets = targets.clamp(8, 28)
    targets[targets == 17] = 18
    hidden.requires_grad_()
    logp, ent = chunked_logprob_entropy(hidden, weight, targets, chunk_size=8, bias=bias)
    keep = [i for i in range(30) if i not in masked]
    remap = torch.full((30,), -1, dtype=torch.long)
    remap[keep] = torch.arange(len(keep))
    ref_logp, ref_ent = naive_logprob_entropy(hidden, weight[keep], remap[targets], 1.0, bias=bias[keep])
    torch.testing.assert_close(logp, ref_logp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-5, atol=1e-6)
    (g,) = torch.autograd.grad((logp + ent).sum(), [hidden])
    (rg,) = torch.autograd.grad((ref_logp + ref_ent).sum(), [hidden])
    assert torch.isfinite(g).all()
    torch.testing.assert_close(g, rg, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- backward

BACKWARD_CASES = [
    (8, 16, 128, 32, 1.0, False),
    (13, 8, 257, 64, 0.7, True),
    (5, 12, 50, 128, 1.0, True),
    (6, 24, 3001, 512, 1.3, False),
]


@pytest.mark.parametrize("n,h,v,chunk,temp,with_bias", BACKWARD_CASES)
def test_backward_matches_naive(n, h, v, chunk, temp, with_bias):
    hidden, weight, targets, bias = _case(n, h, v, with_bias=with_bias, seed=1)
    g = torch.Generator().manual_seed(2)
    coef_l, coef_h = torch.randn(n, generator=g), torch.randn(n, generator=g)
    inputs = [hidden.requires_grad_(), weight.requires_grad_()] + ([bias.requires_grad_()] if with_bias else [])

    logp, ent = chunked_logprob_entropy(hidden, weight, targets, temperature=temp, chunk_size=chunk, bias=bias)
    grads = torch.autograd.grad((coef_l * logp + coef_h * ent).sum(), inputs)
    ref_logp, ref_ent = naive_logprob_entropy(hidden, weight, targets, temp, bias=bias)
    ref_grads = torch.autograd.grad((coef_l * ref_logp + coef_h * ref_ent).sum(), inputs)
    # rtol 1e-5 / atol 1e-6 is near float32's floor for these cancellation-heavy sums (the naive
    # float32 gradients themselves differ from float64 by up to ~0.7 of it over 30 seeds); the
    # fixed seeds here use at most a quarter of the tolerance.
    for got, want in zip(grads, ref_grads):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", ["logp", "entropy"])
def test_backward_single_output(which):
    """Only one output used: the other's upstream grad is None (no materialised zeros) and is skipped."""
    hidden, weight, targets, _ = _case(7, 10, 90, seed=3)
    hidden.requires_grad_()
    weight.requires_grad_()
    idx = 0 if which == "logp" else 1
    out = chunked_logprob_entropy(hidden, weight, targets, chunk_size=32, temperature=0.8)[idx]
    grads = torch.autograd.grad(out.sum(), [hidden, weight])
    ref = naive_logprob_entropy(hidden, weight, targets, 0.8)[idx]
    ref_grads = torch.autograd.grad(ref.sum(), [hidden, weight])
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_entropy_gradient_formula():
    """With W = I (H = V) the logits are the hidden states: dH/dh = -p (z - E_p[z]) / T exactly."""
    v, temp = 9, 0.6
    hidden = torch.randn(5, v, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    hidden.requires_grad_()
    weight = torch.eye(v, dtype=torch.float64)
    targets = torch.zeros(5, dtype=torch.long)
    _, ent = chunked_logprob_entropy(hidden, weight, targets, temperature=temp, chunk_size=4)
    (g,) = torch.autograd.grad(ent.sum(), [hidden])
    z = hidden.detach() / temp
    p = torch.softmax(z, dim=-1)
    expected = -p * (z - (p * z).sum(-1, keepdim=True)) / temp
    torch.testing.assert_close(g, expected, rtol=1e-12, atol=1e-12)
    assert g.sum(-1).abs().max() < 1e-12  # shift invariance of H


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(11, 5, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(11, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 11, (6,), generator=g)

    def fn(h, w, b):
        return chunked_logprob_entropy(h, w, targets, temperature=0.8, chunk_size=4, bias=b)

    assert torch.autograd.gradcheck(fn, (hidden, weight, bias))
    assert torch.autograd.gradcheck(lambda h, w, b: fn(h, w, b)[1], (hidden, weight, bias))


def test_no_grad_for_frozen_weight():
    hidden, weight, targets, _ = _case(4, 6, 20)
    hidden.requires_grad_()
    logp, ent = chunked_logprob_entropy(hidden, weight, targets, chunk_size=8)
    (logp.sum() + ent.sum()).backward()
    assert hidden.grad is not None and weight.grad is None


# --------------------------------------------------------------------------- memory (no timings)


def test_no_vocab_sized_tensor_saved_for_backward():
    n, h, v, chunk = 16, 8, 1000, 128
    hidden, weight, targets, bias = _case(n, h, v, with_bias=True)
    hidden.requires_grad_()
    weight.requires_grad_()
    saved = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, ent = chunked_logprob_entropy(hidden, weight, targets, chunk_size=chunk, bias=bias)
    assert saved, "the hook saw nothing"
    assert set(saved) <= {(n, h), (v, h), (v,), (n,), (2, n)}, saved
    # The same view from the autograd node itself.
    shapes = [tuple(t.shape) for t in logp.grad_fn.saved_tensors if t is not None]
    assert all(torch.Size(s).numel() < n * v for s in shapes), shapes

    # The probe does see the (N, V) tensor the naive path keeps alive.
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        naive_logprob_entropy(hidden, weight, targets, 1.0, bias=bias)
    assert (n, v) in saved


def test_peak_intermediate_is_chunk_sized():
    """Every tensor produced in forward + backward is O(N * chunk), O(V * H) or O(N * H), never O(N * V)."""
    dispatch = pytest.importorskip("torch.utils._python_dispatch")

    class ShapeRecorder(dispatch.TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numels = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.numels.append(t.numel())
            return out

    n, h, v, chunk = 64, 8, 3000, 256  # N*V = 192000; V*H = 24000; N*chunk = 16384
    hidden, weight, targets, _ = _case(n, h, v)
    hidden.requires_grad_()
    weight.requires_grad_()
    rec = ShapeRecorder()
    with rec:
        logp, ent = chunked_logprob_entropy(hidden, weight, targets, chunk_size=chunk)
        (logp.sum() + 0.3 * ent.sum()).backward()
    assert rec.numels and max(rec.numels) <= max(v * h, n * chunk, n * h)

    rec = ShapeRecorder()
    with rec:
        naive_logprob_entropy(hidden, weight, targets, 1.0)
    assert max(rec.numels) >= n * v  # the probe does catch a full materialisation


# --------------------------------------------------------------------------- validation


def _bad(**overrides):
    hidden, weight, targets, _ = _case(4, 6, 10)
    kw = dict(hidden=hidden, weight=weight, targets=targets, temperature=1.0, chunk_size=4, bias=None)
    kw.update(overrides)
    return kw


BAD_ARGS = [
    ("hidden", dict(hidden=torch.randn(6))),
    ("hidden", dict(hidden=torch.randint(0, 3, (4, 6)))),
    ("hidden", dict(hidden=[[0.0] * 6] * 4)),
    ("weight", dict(weight=torch.randn(10, 5))),
    ("weight", dict(weight=torch.randn(10, 6, 1))),
    ("weight", dict(weight=torch.randn(10, 6, dtype=torch.float64))),
    ("targets", dict(targets=torch.zeros(4))),
    ("targets", dict(targets=torch.zeros(5, dtype=torch.long))),
    ("targets", dict(targets=torch.tensor([0, 1, 2, 10]))),
    ("targets", dict(targets=torch.tensor([0, -1, 2, 3]))),
    ("bias", dict(bias=torch.randn(9))),
    ("bias", dict(bias=torch.randn(10, dtype=torch.float64))),
    ("temperature", dict(temperature=0.0)),
    ("temperature", dict(temperature=float("nan"))),
    ("temperature", dict(temperature=True)),
    ("chunk_size", dict(chunk_size=0)),
    ("chunk_size", dict(chunk_size=2.5)),
]


@pytest.mark.parametrize("name,overrides", BAD_ARGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD_ARGS)])
def test_validation_errors_name_the_argument(name, overrides):
    kw = _bad(**overrides)
    with pytest.raises(ValueError, match=name):
        chunked_logprob_entropy(
            kw["hidden"], kw["weight"], kw["targets"],
            temperature=kw["temperature"], chunk_size=kw["chunk_size"], bias=kw["bias"],
        )


# --------------------------------------------------------------------------- dispatcher


def test_dispatcher_backends_on_cpu():
    hidden, weight, targets, bias = _case(6, 8, 70, with_bias=True)
    ref = chunked_logprob_entropy(hidden, weight, targets, temperature=0.9, chunk_size=16, bias=bias)
    for backend in ("auto", "torch"):  # auto on CPU tensors -> the torch chunked path
        out = logprob_entropy(hidden, weight, targets, temperature=0.9, chunk_size=16, backend=backend, bias=bias)
        torch.testing.assert_close(out[0], ref[0], rtol=0, atol=0)
        torch.testing.assert_close(out[1], ref[1], rtol=0, atol=0)
    naive = logprob_entropy(hidden, weight, targets, temperature=0.9, backend="naive", bias=bias)
    torch.testing.assert_close(naive[0], ref[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"^backend='cuda' is invalid: must be one of \[.*'torch'"):
        logprob_entropy(hidden, weight, targets, backend="cuda")
    if not triton_interpret_mode():
        with pytest.raises(RuntimeError, match="[Tt]riton"):
            logprob_entropy(hidden, weight, targets, backend="triton")


def test_triton_validation():
    hidden, weight, targets, _ = _case(4, 6, 10)
    with pytest.raises(ValueError, match=r"^block_v=48 is invalid: must be a power of two >= 16$"):
        triton_logprob_entropy(hidden, weight, targets, block_v=48)
    with pytest.raises(ValueError, match="dtype"):
        triton_logprob_entropy(hidden.double(), weight.double(), targets)


# --------------------------------------------------------------------------- Triton (interpreter)

_TRITON_SCRIPT = textwrap.dedent(
    """
    import torch
    from rlvr_lib.kernels import chunked_logprob_entropy, triton_interpret_mode, triton_logprob_entropy

    assert triton_interpret_mode(), "kernels were not built for the interpreter"
    tiles = dict(block_n=16, block_v=32, block_h=16)

    def case(n, h, v, seed, dtype=torch.float32, with_bias=False):
        g = torch.Generator().manual_seed(seed)
        hid = torch.randn(n, h, generator=g).to(dtype)
        w = (torch.randn(v, h, generator=g) * 0.5).to(dtype)
        t = torch.randint(0, v, (n,), generator=g)
        b = (torch.randn(v, generator=g) * 0.5).to(dtype) if with_bias else None
        return hid, w, t, b

    # (N, H, V, T, splits, bias): N and H not multiples of the tiles, V not a multiple of block_v.
    for n, h, v, temp, splits, with_bias in [
        (21, 24, 150, 0.7, None, False),
        (21, 24, 150, 1.0, 3, True),
        (16, 16, 32, 1.5, 4, True),   # more splits asked than tiles
        (5, 40, 97, 1.0, 2, False),
    ]:
        hid, w, t, b = case(n, h, v, seed=n + v, with_bias=with_bias)
        lp, en = triton_logprob_entropy(hid, w, t, temperature=temp, bias=b, num_splits=splits, **tiles)
        rlp, ren = chunked_logprob_entropy(hid, w, t, temperature=temp, bias=b, chunk_size=64)
        torch.testing.assert_close(lp, rlp, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(en, ren, rtol=1e-5, atol=1e-6)

        # backward: Triton dlogits kernel + chunked matmuls vs the torch path
        ins = [x.clone().requires_grad_() for x in (hid, w) + ((b,) if with_bias else ())]
        bb = ins[2] if with_bias else None
        g = torch.Generator().manual_seed(7)
        cl, ch = torch.randn(n, generator=g), torch.randn(n, generator=g)
        lp, en = triton_logprob_entropy(ins[0], ins[1], t, temperature=temp, bias=bb, num_splits=splits,
                                        chunk_size=40, **tiles)
        got = torch.autograd.grad((cl * lp + ch * en).sum(), ins)
        rlp, ren = chunked_logprob_entropy(ins[0], ins[1], t, temperature=temp, bias=bb, chunk_size=40)
        want = torch.autograd.grad((cl * rlp + ch * ren).sum(), ins)
        # Looser than forward: logZ / E_p[z] come from the kernel's own summation order, which moves
        # every p_v by ~1 ulp, and the gradients are sums with heavy cancellation (sum_v dz_v = 0).
        for a, c in zip(got, want):
            torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
        # entropy only (logp's upstream grad is None)
        got = torch.autograd.grad(triton_logprob_entropy(ins[0], ins[1], t, bias=bb, **tiles)[1].sum(), ins[0])
        want = torch.autograd.grad(chunked_logprob_entropy(ins[0], ins[1], t, bias=bb)[1].sum(), ins[0])
        torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)

    # bf16 operands (fp32 accumulation): equal to the torch path on the same bf16 values.
    hid, w, t, b = case(19, 32, 130, seed=3, dtype=torch.bfloat16, with_bias=True)
    lp, en = triton_logprob_entropy(hid, w, t, temperature=0.8, bias=b, num_splits=2, **tiles)
    rlp, ren = chunked_logprob_entropy(hid, w, t, temperature=0.8, bias=b)
    torch.testing.assert_close(lp, rlp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(en, ren, rtol=1e-5, atol=1e-5)

    # -inf (masked) vocabulary entries and an empty batch
    hid, w, t, b = case(9, 16, 64, seed=4, with_bias=True)
    b[list(range(32)) + [40, 63]] = float("-inf")  # a whole tile (and split), and two more
    t = t.clamp(41, 62)
    hid.requires_grad_()
    rlp, ren = chunked_logprob_entropy(hid, w, t, bias=b, chunk_size=16)
    (want,) = torch.autograd.grad((rlp + ren).sum(), hid)
    for splits in (1, 2):  # the masked tile opens a split (2) or the only split (1)
        lp, en = triton_logprob_entropy(hid, w, t, bias=b, num_splits=splits, chunk_size=16, **tiles)
        assert torch.isfinite(lp).all() and torch.isfinite(en).all()
        torch.testing.assert_close(lp, rlp, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(en, ren, rtol=1e-5, atol=1e-6)
        (got,) = torch.autograd.grad((lp + en).sum(), hid)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    hid = hid.detach()
    lp, en = triton_logprob_entropy(hid[:0], w, t[:0], **tiles)
    assert lp.shape == en.shape == (0,)
    print("TRITON_INTERPRET_OK")
    """
)


@pytest.mark.skipif(
    not HAS_TRITON or importlib.util.find_spec("triton") is None,
    reason="triton is not installed (pip install triton); the Triton kernels are untested here",
)
def test_triton_kernels_under_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", _TRITON_SCRIPT],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0 and "TRITON_INTERPRET_OK" in proc.stdout, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- Triton (compiled, CUDA)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not HAS_TRITON, reason="needs CUDA and triton")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_kernels_on_cuda(dtype):
    """The compiled kernels (not the interpreter) equal the torch chunked path on the same CUDA tensors:
    values and gradients (hidden and weight), with and without bias, a masked (-inf) vocabulary tile,
    vocabulary splits, and the ``backend="auto"`` dispatch."""
    if triton_interpret_mode():
        pytest.skip("TRITON_INTERPRET=1 is set: the kernels were built for the interpreter")
    tol = dict(rtol=1e-4, atol=1e-4)
    # (N, H, V, T, splits, bias, mask a tile): N, H, V not multiples of the default tiles.
    for n, h, v, temp, splits, with_bias, masked in [
        (21, 24, 150, 0.7, None, False, False),
        (300, 64, 5000, 1.0, 3, True, False),
        (5, 40, 97, 1.5, 2, True, True),
    ]:
        hidden, weight, targets, bias = _case(n, h, v, seed=n + v, dtype=dtype, with_bias=with_bias)
        hidden, weight, targets = hidden.cuda(), weight.cuda(), targets.cuda()
        if bias is not None:
            bias = bias.cuda()
            if masked:
                bias[:64] = float("-inf")
                targets = targets.clamp(64, v - 1)
        hidden.requires_grad_()
        weight.requires_grad_()
        lp, en = triton_logprob_entropy(hidden, weight, targets, temperature=temp, bias=bias, num_splits=splits)
        rlp, ren = chunked_logprob_entropy(hidden, weight, targets, temperature=temp, bias=bias)
        assert lp.is_cuda and torch.isfinite(lp).all() and torch.isfinite(en).all()
        torch.testing.assert_close(lp, rlp, **tol)
        torch.testing.assert_close(en, ren, **tol)
        got = torch.autograd.grad((lp + 0.5 * en).sum(), (hidden, weight))
        want = torch.autograd.grad((rlp + 0.5 * ren).sum(), (hidden, weight))
        for g, w in zip(got, want):  # bf16 gradients: both rounded to bf16, compared at its precision
            torch.testing.assert_close(g, w, **({} if dtype == torch.bfloat16 else dict(rtol=1e-3, atol=1e-3)))
        with torch.no_grad():  # auto picks Triton on CUDA: bit for bit its default-split result
            auto = logprob_entropy(hidden, weight, targets, temperature=temp, bias=bias)
            direct = triton_logprob_entropy(hidden, weight, targets, temperature=temp, bias=bias)
        assert all(torch.equal(a, d) for a, d in zip(auto, direct))
