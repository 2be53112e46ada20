"""Tests for rlvr_lib.eval.diagnostics (3PO Fig. 3, NudgeRL), hand-worked numbers."""

from __future__ import annotations

import math
from enum import Enum

import numpy as np
import pytest
import torch

from rlvr_lib.eval.diagnostics import (
    RescuedLostGroups,
    dead_group_mask,
    length_stats,
    outcome_rates,
    rescued_lost_groups,
    zero_advantage_fraction,
)

# --------------------------------------------------------------------------- zero-advantage groups


def test_zero_advantage_fraction_flat_with_group_index():
    # groups: a=[1,1,1] (dead, all correct), b=[0,1,0] (alive), c=[0,0] (dead), d=[0.5] (dead, single)
    rewards = [1, 0, 1, 0, 1, 1, 0, 0, 0.5]
    group = ["a", "b", "a", "b", "b", "a", "c", "c", "d"]
    assert zero_advantage_fraction(rewards, group) == pytest.approx(3 / 4)


def test_zero_advantage_fraction_2d_and_torch():
    r = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [0.2, 0.2, 0.2, 0.3]])
    assert zero_advantage_fraction(r) == pytest.approx(2 / 4)
    assert zero_advantage_fraction(torch.tensor(r)) == pytest.approx(2 / 4)
    # atol absorbs the 0.1 spread of the last group
    assert zero_advantage_fraction(r, atol=0.1 + 1e-12) == pytest.approx(3 / 4)
    flat = torch.tensor(r.ravel(), dtype=torch.float32)
    idx = torch.arange(4).repeat_interleave(4)
    assert zero_advantage_fraction(flat, idx) == pytest.approx(2 / 4)


def test_zero_advantage_fraction_rejects_bad_input():
    with pytest.raises(ValueError, match="rewards has shape"):
        zero_advantage_fraction([0, 1, 1])  # 1-D needs group_index
    with pytest.raises(ValueError, match="group_index has shape"):
        zero_advantage_fraction([0, 1, 1], [0, 0])
    with pytest.raises(ValueError, match="NaN"):
        zero_advantage_fraction([[0, float("nan")]])
    with pytest.raises(ValueError, match="empty"):
        zero_advantage_fraction(np.zeros((0, 4)))
    with pytest.raises(ValueError, match=r"^atol=-1 is invalid: must be a number in \[0, inf\)$"):
        zero_advantage_fraction([[0, 1]], atol=-1)
    with pytest.raises(ValueError, match="dtype"):
        zero_advantage_fraction([["a", "b"]])


# --------------------------------------------------------------------------- rescued / lost


BASE = {  # GRPO
    "p1": [0, 0, 0, 0],  # dead (unsolved)
    "p2": [1, 1, 1, 1],  # dead (all correct)
    "p3": [0, 1, 0, 0],  # alive
    "p4": [0, 0, 0, 0],  # dead (unsolved)
    "p5": [1, 0, 1, 1],  # alive
}
METHOD = {
    "p1": [0, 1, 0, 0],  # rescued (both criteria)
    "p2": [1, 0, 1, 1],  # rescued under zero_advantage only (alive under all_zero in both)
    "p3": [0, 0, 0, 0],  # lost (both criteria)
    "p4": [0, 0, 0, 0, 0, 0, 0, 0],  # still dead (other group size is fine)
    "p5": [1, 1, 1, 1],  # lost under zero_advantage only (solved in both)
}


def test_rescued_lost_zero_advantage_hand_worked():
    s = rescued_lost_groups(BASE, METHOD)
    assert isinstance(s, RescuedLostGroups)
    assert s.criterion == "zero_advantage"
    assert (s.n_groups, s.dead_base, s.dead_other) == (5, 3, 3)
    assert (s.rescued, s.lost, s.net) == (2, 2, 0)  # p1, p2 rescued; p3, p5 lost
    assert s.rescued_rate == pytest.approx(2 / 5)
    assert s.lost_rate == pytest.approx(2 / 5)
    assert s.rescued_of_dead == pytest.approx(2 / 3)
    assert s.lost_of_alive == pytest.approx(2 / 2)


