"""The dynamics calibration: each target by hand on made-up evaluations, and a reduced run of the command."""

import json
import math

import numpy as np
import pytest

from rlvr_lib.study.__main__ import main
from rlvr_lib.study.dynamics import (
    full_profile_steps,
    KL_COEF_CANDIDATES,
    STEP_CANDIDATES,
    DynamicsConfig,
    chosen_steps,
    targets_by_steps,
    crossover_k,
    dynamics_targets,
    fall_ratio,
    gain_target,
    lost_target,
    relative_fall,
    rescued_lost_vs_null,
)
from rlvr_lib.tasks.arithmetic import EVAL_FAMILIES
from rlvr_lib.study.runs import cpu_model


def test_crossover_k_is_the_first_k_where_the_base_catches_up():
    base = {1: 0.20, 8: 0.50, 64: 0.80, 256: 0.90}
    rl = {1: 0.40, 8: 0.60, 64: 0.78, 256: 0.85}
    assert crossover_k(base, rl) == 64
    assert crossover_k(base, {k: v + 0.2 for k, v in base.items()}) is None
    assert crossover_k(base, base) == 1  # equal counts as caught up
    with pytest.raises(ValueError, match="rl_curve"):
        crossover_k(base, {1: 0.4, 8: 0.6})


def test_relative_fall_and_fall_ratio_by_hand():
    fall = relative_fall([0.8, 1.2], [0.6, 0.7, 0.8])  # before mean 1.0: falls .4, .3, .2
    assert fall["mean"] == pytest.approx(0.3)
    assert 0.2 - 1e-9 <= fall["ci_low"] <= 0.3 <= fall["ci_high"] <= 0.4 + 1e-9
    assert fall_ratio([0.06, 0.06], [0.02, 0.04]) == pytest.approx(2.0)
    assert fall_ratio([0.06], [0.0]) == math.inf
    assert math.isnan(fall_ratio([0.0], [0.0]))
    with pytest.raises(ValueError, match="positive mean"):
        relative_fall([0.0], [0.1])


def test_lost_and_rescued_against_the_null_by_hand():
    base = np.array([3, 0, 2, 1, 0, 5])
    null = np.array([2, 1, 2, 0, 0, 4])  # problem 1 rescued, problem 3 lost by resampling: null = 1 per direction
    seeds = [np.array([0, 0, 0, 1, 0, 3]),  # lost 0 and 2
             np.array([0, 1, 0, 0, 0, 2])]  # lost 0, 2, 3; rescued 1
    stats = rescued_lost_vs_null(base, null, seeds)
    assert (stats["lost"], stats["rescued"], stats["null"], stats["excess_lost"]) == (2.5, 0.5, 1.0, 1.5)
    t = lost_target(stats)
    assert t["value"] == 3.0 and t["met"] is True  # (2.5 - 1) / 0.5 = 3, the bound exactly
    assert lost_target(stats, ratio=3.5)["met"] is False
    # Losing no more than resampling does never meets the target, however few are rescued.
    flat = rescued_lost_vs_null(base, null, [base.copy()])
    assert flat["lost"] == 0 and lost_target(flat)["met"] is False


def test_gain_target_needs_the_size_and_an_interval_above_zero():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 0.5, size=(2, 400))
    up = np.clip(base[:1] + 0.10 + rng.normal(0, 0.01, size=(3, 400)), 0, 1)
    t = gain_target(up, base, at_least=0.05)
    assert t["met"] is True and t["value"] == pytest.approx(0.10, abs=0.01) and t["interval"][0] > 0
    small = np.clip(base[:1] + 0.03 + rng.normal(0, 0.01, size=(3, 400)), 0, 1)
    t = gain_target(small, base, at_least=0.05)
    assert t["met"] is False and t["interval"][0] > 0  # resolved, but too small


def _evaluation(counts, *, entropy, freq, families):
    """A made-up `evaluate_policy` result: per-family correct counts (one list per family)."""
    fams = {f: {"correct_counts": list(c), "uids": [f"{f}:{i}" for i in range(len(c))]} for f, c in counts.items()}
    return {"families": fams, "average": {"families": list(families), "strategy_entropy": entropy,
                                          "strategy_freq": freq}}


