"""SAGE (`rlvr_lib.methods.sage`, arXiv 2605.18864): guides against hand-worked numbers, the shaped
anchor against k3 and against GRPO's anchor, no gradient through the guide, logged stats, training
of every registered SAGE method, resume, option validation, and the tau calibration.

Expected values are literals worked by hand; the comment next to each shows the arithmetic.
"""

import copy
import math

import pytest
import torch

from rlvr_lib.algos import KL_ESTIMATORS, guide_schedule, kl_penalty, shaped_kl
from rlvr_lib.algos.guides import branch_guide, shaped_anchor
from rlvr_lib.methods import METHODS, Method, StepBatch, build_method, method_config
from rlvr_lib.methods.sage import FULL_DAPO_BRANCH, SAGE_ANCHOR, SAGE_DAPO, base_token_entropies, guide_stats
from rlvr_lib.study.testbed import TESTBED_KL_COEF, TESTBED_TAU, calibrated_config
from rlvr_lib.trainer import Trainer, untimed

SAGE_METHODS = ("sage", "sage_token", "sage_random", "dapo_branch", "bnpo_loss_branch")
SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3)
ESTIMATORS = sorted(set(KL_ESTIMATORS) - {"none"})
T = torch.tensor


def _trainer(policy, name, checkpoint_dir=None, **kw):
    model, tokenizer = policy
    return Trainer(calibrated_config(name, **{**SMALL, **kw}), copy.deepcopy(model), tokenizer,
                   checkpoint_dir=checkpoint_dir)


def _method(name="sage", **options):
    return build_method(method_config(name, **SMALL, method_options=options or None))


def _batch(ref):
    n = ref.shape[0]
    return StepBatch(problems=[None], group_index=torch.zeros(n, dtype=torch.long),
                     hint_index=torch.full((n,), -1), hints=[None] * n, rollouts=None,
                     verdicts=[None] * n, ref_logprobs=ref)


