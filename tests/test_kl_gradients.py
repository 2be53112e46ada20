"""Gradients "as used" of the per-token KL estimators, by exact enumeration of the vocabulary.

As a loss term, ``kl_coef * est(logp, ref_logp)`` is evaluated on tokens sampled from pi_theta
and differentiated through ``logp`` only (no gradient through the sampling, no importance
weights). Its expected gradient w.r.t. the logits z (pi = softmax(z)) is therefore

    sum_y pi(y) * d est(y) / d z,   with pi(y) detached as the sampling weight,

which :func:`expected_grad` computes exactly. Reference gradients are autograd of the true
KLs computed from the full distributions.
"""

import torch
import pytest

from rlvr_lib.algos import KL_ESTIMATORS, forward_kl_penalty, kl_penalty, reverse_kl_penalty
from rlvr_lib.algos import kl as kl_module

T = torch.tensor
F64 = torch.float64

# the 3-token example: pi = (.7, .2, .1), pi_ref = (.2, .5, .3)
PI = T([0.7, 0.2, 0.1], dtype=F64)
REF = T([0.2, 0.5, 0.3], dtype=F64)
FORWARD_GRAD = [0.500, -0.300, -0.200]  # pi - pi_ref
REVERSE_GRAD = [0.468, -0.300, -0.168]  # pi * (log(pi/ref) - KL(pi||ref))
OLD_FORWARD_GRAD = [0.627, -0.351, -0.276]  # d/dlogp [w log w - (w - 1)] = -w log w, as used


def _old_forward(logp, ref_logp):
    """The `forward` estimator before the fix: its own autograd gradient (-w log w)."""
    log_w = (ref_logp - logp).clamp(-20.0, 20.0)
    w = torch.exp(log_w)
    return w * log_w - (w - 1.0)


def _estimator(kind):
    return _old_forward if kind == "old_forward" else (lambda lp, lr: kl_penalty(lp, lr, kind))


def expected_grad(kind, logits, ref_logp):
    """E_{y~pi}[d est(y)/d logp(y) * grad_z logp(y)], exactly, over the whole vocabulary."""
    z = logits.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(z, dim=-1)
    est = _estimator(kind)(logp[None], ref_logp[None])[0]
    if not est.requires_grad:  # "none": no graph to the logits at all
        return torch.zeros_like(z)
    weights = logp.exp().detach()  # sampling distribution: not differentiated
    (grad,) = torch.autograd.grad((weights * est).sum(), z)
    return grad


def expected_value(kind, logits, ref_logp):
    logp = torch.log_softmax(logits, dim=-1)
    return (logp.exp() * _estimator(kind)(logp[None], ref_logp[None])[0]).sum()


def true_forward_kl(logits, ref_logp):  # KL(pi_ref || pi_theta)
    return (ref_logp.exp() * (ref_logp - torch.log_softmax(logits, dim=-1))).sum()


def true_reverse_kl(logits, ref_logp):  # KL(pi_theta || pi_ref)
    logp = torch.log_softmax(logits, dim=-1)
    return (logp.exp() * (logp - ref_logp)).sum()


def true_grad(kl_fn, logits, ref_logp):
    z = logits.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(kl_fn(z, ref_logp), z)
    return grad


def close(actual, expected, atol):
    torch.testing.assert_close(actual, T(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ------------------------------------------------------------ the 3-token example
def test_reference_gradients_of_the_3_token_example():
    # the harness itself: true KL gradients, and the old forward estimator's gradient as used
    close(true_grad(true_forward_kl, PI.log(), REF.log()), FORWARD_GRAD, atol=1e-3)
    close(true_grad(true_reverse_kl, PI.log(), REF.log()), REVERSE_GRAD, atol=1e-3)
    close(expected_grad("old_forward", PI.log(), REF.log()), OLD_FORWARD_GRAD, atol=1e-3)


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("forward", FORWARD_GRAD),
        ("reverse", REVERSE_GRAD),
        ("k3", FORWARD_GRAD),  # k3's value estimates the reverse KL, its gradient is the forward KL's
        ("k2", REVERSE_GRAD),
        ("k1", [0.0, 0.0, 0.0]),
        ("none", [0.0, 0.0, 0.0]),
    ],
)
def test_expected_gradient_as_used_3_token_example(kind, expected):
    close(expected_grad(kind, PI.log(), REF.log()), expected, atol=1e-3)


