"""Calibration machinery on a reduced sample (the full calibration is a command, not a test)."""

import json

import pytest

from rlvr_lib.__main__ import main
from rlvr_lib.calibration import CalibrationConfig, calibrate, format_report
from rlvr_lib.policy import load_policy
from rlvr_lib.rollout import HFEngine
from rlvr_lib.tasks import EVAL_FAMILIES, STRATEGIES

SMALL = CalibrationConfig(problems_per_family=8, samples=8, hint_problems=8, hint_samples=4, hot_samples=4,
                          families=("easy_mix", "hard_mix", "train"))


@pytest.fixture(scope="module")
def report():
    model, tokenizer = load_policy(device="cpu")
    return calibrate(HFEngine(model, tokenizer), SMALL)


def test_report_has_the_stable_keys(report):
    for name, m in report["families"].items():
        for key in ("pass_at_1", "pass_at_8", "strategy_freq", "hint_follow", "hard_acc_by_strategy",
                    "malformed_t1", "malformed_t2", "zero_adv_frac_g8"):
            assert key in m, (name, key)
        assert set(m["hint_follow"]) == set(STRATEGIES)
        assert 0 <= m["pass_at_1"] <= m["pass_at_8"] <= 1
        assert abs(sum(m["strategy_freq"].values()) - 1) < 1e-9
    assert report["all_targets_met"] == all(t["met"] for t in report["targets"].values())
    assert report["config"] == SMALL.to_dict()


def test_targets_agree_with_their_bounds(report):
    for name, t in report["targets"].items():
        assert set(t) >= {"value", "bound", "met"}
        if t["value"] is None:
            assert t["met"] is False
            continue
        v, bound = t["value"], t["bound"]
        if bound.startswith("in ["):
            lo, hi = map(float, bound[4:-1].split(", "))
            assert t["met"] == (lo <= v <= hi), name
        elif bound.startswith(">="):
            assert t["met"] == (v >= float(bound[3:])), name
        else:
            assert t["met"] == (v <= float(bound[3:])), name
    pooled = sum(report["families"][f]["pass_at_1"] for f in ("easy_mix", "hard_mix")) / 2
    assert report["targets"]["mean_pass_at_1"]["value"] == pytest.approx(pooled, abs=1e-4)


def test_shipped_policy_follows_hints_and_prefers_the_dominant_strategy(report):
    # Coarse versions of the calibration targets that a reduced sample can still check.
    for s in STRATEGIES:
        assert report["targets"][f"hint_follow[{s}]"]["value"] >= 0.7
    assert report["targets"]["dominant_strategy_share[direct]"]["value"] >= 0.5
    assert report["targets"]["malformed_t1"]["value"] <= 0.2
    assert "pass@1" in format_report(report)


def test_cli_writes_json_and_prints(tmp_path, capsys):
    out = tmp_path / "cal.json"
    code = main(["calibrate", "--problems", "4", "--samples", "8", "--out", str(out)])
    data = json.loads(out.read_text())
    assert code == (0 if data["all_targets_met"] else 1)
    assert set(data["families"]) == set(EVAL_FAMILIES) | {"ood_shift", "train"}
    assert "mean_pass_at_1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(samples=12, group_size=8), "CalibrationConfig.samples=12 is invalid: must be a multiple of group_size=8"),
        (dict(families=("easy_mix",)), r"CalibrationConfig.families=\('easy_mix',\) is invalid: .*includes 'train'"),
        (dict(families=()), "CalibrationConfig.families=.* is invalid: .*includes 'train'"),
        (dict(families=("train", "aime")), r"CalibrationConfig.families='aime' is invalid: must be one of \["),
        (dict(problems_per_family=0), "CalibrationConfig.problems_per_family=0 is invalid: must be an integer >= 1"),
        (dict(samples=0), "CalibrationConfig.samples=0 is invalid"),
        (dict(hint_problems=-1), "CalibrationConfig.hint_problems=-1 is invalid"),
        (dict(hint_samples=0), "CalibrationConfig.hint_samples=0 is invalid"),
        (dict(hot_samples=1.5), "CalibrationConfig.hot_samples=1.5 is invalid"),
        (dict(group_size=0), "CalibrationConfig.group_size=0 is invalid"),
        (dict(max_new_tokens=0), "CalibrationConfig.max_new_tokens=0 is invalid"),
        (dict(seed=-2), "CalibrationConfig.seed=-2 is invalid"),
        (dict(hot_temperature=0.0), "CalibrationConfig.hot_temperature=0.0 is invalid"),
    ],
)
def test_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        CalibrationConfig(**kw)


def test_config_json_round_trip_and_report_config():
    assert CalibrationConfig.from_json(SMALL.to_json()) == SMALL
    assert SMALL.to_dict()["families"] == ["easy_mix", "hard_mix", "train"]
    assert list(CalibrationConfig().to_dict()) == [
        "problems_per_family", "samples", "hint_problems", "hint_samples", "hot_samples", "hot_temperature",
        "group_size", "max_new_tokens", "seed", "families",
    ]
