"""Step-time benchmark against TRL's GRPOTrainer: argument checks, a tiny real run, TRL really trains."""

import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
import trl as trl_lib

from rlvr_lib.study.bench import step as bench
from rlvr_lib.study.bench.step import bench_step_time
from rlvr_lib.rollout import HFEngine

TINY = dict(prompts_per_step=2, group_size=2, max_new_tokens=8, warmup=0, repeats=1)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"prompts_per_step": 0}, "prompts_per_step"),
        ({"prompts_per_step": 2.0}, "prompts_per_step"),
        ({"prompts_per_step": True}, "prompts_per_step"),
        ({"group_size": 1}, "group_size"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"warmup": -1}, "warmup"),
        ({"repeats": 0}, "repeats"),
        ({"seed": -1}, "seed"),
        ({"threads": 0}, "threads"),
        ({"engine": "HFEngine"}, "engine"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"{name}=.*must be"):
        bench_step_time(**{**TINY, **kwargs})


def test_tiny_run_returns_consistent_json(tmp_path, monkeypatch):
    # TRL's output_dir must be a temporary directory that is gone afterwards, and nothing lands in the cwd.
    made = []

    class RecordingTemporaryDirectory(tempfile.TemporaryDirectory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(Path(self.name))

    monkeypatch.setattr(bench.tempfile, "TemporaryDirectory", RecordingTemporaryDirectory)
    monkeypatch.chdir(tmp_path)
    threads_before = torch.get_num_threads()

    result = bench_step_time(**TINY, seed=3, threads=1)

    assert len(made) == 1 and not made[0].exists()
    assert list(tmp_path.iterdir()) == []
    assert torch.get_num_threads() == threads_before
    assert json.loads(json.dumps(result)) == result
    ours, trl = result["ours"], result["trl"]
    for side in (ours, trl):
        assert len(side["step_seconds"]) == 1 and side["warmup_step_seconds"] == []
        assert math.isfinite(side["median_s"]) and side["median_s"] > 0
        assert side["median_s"] == side["step_seconds"][0]
        assert side["threads"] == 1
        assert side["mean_completion_tokens"][0] is not None and 1 <= side["mean_completion_tokens"][0] <= 8
    assert ours["engine"] == "KVCacheEngine"  # the Trainer's default
    assert trl["trl_version"] == trl_lib.__version__
    assert result["step_time_ratio_vs_trl"] == pytest.approx(ours["median_s"] / trl["median_s"])

    settings = result["settings"]
    expected = {**TINY, "seed": 3, "threads": 1}
    assert {k: settings[k] for k in expected} == expected
    assert settings["engine_factory"] is None
    assert len(settings["problem_uids"]) == 2
    cfg, args = settings["ours_config"], settings["trl_args"]
    assert (cfg["method"], cfg["prompts_per_step"], cfg["group_size"], cfg["max_new_tokens"], cfg["seed"]) == (
        "grpo_no_kl", 2, 2, 8, 3)
    assert (cfg["train_pool_size"], cfg["kl_coef"], cfg["loss_agg"], cfg["inner_epochs"], cfg["minibatches"]) == (
        2, 0.0, "seq_mean_token_mean", 1, 1)
    assert (args["per_device_train_batch_size"], args["num_generations"], args["max_completion_length"]) == (4, 2, 8)
    assert (args["beta"], args["loss_type"], args["scale_rewards"], args["max_steps"], args["seed"]) == (
        0.0, "grpo", "group", 1, 3)
    assert args["learning_rate"] == cfg["lr"] == 1e-4 and args["max_grad_norm"] == cfg["max_grad_norm"] == 1.0
    assert args["epsilon"] == args["epsilon_high"] == cfg["eps_low"] == cfg["eps_high"] == 0.2


def test_engine_factory_is_used_for_our_side():
    calls = []

    def factory(model, tokenizer):
        calls.append((model, tokenizer))
        return HFEngine(model, tokenizer, batch_size=2)

    result = bench_step_time(**TINY, engine=factory)
    assert len(calls) == 1
    assert result["ours"]["engine"] == "HFEngine"
    assert result["settings"]["engine_factory"].endswith("factory")


def test_reward_function_uses_the_verifier_through_problem_index():
    problems = bench._problems(2)
    reward = bench._make_reward_func(problems)
    dataset = bench._trl_dataset(problems)
    assert list(dataset["prompt"]) == [p.prompt_with(None) for p in problems]
    assert list(dataset["problem_index"]) == [0, 1]
    rewards = reward(
        prompts=list(dataset["prompt"]) * 2,
        completions=[problems[0].oracle_trace, problems[1].oracle_trace, problems[1].oracle_trace, "direct: #0"],
        problem_index=[0, 1, 0, 1],
    )
    assert rewards == [1.0, 1.0, 0.0, 0.0]


def test_trl_step_updates_the_model(tmp_path):
    # Enough tokens and samples that some group has mixed rewards, so the advantages (and the gradient) are nonzero.
    problems = bench._problems(8)  # the v7 RL pool's first 4 problems are all-wrong groups for the base policy
    trainer = bench._build_trl_trainer(problems, group_size=8, max_new_tokens=48, steps=1, seed=0,
                                       output_dir=str(tmp_path))
    assert trainer.ref_model is None and not trainer.args.gradient_checkpointing
    assert next(trainer.model.parameters()).dtype == torch.float32
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with bench._quiet():
        trainer.train()
    log = trainer.state.log_history[-1]
    assert trainer.state.global_step == 1
    assert log["frac_reward_zero_std"] < 1.0, log  # a learning signal existed
    groups = trainer.optimizer.param_groups
    assert all(g["lr"] == pytest.approx(1e-4) and g["weight_decay"] == 0.0 for g in groups)
    changed = [not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters())]
    assert any(changed), "no parameter moved after TRL's optimizer step"
