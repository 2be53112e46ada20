"""Learning-rate schedules: the factor at given steps, the trainer's use of it, resume mid-warm-up, presets."""

import math

import pytest
import torch

from rlvr_lib.methods import METHODS, method_config
from rlvr_lib.schedules import (
    PAPER_SCHEDULES,
    lr_factor,
    lr_scheduler,
    paper_schedule,
    total_optimizer_steps,
    warmup_steps,
)
from rlvr_lib.trainer import Trainer, TrainerConfig


def _metrics(history):
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]


def test_warmup_then_constant_by_hand():
    # W = 4 of S = 10: 0, 1/4, 2/4, 3/4, then 1.
    assert [lr_factor(s, total=10, warmup=4) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert lr_factor(9, total=10, warmup=4, schedule="constant") == 1.0


def test_warmup_then_cosine_by_hand():
    # W = 2 of S = 10: after the warm-up, 0.5 (1 + cos(pi (s - 2) / 8)).
    assert lr_factor(1, total=10, warmup=2, schedule="cosine") == 0.5
    assert lr_factor(2, total=10, warmup=2, schedule="cosine") == 1.0
    assert lr_factor(6, total=10, warmup=2, schedule="cosine") == pytest.approx(0.5, abs=1e-15)  # half way
    assert lr_factor(4, total=10, warmup=2, schedule="cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_factor(10, total=10, warmup=2, schedule="cosine") == 0.0
    # no warm-up: starts at the full lr
    assert lr_factor(0, total=10, warmup=0, schedule="cosine") == 1.0


def test_warmup_steps_rounds_up_as_hugging_face():
    assert warmup_steps(0.05, 40) == 2  # 2.0, not 3 from 2.0000000000000004
    assert warmup_steps(0.05, 30) == 2  # 1.5 -> 2
    assert warmup_steps(0.1, 30) == 3
    assert warmup_steps(0.0, 30) == 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(lr_schedule="linear"), r"TrainerConfig.lr_schedule='linear' is invalid: must be one of"),
    (dict(lr_warmup_ratio=1.0), r"TrainerConfig.lr_warmup_ratio=1.0 is invalid: must be a number in \[0, 1\)"),
    (dict(lr_warmup_ratio=-0.1), r"TrainerConfig.lr_warmup_ratio=-0.1 is invalid"),
])
def test_bad_schedule_fields_raise_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainerConfig(**kwargs)


def test_lr_factor_validates_its_arguments():
    with pytest.raises(ValueError, match="schedule='step' is invalid"):
        lr_factor(0, total=4, warmup=1, schedule="step")
    with pytest.raises(ValueError, match="warmup=5 is invalid"):
        lr_factor(0, total=4, warmup=5)


def test_defaults_keep_the_config_hash_and_build_no_scheduler():
    cfg = TrainerConfig()
    assert "lr_schedule" not in cfg.to_dict() and "lr_warmup_ratio" not in cfg.to_dict()
    assert TrainerConfig(lr_schedule="constant", lr_warmup_ratio=0.0).config_hash() == cfg.config_hash()
    assert TrainerConfig(lr_schedule="cosine").config_hash() != cfg.config_hash()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert lr_scheduler(opt, cfg) is None


def test_scheduler_steps_the_optimizer_lr():
    cfg = TrainerConfig(steps=5, minibatches=2, lr=0.01, lr_schedule="cosine", lr_warmup_ratio=0.2)
    assert total_optimizer_steps(cfg) == 10
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    sched = lr_scheduler(opt, cfg)
    seen = []
    for _ in range(10):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [0.01 * lr_factor(s, total=10, warmup=2, schedule="cosine") for s in range(10)]
    assert seen == pytest.approx(expected, rel=1e-12, abs=0)
    assert seen[0] == 0.0 and seen[1] == 0.005 and seen[2] == 0.01


def _small(**kw):
    base = dict(steps=4, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="train")
    return method_config("grpo_no_kl", **{**base, **kw})


def test_trainer_logs_the_scheduled_lr_per_step():
    # 4 steps x 2 minibatches = 8 optimizer steps, W = ceil(0.5 * 8) = 4, then cosine over 4.
    cfg = _small(minibatches=2, lr=1e-4, lr_schedule="cosine", lr_warmup_ratio=0.5, seed=1)
    history = Trainer(cfg).train(progress=False)
    factors = [lr_factor(s, total=8, warmup=4, schedule="cosine") for s in range(8)]
    for step, row in enumerate(history):
        assert row["lr"] == pytest.approx(1e-4 * (factors[2 * step] + factors[2 * step + 1]) / 2, rel=1e-12)
    assert history[0]["lr"] == pytest.approx(1e-4 * 0.125)  # (0 + 1/4) / 2


def test_no_schedule_logs_no_lr():
    assert "lr" not in Trainer(_small(steps=1)).train(progress=False)[0]


def test_resume_mid_warmup_is_bit_identical(tmp_path):
    # W = ceil(0.75 * 4) = 3 optimizer steps: the checkpoint after step 2 is inside the warm-up.
    cfg = _small(seed=5, checkpoint_every=2, lr_schedule="cosine", lr_warmup_ratio=0.75, lr=1e-3)
    uninterrupted = Trainer(cfg).train(progress=False)
    first = Trainer(cfg, checkpoint_dir=tmp_path)
    first.step(), first.step()  # "killed" after the step-2 checkpoint
    resumed = Trainer(cfg, checkpoint_dir=tmp_path)
    assert resumed.step_count == 2 and resumed.scheduler.last_epoch == 2
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 2 / 3, rel=1e-15)
    assert _metrics(resumed.train(progress=False)) == _metrics(uninterrupted)
    # The final weights of an uninterrupted run equal the resumed run's, bit for bit.
    again = Trainer(cfg)
    again.train(progress=False)
    for a, b in zip(resumed.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


def test_paper_presets_carry_their_schedule():
    assert paper_schedule("nudgerl") == {"lr_schedule": "cosine", "lr_warmup_ratio": 0.05}
    assert paper_schedule("vigor") == {"lr_schedule": "cosine", "lr_warmup_ratio": 0.1}
    assert paper_schedule("threepo")["lr_schedule"] == "constant"
    assert paper_schedule("threepo")["lr_warmup_ratio"] == pytest.approx(34 / 1629)
    for name, paper in (("nudgerl", "nudgerl"), ("vigor", "vigor"), ("b3po", "threepo"), ("m3po", "threepo"),
                        ("c3po", "threepo")):
        cfg = method_config(name)
        assert (cfg.lr_schedule, cfg.lr_warmup_ratio) == (PAPER_SCHEDULES[paper].schedule,
                                                          PAPER_SCHEDULES[paper].warmup_ratio), name
    # GRPO and SAGE keep a constant lr without warm-up.
    for name in ("grpo", "sage"):
        assert "lr_schedule" not in METHODS[name].preset and method_config(name).lr_warmup_ratio == 0.0
    with pytest.raises(ValueError, match="paper='sage' is invalid"):
        paper_schedule("sage")