def test_rescued_lost_all_zero_hand_worked():
    s = rescued_lost_groups(BASE, METHOD, criterion="all_zero")
    # dead = unsolved: base p1, p4; method p3, p4
    assert (s.dead_base, s.dead_other) == (2, 2)
    assert (s.rescued, s.lost, s.net) == (1, 1, 0)  # p1 rescued, p3 lost
    assert s.rescued_of_dead == pytest.approx(1 / 2)
    assert s.lost_of_alive == pytest.approx(1 / 3)
    d = s.to_dict()
    assert d["rescued"] == 1 and d["criterion"] == "all_zero"


def test_rescued_lost_is_antisymmetric_and_accepts_sequences():
    fwd = rescued_lost_groups(BASE, METHOD, criterion="all_zero")
    rev = rescued_lost_groups(METHOD, BASE, criterion="all_zero")
    assert (rev.rescued, rev.lost) == (fwd.lost, fwd.rescued)
    keys = sorted(BASE)
    seq = rescued_lost_groups([BASE[k] for k in keys], [torch.tensor(METHOD[k]) for k in keys])
    assert (seq.rescued, seq.lost) == (2, 2)


def test_rescued_lost_success_threshold_and_nan_rates():
    # rewards -1/+1: success iff r > 0.5
    s = rescued_lost_groups({"x": [-1, -1]}, {"x": [-1, 1]}, criterion="all_zero")
    assert (s.rescued, s.lost) == (1, 0)
    assert math.isnan(s.lost_of_alive)  # no alive baseline group
    # partial-credit rewards below the threshold are not successes
    s = rescued_lost_groups({"x": [0, 0]}, {"x": [0.2, 0.4]}, criterion="all_zero")
    assert s.rescued == 0
    s = rescued_lost_groups({"x": [0, 0]}, {"x": [0.2, 0.4]}, criterion="all_zero", success_threshold=0.3)
    assert s.rescued == 1
    s = rescued_lost_groups({"x": [0, 1]}, {"x": [1, 0]})
    assert s.dead_base == 0 and math.isnan(s.rescued_of_dead)


def test_rescued_lost_rejects_bad_input():
    with pytest.raises(ValueError, match="same prompts.*only in base: \\['p5'\\]"):
        rescued_lost_groups(BASE, {k: v for k, v in METHOD.items() if k != "p5"})
    with pytest.raises(ValueError, match="base_rewards_by_prompt is empty"):
        rescued_lost_groups({}, {})
    with pytest.raises(ValueError, match=r"^criterion='dead' is invalid: must be one of \['zero_advantage', 'all_zero'\]$"):
        rescued_lost_groups(BASE, METHOD, criterion="dead")
    with pytest.raises(ValueError, match=r"rewards_by_group\[0\] is empty"):
        rescued_lost_groups({"x": []}, {"x": [1]})
    with pytest.raises(ValueError, match="base_rewards_by_prompt is a int"):
        rescued_lost_groups(3, METHOD)


def test_dead_group_mask():
    groups = [[0, 0], [1, 1], [0, 1], [0.3, 0.3]]
    np.testing.assert_array_equal(dead_group_mask(groups), [True, True, False, True])
    np.testing.assert_array_equal(dead_group_mask(groups, criterion="all_zero"), [True, False, False, True])
    with pytest.raises(ValueError, match="rewards_by_group is empty"):
        dead_group_mask([])
    with pytest.raises(ValueError, match=r"^success_threshold=nan is invalid: must be a number in \(-inf, inf\)$"):
        dead_group_mask(groups, criterion="all_zero", success_threshold=float("nan"))


# --------------------------------------------------------------------------- outcomes and lengths


class _Status(Enum):
    CORRECT = "correct"
    WRONG = "wrong"


def test_outcome_rates_hand_worked():
    statuses = ["correct", "wrong", "wrong", "malformed", "wrong", "correct", "wrong", "wrong"]
    assert outcome_rates(statuses) == {"correct": 2 / 8, "wrong": 5 / 8, "malformed": 1 / 8, "timeout": 0.0}
    assert outcome_rates(np.array(["malformed", "malformed"])) == {"correct": 0.0, "wrong": 0.0, "malformed": 1.0,
                                                                  "timeout": 0.0}
    assert outcome_rates([_Status.CORRECT, _Status.WRONG, "wrong"]) == pytest.approx(
        {"correct": 1 / 3, "wrong": 2 / 3, "malformed": 0.0, "timeout": 0.0}
    )


