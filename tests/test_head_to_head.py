"""Notebook 07's rules (`rlvr_lib.study.head_to_head`): the equal-compute check on short runs, the arm selection
on fake records and its fallback, the pairs' settings, and the "when does it help" map on a known example."""

from types import SimpleNamespace

import numpy as np
import pytest

from rlvr_lib.eval import EvalSpec
from rlvr_lib.study.testbed import key_train, calibrated_config as method_config
from rlvr_lib.methods.registry import METHODS
from rlvr_lib.study import head_to_head as h2h
from rlvr_lib.study.claims import registry
from rlvr_lib.study.runs import PrerequisitesMissing
from counted_run import counted_run as _counted_run

BUDGET = h2h.Budget(steps=2, prompts_per_step=4, group_size=4)


def _record(name, config, history, seed=0):
    return SimpleNamespace(config={"train": config.to_dict()}, history=history, seed=seed, run_id=f"{name}-s{seed}")


def _run(policy, name, monkeypatch=None, correct_if=None, **overrides):
    """A 2-step run of ``name`` (`counted_run`, which counts completions at the engine and steps at the
    optimizer); returns (record-like, those counts)."""
    config, history, counts = _counted_run(policy, name, monkeypatch, correct_if, **overrides)
    return _record(name, config, history), counts


def test_two_arms_at_the_budget_spend_it_exactly(policy, monkeypatch):
    # NudgeRL (two optimizer steps per batch in its preset) and DAPO (refills in its preset), both at the budget
    nudgerl, n_counts = _run(policy, "nudgerl", **BUDGET.overrides("nudgerl"))
    dapo, d_counts = _run(policy, "dapo", monkeypatch, lambda p, k: p.operands[0] % 2 == 0 and k % 2 == 0,
                          **BUDGET.overrides("dapo"))
    assert any(row["dynamic_dropped_groups"] for row in dapo.history)  # the filter ran, nothing refilled
    want = {"completions": 2 * 4 * 4, "optimizer_steps": 2}
    assert n_counts == d_counts == want
    assert BUDGET.check("nudgerl", [nudgerl]) == BUDGET.check("dapo", [dapo]) == want


def test_an_arm_off_the_budget_is_named(policy):
    own, _ = _run(policy, "nudgerl", steps=2, prompts_per_step=4, group_size=4)  # its preset: 2 optimizer steps/batch
    with pytest.raises(ValueError, match=r"^arm 'nudgerl', seed 0 \(nudgerl-s0\): not at the equal-compute budget: "
                                         r"optimizer_steps 4 spent, budget 2$"):
        BUDGET.check("nudgerl", [own])
    short = _record("grpo", method_config("grpo", **BUDGET.overrides("grpo")), [{"step": 0}])
    with pytest.raises(ValueError, match=r"completions 16 spent, budget 32; optimizer_steps 1 spent, budget 2$"):
        BUDGET.check("grpo", [short])


def test_budget_overrides_and_where_an_arm_is_read():
    assert BUDGET.overrides("dapo")["method_options"] == {"max_refill_rounds": 0}
    assert "method_options" not in BUDGET.overrides("nudgerl") and BUDGET.overrides("nudgerl")["minibatches"] == 1
    assert {n: h2h.home(n, BUDGET) for n in ("grpo", "grpo_forward_kl", "sage", "dapo", "nudgerl")} == {
        "grpo": "baselines", "grpo_forward_kl": "baselines", "sage": "sage", "dapo": "head_to_head",
        "nudgerl": "head_to_head"}
    with pytest.raises(ValueError, match="^name='nope' is invalid"):
        BUDGET.overrides("nope")


def _fake(pass1, rare=None, k=16):
    final = {"average": {"pass_at_k": {"1": pass1}}}
    extra = {} if rare is None else {"evals": {"wide": {"families": {"rare_mix": {"pass_at_k": {str(k): rare}}}}}}
    return [SimpleNamespace(final=final, extra=extra)]


def test_selection_rule_on_fake_records_and_its_fallback():
    nb02 = {n: _fake(0.30, 0.40 if n in h2h.BASELINES_WITH_WIDE else None) for n in h2h.BASELINE_CANDIDATES}
    nb02["pope"] = nb02["dapo"] = _fake(0.50)  # a tie: the first name alphabetically
    nb04 = {"b3po": _fake(0.31), "m3po": _fake(0.33), "c3po": _fake(0.32)}
    assert h2h.select_arms(nb02, nb04, k_wide=16) == {"pass1": "dapo", "wide": "bnpo_loss", "threepo": "m3po",
                                                      "source": "records"}
    # the pass@1 pick also leads at pass@256: the pass@256 pick is the next one, so the two differ
    nb02["bnpo_loss"], nb02["grpo_no_kl"] = _fake(0.60, 0.90), _fake(0.30, 0.50)
    assert h2h.select_arms(nb02, nb04, k_wide=16)["pass1"] == "bnpo_loss"
    assert h2h.select_arms(nb02, nb04, k_wide=16)["wide"] == "grpo_no_kl"
    # no records yet (today): the quick profile falls back, the full one refuses
    assert h2h.select_arms({}, {}, k_wide=16, fallback=True) == {**h2h.FALLBACK, "source": "fallback"}
    with pytest.raises(PrerequisitesMissing, match=r"^select_arms: fewer than 1 records of \['b3po', 'm3po', 'c3po'\]: "
                                         "finish notebooks 02 and 04"):
        h2h.select_arms(nb02, {}, k_wide=16)
    # a notebook still running (one seed of five done) is not selected from
    with pytest.raises(PrerequisitesMissing, match=r"^select_arms: fewer than 5 records of \["):
        h2h.select_arms(nb02, nb04, k_wide=16, seeds=5)


