"""The four methods' premises on a policy (`rlvr_lib.study.probes.premises`, issue 27 item 4)."""

import itertools
import json
import math

import numpy as np
import pytest
import torch

from rlvr_lib.study.probes.premises import (
                                            DEFAULT_ESS_GRID,
                                            branch_entropy_percentiles,
                                            branch_flip_by_ess,
                                            completion_entropies,
                                            entropy_percentiles,
                                            ess_by_flip_rule,
                                            ess_by_noise_rule,
                                            ivon_initial_sigma,
                                            measure_premises,
                                            next_flip_ess,
                                            noisy_rollout_quality,
                                            score_correctness_spearman,
                                            single_strategy_probs,
                                            single_strategy_share,
                                            truncated_to_problem_min,
                                            vigor_score_correctness,
                                            vigor_scores,
                                            vigor_spearman,
                                            )
from rlvr_lib.eval.weight_noise import branch_logits, strategy_tokens, weight_sample
from rlvr_lib.rollout import KVCacheEngine, SamplingParams
from rlvr_lib.study.runs import cpu_model
from rlvr_lib.tasks import get_task
from rlvr_lib.tasks.arithmetic import STRATEGIES


def _problems(n=3, family="easy_mix"):
    return get_task("arith").family_problems(family, n, seed=0)


# ----------------------------------------------------------------------------- NudgeRL
def test_single_strategy_share_by_hand():
    # problem 0: all 8 direct -> 1; problem 1: 4 direct + 4 split, no 8 of one -> 0;
    # problem 2: 9 direct + 1 split of 10 -> C(9, 8) / C(10, 8) = 9 / 45 = 0.2
    counts = {"direct": [8, 4, 9], "split": [0, 4, 1], "round": [0, 0, 0], "none": [0, 0, 0]}
    np.testing.assert_allclose(single_strategy_probs(counts, 8), [1.0, 0.0, 0.2])
    assert single_strategy_share(counts, 8) == pytest.approx(1.2 / 3)
    # k = 2 of 2 direct + 2 split: (C(2,2) + C(2,2)) / C(4,2) = 2 / 6
    assert single_strategy_share({"direct": [2], "split": [2], "none": [0]}, 2) == pytest.approx(1 / 3)
    # k = 1: every parsed sample shows one strategy
    assert single_strategy_share({"direct": [3], "none": [1]}, 1) == pytest.approx(0.75)


def test_unparsed_samples_show_no_strategy():
    # 9 direct + 1 unparsed: the draws of 8 that hold the unparsed one do not count
    assert single_strategy_share({"direct": [9], "none": [1]}, 8) == pytest.approx(0.2)
    assert single_strategy_share({"direct": [0], "none": [8]}, 8) == 0.0


def test_single_strategy_probs_equal_enumerating_every_draw():
    rng = np.random.default_rng(3)
    for _ in range(5):
        c = rng.multinomial(10, [0.5, 0.3, 0.1, 0.1])
        labels = [s for s, m in zip(("a", "b", "c", None), c) for _ in range(m)]
        draws = list(itertools.combinations(range(10), 4))
        same = sum(len({labels[i] for i in d}) == 1 and labels[d[0]] is not None for d in draws)
        got = single_strategy_probs({"a": [c[0]], "b": [c[1]], "c": [c[2]], "none": [c[3]]}, 4)
        assert got[0] == pytest.approx(same / len(draws))


def test_single_strategy_probs_are_unbiased_for_k_fresh_samples():
    # E over multinomial(n, pi) counts of q = sum_s pi_s^k (the unparsed share pi_none never counts)
    from scipy.stats import multinomial

    pi, n, k = np.array([0.5, 0.25, 0.15, 0.10]), 6, 3
    expected = 0.0
    for c in itertools.product(range(n + 1), repeat=3):
        if sum(c) <= n:
            counts = {"a": [c[0]], "b": [c[1]], "c": [c[2]], "none": [n - sum(c)]}
            expected += multinomial.pmf([*c, n - sum(c)], n, pi) * single_strategy_probs(counts, k)[0]
    assert expected == pytest.approx((pi[:3] ** k).sum(), rel=1e-10)