def test_forward_no_longer_has_the_old_gradient():
    grad = expected_grad("forward", PI.log(), REF.log())
    old = T(OLD_FORWARD_GRAD, dtype=F64)
    assert (grad - old).abs().max() > 0.05
    assert not torch.allclose(grad, old, atol=1e-3, rtol=0)


def test_every_registered_estimator_is_covered():
    # a new estimator must get its expected gradient pinned in the parametrisation above
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "forward", "reverse", "none"}


# ------------------------------------------------------------ randomised, vocab 7
GRAD_TARGET = {
    "forward": true_forward_kl,
    "k3": true_forward_kl,
    "reverse": true_reverse_kl,
    "k2": true_reverse_kl,
    "k1": None,
    "none": None,
}
VALUE_TARGET = {"k1": true_reverse_kl, "k3": true_reverse_kl, "reverse": true_reverse_kl,
                "forward": true_forward_kl}


def _random_case(seed, vocab=7):
    g = torch.Generator().manual_seed(seed)
    logits = 1.5 * torch.randn(vocab, generator=g, dtype=F64)
    ref_logp = torch.log_softmax(1.5 * torch.randn(vocab, generator=g, dtype=F64), dim=-1)
    return logits, ref_logp


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("kind", sorted(GRAD_TARGET))
def test_expected_gradient_as_used_random(kind, seed):
    logits, ref_logp = _random_case(seed)
    target = GRAD_TARGET[kind]
    want = torch.zeros_like(logits) if target is None else true_grad(target, logits, ref_logp)
    got = expected_grad(kind, logits, ref_logp)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
    if target is not None:  # the case is not degenerate: the gradient is far from zero
        assert want.abs().max() > 1e-2


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_forward_and_reverse_gradients_differ_random(seed):
    # the two KLs pull differently, so the checks above really tell them apart
    logits, ref_logp = _random_case(seed)
    fwd = expected_grad("forward", logits, ref_logp)
    rev = expected_grad("reverse", logits, ref_logp)
    assert (fwd - rev).abs().max() > 1e-3


# ------------------------------------------------------------ expected values
@pytest.mark.parametrize("kind", sorted(VALUE_TARGET))
def test_expected_value_3_token_example(kind):
    got = expected_value(kind, PI.log(), REF.log())
    want = VALUE_TARGET[kind](PI.log(), REF.log())
    assert abs(got.item() - want.item()) < 1e-12, (kind, got.item(), want.item())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("kind", sorted(VALUE_TARGET))
def test_expected_value_random(kind, seed):
    logits, ref_logp = _random_case(seed)
    got = expected_value(kind, logits, ref_logp)
    want = VALUE_TARGET[kind](logits, ref_logp)
    other = true_forward_kl if VALUE_TARGET[kind] is true_reverse_kl else true_reverse_kl
    assert abs(got.item() - want.item()) < 1e-10, (kind, got.item(), want.item())
    assert abs(got.item() - other(logits, ref_logp).item()) > 1e-3  # the two KLs differ here


@pytest.mark.parametrize("kind", ["forward", "reverse", "k3"])
def test_values_are_non_negative_per_token(kind):
    g = torch.Generator().manual_seed(0)
    logp = 4.0 * torch.randn(64, 32, generator=g)
    ref_logp = 4.0 * torch.randn(64, 32, generator=g)
    logp[0, :3], ref_logp[0, :3] = T([-200.0, 0.0, -1.0]), T([0.0, -200.0, -1.0])  # clamp, equal
    out = kl_penalty(logp, ref_logp, kind)
    assert torch.isfinite(out).all()
    assert (out >= 0).all()
    assert out[0, 2] == 0.0


