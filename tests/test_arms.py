"""The notebooks' shared arms (`rlvr_lib.study.arms`): the configs they train and the paired comparisons."""

import numpy as np
import pytest

from rlvr_lib.eval import EvalSpec
from rlvr_lib.study.testbed import calibrated_config
from rlvr_lib.study.arms import Arms, Paired
from rlvr_lib.study.stats import paired_difference_ci, per_problem_scores

SPEC = EvalSpec(families=("easy_mix",), problems_per_family=3, samples=8, max_new_tokens=16, diversity_problems=3,
                diversity_samples=8)


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    return Arms("nb", tmp_path_factory.mktemp("results"), SPEC, steps=1, prompts_per_step=2, group_size=2)


def test_an_arm_is_the_method_preset_at_the_notebook_settings_one_record_per_seed(arms):
    runs = arms.train("grpo", [0, 1], label="grpo-g4", group_size=4, lr=3e-4)
    assert [r.seed for r in runs] == [0, 1] and {r.name for r in runs} == {"grpo-g4"}
    expected = calibrated_config("grpo", steps=1, prompts_per_step=2, group_size=4, lr=3e-4, seed=1).to_dict()
    assert runs[1].config["train"] == expected
    assert all(p.parent.name == "nb" for p in (arms.root / "nb").glob("grpo-g4-*.json"))
    # Another notebook asking for the same arm reads the record, it does not retrain.
    again = Arms("other", arms.root, SPEC, steps=1, prompts_per_step=2, group_size=4).train(
        "grpo", [1], experiment="nb", label="grpo-g4", lr=3e-4)
    assert again[0].run_id == runs[1].run_id and again[0].history == runs[1].history
    base = arms.base([0], name="base-x", samples=16)
    assert base[0].name == "base-x" and base[0].config["eval"]["samples"] == 16


def test_paired_scores_and_versus_are_the_stats_functions(arms):
    a, b = arms.train("grpo", [0, 1], label="grpo-g4", group_size=4, lr=3e-4), arms.base([0, 1])
    paired = Paired(["easy_mix"], SPEC.samples)
    for k in (1, 8):
        np.testing.assert_array_equal(paired.scores(a, k), per_problem_scores(a, ["easy_mix"], samples=8, k=k)[0])
        assert paired.versus(a, b, k) == paired_difference_ci(paired.scores(a, k), paired.scores(b, k), bounds=(0, 1))
    with pytest.raises(ValueError, match=r"k=9 is invalid"):
        paired.scores(a, 9)  # more than the evaluation's samples
    with pytest.raises(ValueError, match=r"samples=0 is invalid"):
        paired.scores(a, 1, samples=0)