@pytest.mark.parametrize("counts,k,match", [
    ({"direct": [3], "none": [1]}, 8, r"k=8 is invalid: must be at most every problem's number of samples "
                                      r"\(problem 0 has 4\)"),
    ({"direct": [8], "none": [0]}, 0, r"k=0 is invalid: must be an integer >= 1"),
    ({"direct": [8, 8], "none": [0]}, 8, r"strategy_counts=.* is invalid: must be one count per problem"),
    ({"direct": [-1, 8]}, 1, r"strategy_counts\['direct'\]=\[-1, 8\] is invalid: must be a non-empty 1-D"),
    ({"direct": [1.5]}, 1, r"strategy_counts\['direct'\]=\[1.5\] is invalid"),
    ({}, 8, r"strategy_counts=\{\} is invalid: must be a non-empty mapping"),
])
def test_single_strategy_share_rejects_bad_counts(counts, k, match):
    with pytest.raises(ValueError, match=match):
        single_strategy_share(counts, k)


# ----------------------------------------------------------------------------- 3PO
def test_ivon_initial_sigma_is_threepos_formula():
    from rlvr_lib.methods.threepo import initial_sigma
    from rlvr_lib.study.testbed import TESTBED_ESS

    for ess in (1e9, TESTBED_ESS, 1e5):
        assert ivon_initial_sigma(ess) == pytest.approx(initial_sigma(ess, 1e-3, 1e-6), rel=1e-15)
    assert ivon_initial_sigma(1e9) == pytest.approx(1 / math.sqrt(1e9 * 1.001e-3))
    assert ivon_initial_sigma(100.0, hess_init=0.01, weight_decay=0.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"ess=0 is invalid: must be a number in \(0, inf\)"):
        ivon_initial_sigma(0)


def test_flip_rule_takes_the_largest_ess_in_the_band():
    shares = {1e9: 0.0, 1e8: 0.03, 1e7: 0.10, 1e6: 0.15, 1e5: 0.40}
    assert ess_by_flip_rule(shares) == 1e7
    assert ess_by_flip_rule(shares, band=(0.12, 0.5)) == 1e6
    assert ess_by_flip_rule({1e9: 0.0, 1e5: 0.5}) is None  # jumps over the band
    assert ess_by_flip_rule({1e8: 0.05}) == 1e8 and ess_by_flip_rule({1e8: 0.20}) == 1e8  # closed band
    assert ess_by_flip_rule({1e9: 0.1, 1e8: 0.3, 1e7: 0.1}) == 1e9  # not monotone: still the largest in band


def test_next_flip_ess_bisects_the_bracket_around_the_band_in_log_ess():
    # 1e7 is below the band, 1e6 the largest above it: the midpoint in log ESS
    assert next_flip_ess({1e9: 0.0, 1e7: 0.01, 1e6: 0.5, 1e5: 0.9}) == pytest.approx(math.sqrt(1e13))
    assert next_flip_ess({1e9: 0.0, 1e7: 0.1}) is None  # already in the band
    assert next_flip_ess({1e9: 0.0, 1e7: 0.01}) is None  # never above the band: nothing to bisect
    assert next_flip_ess({1e9: 0.5, 1e7: 0.9}) is None  # the largest ESS is already above it
    # not monotone: the LARGEST ESS above the band and its larger neighbour
    assert next_flip_ess({1e9: 0.0, 1e8: 0.3, 1e7: 0.01, 1e6: 0.6}) == pytest.approx(math.sqrt(1e17))
    with pytest.raises(ValueError, match=r"band=\(0.3, 0.1\) is invalid"):
        next_flip_ess({1e9: 0.0}, (0.3, 0.1))


@pytest.mark.parametrize("shares,band,match", [
    ({1e9: 1.5}, (0.05, 0.2), r"shares_by_ess\[1000000000.0\]=1.5 is invalid: must be a number in \[0, 1\]"),
    ({1e9: float("nan")}, (0.05, 0.2), r"shares_by_ess\[1000000000.0\]=nan is invalid"),
    ({-1.0: 0.1}, (0.05, 0.2), r"shares_by_ess \(an ESS\)=-1.0 is invalid: must be a number in \(0, inf\)"),
    ({1e9: 0.1}, (0.3, 0.1), r"band=\(0.3, 0.1\) is invalid: must be a pair \(lo, hi\) with 0 <= lo <= hi <= 1"),
    ({1e9: 0.1}, 0.1, r"band=0.1 is invalid"),
    ({}, (0.05, 0.2), r"shares_by_ess=\{\} is invalid: must be a non-empty mapping"),
])
def test_flip_rule_rejects_bad_input(shares, band, match):
    with pytest.raises(ValueError, match=match):
        ess_by_flip_rule(shares, band)