# ------------------------------------------------------------ bit-for-bit contracts
def _legacy(kind, logp, ref_logp):
    """k1 / k2 / k3 / none / forward values exactly as implemented before the fix."""
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    if kind == "k3":
        log_r = (ref_logp - logp).clamp(-20.0, 20.0)
        return torch.exp(log_r) - log_r - 1.0
    if kind == "none":
        return torch.zeros_like(logp)
    return _old_forward(logp, ref_logp)


def _value_and_grad(fn, logp, ref_logp):
    x = logp.detach().clone().requires_grad_(True)
    out = fn(x, ref_logp)
    if not out.requires_grad:
        return out.detach(), None
    (grad,) = torch.autograd.grad(out, x, grad_outputs=torch.linspace(-1, 2, out.numel(),
                                                                      dtype=out.dtype).view_as(out))
    return out.detach(), grad


def _inputs(dtype):
    g = torch.Generator().manual_seed(7)
    logp = (-3.0 * torch.rand(5, 11, generator=g)).to(dtype)
    ref_logp = (-3.0 * torch.rand(5, 11, generator=g)).to(dtype)
    logp[0, 0], ref_logp[0, 1] = -100.0, -100.0  # clamped log-ratios
    return logp, ref_logp


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "none"])
def test_legacy_estimators_unchanged_bit_for_bit(kind, dtype):
    logp, ref_logp = _inputs(dtype)
    v_new, g_new = _value_and_grad(lambda a, b: kl_penalty(a, b, kind), logp, ref_logp)
    v_old, g_old = _value_and_grad(lambda a, b: _legacy(kind, a, b), logp, ref_logp)
    assert torch.equal(v_new, v_old)
    assert (g_new is None) == (g_old is None)
    if g_new is not None:
        assert torch.equal(g_new, g_old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_forward_value_unchanged_and_gradient_is_k3s(dtype):
    logp, ref_logp = _inputs(dtype)
    v_new, g_new = _value_and_grad(forward_kl_penalty, logp, ref_logp)
    v_old, g_old = _value_and_grad(_old_forward, logp, ref_logp)
    _, g_k3 = _value_and_grad(lambda a, b: kl_penalty(a, b, "k3"), logp, ref_logp)
    assert torch.equal(v_new, v_old)
    assert torch.equal(g_new, g_k3)
    assert not torch.equal(g_new, g_old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_reverse_value_is_k3s_and_gradient_is_k2s(dtype):
    logp, ref_logp = _inputs(dtype)
    v_rev, g_rev = _value_and_grad(reverse_kl_penalty, logp, ref_logp)
    v_k3, g_k3 = _value_and_grad(lambda a, b: kl_penalty(a, b, "k3"), logp, ref_logp)
    _, g_k2 = _value_and_grad(lambda a, b: kl_penalty(a, b, "k2"), logp, ref_logp)
    assert torch.equal(v_rev, v_k3)
    assert torch.equal(g_rev, g_k2)
    assert not torch.equal(g_rev, g_k3)


@pytest.mark.parametrize("kind", ["forward", "reverse"])
def test_ref_logp_is_constant_and_extremes_are_finite(kind):
    logp = T([-200.0, 0.0, -1.0], requires_grad=True)
    ref = T([0.0, -200.0, -2.0], requires_grad=True)
    out = kl_penalty(logp, ref, kind)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(logp.grad).all()
    assert ref.grad is None


# ------------------------------------------------------------ documentation
@pytest.mark.parametrize("kind", sorted(KL_ESTIMATORS))
def test_each_estimator_documents_its_value_and_gradient(kind):
    doc = KL_ESTIMATORS[kind].__doc__ or ""
    assert "VALUE" in doc and "GRADIENT AS USED" in doc, kind
    assert f"``{kind}``" in kl_module.__doc__
    assert f'``"{kind}"``' in kl_penalty.__doc__