def test_pairs_and_their_settings():
    assert h2h.composable_pairs(("nudgerl", "sage", "m3po", "vigor")) == [("nudgerl", "sage"), ("sage", "m3po"),
                                                                           ("sage", "vigor")]
    assert h2h.pair_settings("sage", "vigor") == {"kl_coef": 0.2, "lr": 3.33333e-05}
    assert h2h.pair_settings("nudgerl", "sage") == {"kl_coef": 0.2}
    assert h2h.pair_settings("b3po", "vigor")["lr_schedule"] == "constant"
    with pytest.raises(ValueError, match=r"the presets differ on 'advantage'"):
        h2h.pair_settings("nudgerl", "vigor")
    before = set(METHODS)
    try:
        name = h2h.pair_name("sage", "vigor")
        config = method_config(name, **BUDGET.overrides(name))
        assert (name, config.kl_coef, config.lr, config.minibatches) == ("sage+vigor", 0.2, 3.33333e-05, 1)
    finally:
        for n in set(METHODS) - before:
            del METHODS[n]
    assert h2h.better_component("sage+vigor", {"sage": 0.4, "vigor": 0.4}) == "sage"


def test_gain_map_on_a_known_example():
    # 8 problems: 4 the base never solves, 4 at 0.5; the arm gains 0.5 on the first four, nothing on the others
    levels = np.array([0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5])
    reference = np.tile([0.2, 0.2, 0.2, 0.2, 0.6, 0.6, 0.6, 0.6], (2, 1))
    arm = reference + np.array([0.5, 0.5, 0.5, 0.5, 0, 0, 0, 0])
    assert h2h.bucket_edges(levels).tolist() == [0.0, 0.25, 0.5]
    table = h2h.gain_map(levels, {"arm": arm}, reference)
    assert table["bucket"].tolist() == ["<= 0", "(0.25, 0.5]"]  # the tied quartiles' empty buckets left out
    assert table["problems"].tolist() == [4, 4]
    assert np.allclose(table[["mean", "ci_low", "ci_high"]].to_numpy(), [[0.5] * 3, [0.0] * 3])
    with pytest.raises(ValueError, match=r"^runs\['arm'\]=\(2, 3\) is invalid"):
        h2h.gain_map(levels, {"arm": arm[:, :3]}, reference)


def test_map_summary_reads_each_bucket_and_the_guide_says_where_to_use_which():
    # problems the base never solves: the arm gains 0.5 on each; at 0.5: it loses 0.4 on each; at 1: no change
    levels = np.array([0, 0, 0, 0.5, 0.5, 0.5, 1, 1])
    reference = np.tile([0.2, 0.2, 0.2, 0.6, 0.6, 0.6, 0.9, 0.9], (2, 1))
    arm = reference + np.array([0.5, 0.5, 0.5, -0.4, -0.4, -0.4, 0, 0])
    gains = h2h.gain_map(levels, {"A": arm, "GRPO again": reference}, reference, edges=[0.0, 0.5])
    text = h2h.map_summary(gains)
    data = h2h.find_map("other output\n" + text)
    assert [b["reading"] for b in data["runs"]["A"]] == [h2h.HELPS, h2h.HURTS, h2h.NO_DIFFERENCE]
    assert [b["problems"] for b in data["runs"]["A"]] == [3, 3, 2]
    assert "- A: <= 0 (3 problems) +0.500 [0.500, 0.500] helps" in text
    assert h2h.guide(data) == [
        "- **A**: use it over GRPO where the base policy's per-problem pass@1 is <= 0 (+0.500 [0.500, 0.500]); "
        "prefer GRPO where it is in (0, 0.5] (-0.400 [-0.400, -0.400]) (1 other bucket: no difference "
        "shown).",
        "- **GRPO again**: no bucket of the base policy's per-problem pass@1 where its pass@1 differs from GRPO's "
        "at this precision: nothing here says to prefer it, or GRPO, for any band of problems.",
    ]
    only_hurts = {**data, "runs": {"B": [b for b in data["runs"]["A"] if b["reading"] == h2h.HURTS]}}
    assert h2h.guide(only_hurts) == ["- **B**: prefer GRPO where the base policy's per-problem pass@1 is in (0, 0.5] "
                                     "(-0.400 [-0.400, -0.400])."]
    assert h2h.find_map("no map here") is None
    with pytest.raises(ValueError, match=r"^data='list' is invalid: must be a map"):
        h2h.guide([])


