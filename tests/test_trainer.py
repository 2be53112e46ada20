"""The RL loop: learning, determinism, resume, config validation, registry."""

import json

import numpy as np
import pytest
import torch

from rlvr_lib.eval.sampling import sample_and_score
from rlvr_lib.methods import METHODS, method_config
from rlvr_lib.policy import load_policy
from rlvr_lib.rollout import HFEngine, SamplingParams
from rlvr_lib.trainer import Trainer, TrainerConfig, read_checkpoint


def _metrics(history):
    """History without wall-clock fields (the only ones allowed to differ between runs)."""
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]


def _small(**kw):
    base = dict(steps=4, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="train")
    return method_config("grpo", **{**base, **kw})


def test_grpo_raises_reward_on_an_easy_family():
    # 64 problems of the easiest evaluation family (base pass@1 about 0.45): 20 steps must lift their reward.
    cfg = method_config("grpo", train_family="easy_mix", train_pool_size=64, steps=20, prompts_per_step=8,
                        group_size=8, lr=1e-4, max_new_tokens=40, seed=0)
    trainer = Trainer(cfg)
    problems = trainer.train_problems
    params = SamplingParams(n=8, temperature=1.0, max_new_tokens=40, seed=123)
    engine = HFEngine(trainer.model, trainer.tokenizer)
    before = sample_and_score(engine, problems, params).rewards.mean()
    history = trainer.train(progress=False)
    after = sample_and_score(engine, problems, params).rewards.mean()
    assert after > before + 0.05, (before, after)
    first, last = history[:5], history[-5:]
    assert sum(m["reward_mean"] for m in last) > sum(m["reward_mean"] for m in first)


def test_same_seed_gives_identical_metrics_and_other_seed_differs():
    a = Trainer(_small(seed=3)).train(progress=False)
    b = Trainer(_small(seed=3)).train(progress=False)
    c = Trainer(_small(seed=4)).train(progress=False)
    assert _metrics(a) == _metrics(b)
    assert _metrics(a) != _metrics(c)


def test_resume_equals_uninterrupted(tmp_path):
    cfg = _small(seed=5, checkpoint_every=2)
    uninterrupted = Trainer(cfg).train(progress=False)
    first = Trainer(cfg, checkpoint_dir=tmp_path)
    first.step(), first.step()  # "killed" after the step-2 checkpoint
    resumed = Trainer(cfg, checkpoint_dir=tmp_path)
    assert resumed.step_count == 2
    assert _metrics(resumed.train(progress=False)) == _metrics(uninterrupted)


def test_a_resumed_run_carries_the_time_its_interrupted_process_spent(tmp_path):
    cfg = _small(seed=5, checkpoint_every=2)
    first = Trainer(cfg, checkpoint_dir=tmp_path)
    assert first.resumed() is None and first.earlier_s == 0.0
    first.step(), first.step()  # "killed" after the step-2 checkpoint
    saved = read_checkpoint(tmp_path / "checkpoint.pt")["elapsed_s"]
    assert saved >= sum(m["time_step"] for m in first.history)  # steps and everything between them
    resumed = Trainer(cfg, checkpoint_dir=tmp_path)
    assert resumed.resumed() == {"at_step": 2, "earlier_s": saved}
    resumed.train(progress=False)
    assert resumed.elapsed_s >= saved + sum(m["time_step"] for m in resumed.history[2:])
    # a checkpoint of a resumed run passes the earlier time on to the next resume
    resumed.save_checkpoint(tmp_path / "checkpoint.pt")
    assert read_checkpoint(tmp_path / "checkpoint.pt")["elapsed_s"] >= saved


def test_a_checkpoint_without_elapsed_time_counts_its_steps_time(tmp_path):
    cfg = _small(seed=5, checkpoint_every=2)
    first = Trainer(cfg, checkpoint_dir=tmp_path)
    first.step(), first.step()
    state = read_checkpoint(tmp_path / "checkpoint.pt")
    del state["elapsed_s"]  # as written before checkpoints carried it
    torch.save(state, tmp_path / "checkpoint.pt")
    resumed = Trainer(cfg, checkpoint_dir=tmp_path)
    assert resumed.earlier_s == pytest.approx(sum(m["time_step"] for m in first.history))


def test_checkpoint_of_another_config_is_refused(tmp_path):
    first = Trainer(_small(seed=5, checkpoint_every=1), checkpoint_dir=tmp_path)
    first.step()
    with pytest.raises(ValueError, match="different config"):
        Trainer(_small(seed=6, checkpoint_every=1), checkpoint_dir=tmp_path)


