"""Temperature vs weight noise at the strategy branch (`rlvr_lib.eval.weight_noise`, 3PO Fig 1)."""

import copy

import numpy as np
import pytest
import torch

from rlvr_lib.eval.weight_noise import branch_logits, branch_reorder, order_changed, strategy_tokens, weight_sample
from rlvr_lib.methods.threepo import weight_matrix_std
from rlvr_lib.tasks import get_task
from rlvr_lib.tasks.arithmetic import STRATEGIES


def _prompts(n=12):
    task = get_task("arith")
    return [p.prompt for f in ("easy_mix", "hard_mix") for p in task.family_problems(f, n, seed=0)]


# ----------------------------------------------------------------------------- the comparison
def test_order_changed_compares_the_leading_ranks_of_the_candidates_only():
    reference = torch.tensor([[3., 2., 1., 0.], [0., 1., 2., 3.]])
    other = torch.tensor([[2., 3., 1., 0.], [0., 1., 3., 2.]])
    # candidates 0, 1, 2: row 0 order [0, 1, 2] -> [1, 0, 2]; row 1 [2, 1, 0] -> [2, 1, 0] (token 3 not a candidate)
    assert order_changed(reference, other, [0, 1, 2], k=1).tolist() == [True, False]
    assert order_changed(reference, other, [0, 1, 2], k=3).tolist() == [True, False]
    # row 0 keeps its last candidate in place: only the first two ranks differ
    assert order_changed(reference, other, [1, 2], k=1).tolist() == [False, False]
    # the whole vocabulary: row 1's top token moves from 3 to 2
    assert order_changed(reference, other, None, k=1).tolist() == [True, True]
    assert order_changed(reference, reference / 0.6, None, k=4).tolist() == [False, False]


@pytest.mark.parametrize("kw,match", [
    (dict(tokens=[0, 0]), r"tokens=\[0, 0\] is invalid: must be distinct token ids in \[0, 3\]"),
    (dict(tokens=[4]), r"tokens=\[4\] is invalid"),
    (dict(tokens=[0, 1], k=3), r"k=3 is invalid: must be an integer in \[1, 2\]"),
])
def test_order_changed_rejects_bad_candidates_and_k(kw, match):
    x = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=match):
        order_changed(x, x, **kw)
    with pytest.raises(ValueError, match=r"must be a 2-D tensor of the reference's shape \(2, 4\)"):
        order_changed(x, torch.zeros(2, 5))


# ----------------------------------------------------------------------------- the pieces
def test_strategy_tokens_are_the_first_tokens_of_the_labels(policy):
    _, tokenizer = policy
    ids = strategy_tokens(tokenizer, STRATEGIES)
    assert ids == [tokenizer.encode(s[0], add_special_tokens=False)[0] for s in STRATEGIES]  # one token per byte
    with pytest.raises(ValueError, match=r"strategies=\['split', 'swap'\] is invalid: must be labels with distinct"):
        strategy_tokens(tokenizer, ["split", "swap"])


def test_weight_sample_adds_sigma_times_the_generators_normal_draw_and_restores_exactly():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].bias.requires_grad_(False)  # frozen: not perturbed
    before = copy.deepcopy(model.state_dict())
    rng_state = torch.get_rng_state()
    with weight_sample(model, 0.5, torch.Generator().manual_seed(7)):
        inside = {n: p.detach().clone() for n, p in model.named_parameters()}
    ref = torch.Generator().manual_seed(7)
    for name in ("0.weight", "0.bias", "1.weight"):
        z = torch.randn(before[name].shape, generator=ref)
        assert torch.allclose(inside[name], before[name] + 0.5 * z, atol=1e-7), name
    assert torch.equal(inside["1.bias"], before["1.bias"])
    assert all(torch.equal(p, before[n]) for n, p in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng_state)
    with pytest.raises(ValueError, match=r"sigma=-0.1 is invalid: must be a number in \[0, inf\)"):
        with weight_sample(model, -0.1, torch.Generator()):
            pass


def test_branch_logits_are_the_logits_that_predict_the_first_completion_token(policy):
    model, tokenizer = policy
    prompts = _prompts(3)
    got = branch_logits(model, tokenizer, prompts, batch_size=4)
    for i, prompt in enumerate(prompts):  # one prompt at a time, no padding
        ids = torch.tensor([tokenizer.encode(prompt)])
        with torch.no_grad():
            want = model(input_ids=ids).logits[0, -1].double()
        assert torch.allclose(got[i], want, atol=1e-4)
    assert got.shape == (len(prompts), model.config.vocab_size)


