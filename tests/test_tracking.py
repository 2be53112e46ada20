"""Logging from the native loop (``TrainerConfig.report_to``): TensorBoard read back, W&B offline if installed."""

from __future__ import annotations

import copy
import importlib.util

import pytest

from rlvr_lib.tracking import TRACKERS, build_trackers, check_report_to
from rlvr_lib.trainer import Trainer
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=3, prompts_per_step=2, group_size=4, max_new_tokens=8, kl_coef=0.05)


def _scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = [p for p in folder.rglob("events.out.tfevents.*")]
    assert runs, f"no event file under {folder}"
    acc = EventAccumulator(str(runs[0].parent))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_file_holds_each_steps_scalars(tiny_model_and_tokenizer, tmp_path):
    model, tok = tiny_model_and_tokenizer
    config = TrainerConfig(**SMALL, report_to=("tensorboard",))
    trainer = Trainer(config, copy.deepcopy(model), tok, checkpoint_dir=tmp_path / "run")
    history = trainer.train(progress=False)
    scalars = _scalars(tmp_path / "run" / "logs")
    for key in ("reward_mean", "kl", "entropy", "loss", "grad_norm", "accuracy"):
        assert [s for s, _ in scalars[key]] == [1, 2, 3], key
        assert [v for _, v in scalars[key]] == pytest.approx([row[key] for row in history], rel=1e-6), key


def test_report_to_is_checked():
    assert "tensorboard" in TRACKERS and "wandb" in TRACKERS and "trackio" in TRACKERS
    assert "report_to" not in TrainerConfig().to_dict()
    with pytest.raises(ValueError, match=r"'tensorbord' is invalid: must be one of \["):
        TrainerConfig(report_to=("tensorbord",))
    with pytest.raises(ValueError, match="must name each tracker once"):
        check_report_to(("tensorboard", "tensorboard"))
    with pytest.raises(ValueError, match="writes files and this trainer has no run folder"):
        build_trackers(("tensorboard",), "x", None)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_missing_tracker_library_is_named():
    with pytest.raises(ValueError, match=r"report_to 'wandb': the wandb package is not installed \(pip install "
                                         "wandb\\)"):
        build_trackers(("wandb",), "x", None)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None,
                    reason="wandb is not installed (an optional tracker; pip install wandb to run this test)")
def test_wandb_offline_run(tiny_model_and_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    model, tok = tiny_model_and_tokenizer
    trainer = Trainer(TrainerConfig(**{**SMALL, "steps": 1}, report_to=("wandb",)), copy.deepcopy(model), tok,
                      checkpoint_dir=tmp_path / "run")
    trainer.train(progress=False)
    assert list(tmp_path.rglob("*.wandb")), "wandb wrote no offline run file"


def test_command_line_trains_with_a_reward_function_trackers_and_evaluations(tmp_path):
    """``python -m rlvr_lib train --reward-func mod:f --report-to tensorboard --eval-every 1``: the user's module
    found on PYTHONPATH, the event file, the evaluation records and the per-function reward in the run record."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "my_rewards.py").write_text(
        "def short(prompts, completions, **kw):\n    return [1.0 / (1 + len(c)) for c in completions]\n")
    out = tmp_path / "run"
    spec = "{families: [easy_mix], problems_per_family: 2, samples: 2, group_size: 2, max_new_tokens: 8}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-m", "rlvr_lib", "train", "--method", "grpo", "--steps", "2", "--reward-func",
         "my_rewards:short", "--report-to", "tensorboard", "--eval-every", "1", "--no-progress", "--set",
         f"eval_spec={spec}", "--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8",
         "--out", str(out)],
        cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (out / "eval").glob("*.json")) == ["step_1.json", "step_2.json"]
    scalars = _scalars(out / "logs")
    assert [s for s, _ in scalars["reward_fn_short"]] == [1, 2]
    assert [s for s, _ in scalars["eval/pass@1"]] == [1, 2]
    (record_file,) = out.glob("grpo-*.json")
    record = json.loads(record_file.read_text())
    assert record["config"]["train"]["reward_funcs"] == ["my_rewards:short"]
    logged = [v for _, v in scalars["reward_fn_short"]]  # TensorBoard keeps float32
    assert [row["reward_fn_short"] for row in record["history"]] == pytest.approx(logged, rel=1e-6)


def test_progress_bar_is_off_without_a_terminal(tiny_model_and_tokenizer, capsys):
    model, tok = tiny_model_and_tokenizer
    trainer = Trainer(TrainerConfig(**{**SMALL, "steps": 1}), copy.deepcopy(model), tok)
    trainer.train(progress=True)  # pytest's captured stderr is not a TTY: tqdm's disable=None turns the bar off
    assert "reward=" not in capsys.readouterr().err
