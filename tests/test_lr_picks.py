"""The study's configs use the committed lr-tuning picks: `TUNED_LR` is `results/testbed/lr_tuning.json`."""

import json
from pathlib import Path

import pytest

from rlvr_lib.methods import METHODS
from rlvr_lib.methods import presets
from rlvr_lib.study.testbed import LR_SHARED, TESTBED_LR, TUNED_LR, calibrated_config as method_config
from rlvr_lib.policy.load import policy_fingerprint
from rlvr_lib.study.dynamics import full_profile_steps
from rlvr_lib.tasks.arithmetic import TESTBED_VERSION

REPORT = Path(__file__).resolve().parent.parent / "results" / "testbed" / "lr_tuning.json"


def _adamw(name: str) -> bool:
    """Whether the method's tuned lr is the AdamW lr of its config (3PO's scales IVON's, reported only)."""
    config = method_config(name, tuned_lr=False)
    return METHODS[name].cls.tuning_lr(config) == config.lr


@pytest.fixture(scope="module")
def report():
    return json.loads(REPORT.read_text())


def test_the_report_is_of_the_shipped_policy_and_testbed(report):
    assert report["policy_sha"] == policy_fingerprint(None)
    assert report["testbed_version"] == TESTBED_VERSION
    assert report["config_fields"]["steps"] == full_profile_steps()  # the runs are as long as the full profile's


def test_tuned_lr_is_the_reports_pick_for_every_adamw_method_it_holds(report):
    picks = {name: result["pick"] for name, result in report["methods"].items() if _adamw(name)}
    assert TUNED_LR == picks
    for name in picks:  # each grid was centred on the preset's lr
        assert report["methods"][name]["default_lr"] == method_config(name, tuned_lr=False).lr, name


def test_every_registered_method_is_tuned_or_takes_its_comparators_pick(report):
    """Every method the study's notebooks run (the manifest, `rlvr_lib.study.papers`), each one the library ships,
    is swept, but one that takes another's pick (`LR_SHARED`: the oracle arm takes GRPO's, since it differs from
    GRPO only in its forced rollouts). Read from the manifest and the registry's shipped list, not from every registered name: a
    method a user registers is not asked for (tests/test_papers.py)."""
    from rlvr_lib.methods.registry import shipped_methods
    from rlvr_lib.study import papers
    from rlvr_lib.study.tuning import methods_to_tune

    shipped = shipped_methods()
    assert set(papers.study_methods()) <= set(shipped)
    inherits = {name for name in papers.study_methods() if name in LR_SHARED}
    assert set(report["methods"]) == set(methods_to_tune()) == set(papers.study_methods()) - inherits
    assert inherits == {"oracle_explore"} and method_config("oracle_explore").lr == TUNED_LR["grpo"]


def test_the_readme_reading_of_the_two_gradient_identical_picks_holds(report):
    """README: grpo_k3 and grpo_forward_kl (one gradient as used) picked differently, each within 0.03 of its
    other choice between x1 and x1/3."""
    k3, fkl = report["methods"]["grpo_k3"], report["methods"]["grpo_forward_kl"]
    assert k3["pick"] != fkl["pick"]
    for m in (k3, fkl):
        at = {float(lr): acc for lr, acc in m["mean_final_accuracy"].items()}
        default = m["default_lr"]
        assert abs(at[default] - at[min(at, key=lambda lr: abs(lr - default / 3))]) < 0.03


def test_method_config_applies_the_pick_over_the_preset_and_overrides_win(monkeypatch):
    monkeypatch.setitem(TUNED_LR, "grpo", 3e-4)
    assert method_config("grpo").lr == 3e-4
    assert method_config("grpo", tuned_lr=False).lr == TESTBED_LR == 1e-4  # where the tuning grid is centred
    assert method_config("grpo", lr=5e-5).lr == 5e-5
    assert presets.method_config("grpo").lr == 1e-6  # the library's preset: the paper's
    assert "b3po" not in TUNED_LR and method_config("b3po") == method_config("b3po", tuned_lr=False)


def test_the_tuning_grid_is_centred_on_the_preset_not_on_an_earlier_pick(monkeypatch, tmp_path):
    from rlvr_lib.study.tuning import tune_lr

    monkeypatch.setitem(TUNED_LR, "grpo_no_kl", 3e-4)
    result = tune_lr("grpo_no_kl", factors=(1.0,), seeds=(1000,), tail=1, steps=2, prompts_per_step=2, root=tmp_path)
    assert result["default_lr"] == 1e-4 and result["grid"] == [1e-4]
    assert result["cpu_models"] and all(isinstance(m, str) for m in result["cpu_models"])