def _quality(acc, mal, mean=0.5):
    ess = sorted(acc, reverse=True)
    return {"ess": ess, "accuracy": [acc[e] for e in ess], "malformed": [mal[e] for e in ess], "accuracy_mean": mean}


def test_noise_rule_takes_the_largest_in_band_ess_that_keeps_the_policy():
    flips = {"ess": [1e9, 1e8, 1e7, 1e6, 1e5], "share": [0.0, 0.03, 0.10, 0.15, 0.40]}
    ok = {1e9: 0.5, 1e8: 0.5, 1e7: 0.46, 1e6: 0.45, 1e5: 0.1}
    out = ess_by_noise_rule(flips, _quality(ok, dict.fromkeys(ok, 0.02)))
    assert out["premise_holds"] and out["chosen_ess"] == 1e7  # 0.46 >= 0.9 x 0.5
    assert out["kept"] == [1e9, 1e8, 1e7, 1e6] and out["in_band"] == [1e7, 1e6]
    # 1e7 loses too much accuracy (0.44 < 0.45), 1e6 keeps it exactly at the bound (0.45 = 0.9 x 0.5): in the band
    out = ess_by_noise_rule(flips, _quality({**ok, 1e7: 0.44}, dict.fromkeys(ok, 0.02)))
    assert out["premise_holds"] and out["chosen_ess"] == 1e6


def test_noise_rule_falls_back_to_the_most_noise_the_policy_keeps():
    flips = {"ess": [1e9, 1e8, 1e7, 1e6], "share": [0.0, 0.0, 0.0, 0.14]}
    acc = {1e9: 0.5, 1e8: 0.49, 1e7: 0.47, 1e6: 0.0}
    # the in-band ESS breaks the policy: no premise, the smallest ESS that keeps it
    out = ess_by_noise_rule(flips, _quality(acc, {1e9: 0.0, 1e8: 0.0, 1e7: 0.05, 1e6: 0.66}))
    assert not out["premise_holds"] and out["chosen_ess"] == 1e7 and out["in_band"] == [1e6]
    # a malformed rate above the bound breaks it as well, whatever the accuracy
    out = ess_by_noise_rule(flips, _quality(acc, {1e9: 0.0, 1e8: 0.0, 1e7: 0.11, 1e6: 0.66}))
    assert out["chosen_ess"] == 1e8 and out["kept"] == [1e9, 1e8]
    assert ess_by_noise_rule(flips, _quality(dict.fromkeys(acc, 0.0), dict.fromkeys(acc, 0.5)))["chosen_ess"] is None
    with pytest.raises(ValueError, match=r"quality=<measured at \[1000000000.0\]> is invalid: .*missing"):
        ess_by_noise_rule(flips, _quality({1e9: 0.5}, {1e9: 0.0}))
    with pytest.raises(ValueError, match=r"max_malformed=1.5 is invalid: must be a number in \[0, 1\]"):
        ess_by_noise_rule(flips, _quality(acc, dict.fromkeys(acc, 0.0)), max_malformed=1.5)