def test_outcome_rates_count_grading_timeouts_as_their_own_class():
    from rlvr_lib.eval.diagnostics import STATUSES
    from rlvr_lib.tasks import STATUSES as VERIFIER_STATUSES

    assert STATUSES == VERIFIER_STATUSES
    assert outcome_rates(["timeout", "correct", "wrong", "timeout"]) == {
        "correct": 0.25, "wrong": 0.25, "malformed": 0.0, "timeout": 0.5}


def test_outcome_rates_rejects_bad_input():
    with pytest.raises(ValueError, match="statuses is empty"):
        outcome_rates([])
    with pytest.raises(ValueError, match=r"^statuses\[1\]='Correct' is invalid: must be one of \['correct', 'wrong', 'malformed', 'timeout'\]$"):
        outcome_rates(["correct", "Correct"])
    with pytest.raises(ValueError, match="statuses="):
        outcome_rates("correct")


def test_length_stats_hand_worked():
    # sorted: 10 20 30 40 100; p90 position 0.9*4 = 3.6 -> 40 + 0.6*(100-40) = 76
    s = length_stats([30, 10, 100, 20, 40])
    assert s == {"n": 5, "mean": 40.0, "median": 30.0, "p90": pytest.approx(76.0)}
    # even count: median is the mean of the two middle values
    s = length_stats(torch.tensor([4, 1, 3, 2]))
    assert s["median"] == 2.5 and s["mean"] == 2.5 and s["p90"] == pytest.approx(3.7)
    assert length_stats([7])["p90"] == 7.0


def test_length_stats_rejects_bad_input():
    with pytest.raises(ValueError, match="lengths is empty"):
        length_stats([])
    with pytest.raises(ValueError, match="lengths contains -3"):
        length_stats([5, -3])
    with pytest.raises(ValueError, match="lengths has shape"):
        length_stats([[1, 2]])
    with pytest.raises(ValueError, match="NaN or inf"):
        length_stats([1, float("inf")])


def test_plateau_step_finds_the_first_window_that_stops_falling():
    from rlvr_lib.eval.diagnostics import plateau_step

    # Window means 1.0, 0.8, 0.6, 0.55, 0.54: drops 0.2, 0.2, 0.05 (< 0.1 * 1.0) -> flat by the end of window 3.
    curve = np.repeat([1.0, 0.8, 0.6, 0.55, 0.54], 4)
    assert plateau_step(curve, window=4, rel_drop=0.1) == 16
    assert plateau_step(curve, window=4, rel_drop=0.25) == 8  # every drop counts as flat
    assert plateau_step(np.linspace(1, 0, 40), window=4, rel_drop=0.05) is None  # still falling: train longer
    with_gaps = list(curve)
    with_gaps[5] = None  # an unlogged step is skipped within its window
    assert plateau_step(with_gaps, window=4, rel_drop=0.1) == 16
    with pytest.raises(ValueError, match="at least two windows"):
        plateau_step([1.0, 0.5], window=2)
    with pytest.raises(ValueError, match="window=0 is invalid"):
        plateau_step(curve, window=0)
    with pytest.raises(ValueError, match="rel_drop"):
        plateau_step(curve, rel_drop=0.0)


def test_plateau_cli_writes_the_per_seed_measurement(tmp_path):
    import json

    from rlvr_lib.study.__main__ import main

    out = tmp_path / "plateau.json"
    code = main(["plateau", "--steps", "4", "--window", "2", "--seeds", "0", "--rel-drop", "10", "--out", str(out)])
    report = json.loads(out.read_text())
    assert code == 0 and report["plateau_step"] == 4  # rel_drop 10: the first comparison already counts as flat
    assert len(report["runs"]["0"]["entropy"]) == 4 and report["plateau_step_per_seed"] == [4]
