"""Reward functions as callables (TRL's ``reward_funcs``): weighted sums, None handling, training, errors."""

from __future__ import annotations

import copy
import math
import sys
import types

import numpy as np
import pytest
import torch

from rlvr_lib.rewards.callables import (
    REWARD_FUNCS,
    call_reward_func,
    combine_rewards,
    register_reward_func,
    resolve_reward_func,
)
from rlvr_lib.trainer import Trainer, reward_columns
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2)


@pytest.fixture
def plugin(monkeypatch):
    """A module ``user_rewards`` importable by path, its functions recording what they were called with."""
    mod = types.ModuleType("user_rewards")
    mod.calls = []

    def length_reward(prompts, completions, **kw):
        mod.calls.append(dict(prompts=prompts, completions=completions, **kw))
        return [len(c) / 10 for c in completions]

    def half_none(prompts, completions, **kw):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    def all_none(prompts, completions, **kw):
        return [None] * len(completions)

    def too_short(prompts, completions, **kw):
        return [0.0] * (len(completions) - 1)

    def strings(prompts, completions, **kw):
        return ["good"] * len(completions)

    def scalar(prompts, completions, **kw):
        return 1.0

    for f in (length_reward, half_none, all_none, too_short, strings, scalar):
        setattr(mod, f.__name__, f)
    monkeypatch.setitem(sys.modules, "user_rewards", mod)
    return mod


def test_combine_rewards_is_a_weighted_nan_aware_sum():
    per_func = np.array([[1.0, 0.5, np.nan],
                         [0.0, np.nan, 2.0],
                         [np.nan, np.nan, np.nan]])
    out = combine_rewards(per_func, [2.0, -1.0, 0.25])
    # by hand: 2*1 - 0.5 = 1.5; 0 + 0.25*2 = 0.5; nothing rewarded -> 0 (TRL's nansum)
    assert out.tolist() == [1.5, 0.5, 0.0]