def _tokens(seed=0, n=3, t=5):
    """Log-probs of sampled tokens, reference log-probs, entropies in [0, 2] and a mask with padding."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.log(torch.rand(n, t, generator=g) * 0.98 + 0.01)
    ref = torch.log(torch.rand(n, t, generator=g) * 0.98 + 0.01)
    entropy = torch.rand(n, t, generator=g) * 2
    mask = torch.ones(n, t)
    mask[0, 3:] = 0
    mask[2, 1:] = 0
    return logp * mask, ref * mask, entropy * mask, mask


# ----------------------------------------------------------------------------- registry
def test_sage_methods_are_registered_with_the_authors_k3_anchor():
    # Issue 29: the SAGE presets and their GRPO comparator grpo_k3 use the authors' k3 (was the grpo preset's
    # "reverse", under which a prefix-only guide is null in expectation; see the exact test below).
    grpo_k3 = METHODS["grpo_k3"].preset
    # the paper's settings (beta 0.05, k3, lr 5e-6); the testbed's beta is the study's calibration
    assert grpo_k3 == {**METHODS["grpo"].preset, "kl_coef": 0.05, "kl_estimator": "k3", "lr": 5e-6}
    assert (calibrated_config("grpo_k3").kl_coef, calibrated_config("sage").kl_coef) == (TESTBED_KL_COEF, TESTBED_KL_COEF)
    assert METHODS["grpo_k3"].cls is Method  # plain GRPO hooks: a preset of GRPO's class
    for name in ("sage", "sage_token", "sage_random"):
        assert METHODS[name].preset == grpo_k3, name  # SAGE vs its GRPO: only q differs
    assert METHODS["bnpo_loss"].preset["kl_coef"] == 0
    assert METHODS["bnpo_loss_branch"].preset == {**METHODS["bnpo_loss"].preset, "kl_coef": 0.05,
                                                  "kl_estimator": "k3", "lr": 5e-6}
    for name, base in (("dapo_branch", "dapo"), ("bnpo_loss_branch", "bnpo_loss")):
        assert issubclass(METHODS[name].cls, METHODS[base].cls)
    for name in SAGE_METHODS:
        spec = METHODS[name]
        assert spec.description and "arXiv 2605.18864" in spec.doc


def test_dapo_branch_is_sages_dapo_trls_dapo_loss_and_the_full_recipe_one_override_away():
    # Issue 56, item 3: SAGE's "DAPO" is TRL's loss_type="dapo" (token-level mean, clip 0.2/0.2, no dynamic
    # sampling, no overlong shaping, KL off), the anchor added; the full DAPO recipe is an extra row.
    cfg = method_config("dapo_branch")
    assert (cfg.loss_agg, cfg.eps_low, cfg.eps_high) == ("token_mean", 0.2, 0.2)
    assert (cfg.kl_coef, cfg.kl_estimator, cfg.lr) == (0.05, "k3", 5e-6)
    method = build_method(cfg)
    assert method.refill_rounds() == 0
    assert (method.options.dynamic_sampling, method.options.overlong_cache) == (False, 0)
    full = build_method(method_config("dapo_branch", **FULL_DAPO_BRANCH))
    assert full.config.eps_high == 0.28 and full.refill_rounds() == 3 and full.options.overlong_cache == 8
    # the full form is the dapo preset with SAGE's anchor (dapo_branch's preset before issue 56)
    assert method_config("dapo_branch", **FULL_DAPO_BRANCH) == method_config(
        "dapo", **SAGE_ANCHOR, lr=cfg.lr).replace(method="dapo_branch")
    # its matched comparator: the dapo hooks at the same settings, without the guide
    comparator = method_config("dapo", **{**SAGE_DAPO, **SAGE_ANCHOR}, lr=cfg.lr)
    assert comparator.replace(method="dapo_branch") == cfg


def test_sages_dapo_and_bnpo_branch_rows_train_bit_identically_on_one_process(policy):
    """TRL's "dapo" and "bnpo" losses differ only in normalising over every process's tokens or each one's own:
    on one process dapo_branch trains exactly as bnpo_loss_branch (the module docstring)."""
    kw = dict(minibatches=2)
    dapo, bnpo = (untimed(_trainer(policy, name, **kw).train(progress=False))
                  for name in ("dapo_branch", "bnpo_loss_branch"))
    drop = ("dynamic_refill_rounds", "dynamic_dropped_groups", "dynamic_kept_groups", "dynamic_completions")
    assert [{k: v for k, v in row.items() if k not in drop} for row in dapo] == bnpo


# ----------------------------------------------------------------------------- guides, by hand
def test_branch_guide_below_at_and_above_tau():
    method = _method("sage", tau=1.0, gamma=0.3)
    entropy = T([[0.2, 1.0, 1.5, 2.0, 3.0, 10.0]])
    mask = torch.ones(1, 6)
    q = method.guide(torch.zeros(1, 6), entropy, mask)
    # H <= tau -> 1 ; 1.5: 1 + 0.3 * 0.5 = 1.15 ; 2.0: 1.3 ; 3.0: 1.6 -> clamp 1.4 ; 10: 3.7 -> 1.4
    torch.testing.assert_close(q, T([[1.0, 1.0, 1.15, 1.3, 1.4, 1.4]]), atol=1e-6, rtol=0)
    assert q[0, 0] == 1 and q[0, 1] == 1  # exactly 1, so log q = 0 exactly


def test_branch_guide_default_tau_and_clamp_option():
    q = _method("sage").guide(torch.zeros(1, 3), T([[1.2, 1.45, 1.7]]), torch.ones(1, 3))
    # default tau 1.2 (the paper's): at tau -> 1 ; 1.45: 1 + 0.3 * 0.25 = 1.075 ; 1.7: 1.15
    torch.testing.assert_close(q, T([[1.0, 1.075, 1.15]]), atol=1e-6, rtol=0)
    q = _method("sage", tau=TESTBED_TAU).guide(torch.zeros(1, 3), T([[0.24, 0.49, 0.74]]), torch.ones(1, 3))
    torch.testing.assert_close(q, T([[1.0, 1.075, 1.15]]), atol=1e-6, rtol=0)  # the testbed's 0.24
    q = _method("sage", q_max=1.1, tau=0.0, gamma=1.0).guide(torch.zeros(1, 3), T([[0.0, 0.05, 0.5]]),
                                                              torch.ones(1, 3))
    torch.testing.assert_close(q, T([[1.0, 1.05, 1.1]]), atol=1e-6, rtol=0)  # 1.5 clamped to q_max 1.1
    # The paper's tau never fires on the testbed's strategy choice: at most ln 3 = 1.0986 nats.
    q = _method("sage", tau=1.2).guide(torch.zeros(1, 2), T([[math.log(3), 1.2]]), torch.ones(1, 2))
    assert torch.equal(q, torch.ones(1, 2))


def test_token_guide_hand_worked_and_scheduled():
    method = _method("sage_token", sigma_start=0.0, sigma_end=0.0, quantile=0.0)
    logp = T([[-0.1, -1.1, -2.1, -5.0]])
    mask = T([[1.0, 1.0, 1.0, 0.0]])
    # surprisal 0.1, 1.1, 2.1 -> min-max w = 0, 0.5, 1 -> q = 1 + 0.3 w (alpha_start at step 0); padding -> 1
    torch.testing.assert_close(method.guide(logp, torch.zeros(1, 4), mask), T([[1.0, 1.15, 1.3, 1.0]]),
                               atol=1e-6, rtol=0)
    method.on_step_start(1)  # steps=2, 8 cycles -> cycle length 1: step 1 restarts at 0.3 * 0.9 = 0.27
    torch.testing.assert_close(method.guide(logp, torch.zeros(1, 4), mask), T([[1.0, 1.135, 1.27, 1.0]]),
                               atol=1e-6, rtol=0)


def test_token_guide_default_outlier_quantile_hand_worked():
    method = _method("sage_token", sigma_start=0.0, sigma_end=0.0)  # quantile left at its default
    assert method.options.quantile == 0.05
    logp = T([[-0.0, -1.0, -2.0, -3.0, -4.0],
              [-0.5, -1.5, -4.5, -9.0, -9.0]])
    mask = T([[1.0, 1.0, 1.0, 1.0, 1.0],
              [1.0, 1.0, 1.0, 0.0, 0.0]])  # row 2: two padding tokens, left out of its quantiles
    # The docstring's formula, by hand. Linear-interpolation quantile of n sorted values at level p:
    # position p * (n - 1) between the sorted values around it.
    # Row 1, s = 0, 1, 2, 3, 4 (n = 5): lo at 0.05 * 4 = 0.2 -> 0.2 ; hi at 0.95 * 4 = 3.8 -> 3.8 ; hi - lo = 3.6
    #   w = (clamp(s, 0.2, 3.8) - 0.2) / 3.6 = 0, 0.8/3.6, 1.8/3.6, 2.8/3.6, 1
    # Row 2, s = 0.5, 1.5, 4.5 (n = 3): lo at 0.05 * 2 = 0.1 -> 0.5 + 0.1 * 1.0 = 0.6 ;
    #   hi at 0.95 * 2 = 1.9 -> 1.5 + 0.9 * 3.0 = 4.2 ; hi - lo = 3.6
    #   w = (clamp(s, 0.6, 4.2) - 0.6) / 3.6 = 0, 0.9/3.6, 1 ; padding -> q = 1
    # q = 1 + alpha * w, alpha = 0.3 at step 0 (sigma 0: no noise)
    expected = T([[1.0, 1 + 0.3 * 0.8 / 3.6, 1 + 0.3 * 1.8 / 3.6, 1 + 0.3 * 2.8 / 3.6, 1.3],
                  [1.0, 1 + 0.3 * 0.9 / 3.6, 1.3, 1.0, 1.0]])
    torch.testing.assert_close(method.guide(logp, torch.zeros(2, 5), mask), expected, atol=1e-6, rtol=0)
    # The clip matters: without it (quantile 0) row 1's w would be s / 4, e.g. 0.25 (q 1.075) instead of 0.8/3.6.
    q0 = _method("sage_token", sigma_start=0.0, sigma_end=0.0, quantile=0.0).guide(logp, torch.zeros(2, 5), mask)
    torch.testing.assert_close(q0[0], T([1.0, 1.075, 1.15, 1.225, 1.3]), atol=1e-6, rtol=0)


def test_random_guide_is_clamped_and_scheduled():
    method = _method("sage_random", eps_start=1.0, eps_end=1.0, sigma_start=10.0, sigma_end=10.0)
    q = method.guide(torch.zeros(8, 64), torch.zeros(8, 64), torch.ones(8, 64))
    assert q.min() == 0.6 and q.max() == 1.4  # 1 + 10 xi clamped to [0.6, 1.4], both bounds reached
    method = build_method(method_config("sage_random", steps=16))
    kwargs = [method.options.guide_kwargs(step, 16) for step in (0, 1, 2)]
    # 16 steps, 8 cycles -> length 2: step 0 eps 0.1, sigma 0.15 ; step 1 mid-cycle:
    # eps 0 + 0.1 * 0.5 = 0.05, sigma 0.05 + 0.1 * 0.5 = 0.1 ; step 2 restart: eps 0.1 * 0.9 = 0.09,
    # sigma 0.15 * 0.9 = 0.135
    assert [round(k["eps"], 9) for k in kwargs] == [0.1, 0.05, 0.09]
    assert [round(k["sigma"], 9) for k in kwargs] == [0.15, 0.1, 0.135]
    assert kwargs[1]["eps"] == guide_schedule(1, max_steps=16, start=0.1, end=0.0)


def test_random_guide_draws_only_from_the_methods_generator():
    shape = (4, 32)
    a, b = _method("sage_random", eps_start=0.5), _method("sage_random", eps_start=0.5)
    state = torch.get_rng_state()
    qa = a.guide(torch.zeros(shape), torch.zeros(shape), torch.ones(shape))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(qa, b.guide(torch.zeros(shape), torch.zeros(shape), torch.ones(shape)))
    assert (qa != 1).any()
    a.on_step_start(1), b.on_step_start(0)
    assert not torch.equal(a.guide(torch.zeros(shape), torch.zeros(shape), torch.ones(shape)), qa)
    assert torch.equal(b.guide(torch.zeros(shape), torch.zeros(shape), torch.ones(shape)), qa)  # reseeded


# ----------------------------------------------------------------------------- the shaped anchor
def test_shaped_anchor_is_k3_with_log_q_added():
    logp, ref = T([[-1.0, -2.0, -0.5]]), T([[-1.0, -1.5, -0.5]])
    q = T([[math.exp(0.5), 1.0, 0.6]])
    # D = ref + log q - logp = 0.5, 0.5, log 0.6 ; k3 = e^D - D - 1
    d = [0.5, 0.5, math.log(0.6)]
    expected = T([[math.exp(x) - x - 1 for x in d]])
    out = shaped_anchor(logp, ref, q, "k3")
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    assert torch.equal(out, shaped_kl(logp, ref, torch.log(q)))  # the authors' formula, bit for bit
    assert torch.equal(out, kl_penalty(logp, ref + torch.log(q), "k3"))
    # Hand-worked: e^0.5 - 1.5 = 0.1487213
    assert abs(float(out[0, 0]) - 0.1487213) < 1e-6


@pytest.mark.parametrize("estimator", ["k3", "reverse"])
def test_shaped_anchor_gradients_by_hand(estimator):
    logp = T([[-1.0, -2.0, -0.5]], requires_grad=True)
    ref, q = T([[-1.0, -1.5, -0.5]]), T([[1.2, 1.0, 0.8]])
    shaped_anchor(logp, ref, q, estimator).sum().backward()
    shaped = ref + torch.log(q)
    if estimator == "k3":  # d/dlogp (e^D - D - 1) = 1 - e^D, the forward KL's gradient as used
        expected = 1 - torch.exp(shaped - logp.detach())
    else:  # reverse: k2's gradient, logp - shaped_ref
        expected = logp.detach() - shaped
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_sage_anchor_with_q_one_is_grpos_anchor_bit_for_bit(estimator):
    logp0, ref, entropy, mask = _tokens()
    # No entropy reaches tau = 100: q = 1 everywhere.
    sage = build_method(method_config("sage", **SMALL, kl_estimator=estimator, method_options={"tau": 100.0}))
    grpo = build_method(method_config("grpo", **SMALL, kl_estimator=estimator))
    sage_logp, grpo_logp = logp0.clone().requires_grad_(), logp0.clone().requires_grad_()
    a, stats = sage.anchor(_batch(ref), sage_logp, entropy, mask)
    b, _ = grpo.anchor(_batch(ref), grpo_logp, entropy, mask)
    assert type(grpo) is Method and stats["sage_q_mean"] == 1 and stats["sage_q_shaped_frac"] == 0
    assert float(stats["sage_kl_unshaped"]) == float((b.detach() * mask).sum() / mask.sum())
    assert torch.equal(a, b)
    (a * mask).sum().backward(), (b * mask).sum().backward()
    assert torch.equal(sage_logp.grad, grpo_logp.grad)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_sage_anchor_differs_from_grpos_only_where_q_is_not_one(estimator):
    logp, ref, entropy, mask = _tokens(seed=1)
    sage = build_method(method_config("sage", **SMALL, kl_estimator=estimator))
    grpo = build_method(method_config("grpo", **SMALL, kl_estimator=estimator))
    q = sage.guide(logp, entropy, mask)
    a, _ = sage.anchor(_batch(ref), logp, entropy, mask)
    b, _ = grpo.anchor(_batch(ref), logp, entropy, mask)
    one = q == 1
    assert one.any() and (~one).any()
    assert torch.equal(a[one], b[one])
    assert torch.equal(a, kl_penalty(logp, ref + torch.log(q), estimator))
    if estimator != "k1":  # k1 = logp - shaped_ref moves by -log q, the others by a nonlinear amount
        assert (a[~one] != b[~one]).all()


@pytest.mark.parametrize("name", ["sage", "sage_token", "sage_random"])
def test_the_guide_never_carries_gradient(name):
    logp0, ref, entropy0, mask = _tokens(seed=2)
    method = _method(name, **({"tau": 0.3} if name == "sage" else {}))
    logp = logp0.clone().requires_grad_()
    entropy = entropy0.clone().requires_grad_()  # the trainer detaches it; here it carries a graph on purpose
    q = method.guide(logp, entropy, mask)
    assert not q.requires_grad and q.grad_fn is None
    method.on_step_start(0)  # same generator state as for q above
    out, stats = method.anchor(_batch(ref), logp, entropy * 1.0, mask)
    assert all(not v.requires_grad for v in stats.values())
    (out * mask).sum().backward()
    assert entropy.grad is None  # no path from the loss to the entropy
    # The gradient w.r.t. logp is the estimator's against the constant shaped reference, nothing through q.
    fixed = logp0.clone().requires_grad_()
    (kl_penalty(fixed, ref + torch.log(q), method.config.kl_estimator) * mask).sum().backward()
    assert torch.equal(logp.grad, fixed.grad)


def test_shaped_anchor_rejects_bad_q():
    with pytest.raises(ValueError, match="q must be finite and > 0"):
        shaped_anchor(torch.zeros(1, 2), torch.zeros(1, 2), T([[1.0, 0.0]]))
    with pytest.raises(ValueError, match=r"q has shape \(1, 3\)"):
        shaped_anchor(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 3))
    with pytest.raises(ValueError, match="kl_estimator='k4' is invalid"):
        shaped_anchor(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), "k4")


# ----------------------------------------------------------------------------- stats
def test_guide_stats_hand_worked():
    q = T([[1.0, 1.2, 0.8, 1.4]])
    entropy = T([[0.1, 0.5, 0.3, 9.0]])
    mask = T([[1.0, 1.0, 1.0, 0.0]])  # the last token is padding
    stats = {k: float(v) for k, v in guide_stats(q, entropy, mask).items()}
    # q mean (1 + 1.2 + 0.8) / 3 = 1 ; q != 1: 2 of 3 ; q > 1: 1 of 3 ; entropy there 0.5
    assert stats == pytest.approx({"sage_q_mean": 1.0, "sage_q_shaped_frac": 2 / 3, "sage_q_raised_frac": 1 / 3,
                                   "sage_entropy_raised": 0.5})
    none = {k: float(v) for k, v in guide_stats(torch.ones(1, 4), entropy, mask).items()}
    assert none == {"sage_q_mean": 1.0, "sage_q_shaped_frac": 0.0, "sage_q_raised_frac": 0.0,
                    "sage_entropy_raised": 0.0}  # 0, not NaN, when no token is raised


def test_stats_are_logged_by_a_short_training_run(policy):
    history = _trainer(policy, "sage").train(progress=False)
    for row in history:
        # some tokens of the base policy's completions lie above tau (10% by the calibration rule), not all
        assert 0 < row["sage_q_raised_frac"] == row["sage_q_shaped_frac"] < 1, row
        assert 1 < row["sage_q_mean"] <= 1.4
        assert row["sage_entropy_raised"] > TESTBED_TAU
        assert row["kl"] >= 0 and row["sage_kl_unshaped"] >= 0
        assert row["kl"] != row["sage_kl_unshaped"]
    history = _trainer(policy, "sage", steps=1, method_options={"tau": 1.2}).train(progress=False)
    assert history[0]["sage_q_mean"] >= 1 and history[0]["sage_q_raised_frac"] < 0.1


# ----------------------------------------------------------------------------- training and resume
@pytest.mark.parametrize("name", SAGE_METHODS)
def test_every_sage_method_trains_every_parameter_without_nan(policy, name):
    trainer = _trainer(policy, name)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    assert len(history) == SMALL["steps"]
    for row in history:
        for key, value in row.items():
            assert not (isinstance(value, float) and math.isnan(value)), (name, key)
        assert {"kl", "sage_kl_unshaped", "sage_q_mean", "sage_q_shaped_frac", "sage_q_raised_frac",
                "sage_entropy_raised"} <= set(row)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, (name, unchanged)
    if name == "dapo_branch":  # SAGE's DAPO: no dynamic sampling
        assert history[-1].get("dynamic_refill_rounds", 0) == 0
    if name == "sage_random":
        assert any(row["sage_q_shaped_frac"] > 0 for row in history)


@pytest.mark.parametrize("name", SAGE_METHODS)
def test_resume_is_bit_identical(policy, name, tmp_path):
    kw = dict(steps=3, checkpoint_every=1, minibatches=2)
    full = _trainer(policy, name, **kw).train(progress=False)
    first = _trainer(policy, name, checkpoint_dir=tmp_path, **kw)
    first.step()
    resumed = _trainer(policy, name, checkpoint_dir=tmp_path, **kw)
    assert resumed.step_count == 1
    assert untimed(resumed.train(progress=False)) == untimed(full)


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("name, options, message", [
    ("sage", {"tau": -0.1}, r"sage: method_options: BranchOptions.tau=-0.1 is invalid: must be a number in \[0, inf\)"),
    ("sage", {"gamma": -1}, r"BranchOptions.gamma=-1.0 is invalid: must be a number in \[0, inf\)"),
    ("sage", {"q_min": 0.0}, r"BranchOptions.q_min=0.0 is invalid: must be a number in \(0, 1\]"),
    ("sage", {"q_max": 0.9}, r"BranchOptions.q_max=0.9 is invalid: must be a number in \[1, inf\)"),
    ("sage", {"tua": 1.0}, r"BranchOptions: unknown key\(s\) \['tua'\]; valid keys: \['gamma', 'q_max', 'q_min', "
                           r"'tau'\]"),
    ("sage_token", {"quantile": 0.5}, r"TokenGuideOptions.quantile=0.5 is invalid: must be a number in \[0, 0.5\)"),
    ("sage_token", {"tau": 1.0}, r"TokenGuideOptions: unknown key\(s\) \['tau'\]"),
    ("sage_random", {"eps_start": 1.5}, r"RandomGuideOptions.eps_start=1.5 is invalid: must be a number in \[0, 1\]"),
    ("sage_random", {"num_cycles": 0}, r"RandomGuideOptions.num_cycles=0 is invalid: must be an integer >= 1"),
    ("dapo_branch", {"tau": -1}, r"dapo_branch: method_options: DAPOBranchOptions.tau=-1.0 is invalid"),
    ("dapo_branch", {"overlong_cache": -1}, r"DAPOBranchOptions.overlong_cache=-1 is invalid: must be an integer >= 0"),
    ("bnpo_loss_branch", {"gamma": "x"},
     r"bnpo_loss_branch: method_options: BranchOptions.gamma: expected float, got str 'x'"),
])
def test_option_errors_name_option_value_and_what_is_allowed(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_method(method_config(name, method_options=options))


@pytest.mark.parametrize("name", SAGE_METHODS)
def test_sage_methods_refuse_to_run_without_the_anchor(name):
    with pytest.raises(ValueError, match=rf"{name}: kl_coef=0.0 is invalid: must be > 0"):
        build_method(method_config(name, kl_coef=0.0))
    with pytest.raises(ValueError, match=rf"{name}: kl_estimator='none' is invalid: must be one of \['forward'"):
        build_method(method_config(name, kl_estimator="none"))


# ----------------------------------------------------------------------------- tau calibration
def test_stored_tau_matches_the_calibration_rule_on_a_reduced_sample(policy):
    # The rule: 90th percentile of the base policy's completion-token entropies on `train`, T = 1.
    # TESTBED_TAU came from the train family's problems x 32 samples, seed 0 (0.240 on testbed v7, 0.144 on v5, 0.152 on v4).
    # Here 8 samples per problem with another seed: the tolerance is 0.005 nats on the percentile and 0.01
    # on the share of tokens above the stored tau (0.10 by the rule). The paper's 1.2 fails both.
    model, tokenizer = policy
    entropies = base_token_entropies(model, tokenizer, samples=8, seed=1)
    assert entropies.numel() > 25_000
    assert abs(float(torch.quantile(entropies, 0.9)) - TESTBED_TAU) <= 0.005
    assert abs(float((entropies > TESTBED_TAU).double().mean()) - 0.10) <= 0.01
    assert float((entropies > 1.2).double().mean()) < 0.05


# ----------------------------------------------------------------------------- reverse is null for prefix-only guides
def _expected_anchor_gradient(theta, ref_logp, q, estimator):
    """E_{y ~ pi}[grad_theta anchor(logp(y), ref_logp(y) + log q(y))] for one token, pi = softmax(theta), exactly.

    The sum over the whole vocabulary of pi(y) (detached: the sampling is not differentiated, as in the loss)
    times the gradient as used of the anchor at y.
    """
    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)
    per_y = shaped_anchor(logp[None], ref_logp[None], q[None], estimator)[0]
    (logp.exp().detach() * per_y).sum().backward()
    return theta.grad


def test_reverse_has_grpos_expected_gradient_for_a_prefix_only_guide_and_k3_does_not():
    # One token over a vocabulary of 5, float64; the branch guide's q depends on the prefix only (the entropy of
    # pi there), so it is the same for every y: q = clamp(1 + 0.3 (H - 0), 0.6, 1.4).
    theta = T([0.3, -1.2, 2.0, 0.1, -0.4], dtype=torch.float64)
    ref_logp = torch.log_softmax(T([0.0, 0.5, 1.0, -0.5, 0.2], dtype=torch.float64), -1)
    pi = torch.softmax(theta, -1)
    entropy = -(pi * pi.log()).sum()
    q_value = branch_guide(entropy, gamma=0.3, tau=0.0)
    assert 1.0 < float(q_value) < 1.4  # the guide fires and is not clamped
    q = q_value.expand(5).clone()
    ones = torch.ones(5, dtype=torch.float64)

    grpo_reverse = _expected_anchor_gradient(theta, ref_logp, ones, "reverse")
    sage_reverse = _expected_anchor_gradient(theta, ref_logp, q, "reverse")
    # -log q * E_pi[grad logp] = 0: the shaped anchor's expected gradient is GRPO's.
    torch.testing.assert_close(sage_reverse, grpo_reverse, rtol=0, atol=1e-15)

    grpo_k3 = _expected_anchor_gradient(theta, ref_logp, ones, "k3")
    sage_k3 = _expected_anchor_gradient(theta, ref_logp, q, "k3")
    # E_pi[(1 - q r) grad logp] = q * E_pi[(1 - r) grad logp]: the guide rescales GRPO's pull by q.
    assert (sage_k3 - grpo_k3).abs().max() > 1e-3
    torch.testing.assert_close(sage_k3, q_value * grpo_k3, rtol=1e-12, atol=1e-15)


def test_reverse_is_not_null_for_a_guide_that_depends_on_the_sampled_token():
    theta = T([0.3, -1.2, 2.0, 0.1, -0.4], dtype=torch.float64)
    ref_logp = torch.log_softmax(T([0.0, 0.5, 1.0, -0.5, 0.2], dtype=torch.float64), -1)
    q = T([1.4, 1.0, 0.6, 1.2, 1.0], dtype=torch.float64)  # a per-token guide, as the token guide's
    ones = torch.ones(5, dtype=torch.float64)
    diff = _expected_anchor_gradient(theta, ref_logp, q, "reverse") - _expected_anchor_gradient(
        theta, ref_logp, ones, "reverse")
    assert diff.abs().max() > 1e-3
