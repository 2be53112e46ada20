"""The testbed's two regimes (`rlvr_lib.study.regimes`, `rlvr_lib.tasks.discovery`): the fresh-sample premise check,
the unhinted rare share, the designs, the gate on hand-built cases; the discovery task's pool and key; the oracle
arm's plan and its crediting to the hint-free prompt."""

import copy
import math

import numpy as np
import pytest
import torch

from rlvr_lib.methods import build_method
from rlvr_lib.study.testbed import TUNED_LR, calibrated_config
from rlvr_lib.study import regimes
from rlvr_lib.study.pipeline import versioned_key
from rlvr_lib.tasks import TASKS, get_task
from rlvr_lib.tasks import discovery
from rlvr_lib.tasks.arithmetic import TESTBED_VERSION, make_problem


# ----------------------------------------------------------------------------- the retention premise check
def test_rare_reward_share_counts_samples_and_problems():
    correct = np.array([[False] * 4, [True, False, False, False], [True, True, False, False]])
    got = regimes.rare_reward_share(correct)
    assert got == {"share": 3 / 12, "correct": 3, "samples": 12, "problems": 3, "problems_with_success": 2}


@pytest.mark.parametrize("bad", [np.zeros((0, 4), bool), np.zeros(4, bool), np.zeros((2, 2))])
def test_rare_reward_share_refuses_what_is_not_a_bool_matrix(bad):
    with pytest.raises(ValueError, match="correct"):
        regimes.rare_reward_share(bad)


@pytest.mark.parametrize("correct, expected", [(0, "absent"), (5, "absent"), (6, "present")])
def test_the_discovery_premise_is_absent_at_most_at_half_a_percent(correct, expected):
    measured = {"share": correct / 1000, "correct": correct, "samples": 1000}
    assert regimes.retention_premise(measured)["discovery_premise"] == expected


# ----------------------------------------------------------------------------- unhinted share and groups
def test_no_rare_group_share_is_hypergeometric():
    # 64 samples, 1 rare: a group of 8 misses it with probability 56/64; with none, always; with 60, never.
    assert regimes.no_rare_group_share([1], 64) == pytest.approx(56 / 64)
    assert regimes.no_rare_group_share([0, 60], 64) == pytest.approx(0.5)
    assert regimes.no_rare_group_share([2], 8, 8) == 0.0
    assert regimes.no_rare_group_share([3], 64) == pytest.approx(math.comb(61, 8) / math.comb(64, 8))


def test_unhinted_share_pools_the_labels_of_the_rare_strategy():
    labels = np.array([["split", "round", None, "split"], ["direct"] * 4], dtype=object)
    got = regimes.unhinted_share(labels, group_size=2)
    assert got["share"] == 1 / 8 and got["counts"] == [1, 0]
    assert got["no_rare_group_share"] == pytest.approx((math.comb(3, 2) / math.comb(4, 2) + 1) / 2)


# ----------------------------------------------------------------------------- the designs
def _factor(rare, samples=640, train=4, held=20):
    return {"rare": rare, "samples": samples, "train_targets": train, "heldout_targets": held}


def test_design_d1_holds_when_the_pooled_share_is_within_the_bound():
    got = regimes.choose_design({19: _factor(6), 29: _factor(12)})
    assert got["design"] == "d1" and got["first_factors"] == [19, 29] and got["share"] == 18 / 1280


def test_design_d2_keeps_the_first_factors_within_the_bound():
    got = regimes.choose_design({19: _factor(6), 29: _factor(10), 39: _factor(100), 49: _factor(12)})
    assert got["design"] == "d2" and got["first_factors"] == [19, 29, 49]
    assert [t["design"] for t in got["tried"]] == ["d1", "d2"] and not got["tried"][0]["holds"]


@pytest.mark.parametrize("factors", [
    {19: _factor(6), 39: _factor(100)},  # one first factor within the bound
    {19: _factor(6, train=3), 29: _factor(6, train=4), 39: _factor(100)},  # 7 training targets
    {19: _factor(6, held=14), 29: _factor(6, held=15), 39: _factor(100)},  # 29 held-out targets
    {19: _factor(100), 29: _factor(100)},  # none
])
def test_no_design_holds_on_this_policy_when_d2_lacks_factors_or_targets(factors):
    got = regimes.choose_design(factors)
    assert got["design"] is None and got["first_factors"] == [] and got["share"] is None
    assert len(got["tried"]) == 2 and not any(t["holds"] for t in got["tried"])