def test_measures_beside_the_map_are_read_like_its_buckets_and_reach_the_guide():
    levels, reference = np.array([0.0, 0.0, 0.5, 0.5]), np.tile([0.2, 0.2, 0.6, 0.6], (2, 1))
    gains = h2h.gain_map(levels, {"A": reference + [0.3, 0.3, 0, 0]}, reference, edges=[0.0])
    beside = {"rare pass@256 minus GRPO's": {"A": {"mean": 0.2, "ci_low": 0.1, "ci_high": 0.3},
                                             "baseline": {"mean": -0.1, "ci_low": -0.2, "ci_high": -0.05}},
              "growth with size": {"A": {"mean": 0.01, "ci_low": -0.02, "ci_high": 0.04, "n": 3}}}
    text = h2h.map_summary(gains, beside=beside)
    assert "- baseline: -0.100 [-0.200, -0.050] below 0" in text
    data = h2h.find_map(text)
    assert h2h.map_rows(data) == ["A", "baseline"]  # a run measured only beside the map is a row too
    assert [v["reading"] for v in (data["beside"]["rare pass@256 minus GRPO's"]["A"],
                                    data["beside"]["growth with size"]["A"])] == [h2h.HELPS, h2h.NO_DIFFERENCE]
    assert h2h.guide(data) == [
        "- **A**: use it over GRPO where the base policy's per-problem pass@1 is <= 0 (+0.300 [0.300, 0.300]) "
        "(1 other bucket: no difference shown). Beside the map: rare pass@256 minus GRPO's +0.200 [0.100, 0.300] "
        "(above 0); growth with size +0.010 [-0.020, 0.040] (no difference shown).",
        "- **baseline**: rare pass@256 minus GRPO's -0.100 [-0.200, -0.050] (below 0).",
    ]
    assert h2h.guide_summary(data) == (
        "In short: A gains over GRPO's pass@1 in some bucket. rare pass@256 minus GRPO's: above 0 for A (+0.200); "
        "below 0 for baseline (-0.100). growth with size: no difference shown for 1.")
    worse = {"mean": -0.3, "ci_low": -0.4, "ci_high": -0.2}
    hurt = {"bucket": "> 0", "problems": 2, **worse, "reading": h2h.HURTS}
    two = {**data, "runs": {"B": [hurt], "C": data["runs"]["A"][1:]},
           "beside": {"gap": {"B": {**worse, "reading": h2h.HURTS}, "C": {**worse, "mean": -0.35,
                                                                          "reading": h2h.HURTS},
                              "D": {"mean": 0.0, "ci_low": -0.1, "ci_high": 0.1, "reading": h2h.NO_DIFFERENCE}}}}
    assert h2h.guide_summary(two) == ("In short: none of the 2 runs on the map gains over GRPO's pass@1 in any bucket; "
                                      "B loses in at least one. gap: below 0 for C (-0.350), B (-0.300); no "
                                      "difference shown for the other 1.")
    assert h2h.find_map(h2h.map_summary(gains))["beside"] == {}
    with pytest.raises(ValueError, match=r"^beside\['growth'\]=.* is invalid: must be \{run: an interval"):
        h2h.map_summary(gains, beside={"growth": {"A": {"mean": 0.1}}})


def test_rows_a_profile_does_not_run_are_left_out():
    reg = registry("nb07_head_to_head")
    ci = {"mean": 0.1, "ci_low": 0.05, "ci_high": 0.15, "n": 5, "method": "m"}
    measured = {m.id: (None if m.id.startswith("pair-nudgerl") else ci) for m in reg.measurements}
    ids = [row["id"] for row in reg.measurement_rows(measured, threepo="M3PO", rare="rare_mix", n_wide=256,
                                                     small="small")]
    assert "pair-nudgerl-sage" not in ids and "pair-sage-vigor" in ids and len(ids) == len(reg.measurements) - 2


# ------------------------------------------------------------------ the second model size
def _seeded(pass1_by_seed):
    return [SimpleNamespace(seed=s, final={"average": {"pass_at_k": {"1": v}}}) for s, v in pass1_by_seed.items()]


def test_seed_gains_pair_runs_by_seed():
    method, grpo = _seeded({0: 0.50, 1: 0.40, 2: 0.45}), _seeded({2: 0.40, 0: 0.45, 3: 0.9})
    assert h2h.seed_gains(method, grpo) == pytest.approx({0: 0.05, 2: 0.05})  # seeds 1 and 3 have no partner
    with pytest.raises(ValueError, match="at least one seed both arms have"):
        h2h.seed_gains(method, _seeded({7: 0.4}))


def test_gain_growth_is_welchs_interval():
    from scipy import stats

    tiny, small = [0.01, 0.02, 0.00, 0.03, 0.01], [0.05, 0.02, 0.06]
    out = h2h.gain_growth(tiny, small)
    # Welch by hand: standard error and Welch-Satterthwaite degrees of freedom
    va, vb = np.var(small, ddof=1) / 3, np.var(tiny, ddof=1) / 5
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 4)
    half = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    diff = np.mean(small) - np.mean(tiny)
    assert out["mean"] == pytest.approx(diff) and (out["n_small"], out["n_tiny"], out["n"]) == (3, 5, 3)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((diff - half, diff + half))
    single = h2h.gain_growth([0.01], [0.05])  # the quick profile: one seed a side, no interval
    assert single["n"] == 1 and single["ci_low"] == single["ci_high"] == pytest.approx(0.04)
    with pytest.raises(ValueError, match="finite per-seed gains"):
        h2h.gain_growth([0.01, float("nan")], small)