def test_call_reward_func_maps_none_and_names_the_function_on_errors(plugin):
    prompts, completions = ["a\n", "b\n", "c\n"], ["x", "yy", "zzz"]
    np.testing.assert_array_equal(call_reward_func(plugin.half_none, prompts, completions), [1.0, np.nan, 1.0])
    np.testing.assert_allclose(call_reward_func(plugin.length_reward, prompts, completions), [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"'too_short' returned 2 rewards, but 3 were expected"):
        call_reward_func(plugin.too_short, prompts, completions)
    with pytest.raises(TypeError, match=r"'strings' returned 'good' \(str\) for completion 0"):
        call_reward_func(plugin.strings, prompts, completions)
    with pytest.raises(TypeError, match=r"'scalar' returned float: must return a list of 3 floats"):
        call_reward_func(plugin.scalar, prompts, completions)
    # a tensor or an array is accepted
    np.testing.assert_array_equal(call_reward_func(lambda prompts, completions, **kw: torch.ones(3), prompts,
                                                   completions), [1.0, 1.0, 1.0])


def test_resolve_by_import_path_and_registered_name(plugin):
    assert resolve_reward_func("user_rewards:length_reward") is plugin.length_reward
    register_reward_func("test_half_none", plugin.half_none)
    try:
        assert resolve_reward_func("test_half_none") is plugin.half_none
        with pytest.raises(ValueError, match="already registered"):
            register_reward_func("test_half_none", plugin.all_none)
    finally:
        REWARD_FUNCS.pop("test_half_none")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        resolve_reward_func("user_rewards:nope")
    with pytest.raises(ValueError, match="not registered .* not an import path"):
        resolve_reward_func("no_such_reward")
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_xyz'"):
        TrainerConfig(reward_funcs=("no_such_module_xyz:f",))


def test_config_checks_and_defaults_unchanged(plugin):
    assert TrainerConfig().to_dict() == TrainerConfig(reward_funcs=(), use_verifier=True).to_dict()
    for key in ("reward_funcs", "reward_weights", "use_verifier", "verifier_weight"):
        assert key not in TrainerConfig().to_dict()
    with pytest.raises(ValueError, match="reward_weights"):
        TrainerConfig(reward_funcs=("user_rewards:length_reward",), reward_weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="use_verifier=False is invalid: must be True when there are no "
                                         "reward_funcs"):
        TrainerConfig(use_verifier=False)
    for method in ("vigor", "intuitor"):  # model-based rewards refuse external ones
        with pytest.raises(ValueError, match=f"method '{method}' computes its own model-based reward"):
            TrainerConfig(method=method, reward_funcs=("user_rewards:length_reward",))
    config = TrainerConfig(reward_funcs=("user_rewards:length_reward",), reward_weights=(0.5,), use_verifier=False)
    assert TrainerConfig.from_dict(config.to_dict()) == config


def test_trainer_rewards_equal_a_hand_computation(plugin, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    config = TrainerConfig(**SMALL, reward_funcs=("user_rewards:length_reward", "user_rewards:half_none"),
                           reward_weights=(0.5, -2.0), verifier_weight=3.0)
    trainer = Trainer(config, copy.deepcopy(model), tok)
    problems = trainer.train_problems[:2]
    batch, _ = trainer._sample(problems, 0, 0)
    verifier = np.array([v.reward for v in batch.verdicts])
    lengths = np.array([len(t) / 10 for t in batch.rollouts.texts])
    half = np.array([np.nan if i % 2 else 1.0 for i in range(len(batch))])
    expected = 3.0 * verifier + 0.5 * lengths + np.where(np.isnan(half), 0.0, -2.0 * half)
    np.testing.assert_allclose(batch.rewards.numpy(), expected.astype(np.float32), rtol=1e-6)
    call = plugin.calls[-1]
    assert call["prompts"] == [problems[g].prompt for g in batch.group_index.tolist()]
    assert call["answer"] == [problems[g].answer for g in batch.group_index.tolist()]
    assert call["completions"] == list(batch.rollouts.texts)
    assert [len(ids) for ids in call["completion_ids"]] == batch.rollouts.completion_mask.sum(1).tolist()
    assert set(reward_columns(batch)) >= {"prompts", "completions", "completion_ids", "hint", "uid", "family"}


def test_all_none_rows_get_zero_and_a_warning(plugin, tiny_model_and_tokenizer, caplog):
    model, tok = tiny_model_and_tokenizer
    config = TrainerConfig(**SMALL, reward_funcs=("user_rewards:all_none",), use_verifier=False)
    trainer = Trainer(config, copy.deepcopy(model), tok)
    with caplog.at_level("WARNING", logger="rlvr_lib.rewards.callables"):
        batch, _ = trainer._sample(trainer.train_problems[:2], 0, 0)
    assert batch.rewards.tolist() == [0.0] * len(batch)
    assert "got no reward from any reward function (all_none)" in caplog.text


def test_wrong_return_fails_the_step_naming_the_function(plugin, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    trainer = Trainer(TrainerConfig(**SMALL, reward_funcs=("user_rewards:too_short",)), copy.deepcopy(model), tok)
    with pytest.raises(ValueError, match="reward function 'too_short' returned 7 rewards, but 8 were expected"):
        trainer.step()


def test_training_on_a_callable_reward_changes_every_trainable_parameter(plugin, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    config = TrainerConfig(**{**SMALL, "steps": 2}, reward_funcs=("user_rewards:length_reward",), use_verifier=False)
    trainer = Trainer(config, copy.deepcopy(model), tok)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    assert len(history) == 2 and all(math.isfinite(row["reward_fn_length_reward"]) for row in history)
    assert history[0]["reward_mean"] == pytest.approx(history[0]["reward_fn_length_reward"], rel=1e-6)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, f"parameters not trained: {unchanged}"


def test_default_rewards_are_the_methods_bit_for_bit(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    trainer = Trainer(TrainerConfig(**SMALL), copy.deepcopy(model), tok)
    batch, _ = trainer._sample(trainer.train_problems[:2], 0, 0)
    assert torch.equal(batch.rewards, trainer.method.rewards(batch, trainer.model).float())