# ----------------------------------------------------------------------------- the gate
def _ci(mean, lo, hi):
    return {"mean": mean, "ci_low": lo, "ci_high": hi, "n": 3, "method": "paired"}


def test_the_gate_passes_when_every_condition_holds():
    gate = regimes.discovery_gate(_ci(0.10, 0.04, 0.16), oracle_gain=0.15, grpo_gain=0.05, fresh_reward_share=0.3)
    assert gate["passed"] and all(c["holds"] for c in gate["conditions"].values())


@pytest.mark.parametrize("args, failing", [
    ((_ci(0.04, 0.01, 0.07), 0.15, 0.05, 0.3), "oracle_beats_grpo"),   # below +0.05
    ((_ci(0.08, -0.01, 0.17), 0.15, 0.05, 0.3), "oracle_beats_grpo"),  # interval touches 0
    ((_ci(0.08, 0.02, 0.14), 0.15, 0.08, 0.3), "grpo_misses_most"),    # GRPO gains more than half
    ((_ci(0.08, 0.02, 0.14), -0.01, -0.09, 0.3), "grpo_misses_most"),  # the oracle itself does not gain
    ((_ci(0.08, 0.02, 0.14), 0.15, 0.05, 0.04), "rare_earns_reward"),  # round earns too little on fresh samples
])
def test_the_gate_fails_on_each_condition_alone(args, failing):
    gate = regimes.discovery_gate(*args)
    assert not gate["passed"]
    assert [name for name, c in gate["conditions"].items() if not c["holds"]] == [failing]


def test_the_gate_refuses_a_difference_without_an_interval():
    with pytest.raises(ValueError, match="oracle_minus_grpo"):
        regimes.discovery_gate({"mean": 0.1}, 0.1, 0.0, 0.5)


def test_premise_status_reads_the_measured_regimes():
    absent = {"retention": {"discovery_premise": "absent", "share": 0.0017, "correct": 41, "samples": 23808,
                            "bound": 0.005}}
    got = regimes.premise_status("retention", "discovery", absent)
    assert got["present"] is False and "41 of 23808" in got["measurement"]
    assert regimes.premise_status("retention", "discovery", {})["present"] is None
    assert regimes.premise_status("discovery", "discovery", {"discovery": {"gate": {"passed": True}}})["present"]
    assert regimes.premise_status("discovery", "discovery", {"discovery": {"gate": None}})["present"] is None
    assert regimes.premise_status("retention", "none", {})["present"] is True
    with pytest.raises(ValueError, match="regime"):
        regimes.premise_status("exploration", "none", {})


# ----------------------------------------------------------------------------- the discovery task
def test_candidates_carry_the_feature_and_targets_only_the_rare_strategy():
    for split in ("train", "eval"):
        ops = discovery.candidates(split)
        assert ops and all(a % 10 == 9 and 19 <= a <= 79 and b != 9 for a, b in ops)
    counts = {"19*23": [0, 0, 2], "29*4": [0, 1, 5], "39*41": [0, 0, 1], "49*12": [0, 0, 0]}
    assert discovery.select_targets(counts) == ["19*23"]


def test_the_pool_is_one_target_in_six_from_fixed_draws():
    targets = [(19, b) for b in range(10, 40)]
    others = [(a, b) for a in (21, 22) for b in range(2, 99) if b != 9]
    kept, non = discovery.discovery_pool(targets, others)
    assert len(kept) == discovery.MAX_TARGETS and len(non) == 5 * len(kept)
    assert (kept, non) == discovery.discovery_pool(targets, others)
    with pytest.raises(ValueError, match="non-targets"):
        discovery.discovery_pool(targets[:4], others[:10])
    with pytest.raises(ValueError, match="targets is empty"):
        discovery.discovery_pool([], others)


PROFILE = {"design": "d2", "first_factors": [19, 29],
           "pool": {"targets": ["19*23", "29*41"], "non_targets": ["21*34", "33*47", "45*12", "52*66"]},
           "heldout_targets": ["19*57", "29*62", "19*71"]}


@pytest.fixture
def task():
    saved = dict(TASKS)
    TASKS["arith_discovery"] = discovery.DiscoveryTask(profile=PROFILE)
    yield get_task("arith_discovery")
    TASKS.clear(), TASKS.update(saved)


