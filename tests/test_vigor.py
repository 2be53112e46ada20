"""VIGOR as a method: the reward ignores the verifier, empty completions rank last, runs resume exactly."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from rlvr_lib.methods import METHODS, build_method, method_config
from rlvr_lib.methods.vigor import empty_below_group_min
from rlvr_lib.tasks import WRONG, Verdict
from rlvr_lib.trainer import Trainer

SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3)


def _trainer(policy, checkpoint_dir=None, **kw):
    model, tokenizer = policy
    return Trainer(method_config("vigor", **{**SMALL, **kw}), copy.deepcopy(model), tokenizer,
                   checkpoint_dir=checkpoint_dir)


def _untimed(history):
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]


def test_empty_completions_go_below_their_groups_minimum():
    # Issue 29, as the authors: only empty-mask completions are moved, to (min of the group's others) - 1e-3.
    scores = torch.tensor([0.0, -3.0, -2.0, -5.0, float("nan"), -6.0, 0.0, 0.0], dtype=torch.float64)
    empty = torch.tensor([True, False, False, False, True, False, True, True])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    # group 0: min of rows 1, 2 = -3 -> row 0 -3.001 ; group 1: min -6 -> row 4 -6.001 (its NaN ignored);
    # group 2: nothing scored -> -0.001 for both
    out = empty_below_group_min(scores, empty, groups)
    assert out.tolist() == pytest.approx([-3.001, -3.0, -2.0, -5.0, -6.001, -6.0, -0.001, -0.001], abs=1e-12)
    with pytest.raises(ValueError, match="margin=-1 is invalid"):
        empty_below_group_min(scores, empty, groups, margin=-1)


def test_preset_and_options():
    preset = METHODS["vigor"].preset
    # TRL's GRPOTrainer (the authors' code) differentiates exp(D) - D - 1 by autograd: our "k3", beta 0.01.
    assert (preset["advantage"], preset["kl_coef"], preset["kl_estimator"], preset["group_size"]) == (
        "rank", 0.01, "k3", 8)
    with pytest.raises(ValueError, match="impl='ghosts' is invalid"):
        build_method(method_config("vigor", method_options={"impl": "ghosts"}))
    with pytest.raises(ValueError, match="sqrt_len"):
        build_method(method_config("vigor", method_options={"sqrt_len": "yes"}))
    with pytest.raises(ValueError, match="rank_shaping: expected bool, got int 1"):
        build_method(method_config("vigor", method_options={"rank_shaping": 1}))
    # The ablation is the option, not another estimator: any advantage but "rank" is refused, naming the option.
    with pytest.raises(ValueError, match=r"advantage='grpo' is invalid: must be 'rank'.*'rank_shaping': False"):
        build_method(method_config("vigor", advantage="grpo"))
    assert build_method(method_config("vigor")).options.rank_shaping is True


def _advantages(scores, groups, **options):
    method = build_method(method_config("vigor", method_options=options))
    batch = SimpleNamespace(rewards=torch.tensor(scores, dtype=torch.float64), group_index=torch.tensor(groups),
                            hint_index=torch.full((len(groups),), -1))
    return method.advantages(batch)


def test_without_rank_shaping_the_raw_scores_are_group_normalised_with_eps_1e_4():
    scores = [-1.0, -3.0, -2.0, -6.0, 0.0, 1e-3]
    groups = [0, 0, 0, 0, 1, 1]
    # group 0: mean -3, deviations (2, 0, 1, -3), unbiased std sqrt(14 / 3) = 2.1602469
    #   -> A = dev / (2.1602469 + 1e-4) = (0.9257772, 0, 0.4628886, -1.3886659)
    # group 1: mean 5e-4, deviations -+5e-4, unbiased std sqrt(5e-7) = 7.0710678e-4
    #   -> A = -+5e-4 / (7.0710678e-4 + 1e-4) = -+0.6194967   (eps 1e-6 would give 0.7061)
    expected = [0.9257772, 0.0, 0.4628886, -1.3886659, -0.6194967, 0.6194967]
    torch.testing.assert_close(_advantages(scores, groups, rank_shaping=False),
                               torch.tensor(expected, dtype=torch.float64), rtol=0, atol=2e-7)
    # With rank shaping (default), the same scores give the ranks' advantages instead: group 0 ranks (4, 2, 3, 1)
    # -> u = (1, -1/3, 1/3, -1), std sqrt(20/27) = 0.8606630 -> A = u / 0.8607630; group 1 u = -+1 -> -+0.7070568.
    torch.testing.assert_close(_advantages(scores, groups), torch.tensor(
        [1.1617600, -0.3872533, 0.3872533, -1.1617600, -0.7070568, 0.7070568], dtype=torch.float64),
        rtol=0, atol=2e-7)


def test_empty_and_truncated_then_rank_shaping_by_hand(monkeypatch):
    # One group of 4 (issue 29, the authors' rules). Row 3 has the best score (-1) and was truncated: it keeps
    # it. Row 1 has an empty mask: its score (0, a zero gradient, would rank best) becomes the minimum of the
    # others (-3) minus 1e-3 = -3.001. Ranks (1 = worst): row 1 1, row 2 (-3) 2, row 0 (-2) 3, row 3 4.
    # u = 2 (rank - 1) / 3 - 1 = (1/3, -1, -1/3, 1): mean 0, sum of squares 20/9,
    # unbiased std sqrt(20 / 27) = 0.8606630 -> A = u / (0.8606630 + 1e-4).
    scores = torch.tensor([-2.0, 0.0, -3.0, -1.0])
    monkeypatch.setattr("rlvr_lib.methods.vigor.grad_norm_scores", lambda *args, **kw: scores.clone())
    ids = torch.ones(4, 3, dtype=torch.long)
    mask = ids.clone()
    mask[1] = 0
    batch = SimpleNamespace(
        rollouts=SimpleNamespace(prompt_ids=ids, prompt_mask=ids, completion_ids=ids, completion_mask=mask,
                                 finish_reasons=["stop", "stop", "stop", "length"]),
        verdicts=[Verdict(0.0, WRONG)] * 4, group_index=torch.zeros(4, dtype=torch.long),
        hint_index=torch.full((4,), -1))
    method = build_method(method_config("vigor"))
    batch.rewards = method.rewards(batch, model=None)
    assert batch.rewards.tolist() == pytest.approx([-2.0, -3.001, -3.0, -1.0], abs=1e-6)
    std = math.sqrt(20 / 27)
    expected = torch.tensor([1 / 3, -1.0, -1 / 3, 1.0], dtype=torch.float64) / (std + 1e-4)
    torch.testing.assert_close(method.advantages(batch).double(), expected, rtol=1e-6, atol=0)
    assert expected[3].item() == pytest.approx(1.1617600, abs=1e-7)
    assert method._stats["vigor_truncated_frac"] == 0.25 and method._stats["vigor_empty_frac"] == 0.25


def test_the_reward_never_reads_the_verifier(policy, monkeypatch):
    honest = _trainer(policy)
    honest.train(progress=False)
    lying = _trainer(policy)
    monkeypatch.setattr(lying.task, "verify", lambda problem, completion: Verdict(7.0, WRONG))
    history = lying.train(progress=False)
    # Same updates whatever the verifier says: only the logged accuracy differs.
    assert all(torch.equal(a, b) for a, b in zip(honest.model.parameters(), lying.model.parameters()))
    assert all(row["accuracy"] == 0 for row in history)
    assert all(row["reward_mean"] < 0 for row in history)  # the scores, not the verifier's 7.0
    assert {"vigor_grad_norm", "vigor_truncated_frac"} <= set(history[0])


def test_ghost_and_naive_give_the_same_run(policy):
    a = _untimed(_trainer(policy, steps=1).train(progress=False))  # "auto": ghost norms on the tiny policy
    b = _untimed(_trainer(policy, steps=1, method_options={"impl": "naive"}).train(progress=False))
    assert a[0]["reward_mean"] == pytest.approx(b[0]["reward_mean"], rel=1e-5)
    assert a[0]["loss"] == pytest.approx(b[0]["loss"], rel=1e-4, abs=1e-7)


def test_runs_are_bit_identical_across_runs_and_resume(policy, tmp_path):
    kw = dict(steps=3, checkpoint_every=1)
    a = _trainer(policy, **kw).train(progress=False)
    b = _trainer(policy, **kw).train(progress=False)
    assert _untimed(a) == _untimed(b)
    first = _trainer(policy, checkpoint_dir=tmp_path, **kw)
    first.step()
    resumed = _trainer(policy, checkpoint_dir=tmp_path, **kw)
    assert resumed.step_count == 1
    assert _untimed(resumed.train(progress=False)) == _untimed(a)


def test_accuracy_by_rank_by_hand():
    from rlvr_lib.methods.vigor import accuracy_by_rank

    scores = torch.tensor([-1.0, -3.0, -2.0, -5.0, -4.0, -6.0])
    correct = torch.tensor([1, 0, 1, 0, 1, 1])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    # group 0 by score: rows 0 (1), 2 (1), 1 (0) ; group 1: rows 4 (1), 3 (0), 5 (1)
    assert accuracy_by_rank(scores, correct, groups).tolist() == [1.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="groups of one size G"):
        accuracy_by_rank(scores[:5], correct[:5], groups[:5])


def test_rank_accuracy_is_logged_for_every_rank(policy):
    row = _trainer(policy, steps=1).train(progress=False)[0]
    ranks = [row[f"vigor_acc_rank_{r}"] for r in range(1, SMALL["group_size"] + 1)]
    assert all(0 <= a <= 1 for a in ranks)
    assert sum(ranks) / len(ranks) == pytest.approx(row["accuracy"])  # every rollout counted once


def test_vigor_trains_every_parameter_without_nan(policy):
    trainer = _trainer(policy)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    for row in history:
        for key, value in row.items():
            assert not (isinstance(value, float) and math.isnan(value)), key
        assert ("reward_acc_corr" in row and -1 <= row["reward_acc_corr"] <= 1) or row["accuracy"] in (0.0, 1.0)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged
    assert all(p.isfinite().all() for p in trainer.model.parameters())


def test_a_verifier_that_raises_does_not_stop_vigor_but_stops_grpo(policy, monkeypatch):
    def broken(problem, completion):
        raise RuntimeError("verifier down")

    trainer = _trainer(policy)
    monkeypatch.setattr(trainer.task, "verify", broken)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    with pytest.warns(RuntimeWarning, match="the verifier raised RuntimeError: verifier down") as caught:
        history = trainer.train(progress=False)
    assert len([w for w in caught if "verifier raised" in str(w.message)]) == 1  # warned once, not per completion
    assert len(history) == 2
    for row in history:
        assert math.isfinite(row["loss"]) and row["reward_mean"] < 0
        assert row["unverified_rate"] == 1.0
        assert math.isnan(row["accuracy"]) and math.isnan(row["malformed_rate"])  # not counted as wrong
        assert "reward_acc_corr" not in row
        assert all(math.isnan(row[f"vigor_acc_rank_{r}"]) for r in range(1, SMALL["group_size"] + 1))
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged
    assert all(p.isfinite().all() for p in trainer.model.parameters())

    # GRPO's reward is the verifier's: its exception propagates unchanged.
    model, tokenizer = policy
    grpo = Trainer(method_config("grpo", **SMALL), copy.deepcopy(model), tokenizer)
    monkeypatch.setattr(grpo.task, "verify", broken)
    with pytest.raises(RuntimeError, match="^verifier down$"):
        grpo.step()


def test_which_methods_survive_a_broken_verifier():
    # Only the intrinsic rewards (which never read the verdict) keep training; every other method the library ships
    # rewards with the verifier (directly, or shaped: DAPO, NudgeRL, 3PO, ...) and lets its exception through.
    # (Shipped methods only: a composite another test registered in this process is not the library's.)
    from rlvr_lib.methods.registry import shipped_methods

    survivors = {name for name in shipped_methods() if not METHODS[name].cls.uses_verifier_reward}
    assert survivors == {"vigor", "intuitor"}


def test_unverified_completions_are_left_out_of_the_rank_accuracy():
    from rlvr_lib.methods.vigor import accuracy_by_rank

    scores = torch.tensor([-1.0, -3.0, -2.0, -5.0, -4.0, -6.0])
    correct = torch.tensor([1.0, 0.0, math.nan, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    # group 0 by score: rows 0 (1), 2 (unverified), 1 (0) ; group 1: rows 4 (1), 3 (0), 5 (1)
    assert accuracy_by_rank(scores, correct, groups).tolist() == [1.0, 0.0, 0.5]