def test_noisy_rollout_quality_without_noise_is_the_mean_weights_and_breaks_under_huge_noise(
        tiny_model_and_tokenizer):
    from rlvr_lib.tasks.arithmetic import verify

    model, tokenizer = tiny_model_and_tokenizer
    problems = _problems(6)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sigma = {3.0: 0.0, 1.0: 5.0}.__getitem__
    out = noisy_rollout_quality(model, tokenizer, problems, [1.0, 3.0], sigma, verify=verify, samples=2,
                                max_new_tokens=12, seed=2)
    assert out["ess"] == [3.0, 1.0] and out["sigma"] == [0.0, 5.0] and out["n_problems"] == 6
    # sigma 0: the same weights and sampling seeds as the mean's, so the same verdicts
    assert (out["accuracy"][0], out["malformed"][0]) == (out["accuracy_mean"], out["malformed_mean"])
    # By hand for the mean weights: one completion per problem at sampling seeds 2 and 3, verified.
    status = []
    for n in (2, 3):
        ro = KVCacheEngine(model, tokenizer, batch_size=256).generate(
            [p.prompt for p in problems], SamplingParams(n=1, temperature=1.0, max_new_tokens=12, seed=n))
        status += [verify(p, t).status for p, t in zip(problems, ro.texts)]
    assert out["malformed_mean"] == pytest.approx(sum(s == "malformed" for s in status) / 12)
    assert out["malformed"][1] == 1.0  # weights of std 5 write no parsable answer
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # weights restored