def test_the_discovery_task_marks_its_targets_and_names_its_design_in_the_key(task):
    train = task.family_problems("train", 6)
    assert sorted(p.operands for p in train if p.family == discovery.TARGET_FAMILY) == [(19, 23), (29, 41)]
    assert all(p.strategy == "round" for p in train if p.family == discovery.TARGET_FAMILY)
    held = task.family_problems(discovery.HELDOUT_FAMILY, 3)
    assert sorted(p.operands for p in held) == [(19, 57), (19, 71), (29, 62)]
    assert task.family_capacity("train") == 6 and task.family_capacity("easy_mix") == get_task("arith").family_capacity("easy_mix")
    assert task.regime == "discovery" and get_task("arith").regime == "retention"
    version = versioned_key({}, "arith_discovery")["task_version"]
    assert version.startswith(f"{TESTBED_VERSION}-discovery-d2-")
    moved = dict(PROFILE, heldout_targets=["19*57", "29*62"])  # another pool, the same design: another key
    assert discovery.DiscoveryTask(profile=moved).version.startswith(f"{TESTBED_VERSION}-discovery-d2-")
    assert discovery.DiscoveryTask(profile=moved).version != version
    assert versioned_key({}, "arith")["task_version"] == TESTBED_VERSION
    with pytest.raises(ValueError, match="1..3"):
        task.family_problems(discovery.HELDOUT_FAMILY, 4)


# ----------------------------------------------------------------------------- the oracle arm
def test_the_oracle_forces_two_of_eight_rollouts_of_targets_only():
    method = build_method(calibrated_config("oracle_explore", task="arith_discovery"))
    problems = [make_problem(19, 23, discovery.TARGET_FAMILY, "round"), make_problem(21, 34, "train")]
    plan = method.hints(problems, 8, np.random.default_rng(0))
    assert plan[0] == [(-1, None)] * 6 + [(0, "round")] * 2 and plan[1] == [(-1, None)] * 8
    cfg = calibrated_config("oracle_explore")
    grpo = calibrated_config("grpo")
    assert cfg.lr == TUNED_LR["grpo"] and (cfg.kl_coef, cfg.kl_estimator) == (grpo.kl_coef, grpo.kl_estimator)
    with pytest.raises(ValueError, match="forced"):
        build_method(calibrated_config("oracle_explore", task="arith_discovery",
                                       method_options={"forced": 9})).hints(problems, 8, None)


