"""Evaluation every ``eval_every`` steps: records in the run folder at the right steps, logged, training unchanged."""

from __future__ import annotations

import copy
import json

import pytest

from rlvr_lib.eval import EvalSpec, evaluate_policy
from rlvr_lib.trainer import Trainer, untimed
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=4, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=1e-2)
SPEC = EvalSpec(families=("easy_mix",), problems_per_family=3, samples=4, group_size=4, max_new_tokens=8,
                diversity_problems=2, diversity_samples=4)


def test_periodic_evaluations_are_written_logged_and_leave_training_unchanged(tiny_model_and_tokenizer, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model, tok = tiny_model_and_tokenizer
    config = TrainerConfig(**SMALL, eval_every=2, eval_spec=SPEC, report_to=("tensorboard",))
    trainer = Trainer(config, copy.deepcopy(model), tok, checkpoint_dir=tmp_path / "run")
    history = trainer.train(progress=False)

    files = sorted((tmp_path / "run" / "eval").glob("step_*.json"))
    assert [f.name for f in files] == ["step_2.json", "step_4.json"]
    records = [json.loads(f.read_text()) for f in files]
    assert [r["step"] for r in records] == [2, 4]
    assert records == json.loads(json.dumps(trainer.evaluations))
    assert records[0]["spec"] == SPEC.to_dict()
    assert set(records[0]["families"]) == {"easy_mix"} and "pass_at_k" in records[0]["average"]
    # the last record is the evaluation of the final weights
    final = evaluate_policy(trainer.engine, SPEC)
    assert records[-1]["average"]["pass_at_k"] == final["average"]["pass_at_k"]
    assert records[-1]["families"]["easy_mix"]["correct_counts"] == final["families"]["easy_mix"]["correct_counts"]

    events = next((tmp_path / "run" / "logs").rglob("events.out.tfevents.*")).parent
    acc = EventAccumulator(str(events))
    acc.Reload()
    logged = [(e.step, e.value) for e in acc.Scalars("eval/pass@1")]
    assert logged == [(r["step"], pytest.approx(r["average"]["pass_at_k"]["1"])) for r in records]

    # evaluating samples with its own seed: the run's steps are those of a run without it, bit for bit
    plain = Trainer(TrainerConfig(**SMALL), copy.deepcopy(model), tok).train(progress=False)
    assert untimed(history) == untimed(plain)


def test_eval_settings_are_checked():
    assert "eval_every" not in TrainerConfig().to_dict() and "eval_spec" not in TrainerConfig().to_dict()
    with pytest.raises(ValueError, match="eval_every=3 is invalid: must be 0 unless eval_spec is given"):
        TrainerConfig(eval_every=3)
    with pytest.raises(ValueError, match="eval_spec=.* is invalid: must be None unless eval_every > 0"):
        TrainerConfig(eval_spec=SPEC)
    with pytest.raises(ValueError, match="eval_every"):
        TrainerConfig(eval_every=-1, eval_spec=SPEC)
    config = TrainerConfig(eval_every=5, eval_spec=SPEC)
    assert TrainerConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_evaluation_without_a_run_folder_stays_in_memory(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    config = TrainerConfig(**{**SMALL, "steps": 1}, eval_every=1, eval_spec=SPEC)
    trainer = Trainer(config, copy.deepcopy(model), tok)
    trainer.train(progress=False)
    assert [r["step"] for r in trainer.evaluations] == [1]
