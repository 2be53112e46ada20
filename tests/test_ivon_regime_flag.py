"""The IVON regime flag (`rlvr_lib.study.probes.ivon_regime.ivon_regime_flag`): a synthetic over-clipped history,
the warm-up left out, a run without IVON, and what it says of the committed records."""

from types import SimpleNamespace

import pytest

from rlvr_lib.study.probes.ivon_regime import ivon_regime_flag
from rlvr_lib.study.runs import load_runs


def _record(shares, steps=None, warmup=0.0):
    steps = len(shares) if steps is None else steps
    return SimpleNamespace(run_id="r", history=[{"ivon_clipped_frac": v} for v in shares],
                           config={"train": {"steps": steps, "lr_warmup_ratio": warmup}})


def test_a_run_over_the_bound_on_more_than_five_percent_of_its_steps_is_flagged():
    flag = ivon_regime_flag(_record([0.1] * 94 + [0.3] * 6))
    assert (flag["steps"], flag["over"], flag["flagged"]) == (100, 6, True) and flag["max"] == 0.3
    assert not ivon_regime_flag(_record([0.1] * 95 + [0.3] * 5))["flagged"]  # 5%: at the tolerance
    assert not ivon_regime_flag(_record([0.2] * 100))["flagged"]  # 20% itself is inside the regime


def test_the_warm_up_steps_are_left_out():
    shares = [0.9] * 10 + [0.1] * 90  # the first tenth of the steps over the bound, then inside
    assert ivon_regime_flag(_record(shares))["flagged"]
    flag = ivon_regime_flag(_record(shares, warmup=0.1))
    assert (flag["steps"], flag["over"], flag["flagged"]) == (90, 0, False)
    with pytest.raises(ValueError, match="warm-up"):
        ivon_regime_flag(_record([0.1] * 5, steps=100, warmup=0.1))


def test_a_run_without_ivon_has_no_flag():
    assert ivon_regime_flag(SimpleNamespace(history=[{"loss": 1.0}], config={"train": {"steps": 1}})) is None


def test_the_committed_records_outside_the_regime_are_the_compositions_issue_56_names():
    """Notebooks 04 and 08 ran every IVON arm inside the regime; notebook 07's b3po+vigor and sage+b3po left it on
    every seed (the departure issue 56 item 2 fixes)."""
    flagged = {}
    for experiment in ("threepo_full", "head_to_head_full", "discovery_full"):
        for r in load_runs(experiment):
            flag = ivon_regime_flag(r)
            if flag is not None:
                flagged.setdefault((experiment, r.name), []).append(flag["flagged"])
    assert not any(any(v) for (exp, _), v in flagged.items() if exp != "head_to_head_full")
    assert all(flagged[("head_to_head_full", name)] == [True] * 3 for name in ("b3po+vigor", "sage+b3po"))


# ----------------------------------------------------------------------------- issue 56 item 2: compositions
def test_each_composite_regime_is_its_committed_calibration_at_the_head_to_heads_settings():
    """COMPOSITE_REGIME holds the picks of results/testbed/threepo_calibration_<composite>.json, each measured on
    the composite notebook 07 trains (its pair settings, the same rule, seeds and steps as the 3PO presets' own
    calibration) against its AdamW counterpart at those settings; each stayed within the bound it was picked for."""
    import json
    from pathlib import Path

    from rlvr_lib.methods.threepo import MAX_CLIPPED_SHARE
    from rlvr_lib.study.head_to_head import pair_settings
    from rlvr_lib.study.probes.ivon_regime import COMPOSITE_REGIME, ivon_component

    root = Path(__file__).resolve().parents[1] / "results" / "testbed"
    presets = json.loads((root / "threepo_calibration.json").read_text())
    assert sorted(COMPOSITE_REGIME) == sorted(p.name[len("threepo_calibration_"):-len(".json")]
                                              for p in root.glob("threepo_calibration_*+*.json"))
    for name, picks in COMPOSITE_REGIME.items():
        report = json.loads((root / f"threepo_calibration_{name}.json").read_text())
        a, b = name.split("+")
        other = a if ivon_component(name) == b else b
        assert (report["method"], report["adamw_method"]) == (name, other)
        assert report["adamw_fields"] == pair_settings(a, b)
        for key in ("run_steps", "probe_steps", "skip", "max_clipped", "config_fields", "policy_sha"):
            assert report[key] == presets[key], (name, key)
        assert {"clip_radius": report["clip_radius"], "lr": report["lr"]} == picks
        last = report["rounds"][-1]["pick"]  # the rule's own prediction at its pick
        assert last["clip_radius"] == picks["clip_radius"] and report["max_clipped"] == MAX_CLIPPED_SHARE


def test_a_head_to_head_composite_with_ivon_trains_in_its_own_regime():
    from rlvr_lib.methods.presets import method_config
    from rlvr_lib.study.head_to_head import pair_name
    from rlvr_lib.study.probes.ivon_regime import COMPOSITE_REGIME, composite_regime

    for name, picks in COMPOSITE_REGIME.items():
        a, b = name.split("+")
        options = method_config(pair_name(a, b)).method_options
        assert options == {"b3po": picks}
    with pytest.raises(ValueError, match=r"composite 'm3po\+vigor' has no IVON regime calibration: .* "
                                         r"`python -m rlvr_lib.study calibrate-threepo --method m3po\+vigor`"):
        composite_regime("m3po+vigor")


def test_an_ivon_runs_record_stores_its_regime_check(tmp_path):
    """train_and_evaluate stores ivon_regime_of(history) in the record of a run that trained with IVON, and
    nothing in one that did not."""
    from rlvr_lib.eval.policy_eval import EvalSpec
    from rlvr_lib.study.pipeline import IVON_REGIME, train_and_evaluate
    from rlvr_lib.study.probes.ivon_regime import ivon_regime_flag
    from rlvr_lib.trainer_config import TrainerConfig

    small = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=16, train_family="easy_mix",
                 train_pool_size=8)
    spec = EvalSpec(families=("easy_mix",), problems_per_family=2, samples=2, group_size=2, diversity_problems=2,
                    diversity_samples=2, max_new_tokens=16)
    ivon = train_and_evaluate("regime", "b3po", TrainerConfig(method="b3po", **small), spec, root=tmp_path)
    assert ivon.extra[IVON_REGIME] == ivon_regime_flag(ivon) and ivon.extra[IVON_REGIME]["steps"] == 2
    plain = train_and_evaluate("regime", "grpo", TrainerConfig(method="grpo", **small), spec, root=tmp_path)
    assert IVON_REGIME not in plain.extra