def test_forced_rollouts_are_trained_on_the_hint_free_prompt(policy, task):
    from rlvr_lib.rollout import sequence_logprobs
    from rlvr_lib.trainer import Trainer

    model, tokenizer = policy
    cfg = calibrated_config("oracle_explore", task="arith_discovery", steps=1, prompts_per_step=6, group_size=8,
                        max_new_tokens=40, train_pool_size=6)
    trainer = Trainer(cfg, copy.deepcopy(model), tokenizer)
    seen = {}
    update = trainer._update

    def spy(batch, local, local_index, temperature, rng):
        seen["batch"], seen["local"] = batch, local
        return update(batch, local, local_index, temperature, rng)

    before = copy.deepcopy(trainer.model)
    trainer._update = spy
    trainer.step()
    batch = seen["batch"]
    hinted = batch.hint_index >= 0
    assert int(hinted.sum()) == 4  # 2 targets x 2 forced rollouts
    assert all(batch.problems[g].family == discovery.TARGET_FAMILY for g in batch.group_index[hinted].tolist())
    ro = batch.rollouts
    assert torch.equal(ro.prompt_ids, batch.plain_prompt_ids)  # every row is on its hint-free prompt
    assert all(t.startswith("round") for t, h in zip(ro.texts, hinted.tolist()) if h)
    with torch.no_grad():
        lp, _ = sequence_logprobs(before, ro.prompt_ids[hinted], ro.prompt_mask[hinted], ro.completion_ids[hinted],
                                  ro.completion_mask[hinted])
    torch.testing.assert_close(ro.logprobs[hinted], lp * ro.completion_mask[hinted])
    ref = seen["local"].ref_logprobs  # one process: its rows are the batch's
    assert ref is not None and ref.shape == ro.logprobs.shape
    torch.testing.assert_close(ref[hinted], ro.logprobs[hinted], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- headroom
def test_headroom_fraction_is_the_methods_share_of_the_oracles_gain_over_grpo():
    rng = np.random.default_rng(0)
    grpo = rng.uniform(0.0, 0.2, (5, 40))
    oracle = grpo + 0.4
    half = grpo + 0.2
    got = regimes.headroom_fraction(half, grpo, oracle, n_resamples=500)
    assert got["mean"] == pytest.approx(0.5) and got["ci_low"] < 0.5 < got["ci_high"] and got["dropped"] == 0
    assert regimes.headroom_fraction(grpo, grpo, oracle, n_resamples=200)["mean"] == pytest.approx(0.0)
    assert regimes.headroom_fraction(oracle, grpo, oracle, n_resamples=200)["mean"] == pytest.approx(1.0)
    none = regimes.headroom_fraction(half, grpo, grpo, n_resamples=50)  # no headroom: no ratio
    assert math.isnan(none["mean"]) and 0 < none["dropped"] < 50  # resampled seeds put it on either side of 0
    with pytest.raises(ValueError, match="problems"):
        regimes.headroom_fraction(half[:, :10], grpo, oracle)


def test_every_committed_record_names_its_regime_through_its_task():
    """The regime is in every run key and record: the task (and its version) of notebooks 01-07's records is the
    retention pool's, notebook 08's the discovery regime's, whose version names the design."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "results"
    seen = {}
    for folder in ("grpo_baseline_full", "baselines_full", "nudgerl_full", "threepo_full", "sage_full", "vigor_full",
                   "head_to_head_full", "discovery_full"):
        for path in sorted((root / folder).glob("*.json"))[:40]:
            record = json.loads(path.read_text())
            seen.setdefault(folder, set()).add((regimes.regime_of(record), record["config"].get("task_version")))
    assert all(v == {("retention", TESTBED_VERSION)} for k, v in seen.items() if k != "discovery_full")
    (regime, version), = seen["discovery_full"]
    assert regime == "discovery" and version == get_task("arith_discovery").version
    assert version.startswith(f"{TESTBED_VERSION}-discovery-{discovery.load_discovery()['design']}-")


def test_a_composite_credits_the_hint_free_prompt_when_its_hints_owner_does():
    from rlvr_lib.methods import METHODS, compose

    assert METHODS[compose("oracle_explore", "sage", kl_estimator="k3", kl_coef=0.05, lr=5e-6)].cls.credits_hint_free
    assert not METHODS[compose("nudgerl", "sage", kl_coef=0.2, lr=5e-6)].cls.credits_hint_free


def test_crediting_the_hint_free_prompt_is_refused_where_rollouts_are_not_at_the_models_weights(policy, task,
                                                                                                 registered):
    from rlvr_lib.methods.oracle import OracleExploration
    from rlvr_lib.trainer import Trainer

    class NoisyOracle(OracleExploration):
        reads_parameters = True  # as a weight-space method (3PO) or a parameter-reading reward would

    registered("noisy_oracle", NoisyOracle, kl_coef=0.2, kl_estimator="reverse")
    model, tokenizer = policy
    cfg = calibrated_config("noisy_oracle", task="arith_discovery", steps=1, prompts_per_step=6, group_size=8,
                        max_new_tokens=40, train_pool_size=6)
    with pytest.raises(ValueError, match="hint-free prompt.*own weights"):
        Trainer(cfg, copy.deepcopy(model), tokenizer).step()


def test_design_d3_takes_every_first_factor_on_its_own_policy():
    low = regimes.choose_design({19: _factor(6), 29: _factor(10)}, designs=("d3",))
    assert low["design"] == "d3" and low["first_factors"] == [19, 29] and [t["design"] for t in low["tried"]] == ["d3"]
    high = regimes.choose_design({19: _factor(60), 29: _factor(10)}, designs=("d3",))
    assert high["design"] is None and high["tried"][0]["share"] == 70 / 1280 and not high["tried"][0]["holds"]
    with pytest.raises(ValueError, match="designs"):
        regimes.choose_design({19: _factor(6)}, designs=("d4",))


def test_load_regimes_puts_the_gate_file_beside_the_regimes(tmp_path):
    import json

    assert regimes.load_regimes(tmp_path) == {}
    (tmp_path / "regimes.json").write_text(json.dumps({"retention": {"share": 0.0}, "discovery": {"design": "d3"}}))
    assert regimes.load_regimes(tmp_path)["discovery"] == {"design": "d3", "gate": None}
    (tmp_path / "discovery_gate.json").write_text(json.dumps({"gate": {"passed": True}}))
    loaded = regimes.load_regimes(tmp_path)
    assert loaded["discovery"]["gate"] == {"passed": True}
    assert regimes.premise_status("discovery", "discovery", loaded)["present"] is True


def test_the_committed_gate_is_the_designs_and_passed_on_the_main_seeds():
    """The promise notebook 08's method rows rest on: the committed gate file of the design in use passed."""
    from rlvr_lib.study.dynamics import full_profile_steps
    from rlvr_lib.study.profiles import MAIN_SEEDS

    gate = regimes.load_regimes()["discovery"]["gate"]
    assert gate["passed"] and all(c["holds"] for c in gate["conditions"].values())
    assert gate["design"] == discovery.load_discovery()["design"]
    assert gate["seeds"] == list(MAIN_SEEDS) and gate["steps"] == full_profile_steps()


def test_the_discovery_policys_card_and_readme_quote_the_committed_measurements():
    import json
    from pathlib import Path

    from rlvr_lib.policy.load import DISCOVERY_POLICY_DIR

    root = Path(__file__).resolve().parent.parent
    card = " ".join((DISCOVERY_POLICY_DIR / "README.md").read_text().split())
    log = json.loads((DISCOVERY_POLICY_DIR / "pretrain_log.json").read_text())
    tried = {t["design"]: t for t in regimes.designs_tried(regimes.load_regimes())}
    assert f"{tried['d1']['share']:.2%}" in card and f"{tried['d3']['share']:.2%}" in card
    assert f"{log['train_seconds']} s on one thread; final loss {log['final_loss']:.3f}" in card
    assert log["config"]["round_only_rare_share"] == discovery.D3_ROUND_SHARE and f"{discovery.D3_ROUND_SHARE:.0%}" in card
    readme = " ".join((root / "docs" / "testbed-guide.md").read_text().split())  # "Two regimes"
    assert f"at most {discovery.UNHINTED_BOUND:.0%} of the targets' unhinted samples" in readme
    assert f"at least +{regimes.GATE_MIN_GAIN:.2f} with its interval above 0" in readme
    assert regimes.GATE_GRPO_SHARE == 0.5 and "GRPO must gain at most half of the oracle's gain" in readme
    from rlvr_lib.methods.oracle import OracleOptions

    assert OracleOptions().forced == 2 and "2 of 8 rollouts of each target forced onto `round`" in readme


# ----------------------------------------------------------------------------- issue 56 item 6: protocols
def test_each_discovery_claim_row_reads_an_evaluation_both_of_its_arms_carry():
    """Every pass@1 row of notebook 08 compares a method with GRPO under its source paper's protocol: the method arm
    and GRPO (a gate arm) both carry that protocol's evaluation of the held-out targets, at the same spec."""
    from rlvr_lib.study.claims import registry
    from rlvr_lib.study.protocols import ProtocolEvaluation, claim_protocol

    claims = registry("nb08_discovery").claims
    arm_of = {"nudgerl-beats-grpo": "nudgerl", "c3po-beats-grpo": "c3po", "m3po-beats-grpo": "m3po",
              "b3po-matches-grpo": "b3po"}
    assert sorted(c.id for c in claims) == sorted(arm_of)
    for profile in ("quick", "full"):
        main, extra = regimes.discovery_specs(problems=8 if profile == "quick" else regimes.HELDOUT_SPEC_PROBLEMS)
        grpo = regimes.arm_extra_specs("grpo", main, extra[regimes.TRAIN_TARGETS], profile)
        for claim, arm in arm_of.items():
            proto = ProtocolEvaluation.of(claim_protocol("nb08_discovery", claim), main, profile)
            assert proto.protocol.name == regimes.ARM_PROTOCOL[arm]
            mine = regimes.arm_extra_specs(arm, main, extra[regimes.TRAIN_TARGETS], profile)
            assert mine == {regimes.TRAIN_TARGETS: extra[regimes.TRAIN_TARGETS], proto.label: proto.spec}
            assert grpo[proto.label] == proto.spec and proto.spec.families == main.families
    # SAGE's protocol is the main evaluation: its arm adds none; an unknown arm is refused
    assert regimes.arm_extra_specs("sage", main, extra[regimes.TRAIN_TARGETS]) == {
        regimes.TRAIN_TARGETS: extra[regimes.TRAIN_TARGETS]}
    with pytest.raises(ValueError, match=r"arm='dapo' is invalid: must be one of"):
        regimes.arm_extra_specs("dapo", main, extra[regimes.TRAIN_TARGETS])