# ----------------------------------------------------------------------------- Fig 1
def test_temperature_never_reorders_the_branch_and_zero_noise_never_does(policy):
    model, tokenizer = policy
    tokens = strategy_tokens(tokenizer, STRATEGIES)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for k in (1, len(tokens)):
        out = branch_reorder(model, tokenizer, _prompts(), sigma=0.0, samples=2, tokens=tokens, k=k)
        assert out.weight.shape == (2, 24) and out.temperature.shape == (3, 24)
        assert not out.weight.any() and not out.temperature.any()
        assert out.shares() == {"weight": 0.0, "weight_any": 0.0, "T=0.6": 0.0, "T=1": 0.0, "T=1.4": 0.0}
    np.testing.assert_allclose(out.temperature_probs[1], out.probs, atol=1e-12)  # T = 1 is the reference
    np.testing.assert_allclose(out.weight_probs[0], out.probs, atol=1e-12)
    # temperature changes the probabilities (it sharpens / flattens) but not their order
    assert np.abs(out.temperature_probs[0] - out.probs).max() > 0.01
    # the base policy puts almost all its branch mass on the three strategy tokens
    assert out.candidate_mass()["mean"] > 0.95
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_large_weight_noise_reorders_the_branch_deterministically(policy):
    model, tokenizer = policy
    tokens = strategy_tokens(tokenizer, STRATEGIES)
    rng_state = torch.get_rng_state()
    # sigma = 0.75 x the std of the weight matrices (0.05): on the shipped policy 31% of the (sample, prompt)
    # pairs change the top strategy token on 800 prompts x 16 samples, 43% on these 24 x 4
    sigma = 0.75 * weight_matrix_std(model)
    a = branch_reorder(model, tokenizer, _prompts(), sigma=sigma, samples=4, tokens=tokens, seed=3)
    b = branch_reorder(model, tokenizer, _prompts(), sigma=sigma, samples=4, tokens=tokens, seed=3)
    c = branch_reorder(model, tokenizer, _prompts(), sigma=sigma, samples=4, tokens=tokens, seed=4)
    assert a.shares()["weight"] > 0.2 and not a.temperature.any()
    assert np.array_equal(a.weight, b.weight) and np.array_equal(a.weight_probs, b.weight_probs)
    assert not np.array_equal(a.weight_probs, c.weight_probs)
    assert torch.equal(torch.get_rng_state(), rng_state)


@pytest.mark.parametrize("kw,match", [
    (dict(sigma=-1.0), r"sigma=-1.0 is invalid: must be a number in \[0, inf\)"),
    (dict(samples=0), r"samples=0 is invalid: must be an integer >= 1"),
    (dict(temperatures=(1.0, 0.0)), r"temperatures=0.0 is invalid: must be a number in \(0, inf\)"),
    (dict(temperatures=()), r"temperatures=\(\) is invalid: must be a non-empty sequence"),
    (dict(tokens=[16, 16]), r"tokens=\[16, 16\] is invalid: must be distinct token ids"),
])
def test_branch_reorder_names_the_bad_argument(policy, kw, match):
    model, tokenizer = policy
    with pytest.raises(ValueError, match=match):
        branch_reorder(model, tokenizer, _prompts(1), **{"sigma": 0.0, **kw})
    with pytest.raises(ValueError, match=r"prompts=\[\] is invalid: must be a non-empty sequence of prompt strings"):
        branch_logits(model, tokenizer, [])


def test_closest_prompt_is_the_smallest_gap_between_the_top_two_candidates():
    from rlvr_lib.eval.weight_noise import BranchReorder

    probs = np.array([[0.7, 0.2, 0.1], [0.4, 0.5, 0.1], [0.45, 0.1, 0.45]])
    empty = np.zeros((0, 3), dtype=bool)
    out = BranchReorder(weight=empty, temperature=empty, probs=probs, weight_probs=probs[None],
                        temperature_probs=probs[None], temperatures=(1.0,), sigma=0.0, k=1, tokens=(0, 1, 2))
    assert out.closest_prompt() == 2  # log(.45/.45) = 0 < log(.5/.4) < log(.7/.2)
    assert out.candidate_mass()["mean"] == pytest.approx(1.0)