def test_branch_flips_none_without_noise_some_with_huge_noise(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    prompts = [p.prompt for p in _problems(6)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sigma = {3.0: 0.0, 2.0: 1e-9, 1.0: 5.0}.__getitem__  # larger ESS, less noise
    out = branch_flip_by_ess(model, tokenizer, prompts, [1.0, 3.0, 2.0], sigma, samples=3, seed=1)
    assert out["ess"] == [3.0, 2.0, 1.0] and out["sigma"] == [0.0, 1e-9, 5.0]  # largest ESS first
    assert out["refined"] == []
    assert out["share"][0] == 0.0 and out["share_any"][0] == 0.0 and out["share"][1] == 0.0
    assert out["mass"][0] == pytest.approx(out["mass_mean"], rel=1e-12)
    assert out["share"][2] > 0.0 and out["share_any"][2] >= out["share"][2]
    assert out["tokens"] == strategy_tokens(tokenizer, STRATEGIES) and out["n_prompts"] == 6
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # weights restored


def test_branch_flip_share_is_the_share_of_prompts_whose_top_candidate_moves(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    prompts = [p.prompt for p in _problems(8)]
    tokens = strategy_tokens(tokenizer, STRATEGIES)
    out = branch_flip_by_ess(model, tokenizer, prompts, [7.0], lambda ess: 0.1, samples=2, tokens=tokens, seed=4)
    ref = branch_logits(model, tokenizer, prompts)[:, tokens].argmax(1)
    gen = torch.Generator().manual_seed(4)
    changed = []
    for _ in range(2):  # the same draws, in order
        with weight_sample(model, 0.1, gen):
            changed.append((branch_logits(model, tokenizer, prompts)[:, tokens].argmax(1) != ref).numpy())
    changed = np.stack(changed)
    assert out["share"] == [pytest.approx(changed.mean())]
    assert out["share_any"] == [pytest.approx(changed.any(0).mean())]


def test_refinement_bisects_until_the_band_is_hit(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    prompts = [p.prompt for p in _problems(8)]
    band = (0.05, 0.2)
    out = branch_flip_by_ess(model, tokenizer, prompts, [1e6, 1e-1], lambda ess: 1.0 / ess, samples=2, refine=6,
                             band=band)
    shares = dict(zip(out["ess"], out["share"]))
    assert shares[1e6] == 0.0 and shares[1e-1] > band[1]  # the grid jumps over the band
    assert out["refined"][0] == pytest.approx(math.sqrt(1e6 * 1e-1))
    seen = {1e6: shares[1e6], 1e-1: shares[1e-1]}
    for ess in out["refined"]:  # each refinement is next_flip_ess of what was measured before it
        assert ess == pytest.approx(next_flip_ess(seen, band))
        seen[ess] = shares[ess]
    assert next_flip_ess(seen, band) is None or len(out["refined"]) == 6
    assert out["ess"] == sorted(out["ess"], reverse=True) and len(out["ess"]) == 2 + len(out["refined"])
    if ess_by_flip_rule(shares, band) is not None:
        assert band[0] <= shares[ess_by_flip_rule(shares, band)] <= band[1]


def test_branch_flips_reject_bad_grids_and_sigmas(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    prompts = [p.prompt for p in _problems(2)]
    with pytest.raises(ValueError, match=r"ess_grid=\[\] is invalid: must be a non-empty sequence"):
        branch_flip_by_ess(model, tokenizer, prompts, [])
    with pytest.raises(ValueError, match=r"ess_grid=\[1.0, 1.0\] is invalid: must be distinct ESS values > 0"):
        branch_flip_by_ess(model, tokenizer, prompts, [1.0, 1.0])
    with pytest.raises(ValueError, match=r"ess_grid=-3 is invalid: must be a number in \(0, inf\)"):
        branch_flip_by_ess(model, tokenizer, prompts, [1.0, -3])
    with pytest.raises(ValueError, match=r"sigma_of_ess=.* is invalid: must be a callable giving a finite sigma >= 0 "
                                         r"\(got -1.0 at ess=1.0\)"):
        branch_flip_by_ess(model, tokenizer, prompts, [1.0], lambda e: -1.0)
    with pytest.raises(ValueError, match=r"refine=-1 is invalid: must be an integer >= 0"):
        branch_flip_by_ess(model, tokenizer, prompts, [1.0], refine=-1)


# ----------------------------------------------------------------------------- SAGE
def test_entropy_percentiles_by_hand():
    entropy = [[1.0, 2.0, 9.0], [3.0, 4.0, 5.0]]  # 9.0 is padding
    mask = [[1, 1, 0], [1, 1, 1]]
    out = entropy_percentiles(entropy, mask, (50, 25, 90))
    # tokens 1, 2, 3, 4, 5: p50 = 3, p25 = 2, p90 = 4 + 0.6 * (5 - 4) (linear)
    assert out["all"] == {"p50": 3.0, "p25": 2.0, "p90": pytest.approx(4.6)}
    assert out["branch"]["p50"] == 2.0  # branch tokens 1, 3
    assert out["branch_mean"] == 2.0 and out["other_mean"] == pytest.approx(11 / 3)  # 2, 4, 5
    assert out["branch_above"] == {"p50": 0.0, "p25": 0.5, "p90": 0.0}  # branch > 3, > 2, > 4.6
    assert out["n_tokens"] == 5 and out["n_branch"] == 2
    assert entropy_percentiles([[1.0]], [[1]], (50,))["other_mean"] is None


@pytest.mark.parametrize("entropy,mask,q,match", [
    ([[1.0, 2.0]], [[0, 0]], (50,), r"mask=<a row without tokens> is invalid"),
    ([[1.0, 2.0]], [[1, 1, 1]], (50,), r"entropy=<array of shape \(1, 2\)> is invalid: must be an \(N, T\) array "
                                       r"shaped like mask \(1, 3\)"),
    ([[1.0, float("nan")]], [[1, 1]], (50,), r"entropy=<NaN or inf on a token> is invalid"),
    ([[1.0]], [[1]], (101,), r"percentiles=101 is invalid: must be a number in \[0, 100\]"),
    ([[1.0]], [[1]], (), r"percentiles=\(\) is invalid"),
])
def test_entropy_percentiles_reject_bad_input(entropy, mask, q, match):
    with pytest.raises(ValueError, match=match):
        entropy_percentiles(entropy, mask, q)


def test_completion_entropies_equal_a_direct_softmax(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    prompts = [p.prompt for p in _problems(2)]
    ro = KVCacheEngine(model, tokenizer).generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=3))
    ent, mask = completion_entropies(model, ro, temperature=0.7, batch_size=3)
    assert ent.shape == ro.completion_ids.shape and ent.dtype == torch.float64
    for i in (0, 3):
        prompt = ro.prompt_ids[i][ro.prompt_mask[i].bool()]
        completion = ro.completion_ids[i][ro.completion_mask[i].bool()]
        with torch.no_grad():  # one unpadded sequence: logits at positions len(prompt)-1 ... predict the completion
            logits = model(torch.cat([prompt, completion])[None]).logits[0, len(prompt) - 1:-1].double()
        p = torch.softmax(logits / 0.7, dim=-1)
        direct = -(p * p.log()).sum(-1)
        torch.testing.assert_close(ent[i][mask[i]], direct, rtol=1e-4, atol=1e-5)
        assert (ent[i][~mask[i]] == 0).all()


def test_branch_entropy_percentiles_of_a_tiny_model(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    out = branch_entropy_percentiles(model, tokenizer, [p.prompt for p in _problems(2)], samples=3, seed=2,
                                     max_new_tokens=5)
    assert out["n_branch"] == 6 and 6 <= out["n_tokens"] <= 30
    log_v = math.log(len(tokenizer))
    assert 0 <= out["all"]["p50"] <= out["all"]["p90"] <= out["all"]["p99"] <= log_v + 1e-6
    assert out["samples"] == 3 and out["seed"] == 2
    ro = KVCacheEngine(model, tokenizer).generate([p.prompt for p in _problems(2)],
                                                  SamplingParams(n=3, max_new_tokens=5, seed=2))
    expected = entropy_percentiles(*completion_entropies(model, ro))
    assert {k: out[k] for k in expected} == expected  # its own rollouts, seeded as the engine seeds them


# ----------------------------------------------------------------------------- VIGOR
def test_spearman_by_hand():
    # ranks 1..4 against 1.5, 1.5, 3.5, 3.5: cov 4, norms sqrt(5) and 2 -> 2 / sqrt(5)
    assert score_correctness_spearman([1, 2, 3, 4], [0, 0, 1, 1]) == pytest.approx(2 / math.sqrt(5))
    assert score_correctness_spearman([4, 3, 2, 1], [False, False, True, True]) == pytest.approx(-2 / math.sqrt(5))
    # NaN pairs dropped: 1, 2, 3 against 0, 1, 1 -> ranks 1..3 vs 1, 2.5, 2.5 -> sqrt(3) / 2
    assert score_correctness_spearman([1, float("nan"), 2, 3], [0, 1, 1, 1]) == pytest.approx(math.sqrt(3) / 2)
    assert score_correctness_spearman([1, 2, 3], [0, float("nan"), 1]) == pytest.approx(1.0)
    assert math.isnan(score_correctness_spearman([1, 2, 3], [1, 1, 1]))  # constant correctness: undefined
    assert math.isnan(score_correctness_spearman([2, 2], [0, 1]))
    assert math.isnan(score_correctness_spearman([1.0], [1]))
    with pytest.raises(ValueError, match=r"correct=<array of shape \(2,\)> is invalid: must be an array shaped like "
                                         r"scores \(3,\)"):
        score_correctness_spearman([1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match=r"scores=\['a', 'b'\] is invalid: must be a numeric array"):
        score_correctness_spearman(["a", "b"], [0, 1])


def test_truncated_completions_get_their_problems_minimum():
    scores = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    truncated = np.array([[False, False, False, True], [True, False, False, False]])
    np.testing.assert_array_equal(truncated_to_problem_min(scores, truncated), [[1, 2, 3, 1], [5, 6, 7, 8]])


def test_vigor_spearman_pooled_and_within_problems():
    scores = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    correct = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=bool)  # problem 2 is not mixed
    out = vigor_spearman(scores, correct, n_resamples=200)
    assert out["n_mixed"] == 2 and out["n_problems"] == 3 and out["accuracy"] == pytest.approx(8 / 12)
    within = out["within"]
    assert within["mean"] == pytest.approx(2 / math.sqrt(5)) and within["n_problems"] == 2
    assert within["ci_low"] == pytest.approx(within["mean"]) and within["ci_high"] == pytest.approx(within["mean"])
    assert out["pooled"]["mean"] == pytest.approx(score_correctness_spearman(scores, correct))
    assert out["pooled"]["ci_low"] <= out["pooled"]["mean"] <= out["pooled"]["ci_high"]
    assert out["pooled"]["n"] == 12
    # truncation: the truncated correct sample drops to its problem's minimum score
    trunc = np.zeros_like(correct)
    trunc[0, 3] = True
    out = vigor_spearman(scores, correct, trunc, n_resamples=50)
    rho0 = score_correctness_spearman([1, 2, 3, 1], [0, 0, 1, 1])
    assert out["within"]["mean"] == pytest.approx((rho0 + 2 / math.sqrt(5)) / 2)
    assert out["truncated_frac"] == pytest.approx(1 / 12)
    # nothing mixed: no within-problem correlation
    none_mixed = vigor_spearman(scores, np.ones_like(correct), n_resamples=10)
    assert none_mixed["within"] is None and none_mixed["pooled"]["mean"] is None


def test_vigor_spearman_rejects_bad_input():
    with pytest.raises(ValueError, match=r"correct=<array of shape \(2, 2\)> is invalid: must be a 0/1 array shaped"):
        vigor_spearman(np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"scores=<array of shape \(3,\)> is invalid: must be a non-empty \(P, n\)"):
        vigor_spearman(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=r"truncated=<array of shape \(2, 3\), int64> is invalid"):
        vigor_spearman(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3), dtype=np.int64))


def test_vigor_scores_are_minus_sqrt_length_times_the_reference_norm(tiny_model_and_tokenizer):
    from rlvr_lib.rewards.grad_norm import grad_norms_naive

    model, tokenizer = tiny_model_and_tokenizer
    ro = KVCacheEngine(model, tokenizer).generate([p.prompt for p in _problems(2)],
                                                  SamplingParams(n=3, max_new_tokens=6, seed=1))
    got = vigor_scores(model, ro, batch_size=4)
    ref = grad_norms_naive(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask).numpy()
    np.testing.assert_allclose(got, -np.sqrt(ro.completion_mask.sum(1).numpy()) * ref, rtol=1e-4)
    np.testing.assert_allclose(vigor_scores(model, ro, sqrt_len=False), -ref, rtol=1e-4)
    assert all(p.grad is None for p in model.parameters())


def test_vigor_score_correctness_is_vigor_spearman_of_its_own_samples(tiny_model_and_tokenizer):
    from rlvr_lib.tasks import Verdict

    model, tokenizer = tiny_model_and_tokenizer
    problems = _problems(3)

    def verifier(problem, text):  # a random model solves nothing: call a completion correct by its text's parity
        return Verdict(1.0, "correct") if len(text) % 2 else Verdict(0.0, "wrong")

    out = vigor_score_correctness(model, tokenizer, problems, samples=8, seed=2, max_new_tokens=12, n_resamples=30,
                                  verifier=verifier)
    ro = KVCacheEngine(model, tokenizer).generate([p.prompt for p in problems],
                                                  SamplingParams(n=8, max_new_tokens=12, seed=2))
    correct = np.array([verifier(None, t).status == "correct" for t in ro.texts]).reshape(3, 8)
    truncated = np.array([r == "length" for r in ro.finish_reasons]).reshape(3, 8)
    expected = vigor_spearman(vigor_scores(model, ro).reshape(3, 8), correct, truncated, n_resamples=30, seed=2)
    assert {k: out[k] for k in expected} == expected and out["samples"] == 8 and out["sqrt_len"] is True
    assert out["pooled"]["mean"] is not None and out["n_mixed"] >= 1  # the comparison has something to compare
    with pytest.raises(ValueError, match=r"problems=\[\] is invalid: must be at least one problem"):
        vigor_score_correctness(model, tokenizer, [])


# ----------------------------------------------------------------------------- all four
def test_measure_premises_schema_and_ranges(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    problems = _problems(3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = measure_premises(model, tokenizer, problems, samples=8, k=4, max_new_tokens=8,
                           ess_grid=(1e9, 1e4, 1e2), weight_samples=2, reference_ess=3e3, vigor_problems=2,
                           n_resamples=50, seed=1)
    json.dumps(out, allow_nan=False)  # strict JSON
    assert set(out) == {"settings", "nudgerl", "threepo", "sage", "vigor", "seconds", "machine"}
    assert out["machine"]["cpu_model"] == cpu_model()  # where it ran: one processor model for notebook 00-06
    assert all(n_ in out["seconds"] for n_ in ("sampling", "nudgerl", "threepo", "sage", "vigor"))
    settings = out["settings"]
    assert settings["ess_grid"] == [1e9, 1e4, 3e3, 1e2]  # the reference ESS joins the grid, largest first
    assert settings["k"] == 4 and settings["samples"] == 8 and settings["vigor_problems"] == 2
    nudge = out["nudgerl"]
    assert 0.0 <= nudge["share"] <= 1.0 and nudge["k"] == 4
    assert nudge["share"] == pytest.approx(single_strategy_share(nudge["strategy_counts"], 4))
    assert all(sum(c[p] for c in nudge["strategy_counts"].values()) == 8 for p in range(3))
    assert sum(nudge["strategy_freq"].values()) == pytest.approx(1.0)
    three = out["threepo"]
    assert len(three["share"]) == 4 + len(three["refined"]) and all(0.0 <= s <= 1.0 for s in three["share"])
    assert len(three["refined"]) <= 4 and three["ess"] == sorted(three["ess"], reverse=True)
    assert three["at_reference"]["ess"] == 3e3
    assert three["chosen_ess"] == ess_by_flip_rule(dict(zip(three["ess"], three["share"])), (0.05, 0.2))
    assert three["sigma"][0] == pytest.approx(ivon_initial_sigma(1e9))
    assert three["quality"]["ess"] == three["ess"] and three["quality"]["samples"] == 2
    assert three["noise_rule"] == ess_by_noise_rule(three, three["quality"], (0.05, 0.2))
    assert three["training_ess"] == three["noise_rule"]["chosen_ess"]
    sage = out["sage"]
    assert sage["n_branch"] == 24 and sage["all"]["p50"] <= sage["all"]["p90"] <= sage["all"]["p99"]
    vigor = out["vigor"]
    assert vigor["n_problems"] == 2 and vigor["pooled"]["n"] == 16 and 0.0 <= vigor["accuracy"] <= 1.0
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    again = measure_premises(model, tokenizer, problems, samples=8, k=4, max_new_tokens=8, ess_grid=(1e9, 1e4, 1e2),
                             weight_samples=2, reference_ess=3e3, vigor_problems=2, n_resamples=50, seed=1)
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in out.items() if k != "seconds"}


@pytest.mark.parametrize("kw,match", [
    (dict(samples=4, k=8), r"k=8 is invalid: must be an integer in \[1, 4\]"),
    (dict(vigor_problems=5), r"vigor_problems=5 is invalid: must be an integer in \[1, 2\]"),
    (dict(band=(0.5, 0.1)), r"band=\(0.5, 0.1\) is invalid"),
    (dict(reference_ess=0), r"reference_ess=0 is invalid: must be a number in \(0, inf\)"),
    (dict(ess_grid=()), r"ess_grid=\(\) is invalid"),
    (dict(refine=1.5), r"refine=1.5 is invalid: must be an integer >= 0"),
    (dict(temperature=0), r"temperature=0 is invalid: must be a number in \(0, inf\)"),
    (dict(max_new_tokens=0), r"max_new_tokens=0 is invalid: must be an integer >= 1"),
    (dict(vigor_impl="fast"), r"vigor_impl='fast' is invalid: must be one of \['auto', 'ghost', 'naive', 'vmap'\]"),
    (dict(sqrt_len=1), r"sqrt_len=1 is invalid: must be a bool"),
    (dict(sigma_of_ess=0.1), r"sigma_of_ess=0.1 is invalid: must be a callable"),
    (dict(percentiles=(50, 120)), r"percentiles=120 is invalid: must be a number in \[0, 100\]"),
    (dict(task="nope"), r"nope"),
])
def test_measure_premises_rejects_bad_settings(tiny_model_and_tokenizer, kw, match):
    model, tokenizer = tiny_model_and_tokenizer
    with pytest.raises(ValueError, match=match):
        measure_premises(model, tokenizer, _problems(2), **kw)
    with pytest.raises(ValueError, match=r"problems=\[\] is invalid: must be at least one problem"):
        measure_premises(model, tokenizer, [])


def test_default_grid_runs_from_the_authors_ess_down():
    assert DEFAULT_ESS_GRID[0] == 1e9 and list(DEFAULT_ESS_GRID) == sorted(DEFAULT_ESS_GRID, reverse=True)
    assert ivon_initial_sigma(DEFAULT_ESS_GRID[-1]) == pytest.approx(0.1, rel=1e-3)


def test_premises_sit_below_the_methods_and_the_trainer():
    import subprocess
    import sys

    code = ("import sys, rlvr_lib.study.probes.premises; "
            "bad = [m for m in sys.modules if m.startswith(('rlvr_lib.methods', 'rlvr_lib.trainer'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