def test_the_second_size_is_named_not_a_path_and_refused_until_built(tmp_path, monkeypatch):
    from rlvr_lib.policy import load

    assert h2h.scale_policy("quick") is None  # the tiny policy stands in
    monkeypatch.setitem(load.POLICY_NAMES, "small", tmp_path / "small-mul")
    with pytest.raises(PrerequisitesMissing, match=r"second size: policy='small' is not built at .*make second-size"):
        h2h.scale_policy("full")
    (tmp_path / "small-mul").mkdir()
    (tmp_path / "small-mul" / "config.json").write_text("{}")
    assert h2h.scale_policy("full") == "small" and load.resolve_policy_path("small") == str(tmp_path / "small-mul")
    assert method_config("grpo", policy=h2h.scale_policy("full")).policy == "small"  # no checkout path in its key


# ------------------------------------------------------------------ each method beside its own paper's comparator
FULL = h2h.Budget(steps=200, prompts_per_step=8, group_size=8)  # notebook 07's full-profile budget


@pytest.mark.parametrize("key,name", [("nudgerl", "nudgerl"), ("sage", "sage"), ("threepo", "b3po"),
                                      ("threepo", "m3po"), ("threepo", "c3po"), ("vigor", "vigor")])
def test_each_method_arm_stands_beside_its_own_comparator_sharing_every_setting_but_the_named(key, name):
    arm = method_config(name, **BUDGET.overrides(name))
    grpo = method_config("grpo", **BUDGET.overrides("grpo"))
    comps = h2h.own_comparators(key, name)
    assert comps and all(isinstance(c, h2h.Comparator) for c in comps)
    for c in comps:
        config = h2h.comparator_config(name, c, BUDGET)
        assert set(h2h.config_difference(arm, config)) == set(c.named())  # the mechanism only
        assert (config.lr, config.lr_schedule, config.minibatches) == (arm.lr, arm.lr_schedule, 1)
        method, overrides = h2h.comparator_run(name, c, BUDGET)
        assert method_config(method, **overrides, seed=3) == h2h.comparator_config(name, c, BUDGET, seed=3)
    # plain GRPO is the other comparator: the arm differs from it by its method and more than that
    assert {"method"} < set(h2h.config_difference(arm, grpo)) or key == "sage"
    want = {"nudgerl": [("grpo-nudgerl-settings", "grpo")], "sage": [("grpo_k3", "grpo_k3")],
            "vigor": [("grpo-vigor-settings", "grpo")],
            "threepo": [("ivon-no-noise" if name == "b3po" else f"{name}-no-noise", name),
                        ("grpo-3po-settings", "grpo_no_kl")]}[key]
    assert [(c.label, h2h.comparator_config(name, c, BUDGET).method) for c in comps] == want


def test_own_comparators_at_their_papers_settings_and_where_they_are_read():
    from rlvr_lib.methods.nudgerl import NUDGERL_SETTINGS
    from rlvr_lib.methods.threepo import THREEPO_SETTINGS
    from rlvr_lib.methods.vigor import VIGOR_SETTINGS

    nudge = h2h.comparator_config("nudgerl", h2h.own_comparators("nudgerl", "nudgerl")[0], BUDGET)
    assert all(getattr(nudge, k) == v for k, v in NUDGERL_SETTINGS.items() if k not in ("minibatches", "group_size"))
    (no_noise, grpo_3po) = h2h.own_comparators("threepo", "c3po")
    assert key_train(h2h.comparator_config("c3po", no_noise, BUDGET))["method_options"] == {"noise_scale": 0.0}
    assert all(getattr(h2h.comparator_config("c3po", grpo_3po, BUDGET), k) == v for k, v in THREEPO_SETTINGS.items())
    vigor = h2h.own_comparators("vigor", "vigor")[0]
    gt = h2h.comparator_config("vigor", vigor, BUDGET)
    assert all(getattr(gt, k) == v for k, v in VIGOR_SETTINGS.items() if k != "group_size")
    assert gt.lr == method_config("vigor").lr  # VIGOR's lr, whatever GRPO's is
    # a GRPO comparator at another lr than the VIGOR arm's is refused: the lr is not the named difference
    arm = method_config("vigor", **BUDGET.overrides("vigor"))
    with pytest.raises(ValueError, match=r"comparator 'grpo-vigor-settings': fields that differ from the arm=.*'lr'.*"
                                         r"must be exactly the named ones \['advantage', 'method'\]"):
        vigor.check(arm, arm.replace(method="grpo", advantage="grpo", lr=arm.lr * 3))
    # SAGE's grpo_k3 is notebook 05's config at the budget: read there; the others are trained here
    homes = {c.label: h2h.comparator_home(name, c, BUDGET) for key, name in
             {"nudgerl": "nudgerl", "sage": "sage", "threepo": "b3po", "vigor": "vigor"}.items()
             for c in h2h.own_comparators(key, name)}
    assert homes == {"grpo-nudgerl-settings": "head_to_head", "grpo_k3": "sage", "ivon-no-noise": "head_to_head",
                     "grpo-3po-settings": "head_to_head", "grpo-vigor-settings": "head_to_head"}
    with pytest.raises(ValueError, match=r"^key='pope' is invalid: must be one of"):
        h2h.own_comparators("pope", "pope")
    with pytest.raises(ValueError, match=r"^name='sage' is invalid: must be a 3PO variant"):
        h2h.own_comparators("threepo", "sage")
    with pytest.raises(ValueError, match=r"replace=\{'seed': 1\} is invalid"):
        h2h.Comparator("x", {"seed": 1}, "nothing")


