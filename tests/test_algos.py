"""Core tests of rlvr_lib.algos: advantages, PPO-clip, aggregation, KL, entropy.

Expected values are literals worked by hand; the comment next to each shows the arithmetic.
"""

import math

import pytest
import torch

from rlvr_lib.algos import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    aggregate_loss,
    bnpo_beta_advantages,
    hint_advantages,
    dr_grpo_advantages,
    forward_kl_penalty,
    get_advantage_estimator,
    get_kl_estimator,
    grpo_advantages,
    kl_penalty,
    ppo_clip_loss,
    rank_advantages,
    token_entropy,
)

T = torch.tensor


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, T(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------- GRPO / Dr.GRPO
def test_grpo_hand_worked_unsorted_noncontiguous_ids():
    r = T([1.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    g = T([7, 3, 7, 3, 7, 9])
    # group 7: [1, 0, 1], mean 2/3, unbiased std sqrt(((1/3)^2*2 + (2/3)^2)/2) = sqrt(1/3) = 0.5773503
    #   A = 0.3333333/0.5773513 = 0.5773493 ; -0.6666667/0.5773513 = -1.1546985
    # group 3: [0, 1], mean 0.5, std sqrt(0.5) = 0.7071068 -> -+0.5/0.7071078 = -+0.7071058
    # group 9: single rollout -> 0
    close(grpo_advantages(r, g), [0.5773493, -0.7071058, -1.1546985, 0.7071058, 0.5773493, 0.0])


def test_dr_grpo_hand_worked():
    r = T([1.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    g = T([7, 3, 7, 3, 7, 9])
    # r - group mean: 1-2/3, 0-0.5, 0-2/3, 1-0.5, 1-2/3, 0.5-0.5
    close(dr_grpo_advantages(r, g), [1 / 3, -0.5, -2 / 3, 0.5, 1 / 3, 0.0])
    close(grpo_advantages(r, g, normalize_std=False), [1 / 3, -0.5, -2 / 3, 0.5, 1 / 3, 0.0])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "bnpo"])  # "rank": see the next test
def test_equal_rewards_and_singletons_give_exact_zero(name):
    fn = get_advantage_estimator(name)
    # in float32, sum(7 x 0.1)/7 != 0.1 and sum(3 x 0.9)/3 != 0.9 (last-bit error), so a plain
    # "r - mean" leaves ~1e-8 residues that std-normalisation would blow up
    r = T([0.1] * 7 + [0.9] * 3 + [1.0])
    g = T([4] * 7 + [1] * 3 + [0])
    out = fn(r, g)
    assert torch.equal(out, torch.zeros(11)), out


def test_rank_orders_equal_scores_by_row_and_gives_a_singleton_zero():
    # Issue 29: the stable argsort (VIGOR's authors') ranks a group of equal scores 1..G in row order, so
    # equal scores do NOT get equal advantages; a singleton still gets 0.
    r = T([0.1] * 3 + [1.0])
    out = rank_advantages(r, T([4, 4, 4, 0]))
    # ranks 1, 2, 3 of G = 3: u = -1, 0, 1, mean 0, unbiased std 1
    close(out, [-1.0 / (1.0 + 1e-4), 0.0, 1.0 / (1.0 + 1e-4), 0.0])


def test_grpo_eps_zero_no_nan_and_gradless():
    r = T([1.0, 1.0, 0.0, 1.0], requires_grad=True)
    out = grpo_advantages(r, T([0, 0, 1, 1]), eps=0.0)
    # group 0 constant -> 0 (0/0 guarded); group 1: +-0.5 / sqrt(0.5) = +-0.7071068
    close(out, [0.0, 0.0, -0.7071068, 0.7071068])
    assert not out.requires_grad


def test_grpo_accepts_int_and_bool_rewards():
    out = grpo_advantages(T([1, 0]), T([0, 0]))
    # mean 0.5, std sqrt(0.5): +-0.5/0.7071078
    close(out, [0.7071058, -0.7071058])
    assert out.dtype == torch.float32


# ---------------------------------------------------------------- NudgeRL hint advantages
def test_hint_advantages_hand_worked():
    # group 0 (id 5): hints [0, 0, 1, 1, none, none], rewards [1, 0, 1, 1, 0, 0]; lam = 1.1
    # group 1 (id 2): a single rollout -> 0
    r = T([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    g = T([5, 5, 5, 5, 5, 5, 2])
    z = T([0, 0, 1, 1, -1, -1, 0])
    # mean_g = 0.5; mean_z0 = 0.5; mean_z1 = 1
    # raw z0: (1-0.5) + 1.1*(0.5-0.5) = 0.5 ; (0-0.5) + 0 = -0.5
    # raw z1: (1-1) + 1.1*(1-0.5) = 0.55 (twice) ; none: 0-0.5 = -0.5 (twice)
    # mean(raw) = 0.1/6 = 0.0166667 ; centred = [0.4833333, -0.5166667, 0.5333333, 0.5333333, -0.5166667, -0.5166667]
    # population std = sqrt((0.4833^2 + 3*0.5167^2 + 2*0.5333^2)/6) = sqrt(1.6033333/6) = 0.5169354
    # A = centred / (0.5169354 + 1e-5)
    close(hint_advantages(r, g, z), [0.9349794, -0.9994608, 1.0317015, 1.0317015, -0.9994608, -0.9994608, 0.0])


def test_hint_advantages_without_hints_is_population_grpo():
    # no hints: raw = r - mean = [0.5, -0.5, 0.5, -0.5], population std 0.5 -> +-0.5/(0.5+1e-5) = +-0.99998
    out = hint_advantages(T([1.0, 0.0, 1.0, 0.0]), T([0, 0, 0, 0]), T([-1, -1, -1, -1]))
    close(out, [0.99998, -0.99998, 0.99998, -0.99998])


def test_hint_ids_are_local_to_a_group():
    # hint id 0 in group 0 and in group 1 are different sub-groups:
    # group 0: z0 = [1, 1] (mean 1), none [0]: mean_g = 2/3
    #   raw = (1-1) + 1.1*(1-2/3) = 0.3666667 (twice); none: -2/3
    # if ids were shared across groups the 0-reward rollouts of group 1 would pull mean_z0 down.
    r = T([1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    g = T([0, 0, 0, 1, 1, 1])
    z = T([0, 0, -1, 0, 0, -1])
    out = hint_advantages(r, g, z)
    # group 0 raw = [0.3666667, 0.3666667, -0.6666667], mean 0.0222222,
    # centred [0.3444444, 0.3444444, -0.6888889], pop std sqrt((2*0.1186420+0.4745679)/3) = sqrt(0.2372840) = 0.4871180
    # A = 0.3444444/0.4871280 = 0.7070923 ; -0.6888889/0.4871280 = -1.4141845
    # group 1 is the mirror image (rewards flipped) -> negated values
    close(out, [0.7070923, 0.7070923, -1.4141845, -0.7070923, -0.7070923, 1.4141845])


def test_hint_monotone_for_binary_rewards_lambda_in_0_2():
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = 12
        g = torch.randint(0, 3, (n,), generator=gen) * 10 + 1  # ids 1, 11, 21
        z = torch.randint(-1, 3, (n,), generator=gen)
        r = torch.randint(0, 2, (n,), generator=gen).float()
        lam = float(torch.rand((), generator=gen)) * 2.0
        if trial % 50 == 0:
            lam = [0.0, 2.0, 1.0, 1.1][trial // 50]
        a = hint_advantages(r, g, z, lam=lam)
        same = g[:, None] == g[None, :]
        higher = same & (r[:, None] > r[None, :])
        assert (a[:, None] >= a[None, :] - 1e-6)[higher].all(), (trial, lam, r, z, g, a)


def test_hint_not_monotone_for_continuous_rewards_lambda_0():
    # the paper's claim is about binary rewards: with lam = 0, A = r - mean_z, so a 0.6 among
    # 0.9-mean peers ranks below a 0.5 among 0.125-mean peers.
    r = T([0.6, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0])
    z = T([0, 0, 0, 0, 1, 1, 1, 1])
    a = hint_advantages(r, torch.zeros(8, dtype=torch.long), z, lam=0.0)
    assert a[0] < a[4]


# ---------------------------------------------------------------- VIGOR rank shaping
def test_rank_advantages_ties_and_groups():
    # Issue 29: ties are ranked in row order (stable argsort, the VIGOR authors'), no longer at their mean rank.
    s = T([5.0, 5.0, 1.0, 9.0, -3.0, 100.0, 2.0])
    g = T([8, 8, 8, 8, 1, 1, 6])
    # group 8: ascending stable sort 1 (row 2), 5 (row 0), 5 (row 1), 9 (row 3) -> ranks [2, 3, 1, 4];
    #   u = 2*(rank-1)/3 - 1 = [-1/3, 1/3, -1, 1], mean 0, sum of squares 20/9, unbiased std sqrt(20/27)
    #   = 0.8606630 ; A = u/(0.8606630+1e-4) = [-0.3872533, 0.3872533, -1.1617600, 1.1617600]
    # group 1: two scores -> u = [-1, 1], std sqrt(2) = 1.4142136 -> -+1/1.4143136 = -+0.7070568
    # group 6: single -> 0
    close(rank_advantages(s, g), [-0.3872533, 0.3872533, -1.1617600, 1.1617600, -0.7070568, 0.7070568, 0.0])


def test_rank_advantages_ranks_with_ties_equal_a_stable_argsort():
    gen = torch.Generator().manual_seed(0)
    s = torch.randint(0, 4, (40,), generator=gen).double()  # 4 values over groups of 8: many ties
    g = torch.randperm(40, generator=gen) % 5  # groups interleaved, not contiguous
    a = rank_advantages(s, g)
    for group in range(5):
        rows = (g == group).nonzero().flatten()
        rank = torch.argsort(torch.argsort(s[rows], stable=True), stable=True).double()  # 0-based
        u = 2 * rank / 7 - 1
        expected = (u - u.mean()) / (u.std() + 1e-4)
        torch.testing.assert_close(a[rows], expected, rtol=0, atol=1e-12)


def test_rank_advantages_ignore_outlier_magnitude():
    g = T([0, 0, 0])
    assert torch.equal(rank_advantages(T([1.0, 2.0, 3.0]), g), rank_advantages(T([1.0, 2.0, 1e6]), g))


# ---------------------------------------------------------------- BNPO
def test_bnpo_symmetric_fit_hand_worked():
    # group means p = 0.25, 0.5, 0.75 ; mu = 0.5, unbiased var = (0.0625+0+0.0625)/2 = 0.0625
    # k = 0.25/0.0625 - 1 = 3 ; a = b = 1.5 ; alpha = beta = 1 + 1.5/3 = 1.5
    # Beta(1.5,1.5) pdf = sqrt(p(1-p)) / B(1.5,1.5), B = pi/8
    #   p=0.5: pdf = 4/pi -> 1/pdf = 0.7853982 ; p=0.25 or 0.75: 1/pdf = pi/(8*0.4330127) = 0.9068997
    r = T([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    g = T([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    e1, e2, h = 0.9068997 * 0.75, 0.9068997 * 0.25, 0.7853982 * 0.5
    close(bnpo_beta_advantages(r, g), [e1, -e2, -e2, -e2, h, h, -h, -h, e2, e2, e2, -e1])


def test_bnpo_asymmetric_fit_hand_worked():
    # group means p = 0.25, 0.25, 0.5: mu = 1/3, var = ((1/12)^2*2 + (1/6)^2)/2 = 1/48
    # k = (2/9)*48 - 1 = 9.6666667 ; alpha = 1 + 9.6667*(1/3)/3 = 2.0740741 ; beta = 1 + 9.6667*(2/3)/3 = 3.1481481
    # 1/pdf(0.25) = B(alpha,beta) / (0.25^1.0740741 * 0.75^2.1481481) = 0.5804283
    # 1/pdf(0.5)  = 0.6587038  (B(alpha,beta) = G(alpha)G(beta)/G(alpha+beta) evaluated with math.gamma)
    r = T([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    g = T([3, 3, 3, 3, 9, 9, 9, 9, 4, 4])
    a, b, c = 0.5804283 * 0.75, 0.5804283 * 0.25, 0.6587038 * 0.5
    close(bnpo_beta_advantages(r, g), [a, -b, -b, -b, -b, a, -b, -b, c, -c])


def test_bnpo_degenerate_fit_falls_back_to_uniform_and_rescales():
    # one group: no Beta fit -> alpha = beta = 1, pdf = 1, A = R - p ; rewards in {-1, 1} rescaled to {0, 1}
    out = bnpo_beta_advantages(T([1.0, -1.0, -1.0, -1.0]), T([0, 0, 0, 0]), min_value=-1.0, max_value=1.0)
    close(out, [0.75, -0.25, -0.25, -0.25])  # R = [1,0,0,0], p = 0.25
    # p = 0, 0.5, 1: k = 0.25/0.25 - 1 = 0 -> alpha = beta = 1 ; the constant groups give 0
    out = bnpo_beta_advantages(T([0.0, 0.0, 1.0, 0.0, 1.0, 1.0]), T([0, 0, 1, 1, 2, 2]))
    close(out, [0.0, 0.0, 0.5, -0.5, 0.0, 0.0])


def test_bnpo_rejects_rewards_outside_range():
    with pytest.raises(ValueError, match="min_value, max_value"):
        bnpo_beta_advantages(T([2.0, 0.0]), T([0, 0]))


# ---------------------------------------------------------------- advantage validation / registry
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: grpo_advantages(T([1.0, 0.0]), T([0, 0, 0])), "group_index"),
        (lambda: grpo_advantages(T([1.0, 0.0]), T([0.0, 0.0])), "integer"),
        (lambda: grpo_advantages(T([[1.0, 0.0]]), T([0])), "1-D"),
        (lambda: grpo_advantages(T([1.0, float("nan")]), T([0, 0])), "finite"),
        (lambda: grpo_advantages(T([1.0, 0.0]), T([0, 0]), eps=-1e-3), "eps"),
        (lambda: hint_advantages(T([1.0, 0.0]), T([0, 0]), T([0, -2])), "hint_index"),
        (lambda: hint_advantages(T([1.0, 0.0]), T([0, 0]), T([0])), "hint_index"),
        (lambda: rank_advantages(T([1.0, 0.0]), T([0, 0]), eps=-1.0), "eps"),
        (lambda: bnpo_beta_advantages(T([1.0]), T([0]), min_value=1.0, max_value=0.0), "min_value"),
    ],
)
def test_advantage_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_advantage_registry():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo", "hint", "rank", "bnpo"}
    assert get_advantage_estimator("grpo") is grpo_advantages
    with pytest.raises(ValueError, match=r"advantage_estimator='ppo' is invalid: must be one of \[.*'bnpo'"):
        get_advantage_estimator("ppo")


# ---------------------------------------------------------------- PPO-clip
def _ppo_batch():
    # seq 0: A = +1, ratios [1.5, 0.5, 1.1] ; seq 1: A = -2, ratios [0.5, 1.5, 1.0], last token masked
    ratios = T([[1.5, 0.5, 1.1], [0.5, 1.5, 1.0]])
    old = T([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7]])
    logp = (old + ratios.log()).requires_grad_(True)
    return logp, old, T([1.0, -2.0]), T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_ppo_clip_loss_values_and_stats():
    logp, old, adv, mask = _ppo_batch()
    loss, stats = ppo_clip_loss(logp, old, adv, mask)
    # A=+1: -min(rho, clip(rho, .8, 1.2)): 1.5 -> -1.2 (clipped high), 0.5 -> -0.5, 1.1 -> -1.1
    # A=-2: 2*max(rho, clip(rho)): 0.5 -> 1.6 (clipped low), 1.5 -> 3.0 ; masked -> 0
    close(loss, [[-1.2, -0.5, -1.1], [1.6, 3.0, 0.0]])
    close(stats["clip_frac_low"], 0.2)  # 1 of 5 tokens
    close(stats["clip_frac_high"], 0.2)  # 1 of 5 tokens
    close(stats["ratio_mean"], 1.02)  # (1.5+0.5+1.1+0.5+1.5)/5
    # k3 = rho-1-ln rho: 1.5 -> 0.0945349, 0.5 -> 0.1931472, 1.1 -> 0.0046898 ; (2*0.0945349+2*0.1931472+0.0046898)/5
    close(stats["approx_kl"], 0.1160108)
    assert all(v.dim() == 0 and not v.requires_grad for v in stats.values())


def test_ppo_clip_loss_gradient_sign():
    logp, old, adv, mask = _ppo_batch()
    loss, _ = ppo_clip_loss(logp, old, adv, mask)
    loss.sum().backward()
    # unclipped tokens: d(-rho A)/dlogp = -rho A ; clipped tokens and the masked token: 0
    # seq 0: [0 (clipped), -0.5, -1.1] ; seq 1: [0 (clipped), 2*1.5 = 3.0, 0 (masked)]
    close(logp.grad, [[0.0, -0.5, -1.1], [0.0, 3.0, 0.0]])


def test_ppo_old_logp_and_advantages_are_constants():
    logp, old, adv, mask = _ppo_batch()
    old = old.clone().requires_grad_(True)
    adv = adv.clone().requires_grad_(True)
    loss, _ = ppo_clip_loss(logp, old, adv, mask)
    loss.sum().backward()
    assert old.grad is None and adv.grad is None and logp.grad is not None


def test_ppo_clip_higher_and_token_advantages():
    logp, old, _, mask = _ppo_batch()
    adv_tok = T([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    loss, stats = ppo_clip_loss(logp, old, adv_tok, mask, eps_low=0.2, eps_high=0.6)
    # eps_high 0.6: ratio 1.5 < 1.6 is no longer clipped -> -1.5
    close(loss[0], [-1.5, -0.5, -1.1])
    close(stats["clip_frac_high"], 0.0)


def test_ppo_ignores_nan_in_padding():
    logp, old, adv, mask = _ppo_batch()
    old = old.clone()
    old[1, 2] = float("nan")
    loss, stats = ppo_clip_loss(logp, old, adv, mask)
    assert torch.isfinite(loss).all() and all(torch.isfinite(v) for v in stats.values())


@pytest.mark.parametrize(
    "kwargs, match",
    [({"eps_low": -0.1}, "eps_low"), ({"eps_low": 1.0}, "eps_low"), ({"eps_high": -0.1}, "eps_high")],
)
def test_ppo_validation_scalars(kwargs, match):
    logp, old, adv, mask = _ppo_batch()
    with pytest.raises(ValueError, match=match):
        ppo_clip_loss(logp, old, adv, mask, **kwargs)


def test_ppo_validation_shapes():
    logp, old, adv, mask = _ppo_batch()
    with pytest.raises(ValueError, match="old_logp"):
        ppo_clip_loss(logp, old[:, :2], adv, mask)
    with pytest.raises(ValueError, match="advantages"):
        ppo_clip_loss(logp, old, T([1.0, 2.0, 3.0]), mask)
    with pytest.raises(ValueError, match="mask"):
        ppo_clip_loss(logp, old, adv, mask[:, :2])
    with pytest.raises(ValueError, match="0 and 1"):
        ppo_clip_loss(logp, old, adv, mask * 0.5)


# ---------------------------------------------------------------- aggregation
def _agg_batch():
    loss = T([[1.0, 2.0, 3.0], [4.0, 5.0, float("nan")], [7.0, 8.0, 9.0]])
    mask = T([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)  # third row: zero-length completion
    return loss, mask


def test_aggregate_modes_hand_worked():
    loss, mask = _agg_batch()
    # sequence means (1+2)/2 = 1.5, 4/1 = 4, empty -> 0 ; mean over 3 sequences = 5.5/3
    close(aggregate_loss(loss, mask, "seq_mean_token_mean"), 1.8333333)
    close(aggregate_loss(loss, mask, "token_mean"), 2.3333333)  # (1+2+4)/3 tokens
    close(aggregate_loss(loss, mask, "token_mean", normalizer=14.0), 0.5)  # 7/14
    close(aggregate_loss(loss, mask, "seq_mean_token_sum_norm", normalizer=4), 0.5833333)  # 7/(3*4)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregate_all_empty_no_nan(mode):
    loss = torch.randn(2, 3)
    kw = {"normalizer": 3.0} if mode == "seq_mean_token_sum_norm" else {}
    out = aggregate_loss(loss, torch.zeros(2, 3), mode, **kw)
    assert out.item() == 0.0


def test_aggregate_gradient_only_through_unmasked():
    loss, mask = _agg_batch()
    loss = loss.clone().requires_grad_(True)
    aggregate_loss(loss, mask, "token_mean").backward()
    close(loss.grad, [[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_aggregate_validation():
    loss, mask = _agg_batch()
    with pytest.raises(ValueError, match=r"mode='sum' is invalid: must be one of \[.*'token_mean'"):
        aggregate_loss(loss, mask, "sum")
    with pytest.raises(ValueError, match="normalizer"):
        aggregate_loss(loss, mask, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="normalizer"):
        aggregate_loss(loss, mask, "token_mean", normalizer=0.0)
    with pytest.raises(ValueError, match="normalizer"):
        aggregate_loss(loss, mask, "seq_mean_token_mean", normalizer=3.0)


# ---------------------------------------------------------------- KL estimators
def test_kl_kinds_hand_worked():
    logp = T([[math.log(0.5), math.log(0.3)]])
    ref = T([[math.log(0.25), math.log(0.3)]])
    # token 0: logp - ref = ln 2 = 0.6931472 ; token 1: equal -> all estimators 0
    close(kl_penalty(logp, ref, "k1"), [[0.6931472, 0.0]])
    close(kl_penalty(logp, ref, "k2"), [[0.2402265, 0.0]])  # 0.5 * ln2^2
    close(kl_penalty(logp, ref, "k3"), [[0.1931472, 0.0]])  # r = 0.5: 0.5 - ln 0.5 - 1
    close(kl_penalty(logp, ref, "forward"), [[0.1534264, 0.0]])  # w = 0.5: 0.5*ln0.5 - (0.5-1)
    close(kl_penalty(logp, ref, "reverse"), [[0.1931472, 0.0]])  # k3's value
    close(kl_penalty(logp, ref, "none"), [[0.0, 0.0]])
    torch.testing.assert_close(forward_kl_penalty(logp, ref), kl_penalty(logp, ref, "forward"))


def test_kl_estimators_unbiased_in_expectation():
    # exact expectation over the vocabulary under pi_theta (no sampling)
    pi = T([0.5, 0.3, 0.2], dtype=torch.float64)
    ref = T([0.2, 0.2, 0.6], dtype=torch.float64)
    lp, lr = pi.log()[None], ref.log()[None]
    # KL(pi||ref) = .5 ln(.5/.2) + .3 ln(.3/.2) + .2 ln(.2/.6) = .4581454 + .1216395 - .2197225
    reverse = 0.3600624
    # KL(ref||pi) = .2 ln(.2/.5) + .2 ln(.2/.3) + .6 ln(.6/.2) = -.1832581 - .0810930 + .6591674
    forward = 0.3948163
    for kind, expected in (("k1", reverse), ("k3", reverse), ("reverse", reverse), ("forward", forward)):
        est = (pi * kl_penalty(lp, lr, kind)[0]).sum()
        assert abs(est.item() - expected) < 1e-6, kind
    for kind in ("k3", "reverse", "forward"):
        assert (kl_penalty(lp, lr, kind) >= 0).all(), kind


def test_k3_gradient_pushes_towards_reference_and_ref_is_constant():
    logp = T([math.log(0.5), math.log(0.1)], requires_grad=True)
    ref = T([math.log(0.25), math.log(0.2)], requires_grad=True)
    kl_penalty(logp, ref, "k3").sum().backward()
    # d/dlogp [exp(ref-logp) - (ref-logp) - 1] = 1 - pi_ref/pi = 1 - 0.5 = 0.5 ; 1 - 2 = -1
    close(logp.grad, [0.5, -1.0])
    assert ref.grad is None


def test_forward_and_reverse_per_token_gradients_hand_worked():
    # forward: k3's gradient 1 - w (w = pi_ref/pi = 0.5 ; 2) ; reverse: k2's, logp - ref = ln 2 ; ln 0.5
    for kind, expected in (("forward", [0.5, -1.0]), ("reverse", [0.6931472, -0.6931472])):
        logp = T([math.log(0.5), math.log(0.1)], requires_grad=True)
        ref = T([math.log(0.25), math.log(0.2)], requires_grad=True)
        kl_penalty(logp, ref, kind).sum().backward()
        close(logp.grad, expected)
        assert ref.grad is None


def test_k3_extreme_log_ratio_is_finite():
    out = kl_penalty(T([-200.0]), T([0.0]), "k3")
    assert torch.isfinite(out).all()


def test_kl_registry_and_validation():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "forward", "reverse", "none"}
    assert get_kl_estimator("k3") is KL_ESTIMATORS["k3"]
    with pytest.raises(ValueError, match=r"kl_estimator='k4' is invalid: must be one of \[.*'forward'.*'reverse'"):
        kl_penalty(T([0.0]), T([0.0]), "k4")
    with pytest.raises(ValueError, match="ref_logp"):
        kl_penalty(T([0.0, 1.0]), T([0.0]), "k1")


# ---------------------------------------------------------------- entropy
def test_token_entropy_hand_worked():
    logits = T([[0.0, 0.0], [0.0, math.log(2.0)], [0.0, float("-inf")], [1000.0, 0.0]])
    # uniform over 2: ln 2 ; p = [1/3, 2/3]: -(1/3 ln 1/3 + 2/3 ln 2/3) = 0.6365142 ; one-hot: 0 ; near one-hot: ~0
    close(token_entropy(logits), [0.6931472, 0.6365142, 0.0, 0.0])


def test_token_entropy_gradient_finite_with_neg_inf_logits():
    logits = T([[0.3, -1.0, float("-inf")]], requires_grad=True)
    token_entropy(logits).sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 2] == 0.0
