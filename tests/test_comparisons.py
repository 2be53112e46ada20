"""Every paired comparison the claims modules make shares every `TrainerConfig` setting but the one it names
(issue 56, item 4; `rlvr_lib.study.comparisons`): both arms' full configs are resolved through
`rlvr_lib.study.testbed.calibrated_config` and compared field by field."""

import importlib
from collections import defaultdict

import pytest

from rlvr_lib.study.testbed import calibrated_config as method_config
from rlvr_lib.study.testbed import TUNED_LR
from rlvr_lib.study.comparisons import CLAIMS_MODULES, Arm, Pair, all_comparisons, config_differences

PAIRS = all_comparisons()
SHARED = dict(steps=7, prompts_per_step=4, seed=3)  # a notebook's shared fields: they never make a difference


def _module(name):
    return importlib.import_module(f"rlvr_lib.study.claims.{name}")


def _row_ids(module) -> set:
    reg = module.REGISTRY
    return {row.id for rows in (reg.claims, reg.measurements, reg.checks) for row in rows}


@pytest.mark.parametrize("key", sorted(PAIRS), ids=lambda k: f"{k[0]}:{k[1]}")
def test_each_pair_differs_in_exactly_the_fields_it_names(key):
    pair = PAIRS[key]
    pair.check()
    pair.check(**SHARED)
    assert set(pair.differences(**SHARED)) == set(pair.differs)


@pytest.mark.parametrize("key", sorted(k for k, p in PAIRS.items() if p.match_lr), ids=lambda k: f"{k[0]}:{k[1]}")
def test_one_difference_pairs_train_both_arms_at_the_comparators_lr(key):
    """The rule (comparisons module docstring): the comparator's pick (or the lr its declaration sets) for both."""
    pair = PAIRS[key]
    method, comparator = pair.configs()
    assert method.lr == comparator.lr == method_config(pair.comparator.name, **pair.comparator.overrides).lr
    if "lr" not in pair.comparator.overrides:
        assert comparator.lr == TUNED_LR.get(pair.comparator.name, method_config(pair.comparator.name).lr)


@pytest.mark.parametrize("module", CLAIMS_MODULES)
def test_every_pair_reads_rows_its_module_declares_and_every_two_arm_claim_has_a_pair(module):
    mod = _module(module)
    ids = _row_ids(mod)
    declared = getattr(mod, "COMPARISONS", {})
    read = {rid for pair in declared.values() for rid in pair.claims}
    assert read <= ids, sorted(read - ids)
    # a claim against GRPO or a baseline compares two trained arms: its pair must be declared
    two_arm = {c.id for c in mod.REGISTRY.claims if c.against in ("grpo", "baseline")}
    assert two_arm <= read, sorted(two_arm - read)


def test_one_run_label_is_one_config_in_each_experiment():
    """A table reads runs by label: two declarations that train different configs under one label would mix."""
    seen = defaultdict(set)
    for (module, _), pair in PAIRS.items():
        for arm in pair.arms():
            experiment = arm.experiment or _module(module).REGISTRY.experiment
            seen[experiment, arm.run_label].add(arm.config(**SHARED).config_hash())
    mixed = {key: hashes for key, hashes in seen.items() if len(hashes) > 1}
    assert not mixed, mixed


def test_a_pair_that_differs_in_lr_fails():
    # the pairing before issue 56: sage_token at its own pick (3.3e-5) beside grpo_k3 at 1e-4
    unmatched = Pair(Arm("sage_token"), Arm("grpo_k3"), ("method",), "the guide", ("x",), match_lr=False)
    with pytest.raises(ValueError, match=r"pair 'sage_token' vs 'grpo_k3': the arms differ in lr "
                                         r"\(3\.33333e-05 vs 0\.0001\) though the pair names only \['method'\]"):
        unmatched.check()
    # an lr set on the method arm wins over the rule, and the check catches it
    explicit = Pair(Arm("sage", overrides={"lr": 3e-4}), Arm("grpo_k3"), ("method",), "the guide", ("x",))
    with pytest.raises(ValueError, match=r"differ in lr \(0\.0003 vs 0\.0001\)"):
        explicit.check()
    # with the rule the same pairing passes: the method arm takes the comparator's pick, under its own label
    matched = Pair(Arm("sage_token"), Arm("grpo_k3"), ("method",), "the guide", ("x",))
    matched.check()
    assert matched.arms()[0].run_label == "sage_token@grpo_k3-lr"
    assert matched.configs()[0].lr == TUNED_LR["grpo_k3"]


def test_other_unnamed_settings_fail_too_and_a_named_field_must_differ():
    schedule = Pair(Arm("vigor"), Arm("intuitor", overrides={"lr_schedule": "constant"}), ("method", "advantage"),
                    "the reward", ("x",))
    with pytest.raises(ValueError, match=r"differ in lr_schedule \('cosine' vs 'constant'\)"):
        schedule.check()
    top_p = Pair(Arm("nudgerl"), Arm("grpo"), ("method", "advantage"), "the hints", ("x",))
    with pytest.raises(ValueError, match=r"differ in top_p \(0\.95 vs 1\.0\)"):
        top_p.check()
    named = Pair(Arm("grpo_k3"), Arm("grpo_k3", label="again"), ("kl_coef",), "nothing", ("x",))
    with pytest.raises(ValueError, match=r"do not differ in kl_coef, which the pair names"):
        named.check()


def test_differences_by_hand():
    a, b = method_config("grpo"), method_config("grpo_no_kl", method_options={})
    assert config_differences(a, b) == {"method": ("grpo", "grpo_no_kl"), "kl_coef": (0.2, 0.0)}  # no estimator
    c = method_config("grpo_k3")
    assert config_differences(a, c) == {"method": ("grpo", "grpo_k3"), "kl_estimator": ("reverse", "k3")}
    assert config_differences(a, a.replace(seed=9)) == {}  # every arm runs each seed


def test_arms_refuse_bad_declarations():
    with pytest.raises(ValueError, match=r"Arm 'grpo': overrides=\['kl_coeff'\] is invalid: must be TrainerConfig"):
        Arm("grpo", overrides={"kl_coeff": 0.1})
    with pytest.raises(ValueError, match=r"no 'method' \(it is the arm's name\) and no 'seed'"):
        Arm("grpo", overrides={"seed": 1})
    with pytest.raises(ValueError, match=r"Pair.differs=\('lr',\) is invalid: must be no 'lr' while match_lr"):
        Pair(Arm("sage"), Arm("grpo_k3"), ("lr",), "the lr", ("x",))
    with pytest.raises(ValueError, match=r"Pair.differs=\['temp'\] is invalid: must be TrainerConfig fields"):
        Pair(Arm("sage"), Arm("grpo_k3"), ("temp",), "?", ("x",))


def test_arm_train_passes_its_declaration_to_the_notebooks_arms():
    calls = []

    class FakeArms:
        def train(self, name, seeds, experiment=None, label=None, **overrides):
            calls.append((name, list(seeds), experiment, label, overrides))
            return ["record"]

    arm = Arm("pope", experiment="baselines", overrides={"top_p": 0.9})
    assert arm.train(FakeArms(), [0, 1], profile="full", extra_specs=None) == ["record"]
    assert calls == [("pope", [0, 1], "baselines_full", "pope", {"top_p": 0.9, "extra_specs": None})]
    with pytest.raises(ValueError, match=r"arm 'pope': profile=None is invalid"):
        arm.train(FakeArms(), [0])
    with pytest.raises(ValueError, match=r"arm 'pope': overrides given again=\['top_p'\]"):
        arm.train(FakeArms(), [0], profile="quick", top_p=1.0)