def test_dynamics_targets_on_made_up_evaluations():
    n, wide = 8, 16
    ind = EVAL_FAMILIES
    freq_base = {"direct": 0.2, "split": 0.72, "round": 0.08}
    freq_rl = {"direct": 0.02, "split": 0.96, "round": 0.02}
    # Main evaluation: 4 problems per family; RL solves 2 more samples per problem; rare_mix loses problems.
    base_main = [_evaluation({**{f: [2, 2, 1, 0] for f in ind}, "rare_mix": [1, 1, 1, 0]}, entropy=0.7,
                             freq=freq_base, families=ind),
                 _evaluation({**{f: [2, 1, 2, 0] for f in ind}, "rare_mix": [1, 1, 0, 1]}, entropy=0.7,
                             freq=freq_base, families=ind)]
    rl_main = [_evaluation({**{f: [4, 4, 3, 0] for f in ind}, "rare_mix": [0, 0, 0, 0]}, entropy=0.35,
                           freq=freq_rl, families=ind)] * 2
    # Wide evaluation: the base keeps the last problem of every family at large k, RL never solves it; the second
    # base seed (the null) misses rare_mix problem 1 by resampling.
    base_wide = [_evaluation({**{f: [8, 8, 4, 1] for f in ind}, "rare_mix": [2, 2, 2, 2]}, entropy=0.7,
                             freq=freq_base, families=ind),
                 _evaluation({**{f: [8, 8, 4, 1] for f in ind}, "rare_mix": [2, 0, 2, 2]}, entropy=0.7,
                             freq=freq_base, families=ind)]
    rl_wide = [_evaluation({**{f: [12, 12, 8, 0] for f in ind}, "rare_mix": [0, 0, 0, 0]}, entropy=0.35,
                           freq=freq_rl, families=ind)] * 2
    t = dynamics_targets(base_main, base_wide, rl_main, rl_wide, [0.01, 0.012], [0.05, 0.05], samples=n,
                         wide_samples=wide, rare_strategy="round")
    assert t["pass_at_1_gain"]["value"] == pytest.approx((11 - 5) / 4 / n, abs=1e-4)
    assert t["rare_pass_at_16_drop"]["value"] == pytest.approx(1.0) and t["rare_pass_at_16_drop"]["met"]
    # pass@4: base .725 < RL .740; pass@8: base .865 > RL .750 (the problem RL never solves decides).
    assert t["crossover_k"]["value"] == 8 and t["crossover_k"]["met"]
    assert t["strategy_entropy_fall"]["value"] == pytest.approx(0.5) and t["strategy_entropy_fall"]["met"]
    assert t["rare_share_fall"]["value"] == pytest.approx(4.0) and t["rare_share_fall"]["met"]
    # rare_mix, wide: the base reaches all 4, RL none: lost 4, rescued 0; null: problem 1 flips -> 0.5 per direction.
    assert t["rare_lost_vs_rescued"]["detail"] == {"lost": 4.0, "rescued": 0.0, "null": 0.5}
    assert t["rare_lost_vs_rescued"]["met"] and "gates" not in t["rare_lost_vs_rescued"]
    # The same count on the main evaluation is reported, not a gate: base seed 0 solves 3, RL none; null: problems
    # 2 and 3 flip -> 1 per direction.
    assert t["rare_lost_vs_rescued_main"]["detail"] == {"lost": 3.0, "rescued": 0.0, "null": 1.0}
    assert t["rare_lost_vs_rescued_main"]["gates"] is False
    assert t["kl_binds"]["value"] == pytest.approx(0.22) and t["kl_binds"]["met"]
    # A run that keeps the rare strategy fails the share target; an unbound anchor fails the KL target.
    keep = [_evaluation({**{f: [4, 4, 3, 0] for f in ind}, "rare_mix": [0, 0, 0, 0]}, entropy=0.65,
                        freq=freq_base, families=ind)] * 2
    t2 = dynamics_targets(base_main, base_wide, keep, rl_wide, [0.05], [0.05], samples=n, wide_samples=wide,
                          rare_strategy="round")
    assert not t2["rare_share_fall"]["met"] and not t2["strategy_entropy_fall"]["met"]
    assert not t2["kl_binds"]["met"] and t2["kl_binds"]["value"] == pytest.approx(1.0)
    assert chosen_steps({100: t2, 200: t, 300: t}) == 200
    assert chosen_steps({100: t2}) is None
    # A reported row never gates; a gating row always does.
    reported_fails = {**t, "rare_lost_vs_rescued_main": {**t["rare_lost_vs_rescued_main"], "met": False}}
    assert chosen_steps({100: reported_fails}) == 100
    assert chosen_steps({100: {**t, "kl_binds": t2["kl_binds"]}}) is None
    with pytest.raises(ValueError, match=">= 2 wide base evaluations"):
        dynamics_targets(base_main, base_wide[:1], rl_main, rl_wide, [0.01], [0.05], samples=n, wide_samples=wide,
                         rare_strategy="round")


