"""The full profile the method notebooks share (issue 31, item 2): its rules, checked against what they name."""

import json
from pathlib import Path

import pytest

from rlvr_lib.study.dynamics import full_profile_steps
from rlvr_lib.study.profiles import WIDE_FAMILIES, full_profile, wide_spec
from rlvr_lib.tasks.arithmetic import EVAL_FAMILIES, RARE_FAMILIES

CALIBRATION = Path(__file__).resolve().parent.parent / "results" / "testbed" / "calibration.json"


def test_the_wide_families_are_rare_mix_and_the_two_in_distribution_families_the_base_solves_least():
    families = json.loads(CALIBRATION.read_text())["families"]
    by_pass1 = sorted(EVAL_FAMILIES, key=lambda f: families[f]["pass_at_1"])
    assert set(WIDE_FAMILIES) == {*by_pass1[:2], *RARE_FAMILIES}
    assert wide_spec().families == WIDE_FAMILIES and (wide_spec().problems_per_family, wide_spec().samples) == (50, 256)


def test_the_full_profile_trains_as_long_as_notebook_01_and_seeds_main_arms_more_than_ablations():
    p = full_profile(group_size=8)
    assert p["steps"] == full_profile_steps() and p["group_size"] == 8
    assert len(p["seeds"]) == 5 and p["ablation_seeds"] == p["seeds"][:3] and len(p["base_seeds"]) == 3
    assert (p["spec"].problems_per_family, p["spec"].samples) == (200, 32)


def test_a_notebook_cannot_override_a_shared_key():
    with pytest.raises(ValueError, match=r"\['seeds'\] are the shared profile's keys"):
        full_profile(seeds=[0])