def test_sages_own_comparator_is_read_from_notebook_05s_committed_records():
    from rlvr_lib.study.runs import load_runs

    sage = load_runs("sage_full", name="sage", current=True)
    grpo_k3 = load_runs("sage_full", name="grpo_k3", current=True)
    if not (sage and grpo_k3):
        pytest.skip("notebook 05's full-profile records are not committed at this checkout")
    from rlvr_lib.study.pipeline import run_key
    from rlvr_lib.study.profiles import WIDE, full_profile
    from rlvr_lib.study.runs import hash_jsonable

    comp = h2h.own_comparators("sage", "sage")[0]
    assert h2h.comparator_home("sage", comp, FULL) == "sage" and h2h.home("sage", FULL) == "sage"
    profile = full_profile()
    assert (profile["steps"], profile["prompts_per_step"]) == (FULL.steps, FULL.prompts_per_step)
    for r in grpo_k3:  # every committed seed is the comparator's run at notebook 07's budget: its cache key, exactly
        config = h2h.comparator_config("sage", comp, FULL, seed=r.seed)
        assert h2h.record_config([r]) == config
        # the record's wide evaluation: the profile's, or the first recompute's 100 problems until the second
        # recompute (results/recompute-58, README "Budget") replaces notebook 05's folder
        wide = EvalSpec.from_dict(r.config["extra_evals"][WIDE])
        assert wide in (profile["wide_spec"], profile["wide_spec"].replace(problems_per_family=100))
        assert hash_jsonable(run_key(config, profile["spec"], {WIDE: wide})) == r.config_hash
    row = h2h.compare("SAGE", sage, "grpo_k3", grpo_k3, comparator=comp)
    assert (row.label, row.role, row.method) == ("SAGE vs grpo_k3", "own", "SAGE")
    assert row.reads == ("SAGE's guide q alone (method 'sage' vs 'grpo_k3'; every other setting shared)")


def _synthetic(name, counts, seeds=(0, 1), **overrides):
    """Records of registered method ``name`` (its config at BUDGET) with per-problem correct counts of 4 samples
    on one family of len(counts) problems, the same on every seed."""
    config = method_config(name, **{**BUDGET.overrides(name), **overrides})
    uids = [f"p{i}" for i in range(len(counts))]
    return [SimpleNamespace(config={"train": config.replace(seed=s).to_dict()}, seed=s, run_id=f"{name}-s{s}",
                            final={"families": {"f": {"correct_counts": list(counts), "uids": uids}}})
            for s in seeds]


