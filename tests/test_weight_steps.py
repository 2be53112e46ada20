"""Per-step weight updates (`rlvr_lib.study.probes.weight_steps`) and the mean-step IVON lr rule of 3PO."""

import copy

import numpy as np
import pytest
import torch

from rlvr_lib.study.probes.weight_steps import WeightStepProfile, weight_step_profile
from rlvr_lib.methods.threepo import matched_ivon_lr, mean_step_matched_ivon_lr
from rlvr_lib.trainer import Trainer
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3, kl_coef=0.0)


def _config(method, **options):
    return TrainerConfig(method=method, method_options=options, **SMALL)


def test_profile_is_the_update_the_trainer_makes(policy):
    model, tokenizer = policy
    cfg = _config("grpo")
    got = weight_step_profile(cfg, 2, model=copy.deepcopy(model), tokenizer=tokenizer)
    # by hand: the same run, weights pooled before and after each step
    trainer = Trainer(cfg, copy.deepcopy(model), tokenizer)
    flat = lambda: torch.cat([p.detach().flatten().double() for p in trainer.model.parameters() if p.requires_grad])
    want = []
    for _ in range(2):
        before = flat()
        trainer.step()
        d = (flat() - before).abs()
        want.append((float(d.mean()), float(d.max()), float((d >= 0.99 * d.max()).double().mean())))
    np.testing.assert_allclose(got.mean_abs, [w[0] for w in want], rtol=1e-6)
    np.testing.assert_allclose(got.max_abs, [w[1] for w in want], rtol=1e-6)
    np.testing.assert_allclose(got.at_max, [w[2] for w in want], atol=1e-6)
    # AdamW's first bias-corrected step is about lr * sign(g): no weight moves by more than lr
    assert got.max_abs[0] <= SMALL["lr"] * (1 + 1e-4) and got.max_abs[0] > 0.9 * SMALL["lr"]
    assert got.mean(skip=1) == {"mean_abs": got.mean_abs[1], "max_abs": got.max_abs[1], "at_max": got.at_max[1]}


def test_ivon_step_is_bounded_by_the_matched_lr_and_proportional_to_the_lr(policy):
    """IVON's step at the matched lr never exceeds the config lr; on the same first step it scales with the lr,
    so the mean-step rule gives the lr whose first step has the target mean exactly."""
    model, tokenizer = policy
    cfg = _config("b3po", noise_scale=0.0, lr=None, clip_radius=1e-3)  # the first (matched) lr rule
    matched = weight_step_profile(cfg, 1, model=copy.deepcopy(model), tokenizer=tokenizer)
    assert matched.max_abs[0] <= SMALL["lr"] * (1 + 1e-4)  # up to float32 rounding of theta + step
    target = 0.3 * matched.mean_abs[0]
    lr = mean_step_matched_ivon_lr(matched_ivon_lr(SMALL["lr"], 1e-3, 1e-6, 1e-3), matched.mean_abs[0], target,
                                   digits=12)
    scaled = weight_step_profile(_config("b3po", noise_scale=0.0, lr=lr, clip_radius=1e-3), 1, model=copy.deepcopy(model),
                                 tokenizer=tokenizer)
    assert scaled.mean_abs[0] == pytest.approx(target, rel=1e-4)
    assert scaled.at_max[0] == pytest.approx(matched.at_max[0], abs=1e-4)  # the same weights at the bound (float32)


def test_mean_step_matched_ivon_lr_by_hand_and_bad_input():
    assert mean_step_matched_ivon_lr(99.9, 9.7e-5, 3.3e-5) == 34.0  # 33.986... to 3 significant figures
    assert mean_step_matched_ivon_lr(99.9, 9.7e-5, 3.3e-5, digits=5) == 33.987  # 99.9 * 3.3 / 9.7 = 33.98660
    assert mean_step_matched_ivon_lr(1.0, 2e-6, 2e-6) == 1.0
    with pytest.raises(ValueError, match=r"ivon_mean_step=0 is invalid: must be a number in \(0, inf\)"):
        mean_step_matched_ivon_lr(99.9, 0, 3.3e-5)
    with pytest.raises(ValueError, match=r"digits=0 is invalid: must be an integer >= 1"):
        mean_step_matched_ivon_lr(99.9, 9.7e-5, 3.3e-5, digits=0)


def test_profile_bad_input(policy):
    model, tokenizer = policy
    with pytest.raises(ValueError, match=r"steps=0 is invalid"):
        weight_step_profile(_config("grpo"), 0, model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"rel_tol=1.0 is invalid: must be a number in \[0, 1\)"):
        weight_step_profile(_config("grpo"), 1, model=model, tokenizer=tokenizer, rel_tol=1.0)
    profile = WeightStepProfile(np.ones(2), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match=r"skip=2 is invalid"):
        profile.mean(skip=2)