def test_logged_diagnostics_are_present_and_consistent():
    history = Trainer(_small(seed=0, kl_coef=0.05, inner_epochs=2, minibatches=2)).train(progress=False)
    for m in history:
        for key in ("reward_mean", "accuracy", "zero_adv_frac", "entropy", "kl", "clip_frac_low", "clip_frac_high",
                    "response_length", "malformed_rate", "grad_norm", "time_rollout", "time_reward", "time_update"):
            assert key in m and m[key] == m[key], key  # present and not NaN
        assert 0 <= m["zero_adv_frac"] <= 1 and 0 <= m["malformed_rate"] <= 1
        assert m["reward_mean"] == m["accuracy"]  # verifier reward is 1 exactly when correct
        assert m["time_step"] >= m["time_rollout"] + m["time_update"]
    assert any(m["kl"] > 0 for m in history[1:])  # the policy moved away from the reference


def test_no_reference_model_without_kl():
    assert Trainer(_small(kl_coef=0.0)).reference is None
    assert Trainer(_small(kl_coef=0.1)).reference is not None


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("lr", -1.0, r"TrainerConfig.lr=-1.0 is invalid: must be a number in \(0, 1\]"),
        ("group_size", 0, "TrainerConfig.group_size=0 is invalid: must be an integer in \\[1, 100000\\]"),
        ("loss_agg", "mean", "TrainerConfig.loss_agg='mean' is invalid: must be one of"),
        ("kl_estimator", "k4", "k3"),
        ("advantage", "ppo", "grpo"),
        ("train_family", "aime", "train_easy"),
        ("minibatches", 3, "a divisor of prompts_per_step"),
        ("eps_low", 1.0, "eps_low"),
    ],
)
def test_config_validation_names_field_value_and_allowed(field, value, match):
    with pytest.raises(ValueError, match=match):
        TrainerConfig(**{field: value})


def test_unknown_method_lists_registered_ones():
    with pytest.raises(ValueError, match=r"method='nudge' is not registered: must be one of \[.*'grpo'"):
        method_config("nudge")


def test_config_round_trips_through_json():
    cfg = method_config("pope", steps=7, method_options={"share": 0.25})  # options are checked when built
    again = TrainerConfig.from_json(cfg.to_json())
    assert again == cfg and again.config_hash() == cfg.config_hash()
    assert json.loads(cfg.to_json())["kl_coef"] == METHODS["pope"].preset["kl_coef"]


def test_loaded_policy_is_the_trainers_default():
    model, _ = load_policy()
    trainer = Trainer(_small())
    assert all((p1 == p2).all() for p1, p2 in zip(model.parameters(), trainer.model.parameters()))


def test_trainer_leaves_global_rng_alone():
    """Every random choice is drawn from (seed, step) streams: the global torch RNG is neither read nor reset."""
    torch.manual_seed(99)
    state = torch.get_rng_state()
    trainer = Trainer(TrainerConfig(method="grpo", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8))
    trainer.step()
    assert torch.equal(torch.get_rng_state(), state)


def test_reward_accuracy_correlation_by_hand():
    from rlvr_lib.tasks.base import Verdict
    from rlvr_lib.trainer import reward_accuracy_correlation

    def verdicts(statuses):
        return [Verdict(reward=float(s == "correct"), status=s) for s in statuses]

    v = verdicts(["correct", "wrong", "malformed", "correct"])
    assert reward_accuracy_correlation(np.array([1.0, 0.0, 0.0, 1.0]), v) == pytest.approx(1.0)
    assert reward_accuracy_correlation(np.array([0.0, 1.0, 1.0, 0.0]), v) == pytest.approx(-1.0)
    # r = (3, 1, 2, 4) against c = (1, 0, 0, 1): cov = 1, sd_r = sqrt(1.25), sd_c = 0.5 -> 2 / sqrt(5)
    assert reward_accuracy_correlation(np.array([3.0, 1.0, 2.0, 4.0]), v) == pytest.approx(2 / np.sqrt(5))
    assert np.isnan(reward_accuracy_correlation(np.array([2.0, 2.0, 2.0, 2.0]), v))
    assert np.isnan(reward_accuracy_correlation(np.array([3.0, 1.0, 2.0, 4.0]), verdicts(["wrong"] * 4)))
    # An "unverified" verdict (its verifier raised; kept only for intrinsic rewards) is left out, whatever its
    # reward: r = (3, 1, 4) against c = (1, 0, 1): cov-sum 15/9, squares 42/9 and 6/9 -> 15 / sqrt(252).
    u = verdicts(["correct", "wrong", "unverified", "correct"])
    assert reward_accuracy_correlation(np.array([3.0, 1.0, 100.0, 4.0]), u) == pytest.approx(15 / np.sqrt(252))
    assert np.isnan(reward_accuracy_correlation(np.array([3.0, 1.0]), verdicts(["correct", "unverified"])))
