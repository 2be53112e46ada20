"""Tests of the GRPO-family baselines in rlvr_lib.algos: DAPO helpers, KL-Cov / Clip-Cov,
INTUITOR self-certainty, entropy bonus, SAGE guides.

Expected values are literals worked by hand; the comment next to each shows the arithmetic.
"""

import math

import pytest
import torch

from rlvr_lib.algos import (
    GUIDES,
    branch_guide,
    clip_cov_loss,
    clip_cov_mask,
    dynamic_sampling_keep_mask,
    entropy_bonus,
    get_guide,
    guide_schedule,
    kl_cov_loss,
    kl_penalty,
    overlong_reward_shaping,
    random_guide,
    self_certainty,
    shaped_kl,
    token_covariance,
    token_guide,
)

T = torch.tensor


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, T(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------- DAPO helpers
def test_overlong_reward_shaping_hand_worked():
    lengths = T([10, 16, 17, 19, 20, 21, 100])
    # max 20, cache 4: ramp starts after 16: (16 - L)/4 -> 17: -0.25, 19: -0.75, 20: -1 ; > 20: -1
    close(overlong_reward_shaping(lengths, 20, 4), [0.0, 0.0, -0.25, -0.75, -1.0, -1.0, -1.0])
    # no buffer: -1 only beyond max_len
    close(overlong_reward_shaping(lengths, 20, 0), [0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0])


@pytest.mark.parametrize(
    "args, match",
    [((T([-1, 3]), 20, 4), "lengths"), ((T([1, 3]), 20, 21), "cache_len"), ((T([1, 3]), 0, 0), "max_len"),
     ((T([1, 3]), 20, -1), "cache_len")],
)
def test_overlong_validation(args, match):
    with pytest.raises(ValueError, match=match):
        overlong_reward_shaping(*args)


def test_dynamic_sampling_keep_mask():
    r = T([1.0, 1.0, 0.0, 1.0, 0.3, 0.1, 0.1])
    g = T([2, 2, 5, 5, 8, 9, 9])
    # group 2 all 1 -> drop ; group 5 mixed -> keep ; group 8 single -> drop ; group 9 all 0.1 -> drop
    keep = dynamic_sampling_keep_mask(r, g)
    assert keep.dtype == torch.bool
    assert keep.tolist() == [False, False, True, True, False, False, False]
    with pytest.raises(ValueError, match="group_index"):
        dynamic_sampling_keep_mask(r, g[:3])


# ---------------------------------------------------------------- KL-Cov / Clip-Cov
def _cov_batch():
    # third column is padding with an extreme log-prob: it must not enter the batch means
    logp = T([[-1.0, -3.0, 50.0], [-2.0, -1.5, 50.0]], requires_grad=True)
    old = logp.detach() - T([[0.2, 0.0, 0.0], [-0.1, 0.0, 0.0]])  # log-ratios 0.2 and -0.1
    adv = T([1.0, -1.0])
    mask = T([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    return logp, old, adv, mask


def test_token_covariance_hand_worked():
    logp, _, adv, mask = _cov_batch()
    # mean logp over 4 tokens = (-1-3-2-1.5)/4 = -1.875 ; mean A = (1+1-1-1)/4 = 0
    # cov = A * (logp + 1.875): [1*0.875, 1*(-1.125)], [-1*(-0.125), -1*(0.375)]
    close(token_covariance(logp, adv, mask), [[0.875, -1.125, 0.0], [0.125, -0.375, 0.0]])


def test_kl_cov_loss_hand_worked_top1():
    logp, old, adv, mask = _cov_batch()
    loss, stats = kl_cov_loss(logp, old, adv, mask, k_frac=0.25)  # k = int(0.25*4) = 1 -> token (0,0)
    # (0,0): -1*e^0.2 + |0.2| = -1.2214028 + 0.2 ; (0,1): -1 ; (1,0): -(-1)*e^-0.1 = 0.9048374 ; (1,1): 1
    close(loss, [[-1.0214028, -1.0, 0.0], [0.9048374, 1.0, 0.0]])
    close(stats["kl_cov_frac"], 0.25)
    close(stats["abs_log_ratio"], 0.075)  # (0.2 + 0.1)/4
    close(stats["ratio_mean"], 1.0315600)  # (1.2214028 + 1 + 0.9048374 + 1)/4
    loss.sum().backward()
    # d/dlogp: (0,0): -e^0.2 + sign(0.2) = -0.2214028 ; others -A*rho ; padding 0
    close(logp.grad, [[-0.2214028, -1.0, 0.0], [0.9048374, 1.0, 0.0]])


def test_kl_cov_loss_top2_coef_and_min_one():
    logp, old, adv, mask = _cov_batch()
    loss, _ = kl_cov_loss(logp, old, adv, mask, k_frac=0.5)  # k = 2: covariances 0.875 and 0.125
    close(loss, [[-1.0214028, -1.0, 0.0], [1.0048374, 1.0, 0.0]])  # (1,0): 0.9048374 + |-0.1|
    loss, _ = kl_cov_loss(logp, old, adv, mask, k_frac=1e-9, kl_coef=2.0)  # k = max(1, 0) = 1
    close(loss[0, 0], -0.8214028)  # -1.2214028 + 2*0.2


def test_kl_cov_no_tokens_and_validation():
    logp, old, adv, _ = _cov_batch()
    loss, stats = kl_cov_loss(logp, old, adv, torch.zeros(2, 3))
    assert torch.equal(loss, torch.zeros(2, 3)) and stats["kl_cov_frac"] == 0
    with pytest.raises(ValueError, match="k_frac"):
        kl_cov_loss(logp, old, adv, torch.ones(2, 3), k_frac=0.0)
    with pytest.raises(ValueError, match="kl_coef"):
        kl_cov_loss(logp, old, adv, torch.ones(2, 3), kl_coef=-1.0)


def test_clip_cov_mask_window_fraction_and_exclude():
    logp, _, adv, mask = _cov_batch()
    # window (0.1, 1.0) holds (0,0) cov 0.875 and (1,0) cov 0.125
    gen = torch.Generator().manual_seed(0)
    chosen = set()
    for _ in range(20):
        m = clip_cov_mask(logp, adv, mask, clip_frac=0.25, lb=0.1, ub=1.0, generator=gen)  # n = max(1, 1) = 1
        assert m.dtype == torch.bool and int(m.sum()) == 1
        chosen.add(tuple(torch.nonzero(m)[0].tolist()))
    assert chosen == {(0, 0), (1, 0)}  # a random one of the two each time
    m = clip_cov_mask(logp, adv, mask, clip_frac=1.0, lb=0.1, ub=1.0)
    assert torch.nonzero(m).tolist() == [[0, 0], [1, 0]]
    m = clip_cov_mask(logp, adv, mask, clip_frac=1.0, lb=0.125, ub=1.0)  # bounds are strict
    assert torch.nonzero(m).tolist() == [[0, 0]]
    excl = T([[1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    m = clip_cov_mask(logp, adv, mask, clip_frac=1.0, lb=0.1, ub=1.0, exclude=excl)
    assert torch.nonzero(m).tolist() == [[1, 0]]
    assert not clip_cov_mask(logp, adv, mask).any()  # default window (1, 5) is empty here


def test_clip_cov_mask_reproducible_with_generator():
    logp = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)) * 3
    adv = torch.randn(4, generator=torch.Generator().manual_seed(2)) * 2
    mask = torch.ones(4, 50)
    a = clip_cov_mask(logp, adv, mask, clip_frac=0.02, lb=0.5, ub=10.0, generator=torch.Generator().manual_seed(3))
    b = clip_cov_mask(logp, adv, mask, clip_frac=0.02, lb=0.5, ub=10.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and int(a.sum()) == 4  # int(0.02 * 200) = 4


def test_clip_cov_mask_validation():
    logp, _, adv, mask = _cov_batch()
    with pytest.raises(ValueError, match=r"lb=2.0 is invalid: must be a number in \(-inf, 1\)"):
        clip_cov_mask(logp, adv, mask, lb=2.0, ub=1.0)
    with pytest.raises(ValueError, match="clip_frac"):
        clip_cov_mask(logp, adv, mask, clip_frac=1.5)


def test_clip_cov_loss_detaches_gradient_skips_ppo_clipped():
    logp, old, adv, mask = _cov_batch()
    loss, stats = clip_cov_loss(logp, old, adv, mask, clip_frac=1.0, lb=0.1, ub=1.0)
    # (0,0): rho = 1.2214 > 1.2 with A > 0 -> PPO-clipped, so not eligible ; (1,0) is detached
    # values are PPO-clip's: -1.2 ; -1 ; -(-1)*0.9048374 ; 1
    close(loss, [[-1.2, -1.0, 0.0], [0.9048374, 1.0, 0.0]])
    close(stats["clip_cov_frac"], 0.25)
    close(stats["clip_frac_high"], 0.25)
    loss.sum().backward()
    # gradients -A*rho on free tokens only: (0,0) clipped -> 0 ; (1,0) detached -> 0
    close(logp.grad, [[0.0, -1.0, 0.0], [0.0, 1.0, 0.0]])


# ---------------------------------------------------------------- INTUITOR self-certainty, entropy bonus
def test_self_certainty_hand_worked():
    logits = T([
        [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, math.log(5.0)], [float("-inf"), 0.0, 0.0, 0.0]],
        [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
    ])
    mask = T([[1, 1, 0], [0, 0, 0]])
    # token (0,0): uniform -> KL(U||p) = 0
    # token (0,1): p = [1/8, 1/8, 1/8, 5/8]: -ln 4 - (3 ln(1/8) + ln(5/8))/4 = -1.3862944 + 1.6770821 = 0.2907877
    # token (0,2) is masked (its KL is infinite) ; sequence 1 is empty -> 0
    close(self_certainty(logits, mask), [0.2907877 / 2, 0.0])


def test_self_certainty_binary_vocab_and_shape_check():
    # p = [0.25, 0.75]: -ln 2 - (ln 0.25 + ln 0.75)/2 = 0.1438410
    close(self_certainty(T([[[0.0, math.log(3.0)]]]), T([[1.0]])), [0.1438410])
    with pytest.raises(ValueError, match="mask"):
        self_certainty(torch.zeros(2, 3, 4), torch.ones(2, 2))


def test_entropy_bonus_modes_and_gradient():
    ent = T([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    mask = T([[1.0, 0.0], [1.0, 1.0]])
    close(entropy_bonus(ent, mask, "token_mean"), 2.6666667)  # (1+3+4)/3
    close(entropy_bonus(ent, mask, "seq_mean_token_mean"), 2.25)  # (1 + 3.5)/2
    entropy_bonus(ent, mask, "token_mean").backward()
    close(ent.grad, [[1 / 3, 0.0], [1 / 3, 1 / 3]])
    with pytest.raises(ValueError, match=r"mode='mean' is invalid: must be one of \["):
        entropy_bonus(ent, mask, "mean")


# ---------------------------------------------------------------- SAGE guides
def test_branch_guide_hand_worked_and_detached():
    h = T([0.5, 1.2, 2.2, 3.0, 10.0], requires_grad=True)
    # 1 + 0.3*relu(H - 1.2): 1, 1, 1.3, 1.54 -> 1.4 (clamp), 3.64 -> 1.4
    q = branch_guide(h)
    close(q, [1.0, 1.0, 1.3, 1.4, 1.4])
    assert not q.requires_grad
    close(branch_guide(h, gamma=1.0, tau=0.0, q_min=0.6, q_max=5.0), [1.5, 2.2, 3.2, 4.0, 5.0])
    with pytest.raises(ValueError, match=r"q_min=1.5 is invalid: must be a number in \(0, 1.4\]"):
        branch_guide(h, q_min=1.5, q_max=1.4)


def test_token_guide_deterministic_minmax():
    logp = T([[-1.0, -2.0, -3.0, -5.0, 0.0], [-0.7, -0.7, -0.7, 0.0, 0.0], [-4.0, 0.0, 0.0, 0.0, 0.0]])
    mask = T([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    # row 0: surprisal [1, 2, 3, 5]; 5% quantile at position 0.15 -> 1.15 ; 95% at 2.85 -> 3 + 0.85*2 = 4.7
    #   w = (clamp(s) - 1.15)/3.55 = [0, 0.2394366, 0.5211268, 1] ; q = 1 + 0.3 w ; masked -> 1
    # row 1: constant surprisal -> w = 0 -> q = 1 ; row 2: empty -> 1
    q = token_guide(logp, mask, alpha=0.3, sigma=0.0)
    close(q, [[1.0, 1.0718310, 1.1563380, 1.3, 1.0], [1.0] * 5, [1.0] * 5])


def test_token_guide_noise_is_reproducible_and_bounded():
    logp = -torch.rand(3, 20, generator=torch.Generator().manual_seed(0)) * 5
    mask = torch.ones(3, 20)
    a = token_guide(logp, mask, sigma=5.0, generator=torch.Generator().manual_seed(1))
    b = token_guide(logp, mask, sigma=5.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.min() >= 0.6 and a.max() <= 1.4 and (a != 1).any()


def test_random_guide():
    assert torch.equal(random_guide((3, 4), eps=0.0), torch.ones(3, 4))
    gen = torch.Generator().manual_seed(0)
    q = random_guide((100, 200), gen, eps=0.25, sigma=0.15)
    frac = (q != 1).float().mean().item()
    assert 0.23 < frac < 0.27  # Bernoulli(0.25) over 20000 tokens
    assert q.min() >= 0.6 and q.max() <= 1.4
    a = random_guide((5, 7), torch.Generator().manual_seed(4), eps=0.5)
    b = random_guide((5, 7), torch.Generator().manual_seed(4), eps=0.5)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="eps"):
        random_guide((2, 2), eps=1.5)


def test_guide_schedule_hand_worked():
    kw = dict(max_steps=80, start=0.3, end=0.1)  # 8 cycles of 10 steps, decay 0.9
    assert guide_schedule(0, **kw) == pytest.approx(0.3)  # cycle start
    assert guide_schedule(5, **kw) == pytest.approx(0.2)  # 0.1 + 0.2 * 0.5
    assert guide_schedule(10, **kw) == pytest.approx(0.27)  # restart, start 0.3*0.9
    assert guide_schedule(15, **kw) == pytest.approx(0.185)  # 0.1 + 0.17 * 0.5
    # step 79: cycle 7, start 0.3*0.9^7 = 0.1434891, t = 0.9: 0.1 + 0.0434891*0.5*(1 + cos(0.9 pi)) = 0.1010643
    assert guide_schedule(79, **kw) == pytest.approx(0.1010643, abs=1e-7)
    assert guide_schedule(85, **kw) == pytest.approx(0.1217445, abs=1e-7)  # decay stops after 7 restarts
    with pytest.raises(ValueError, match="step"):
        guide_schedule(-1, **kw)


def test_shaped_kl_hand_worked_and_gradient():
    logp = T([math.log(0.5)] * 3, requires_grad=True)
    ref = T([math.log(0.25)] * 3)
    log_q = T([math.log(2.0), math.log(1.4), 0.0])
    # D = ln(0.25 q / 0.5): q=2 -> D=0 -> 0 ; q=1.4 -> D = ln 0.7: 0.7 - ln 0.7 - 1 = 0.0566749 ;
    # q=1 -> k3 = 0.5 - ln 0.5 - 1 = 0.1931472
    kl = shaped_kl(logp, ref, log_q)
    close(kl, [0.0, 0.0566749, 0.1931472])
    torch.testing.assert_close(kl[2:], kl_penalty(logp[2:], ref[2:], "k3"))
    kl.sum().backward()
    close(logp.grad, [0.0, 0.3, 0.5])  # 1 - exp(D)
    with pytest.raises(ValueError, match="log_q"):
        shaped_kl(logp, ref, log_q[:2])


def test_guide_registry_has_one_signature():
    assert set(GUIDES) == {"branch", "token", "random"}
    torch.manual_seed(0)
    logp, entropy = -torch.rand(3, 5) * 3, torch.rand(3, 5) * 3
    mask = torch.ones(3, 5, dtype=torch.long)
    mask[0, 3:] = 0
    direct = {
        "branch": branch_guide(entropy, gamma=0.5),
        "token": token_guide(logp, mask, sigma=0.2, generator=torch.Generator().manual_seed(4)),
        "random": random_guide((3, 5), torch.Generator().manual_seed(4), eps=0.5),
    }
    options = {"branch": {"gamma": 0.5}, "token": {"sigma": 0.2}, "random": {"eps": 0.5}}
    for name, guide in GUIDES.items():  # every guide is called the same way, whatever it reads
        q = get_guide(name)(logp, entropy, mask, generator=torch.Generator().manual_seed(4), **options[name])
        assert q.shape == logp.shape and torch.equal(q, direct[name]), name
        assert ((q >= 0.6) & (q <= 1.4)).all(), name
    with pytest.raises(ValueError, match=r"guide='entropy' is invalid: must be one of \[.*'random'"):
        get_guide("entropy")