def test_dynamics_config_validation():
    assert DynamicsConfig().step_candidates == STEP_CANDIDATES
    with pytest.raises(ValueError, match="step_candidates"):
        DynamicsConfig(step_candidates=(200, 100))
    with pytest.raises(ValueError, match="base_seeds"):
        DynamicsConfig(base_seeds=(0,))
    with pytest.raises(ValueError, match="seeds"):
        DynamicsConfig(seeds=())
    with pytest.raises(ValueError, match="wide_samples"):
        DynamicsConfig(wide_samples=0)
    assert DynamicsConfig().kl_coefs == KL_COEF_CANDIDATES and KL_COEF_CANDIDATES[0] == 0.05
    for bad in ((), (0.1, 0.05), (0.0, 0.1), (0.1, 0.1)):
        with pytest.raises(ValueError, match="kl_coefs"):
            DynamicsConfig(kl_coefs=bad)
    # The anchored arm's beta overrides the preset's and nothing else.
    cfg = DynamicsConfig()
    assert cfg.train_config("grpo", 0, 0.2).to_dict() == {**cfg.train_config("grpo", 0).to_dict(), "kl_coef": 0.2}


def test_testbed_beta_is_the_dynamics_calibrations():
    """TESTBED_KL_COEF is the beta the beta search chose (made once, on the Intel Xeon: archived, README "Budget"),
    and the calibration of record measured the dynamics at that beta only."""
    from rlvr_lib.study.runs import results_root
    from rlvr_lib.study.testbed import ANCHORED, TESTBED_KL_COEF, calibrated_claims

    search = json.loads((results_root() / "archive" / "intel-xeon" / "testbed" / "dynamics.json").read_text())
    report = json.loads((results_root() / "testbed" / "dynamics.json").read_text())
    assert search["all_targets_met"] and [t["kl_coef"] for t in search["search"]] == list(KL_COEF_CANDIDATES[:3])
    assert TESTBED_KL_COEF == search["kl_coef"] == report["kl_coef"]
    assert [t["kl_coef"] for t in report["search"]] == [TESTBED_KL_COEF]
    for name in ANCHORED:
        assert calibrated_claims(name)[0]["kl_coef"] == TESTBED_KL_COEF, name


def test_committed_report_states_only_the_chosen_setting_as_its_targets():
    """``targets`` is the verdict at the chosen beta and step count: every entry gates, and ``all_targets_met``
    says exactly whether every entry is met; the misses of other betas, other step counts and the reported-only
    rows live under ``search`` and ``reported``."""
    from rlvr_lib.study.runs import results_root

    report = json.loads((results_root() / "testbed" / "dynamics.json").read_text())
    assert report["all_targets_met"] == all(t["met"] for t in report["targets"].values())
    assert all(t.get("gates", True) for t in report["targets"].values())
    assert not any(t.get("gates", True) for t in report["reported"].values())
    if report["all_targets_met"]:
        at = targets_by_steps(report)[str(report["chosen_steps"])]
        assert {**report["targets"], **report["reported"]} == at
        assert report["search"][-1]["kl_coef"] == report["kl_coef"]
        assert report["search"][-1]["chosen_steps"] == report["chosen_steps"]