def _sage_map(sage_counts):
    from rlvr_lib.study.arms import Paired

    base_levels = np.array([0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    arms = {"GRPO": _synthetic("grpo", [0, 0, 0, 0, 2, 2, 2, 2]),
            "grpo_k3": _synthetic("grpo_k3", [2, 2, 2, 2, 2, 2, 2, 2]),  # the k3 estimator alone: +0.5 on the first 4
            "SAGE": _synthetic("sage", sage_counts)}
    comp = h2h.own_comparators("sage", "sage")[0]
    rows = [h2h.compare("SAGE", arms["SAGE"], "GRPO", arms["GRPO"], method="SAGE"),
            h2h.compare("SAGE", arms["SAGE"], "grpo_k3", arms["grpo_k3"], comparator=comp),
            h2h.compare("grpo_k3", arms["grpo_k3"], "GRPO", arms["GRPO"])]
    paired = Paired(["f"], 4)
    gains = h2h.comparison_map(base_levels, {n: paired.scores(r) for n, r in arms.items()}, rows, edges=[0.0])
    beside = {"rare gap": {c.label: paired.versus(arms[c.arm], arms[c.versus]) for c in rows}}
    return rows, h2h.find_map(h2h.map_summary(gains, beside=beside, comparisons=rows))


def test_an_effect_equal_under_the_own_comparator_is_not_attributed_to_the_method():
    rows, data = _sage_map([2, 2, 2, 2, 2, 2, 2, 2])  # SAGE = grpo_k3: its gain over GRPO is the estimator's
    assert rows[0].reads == "the method with every setting it changes (method 'sage' vs 'grpo'; kl_estimator 'k3' " \
                            "vs 'reverse')"
    assert [b["reading"] for b in data["runs"]["SAGE vs GRPO"]] == [h2h.HELPS, h2h.NO_DIFFERENCE]
    assert [b["reading"] for b in data["runs"]["SAGE vs grpo_k3"]] == [h2h.NO_DIFFERENCE] * 2
    said = h2h.attribution(data, "SAGE vs GRPO")
    assert said == ["pass@1 in bucket <= 0 above 0 against GRPO: not attributed to SAGE: against grpo_k3, its own "
                    "comparator, no difference shown (+0.000 [0.000, 0.000]); what the arm's settings change from "
                    "GRPO's shows it",
                    "rare gap above 0 against GRPO: not attributed to SAGE: against grpo_k3, its own comparator, no "
                    "difference shown (+0.000 [0.000, 0.000]); what the arm's settings change from GRPO's shows "
                    "it"]
    guide = dict(zip(h2h.map_rows(data), h2h.guide(data)))
    # every statement names its comparator and the difference it reads
    assert guide["SAGE vs GRPO"].startswith(
        "- **SAGE vs GRPO**: against GRPO (notebook 02's), the difference read: the method with every setting it "
        "changes (method 'sage' vs 'grpo'; kl_estimator 'k3' vs 'reverse'). Use it over GRPO where the base "
        "policy's per-problem pass@1 is <= 0 (+0.500 [0.500, 0.500])")
    assert "Attribution: pass@1 in bucket <= 0 above 0 against GRPO: not attributed to SAGE" in guide["SAGE vs GRPO"]
    assert "attributed to SAGE's mechanism" not in guide["SAGE vs GRPO"]
    assert guide["SAGE vs grpo_k3"].startswith(
        "- **SAGE vs grpo_k3**: against its paper's own comparator, the difference read: SAGE's guide q alone "
        "(method 'sage' vs 'grpo_k3'; every other setting shared). No bucket of the base policy's per-problem pass@1 "
        "where its pass@1 differs from grpo_k3's")
    assert "Attribution" not in guide["grpo_k3 vs GRPO"]  # no own comparator of its own
    summary = h2h.guide_summary(data)
    assert summary.startswith("In short: SAGE vs GRPO and grpo_k3 vs GRPO gain over its comparator's pass@1 in some "
                              "bucket.")
    assert summary.endswith("Not attributed to the method (shown against GRPO, not against the method's own "
                            "comparator, which shares every setting but its mechanism): SAGE vs GRPO (pass@1 in "
                            "bucket <= 0 above 0 against GRPO); SAGE vs GRPO (rare gap above 0 against GRPO).")


def test_an_effect_shown_under_the_own_comparator_too_is_attributed_to_the_method():
    rows, data = _sage_map([4, 4, 4, 4, 2, 2, 2, 2])  # SAGE gains a further 0.5 over grpo_k3 on the first four
    said = h2h.attribution(data, "SAGE vs GRPO")
    assert said[0] == ("pass@1 in bucket <= 0 above 0 against GRPO: attributed to SAGE's mechanism (also above 0 "
                       "against grpo_k3 +0.500 [0.500, 0.500])")
    assert h2h.guide_summary(data).endswith("own comparator, which shares every setting but its mechanism): none.")
    # a map without comparisons reads as before: every run against GRPO, no attribution
    plain = {k: v for k, v in data.items() if k != "comparisons"}
    assert h2h.attribution(plain, "SAGE vs GRPO") == [] and "the difference read" not in "".join(h2h.guide(plain))
    with pytest.raises(ValueError, match=r"^runs without a comparison=\['SAGE vs GRPO'\] is invalid"):
        gains = h2h.comparison_map(np.zeros(8), {"SAGE": np.zeros((2, 8)), "GRPO": np.zeros((2, 8))}, rows[:1])
        h2h.map_summary(gains, comparisons=rows[1:2])


def test_a_comparator_config_that_differs_beyond_its_mechanism_is_refused_on_records():
    comp = h2h.own_comparators("sage", "sage")[0]
    off = _synthetic("grpo_k3", [1] * 8, lr=5e-5)  # another lr: not the arm with the guide undone
    with pytest.raises(ValueError, match=r"comparator 'grpo_k3': fields that differ from the arm=\{'lr': .*, 'method'"):
        h2h.compare("SAGE", _synthetic("sage", [1] * 8), "grpo_k3", off, comparator=comp)
    mixed = _synthetic("sage", [1] * 8)[:1] + _synthetic("sage", [1] * 8, seeds=(1,), top_p=0.9)
    with pytest.raises(ValueError, match=r"^record sage-s1: config=\{'top_p': \(1.0, 0.9\)\} is invalid"):
        h2h.record_config(mixed)


def test_every_method_has_a_row_against_its_own_comparator():
    reg = registry("nb07_head_to_head")
    ids = {r.id for r in (*reg.claims, *reg.measurements)}
    for m in h2h.METHOD_ARMS:
        assert {f"{m}-beats-grpo", f"{m}-beats-own", f"{m}-rare-wide-own"} <= ids
    assert {"threepo-beats-no-noise", "threepo-rare-wide-no-noise"} <= ids


def test_readmes_guide_reads_the_comparisons_of_a_map(tmp_path):
    from rlvr_lib.study import report

    rows, data = _sage_map([2, 2, 2, 2, 2, 2, 2, 2])
    nudge = h2h.Comparison("NudgeRL", "GRPO", "grpo", "the method with every setting it changes", "NudgeRL")
    beside = {"rare gap": {**{run: data["beside"]["rare gap"][run] for run in data["beside"]["rare gap"]},
                           nudge.label: {"mean": 0.0, "ci_low": -0.1, "ci_high": 0.1}}}
    gains = h2h.comparison_map(np.zeros(8), {"SAGE": np.zeros((2, 8)), "GRPO": np.zeros((2, 8)),
                                             "grpo_k3": np.zeros((2, 8))}, rows)
    text = h2h.map_summary(gains, beside=beside, comparisons=[*rows, nudge])
    lines = report._guide_section(text, "head_to_head_full", tmp_path)
    head = next(line for line in lines if line.startswith("**Which method for which situation**"))
    assert "gain over the comparator its row names (GRPO, notebook 02's" in head and "NudgeRL vs GRPO" in head
    bullets = [line for line in lines if line.startswith("- **")]
    assert bullets[0].startswith("- **SAGE vs GRPO** (retention regime): against GRPO (notebook 02's), the "
                                 "difference read:")
    # the discovery premise is named for the arm of a comparison, NudgeRL's
    assert bullets[-1].startswith("- **NudgeRL vs GRPO** (retention regime; the discovery premise its exploration "
                                  "needs: not measured): against GRPO")


# ------------------------------------------------------------------ each pass@1 claim under its source paper's protocol
def _plan(threepo="b3po", profile="full"):
    from rlvr_lib.study.profiles import full_profile

    spec = full_profile()["spec"] if profile == "full" else EvalSpec(problems_per_family=8, samples=8,
                                                                      diversity_problems=8, diversity_samples=8)
    names = {"nudgerl": "nudgerl", "sage": "sage", "threepo": threepo, "vigor": "vigor"}
    return h2h.protocol_plan(names, spec, profile), spec


@pytest.mark.parametrize("threepo,profile", [("b3po", "full"), ("c3po", "full"), ("m3po", "quick")])
def test_every_pass1_claim_reads_its_papers_protocol_and_its_arms_carry_that_evaluation(threepo, profile):
    from rlvr_lib.study import protocols

    plan, spec = _plan(threepo, profile)
    reg = registry("nb07_head_to_head")
    # every claim is a pass@1 row read under a protocol, or the one pass@256 row on the wide evaluation
    assert set(plan.rows) == {c.id for c in reg.claims} - {"nudgerl-rare-wide"}
    sources = {c.id: c.source for c in reg.claims}
    own = {"nudgerl": "grpo-nudgerl-settings", "sage": "grpo_k3", "threepo": "grpo-3po-settings",
           "vigor": "grpo-vigor-settings"}
    names = {"nudgerl": "nudgerl", "sage": "sage", "threepo": threepo, "vigor": "vigor"}
    for claim, (arm, versus, name) in plan.rows.items():
        key, against = claim.split("-beats-")
        assert (arm, versus) == (names[key], "grpo" if against == "grpo" else own[key])
        protocol = protocols.claim_protocol("nb07_head_to_head", claim)
        assert name == protocol.name == protocols.PAPER_PROTOCOL[sources[claim]]  # the source paper's
        want = protocols.protocol_spec(protocol, spec, profile)
        for label in (arm, versus):
            carried = plan.extra_specs(label)
            if want == spec:  # SAGE's: the main evaluation measures it, no extra evaluation
                assert protocols.protocol_label(protocol) not in carried and protocol.name == "sage"
            else:
                assert carried[protocols.protocol_label(protocol)] == want
    # the specs themselves: the papers' sampling, samples capped by the scaling rule
    cap = protocols.SAMPLE_CAP[profile]
    got = {label: (s.temperature, s.samples, s.greedy) for label, s in plan.extra_specs("grpo").items()}
    assert got == {"protocol-nudgerl": (0.7, min(128, cap), False), "protocol-3po": (0.6, min(8, cap), False),
                   "protocol-vigor": (1.0, 1, True)}
    assert plan.extra_specs("sage") == plan.extra_specs("grpo_k3") == {}
    assert set(plan.extra_specs(threepo)) == set(plan.extra_specs("grpo-3po-settings")) == {"protocol-3po"}
    assert set(plan.extra_specs("nudgerl")) == set(plan.extra_specs("grpo-nudgerl-settings")) == {"protocol-nudgerl"}
    assert set(plan.extra_specs("vigor")) == set(plan.extra_specs("grpo-vigor-settings")) == {"protocol-vigor"}
    assert plan.extra_specs("dapo") == {} and plan.extra_specs(f"sage+{threepo}") == {}  # no pass@1 claim reads them
    assert set(plan.base_evaluations()) == {"nudgerl", "3po", "vigor"}


def test_an_arm_a_protocol_row_reads_is_trained_here_and_the_others_stay_read_from_their_notebook():
    plan, _ = _plan()
    assert h2h.home("grpo", FULL) == "baselines"  # without protocols: notebook 02's record
    assert h2h.home("grpo", FULL, plan.extra_specs("grpo")) == "head_to_head"  # with them: its own copy, here
    assert h2h.home("sage", FULL, plan.extra_specs("sage")) == "sage"
    assert h2h.home("grpo_forward_kl", FULL, plan.extra_specs("grpo_forward_kl")) == "baselines"
    comp = h2h.paper_comparator("sage", "sage")
    assert comp.label == "grpo_k3" and h2h.comparator_home("sage", comp, FULL, plan.extra_specs("grpo_k3")) == "sage"
    assert h2h.comparator_home("sage", comp, FULL, {"x": EvalSpec()}) == "head_to_head"
    assert h2h.paper_comparator("threepo", "c3po").label == "grpo-3po-settings"


def test_the_protocol_evaluations_cost_is_counted():
    plan, _ = _plan()
    # full profile: 7 families x 200 problems; GRPO, the method and its paper's comparator x 5 seeds, the base x 3
    # (greedy: one seed)
    assert plan.cost(5, [0, 1, 2]) == {
        "3po": {"evaluations": 18, "completions": 18 * 11200, "per_evaluation": 11200, "main": 44800},
        "nudgerl": {"evaluations": 18, "completions": 18 * 44800, "per_evaluation": 44800, "main": 44800},
        "vigor": {"evaluations": 16, "completions": 16 * 1400, "per_evaluation": 1400, "main": 44800}}


def _protocol_records(name, counts_main, extra, seeds=(0, 1)):
    """Records with a main evaluation of 8 samples and the extra evaluations ``{label: (spec, counts)}``."""
    from rlvr_lib.study.profiles import full_profile

    main = full_profile()["spec"].replace(samples=8)
    fam = lambda counts: {"families": {"easy_mix": {"correct_counts": list(counts),
                                                    "uids": [f"p{i}" for i in range(len(counts))]}}}
    specs = {k: v.to_dict() for k, (v, _) in extra.items()}
    return [SimpleNamespace(name=name, run_id=f"{name}-s{s}", seed=s, history=[],
                            config={"eval": main.to_dict(), "extra_evals": specs},
                            final=fam(counts_main), extra={"evals": {k: fam(c) for k, (_, c) in extra.items()}})
            for s in seeds]


def test_a_pass1_claim_reads_its_protocols_evaluation_not_the_main_one():
    from rlvr_lib.study.profiles import full_profile

    base_spec = full_profile()["spec"].replace(samples=8)
    plan = h2h.protocol_plan({"nudgerl": "nudgerl", "sage": "sage", "threepo": "b3po", "vigor": "vigor"}, base_spec,
                             "full")
    grpo_specs, vigor_spec = plan.extra_specs("grpo"), plan.extra_specs("vigor")["protocol-vigor"]
    # main evaluations equal (4 of 8 right on each problem); under VIGOR's greedy protocol VIGOR is right on every
    # problem and GRPO on half of them
    grpo = _protocol_records("grpo", [4, 4], {label: (s, [1, 0] if s.greedy else [4, 4])
                                              for label, s in grpo_specs.items()})
    vigor = _protocol_records("vigor", [4, 4], {"protocol-vigor": (vigor_spec, [1, 1])})
    ci = plan.versus("vigor-beats-grpo", {"grpo": grpo, "vigor": vigor}, ["easy_mix"])
    assert ci["mean"] == pytest.approx(0.5)
    # an arm without the protocol's evaluation is refused, naming it
    with pytest.raises(ValueError, match=r"protocol-vigor"):
        plan.versus("vigor-beats-grpo", {"grpo": grpo, "vigor": _protocol_records("vigor", [4, 4], {})}, ["easy_mix"])
    with pytest.raises(ValueError, match=r"^claim='nudgerl-rare-wide' is invalid: must be one of the pass@1 rows"):
        plan.evaluation("nudgerl-rare-wide")
    with pytest.raises(ValueError, match=r"^method_names=.* is invalid: must be \{method key: registered name\}"):
        h2h.protocol_plan({"nudgerl": "nudgerl"}, base_spec, "full")


def test_notebook_07_builds_its_arms_evaluations_from_the_plan():
    import nbformat
    from pathlib import Path

    code = "\n".join(c.source for c in nbformat.read(Path(__file__).parents[1] / "notebooks/07_head_to_head.ipynb",
                                                     4).cells if c.cell_type == "code")
    for call in ('PLAN = h2h.protocol_plan(METHOD_NAMES, P["spec"], profile)', "protocols = PLAN.extra_specs(name)",
                 "h2h.home(name, BUDGET, protocols)", "protocols = PLAN.extra_specs(comparator.label)",
                 "h2h.comparator_home(name, comparator, BUDGET, protocols)", "extra_specs={**WIDE_EVAL, **protocols}",
                 "PLAN.base_evaluations()", "PLAN.versus(claim, BY_LABEL, fams) for claim in PLAN.rows"):
        assert call in code, call
