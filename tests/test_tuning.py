"""The equal lr-tuning budget (`rlvr_lib.study.tuning`): the grid, the seeds, the pick, the command on 2-step runs."""

import json

import pytest

from rlvr_lib.methods import METHODS, method_config
from rlvr_lib.study.testbed import TESTBED_IVON_LR, calibrated_config
from rlvr_lib.study.tuning import LR_FACTORS, TUNING_SEEDS, pick_lr, tune_lr


def test_pick_is_the_best_score_ties_to_the_default_then_the_smaller_lr():
    assert pick_lr({1e-5: 0.3, 3e-5: 0.5, 9e-5: 0.4}, 3e-5) == 3e-5
    assert pick_lr({1e-5: 0.6, 3e-5: 0.5, 9e-5: 0.4}, 3e-5) == 1e-5
    assert pick_lr({1e-5: 0.5, 3e-5: 0.5, 9e-5: 0.5}, 3e-5) == 3e-5  # tie: the default
    assert pick_lr({1e-5: 0.4, 3e-5: 0.3, 9e-5: 0.4}, 3e-5) == 1e-5  # tie without the default: the smaller
    with pytest.raises(ValueError, match="free of NaN"):
        pick_lr({1e-5: float("nan")}, 1e-5)


def test_tuning_seeds_are_not_evaluation_seeds():
    assert len(TUNING_SEEDS) == 2 and not set(TUNING_SEEDS) & set(range(5))
    assert LR_FACTORS == (1 / 3, 1.0, 3.0)
    with pytest.raises(ValueError, match="outside the evaluation seeds 0-4"):
        tune_lr("grpo", seeds=(0, 1000), steps=1)


def test_the_tuned_lr_is_adamws_or_ivons():
    grpo = calibrated_config("grpo")
    assert METHODS["grpo"].cls.tuning_lr(grpo) == grpo.lr == 1e-4
    assert METHODS["grpo"].cls.with_tuning_lr(grpo, 3e-4).lr == 3e-4
    b3po = calibrated_config("b3po")
    cls = METHODS["b3po"].cls
    assert cls.tuning_lr(b3po) == TESTBED_IVON_LR  # the testbed's calibrated IVON lr
    tuned = cls.with_tuning_lr(b3po, 33.3)
    assert tuned.method_options == {**b3po.method_options, "lr": 33.3} and cls.tuning_lr(tuned) == 33.3 and tuned.lr == b3po.lr


def test_tune_lr_command_on_two_step_runs(tmp_path, monkeypatch):
    from rlvr_lib.study.__main__ import main
    from rlvr_lib.study.runs import RESULTS_ENV
    from rlvr_lib.trainer import Trainer

    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results"))
    out = tmp_path / "lr_tuning.json"
    assert main(["tune-lr", "--methods", "grpo_no_kl", "--steps", "2", "--prompts-per-step", "2", "--tail", "1",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    result = report["methods"]["grpo_no_kl"]
    assert result["grid"] == [pytest.approx(1e-4 / 3, rel=1e-5), 1e-4, 3e-4]
    assert result["seeds"] == [1000, 1001]
    finals = result["final_accuracy"]
    assert len(finals) == 3 and all(set(v) == {"1000", "1001"} for v in finals.values())
    means = {float(lr): sum(v.values()) / 2 for lr, v in finals.items()}
    assert result["mean_final_accuracy"] == {repr(lr): m for lr, m in means.items()}
    assert result["pick"] == pick_lr(means, 1e-4)
    assert report["policy_sha"] and report["config_fields"] == {"steps": 2, "prompts_per_step": 2}
    # Every run is cached: the same sweep again trains nothing and gives the same report.
    records = sorted((tmp_path / "results" / "lr_tuning").glob("grpo_no_kl-lr*.json"))
    assert len(records) == 6
    assert {rid for ids in result["run_ids"].values() for rid in ids.values()} == {r.stem for r in records}

    def no_training(self, *a, **k):
        raise AssertionError("a cached tuning run was trained again")

    monkeypatch.setattr(Trainer, "train", no_training)
    again = tmp_path / "again.json"
    assert main(["tune-lr", "--methods", "grpo_no_kl", "--steps", "2", "--prompts-per-step", "2", "--tail", "1",
                 "--out", str(again)]) == 0
    assert json.loads(again.read_text())["methods"] == report["methods"]


def test_tuning_reports_add_up_across_sweeps_and_a_new_header_replaces_them(tmp_path):
    from rlvr_lib.study.tuning import record_tuning

    out = tmp_path / "lr_tuning.json"
    header = {"rule": "r", "policy_sha": "abc", "config_fields": {"steps": 2}}
    record_tuning(out, header, "grpo", {"pick": 1e-4})
    report = record_tuning(out, header, "sage", {"pick": 3e-4})
    assert report == json.loads(out.read_text()) == {**header, "methods": {"grpo": {"pick": 1e-4},
                                                                           "sage": {"pick": 3e-4}}}
    assert record_tuning(out, header, "grpo", {"pick": 3e-5})["methods"]["grpo"] == {"pick": 3e-5}  # re-tuned
    other = {**header, "policy_sha": "def"}  # another policy: the old picks are not its picks
    assert record_tuning(out, other, "vigor", {"pick": 1e-5}) == {**other, "methods": {"vigor": {"pick": 1e-5}}}


def test_tune_lr_without_methods_tunes_the_study_manifests_methods(tmp_path, monkeypatch):
    """``tune-lr`` with no ``--methods`` sweeps `tuning.methods_to_tune()` (the study manifest's methods that take
    their own lr), in that order; the sweep itself is replaced here by a recorder (its own tests run it)."""
    from rlvr_lib.study import tuning
    from rlvr_lib.study.__main__ import main as study_main

    seen = []

    def fake_tune_lr(name, **kwargs):
        seen.append(name)
        return {"default_lr": 1e-4, "pick": 1e-4, "mean_final_accuracy": 0.5}

    monkeypatch.setattr(tuning, "tune_lr", fake_tune_lr)
    assert study_main(["tune-lr", "--steps", "2", "--prompts-per-step", "2", "--tail", "1",
                       "--out", str(tmp_path / "t.json")]) == 0
    assert seen == list(tuning.methods_to_tune()) and len(seen) > 10
