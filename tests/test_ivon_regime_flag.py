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
