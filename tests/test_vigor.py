"""VIGOR as a method: the reward ignores the verifier, truncation gets the group minimum, runs resume exactly."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rlvr_lib.methods import METHODS, build_method, method_config
from rlvr_lib.methods.vigor import truncated_to_group_min
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


def test_truncated_completions_get_their_groups_minimum():
    scores = torch.tensor([-1.0, -3.0, -2.0, -5.0, -4.0, -6.0])
    truncated = torch.tensor([True, False, False, False, True, False])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    # group 0: min -3 -> row 0 ; group 1: min -6 (row 5) -> row 4
    assert truncated_to_group_min(scores, truncated, groups).tolist() == [-3.0, -3.0, -2.0, -5.0, -6.0, -6.0]


def test_preset_and_options():
    preset = METHODS["vigor"].preset
    # TRL's GRPOTrainer (the authors' code) differentiates exp(D) - D - 1 by autograd: our "k3", beta 0.01.
    assert (preset["advantage"], preset["kl_coef"], preset["kl_estimator"], preset["group_size"]) == (
        "rank", 0.01, "k3", 8)
    with pytest.raises(ValueError, match="impl='ghosts' is invalid"):
        build_method(method_config("vigor", method_options={"impl": "ghosts"}))
    with pytest.raises(ValueError, match="sqrt_len"):
        build_method(method_config("vigor", method_options={"sqrt_len": "yes"}))


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