def test_reduced_dynamics_run_writes_the_schema_and_can_fail(tmp_path, capsys, monkeypatch):
    out = tmp_path / "dynamics.json"
    args = ["calibrate", "--dynamics", "--seeds", "0", "--steps", "1", "2", "--kl-coefs", "0.05", "0.1",
            "--dyn-problems", "3", "--dyn-samples", "8", "--dyn-wide-problems", "3", "--dyn-wide-samples", "8",
            "--dyn-kl-problems", "4", "--results-root", str(tmp_path / "results"), "--out", str(out)]
    code = main(args)
    data = json.loads(out.read_text())
    assert set(data) >= {"testbed_version", "policy_sha", "config", "step_candidates", "targets", "reported",
                         "search", "summary", "chosen_steps", "all_targets_met", "training_curves", "kl_coef"}
    # No beta meets every target, so both are tried in order and the report shows the last one.
    assert [t["kl_coef"] for t in data["search"]] == [0.05, 0.1] and data["kl_coef"] == 0.1
    assert data["processors"] == [cpu_model()]  # read from the runs' records
    assert data["step_candidates"] == [1, 2] and set(targets_by_steps(data)) == {"1", "2"}
    names = {"pass_at_1_gain", "rare_pass_at_8_drop", "crossover_k", "strategy_entropy_fall", "rare_share_fall",
             "rare_lost_vs_rescued", "rare_lost_vs_rescued_main", "kl_binds"}
    for tried in data["search"]:
        for targets in tried["targets_by_steps"].values():
            assert set(targets) == names
            assert all(set(t) >= {"value", "bound", "met"} for t in targets.values())
    # Without a chosen step count the verdict is read at the largest candidate, gating and reported apart.
    assert {**data["targets"], **data["reported"]} == targets_by_steps(data)["2"]
    assert set(data["reported"]) == {"rare_lost_vs_rescued_main"}
    # Two GRPO steps cannot raise pass@1 by 0.05 with an interval above 0: the bound fails, and so does the command.
    assert data["targets"]["pass_at_1_gain"]["met"] is False
    assert data["chosen_steps"] is None and data["all_targets_met"] is False and code == 1
    curves = data["training_curves"]["grpo"]
    assert len(curves["strategy_share_split"][0]) == 2  # one value per training step
    assert all(0 <= v <= 1 for v in curves["strategy_share_round"][0])
    assert "chosen steps None" in capsys.readouterr().out
    # Cached: a second call reads the runs back and writes the same targets.
    main(args)
    assert json.loads(out.read_text())["targets"] == data["targets"]
    # The search stops at the first beta that meets every target: later betas are never trained.
    monkeypatch.setattr("rlvr_lib.study.dynamics.chosen_steps", lambda per_step: min(per_step))
    assert main([*args[:8], "0.05", "0.4", *args[10:]]) == 0
    data = json.loads(out.read_text())
    assert [t["kl_coef"] for t in data["search"]] == [0.05] and data["chosen_steps"] == 1
    assert data["targets"] == {n: t for n, t in targets_by_steps(data)["1"].items() if n != "rare_lost_vs_rescued_main"}
    betas = {json.loads(p.read_text())["config"]["train"]["kl_coef"]
             for p in (tmp_path / "results" / "testbed_dynamics").glob("grpo-*.json")}
    assert betas == {0.05, 0.1}


def test_full_profile_steps_reads_the_chosen_count_of_this_policy(tmp_path):
    from rlvr_lib.policy.load import policy_fingerprint

    path = tmp_path / "dynamics.json"
    with pytest.raises(ValueError, match="run `python -m rlvr_lib.study calibrate --dynamics`"):
        full_profile_steps(path)
    from rlvr_lib.tasks.arithmetic import TESTBED_VERSION

    report = {"policy_sha": policy_fingerprint(None), "testbed_version": TESTBED_VERSION,
              "step_candidates": [100, 200, 300], "chosen_steps": 200}
    path.write_text(json.dumps(report))
    assert full_profile_steps(path) == 200
    path.write_text(json.dumps({**report, "chosen_steps": None}))
    with pytest.raises(ValueError, match=r"one of \[100, 200, 300\]: not every dynamics target holds"):
        full_profile_steps(path)
    path.write_text(json.dumps({**report, "policy_sha": "0" * 16}))
    with pytest.raises(ValueError, match="report is of another checkpoint"):
        full_profile_steps(path)
    path.write_text(json.dumps({**report, "testbed_version": "mul-v4"}))
    with pytest.raises(ValueError, match="report is of another design"):
        full_profile_steps(path)
