"""Tests for rlvr_lib.study.claims.tables: verdicts, the minimum-effect rule, claims and measurements tables,
instrument checks, the summaries README's scorecard reads."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from rlvr_lib.study.claims.tables import (CLAIMS_COLUMNS, EFFECT_FRACTION, MEASUREMENT_COLUMNS, TESTBED_LIMITS,
                                          claims_reading, claims_summary,
                                          claims_table, find_claims_counts, find_claims_headline, instrument_checks,
                                          measurements_summary, measurements_table, min_effect, render_markdown,
                                          verdict, verdict_counts)
from rlvr_lib.study.stats import aggregate_seeds, paired_difference_ci


def _ci(lo, hi, n=5, method="m"):
    return {"mean": (lo + hi) / 2, "ci_low": lo, "ci_high": hi, "n": n, "method": method}


def _row(rid="c", ours=None, **kw):
    row = dict(id=rid, claim=f"claim {rid}", source="SAGE", paper="T1", paper_effect="no number",
               ours=_ci(0.01, 0.03) if ours is None else ours, expect=">", against="grpo", regime="retention",
               premise="none")
    row.update(kw)
    return row


def test_verdict_one_sided_three_ways():
    assert verdict(_ci(0.01, 0.03), ">") == "reproduced"
    assert verdict(_ci(-0.03, -0.01), ">") == "contradicted"
    assert verdict(_ci(-0.01, 0.03), ">") == "unresolved"
    assert verdict(_ci(0.0, 0.03), ">") == "unresolved"  # touching the threshold is not clearing it
    assert verdict(_ci(0.51, 0.53), "<", than=0.54) == "reproduced"
    assert verdict(_ci(0.55, 0.6), "<", than=0.54) == "contradicted"
    assert verdict({"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1}, ">") == "unresolved"  # no interval


def test_equivalence_row_straddling_the_margin_is_unresolved_and_far_outside_contradicted():
    rows = [_row("inside", _ci(-0.004, 0.006), expect="within", margin=0.01),
            _row("straddles", _ci(0.002, 0.02), expect="within", margin=0.01),
            _row("far-below", _ci(-0.13, -0.09), expect="within", margin=0.01),
            _row("far-above", _ci(0.02, 0.05), expect="within", margin=0.01)]
    df = claims_table(rows)
    assert df["verdict"].tolist() == ["reproduced", "unresolved", "contradicted", "contradicted"]
    assert df.loc[0, "threshold"] == "within 0.000 +- 0.010"
    # the old one-sided half "B3PO <= .01 above GRPO" held at -.110; as one equivalence row it is contradicted
    assert verdict(_ci(-0.13, -0.09), "<", than=0.01) == "reproduced"


def test_one_sided_halves_of_a_two_sided_claim_are_refused():
    diff = _ci(-0.13, -0.09)
    with pytest.raises(ValueError, match=r"^claims_table row 1: expect='>' is invalid: row 0 \('above'\) tests the "
                                         r"same measurement with expect='<'.*must be one row with expect='within'"):
        claims_table([_row("above", diff, expect="<", than=0.01), _row("below", diff, expect=">", than=-0.01)])
    with pytest.raises(ValueError, match=r"^claims_table row 1: id='a' is invalid: must be unique in the table"):
        claims_table([_row("a"), _row("a", _ci(0.2, 0.3))])
    with pytest.raises(ValueError, match=r"^measurements_table row 1: expect='>' is invalid: row 0"):  # per-seed values
        measurements_table([{"id": "a", "measurement": "m", "ours": [0.1, 0.2, 0.3], "expect": "<", "than": 0.5},
                            {"id": "b", "measurement": "m", "ours": [0.1, 0.2, 0.3], "expect": ">", "than": 0.0}])
    # the same measurement on the same side twice (a weaker reading) is not a split claim
    assert len(claims_table([_row("a", diff, expect="<"), _row("b", diff, expect="<", than=0.01)])) == 2


def test_a_row_grpo_also_reproduces_is_not_specific():
    rows = [_row("ood-keeps", _ci(-0.004, 0.006), expect="within", margin=0.01, against="base",
                 reference=_ci(-0.002, 0.008)),  # GRPO keeps it too
            _row("beats-pope", _ci(0.01, 0.03), against="baseline", reference=_ci(0.02, 0.04)),
            _row("beats-base", _ci(0.01, 0.03), against="base", reference=_ci(-0.02, 0.01)),  # GRPO does not
            _row("grpo-own", _ci(0.01, 0.03), against="base", reference="the row is GRPO's own"),
            _row("fails", _ci(-0.03, -0.01), against="base", reference=_ci(0.02, 0.04))]
    df = claims_table(rows)
    assert df["verdict"].tolist() == ["not specific", "not specific", "reproduced", "reproduced", "contradicted"]
    assert df.loc[0, "reference"] == "GRPO 0.003 [-0.002, 0.008]: reproduced"
    assert df.loc[2, "reference"] == "GRPO -0.005 [-0.020, 0.010]: unresolved"
    assert df.loc[3, "reference"] == "the row is GRPO's own"
    assert verdict_counts(df) == {"reproduced": 2, "contradicted": 1, "unresolved": 0, "not specific": 2,
                                  "premise absent": 0}
    with pytest.raises(ValueError, match=r"^claims_table row 0: reference=None is invalid: must be the same test on "
                                         r"GRPO .* \(against='base'\)$"):
        claims_table([_row("x", against="base")])


def test_large_paper_effect_sets_the_minimum_effect_by_one_rule():
    # paper 59.14 -> 20.71 (-65%): a quarter of it at our level 0.4 is -0.0325
    assert min_effect(59.14, 20.71, 0.4) == pytest.approx(EFFECT_FRACTION * (20.71 - 59.14) / 59.14 * 0.4)
    assert min_effect(42.99, 44.04, 0.4) is None  # +2.4%: small, 0 stays the threshold
    rows = [_row("collapse", _ci(-0.03, -0.01), expect="<", paper_effect=("Math avg", 59.14, 20.71), level=0.4,
                 against="method"),
            _row("small", _ci(0.001, 0.003), paper_effect=("pass@1", 42.99, 44.04))]
    df = claims_table(rows)
    assert df["verdict"].tolist() == ["contradicted", "reproduced"]  # -0.02 is not a quarter of a collapse
    assert df.loc[0, "threshold"] == "< -0.065 (min effect)" and df.loc[1, "threshold"] == "> 0.000"
    assert df.loc[0, "paper_effect"] == "Math avg 59.14 -> 20.71 (-65%)"
    assert df.loc[0, "our_effect"] == "-5% of 0.400"
    with pytest.raises(ValueError, match=r"^claims_table row 0: level=None is invalid: must be our finite value"):
        claims_table([_row("x", paper_effect=("pass@1", 0.402, 0.489))])
    with pytest.raises(ValueError, match=r"^claims_table row 0: expect='<' is invalid: must be the side of the "
                                         r"paper's change 0.402 -> 0.489"):
        claims_table([_row("x", expect="<", paper_effect=("pass@1", 0.402, 0.489), level=0.3)])


def test_claims_table_columns_and_interval_methods():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, (1, 100))
    method = np.clip(base + 0.1 + rng.normal(0, 0.01, (3, 100)), 0, 1)
    gain = paired_difference_ci(method, base, bounds=(0, 1), n_resamples=2000)
    df = claims_table([_row("gain", gain, note="x"), _row("seeds", [0.0, 0.05, 0.9], bounds=(0, 1))])
    assert list(df.columns) == [*CLAIMS_COLUMNS, "note"]
    assert df.loc[0, "interval"].startswith("paired bootstrap over problems") and df.loc[0, "verdict"] == "reproduced"
    assert df.loc[1, "ours"] == "0.317 [0.000, 0.900]" and "bounds" not in df.columns
    t = claims_table([_row("t", [0.0, 0.05, 0.9])], aggregate=aggregate_seeds)
    assert t.loc[0, "interval"] == "Student-t over seeds"
    assert render_markdown(df).splitlines()[0].startswith("| id")


def test_claims_table_keeps_and_shows_the_full_claim():
    claim = ("GRPO with a large group raises pass@1 on every in-distribution family while its pass@k at the "
             "largest budget stays within the base model's interval, so the gain is sharpening, not new ability.")
    claim = (claim + " " + "x" * 200)[:200]
    df = claims_table([_row("long", claim=claim, paper="p" * 120)])
    assert df.loc[0, "claim"] == claim and df.loc[0, "paper"] == "p" * 120
    with pd.option_context("display.max_colwidth", 50):
        assert claim not in repr(pd.DataFrame(df))  # what a plain DataFrame shows
        assert claim in repr(df)
        assert claim in df._repr_html_()
    assert claim in render_markdown(df)
    assert claim in repr(df[df["verdict"] == "reproduced"])  # a slice is still a claims table
    assert pickle.loads(pickle.dumps(df)).equals(df)


def test_claims_table_errors():
    with pytest.raises(ValueError, match=r"^claims_table row 0: fields=.* must be a mapping with \['paper'\] as well"):
        claims_table([{k: v for k, v in _row().items() if k != "paper"}])
    with pytest.raises(ValueError, match=r"^claims_table row 0: expect='>=' is invalid: must be one of "
                                         r"\['>', '<', 'within'\]$"):
        claims_table([_row(expect=">=")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: than='0' is invalid: must be a number"):
        claims_table([_row(than="0")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: margin=None is invalid: must be a number > 0"):
        claims_table([_row(expect="within")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: margin=0.01 is invalid: must be absent unless"):
        claims_table([_row(margin=0.01)])
    with pytest.raises(ValueError, match=r"^claims_table row 0: holds=True is invalid: must be absent: .*"
                                         r"instrument_checks$"):
        claims_table([_row(holds=True)])
    with pytest.raises(ValueError, match=r"^claims_table row 0: source='Nudge' is invalid: must be one of"):
        claims_table([_row(source="Nudge")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: against='gt' is invalid: must be one of"):
        claims_table([_row(against="gt")])
    with pytest.raises(ValueError, match=r"^claims_table row 0: paper_effect=\('pass@1', 1\) is invalid"):
        claims_table([_row(paper_effect=("pass@1", 1))])
    with pytest.raises(ValueError, match=r"^claims_table row 1: ours=.* must be an interval dict with 'mean', "
                                         r"'ci_low', 'ci_high', 'n' \(and 'method'\); missing \['ci_low', 'ci_high'\]$"):
        claims_table([_row("a"), _row("b", {"mean": 1.0, "n": 3})])
    with pytest.raises(ValueError, match=r"^claims_table row 0: values=\[0.1, nan\] is invalid"):
        claims_table([_row(ours=[0.1, float("nan")])])


def test_claims_summary_counts_each_verdict_and_the_chance_count():
    rows = [_row("a", _ci(0.05, 0.2)), _row("b", _ci(-0.05, 0.2)), _row("c", _ci(0.05, 0.3), expect="<"),
            _row("d", _ci(0.05, 0.2), source="VIGOR", against="base", reference=_ci(0.01, 0.02))]
    text = claims_summary(claims_table(rows))
    lines = text.splitlines()
    assert lines[0].startswith("**1 reproduced, 1 contradicted, 1 unresolved, 1 not specific, 0 premise absent of 4 "
                               "claims** "
                               "(chance alone, every effect at its threshold, would give 0.1 `reproduced`")
    assert find_claims_headline(text) == ("1 reproduced, 1 contradicted, 1 unresolved, 1 not specific, 0 premise "
                                          "absent of 4 claims")
    assert find_claims_counts(text + "\n" + text) == {
        "SAGE": {"reproduced": 2, "contradicted": 2, "unresolved": 2, "not specific": 0, "premise absent": 0},
        "VIGOR": {"reproduced": 0, "contradicted": 0, "unresolved": 0, "not specific": 2, "premise absent": 0}}
    assert "- **contradicted**: claim c (SAGE) -- ours 0.175 [0.050, 0.300], threshold < 0.000" in text


def test_claims_reading_says_each_verdict_the_disagreements_and_the_limits():
    rows = [_row("a", _ci(0.05, 0.2)), _row("b", _ci(-0.05, 0.2)),
            _row("c", _ci(0.05, 0.3), expect="<", paper_effect=("pass@1", 0.40, 0.38)),
            _row("d", _ci(0.05, 0.2), source="VIGOR", against="base", reference=_ci(0.01, 0.02))]
    text = claims_reading(claims_table(rows), "Only three strategies.")
    reading, limits = text.split("\n\n")
    assert reading.startswith("**Reading.** Of the 4 claims tested here: 1 reproduced, 1 contradicted, "
                              "1 unresolved, 1 not specific, 0 premise absent. Regimes: 4 on the retention regime (4 "
                              "needing no premise).")
    # the disagreement names our interval beside the paper's effect
    assert ("Where the testbed disagrees with the paper (contradicted): claim c (SAGE): ours 0.175 [0.050, 0.300], "
            "the paper's pass@1 0.4 -> 0.38 (-5%)") in reading
    assert "Reproduced: claim a (SAGE)." in reading and "says nothing of the method: claim d." in reading
    assert "Unresolved (the interval straddles the threshold" in reading and reading.endswith("claim b.")
    assert limits == f"**What the testbed cannot say.** {TESTBED_LIMITS} Only three strategies."
    only = claims_reading(claims_table([_row("a", _ci(0.05, 0.2))]), "x")
    assert "contradicted)" not in only and "Unresolved" not in only  # a verdict no row has is not mentioned
    with pytest.raises(ValueError, match="limits='  ' is invalid: must be the notebook's own words"):
        claims_reading(claims_table(rows), "  ")


def test_every_notebook_says_what_its_testbed_cannot_say():
    from rlvr_lib.study.claims import registry

    for module in ("nb01_grpo", "nb02_baselines", "nb03_nudgerl", "nb04_3po", "nb05_sage", "nb06_vigor",
                   "nb07_head_to_head"):
        limits = registry(module).limits
        assert len(limits) > 100 and limits.endswith("."), module


def test_measurements_and_instrument_checks_are_tables_of_their_own():
    m = measurements_table([{"id": "rescued", "measurement": "rescued > lost", "ours": _ci(0.01, 0.02), "expect": ">",
                             "regime": "retention", "premise": "none"}])
    assert list(m.columns) == list(MEASUREMENT_COLUMNS) and m.loc[0, "verdict"] == "reproduced"
    assert find_claims_headline(measurements_summary(m)) is None  # never counted among claims
    c = instrument_checks([{"id": "ari", "check": "ARI >= 0.8", "kind": "measurement", "value": 0.91, "passes": True}])
    assert c.loc[0, "value"] == "0.910" and bool(c.loc[0, "passes"])
    with pytest.raises(ValueError, match=r"^instrument_checks row 0: kind='claim' is invalid: must be one of"):
        instrument_checks([{"id": "x", "check": "x", "kind": "claim", "value": 1, "passes": True}])


# ------------------------------------------------------------------ regimes and premises (issue 55, item 5)

def _regimes(state):
    """A hand-built ``results/testbed/regimes.json``: the discovery premise on the retention pool ``state``."""
    share, correct = (0.0017, 41) if state == "absent" else (0.02, 476)
    return {"retention": {"share": share, "correct": correct, "samples": 23808, "bound": 0.005,
                          "discovery_premise": state}}


def test_premise_status_reads_a_hand_built_regimes_file():
    from rlvr_lib.study.regimes import premise_status

    absent = premise_status("retention", "discovery", _regimes("absent"))
    assert absent == {"present": False, "measurement": "hinted round earns reward on 0.17% of fresh samples of the "
                                                       "RL pool (41 of 23808; bound 0.5%)"}
    assert premise_status("retention", "discovery", _regimes("present"))["present"] is True
    assert premise_status("retention", "discovery", {}) == {"present": None, "measurement": "not measured"}
    assert premise_status("retention", "retention", {})["present"] is True  # notebook 00's dynamics
    assert premise_status("discovery", "none", {})["present"] is True
    assert premise_status("discovery", "discovery", {})["present"] is None  # no gate outcome yet


def test_a_row_whose_premise_is_absent_gets_premise_absent_with_the_measurement_beside_it():
    rows = [_row("needs-discovery", _ci(-0.03, -0.01), premise="discovery"),
            _row("needs-nothing", _ci(0.01, 0.03)),
            _row("keeps", _ci(0.01, 0.03), premise="retention")]
    df = claims_table(rows, regimes=_regimes("absent"))
    assert list(df.columns) == list(CLAIMS_COLUMNS)
    assert df["verdict"].tolist() == ["premise absent", "reproduced", "reproduced"]
    # nothing is hidden: the interval, its own verdict and the premise's measurement stay in the row
    assert df.loc[0, "ours"] == "-0.020 [-0.030, -0.010]" and df.loc[0, "verdict_if_premise"] == "contradicted"
    assert df.loc[0, "premise"] == ("discovery -- absent: hinted round earns reward on 0.17% of fresh samples of the "
                                    "RL pool (41 of 23808; bound 0.5%)")
    assert df.loc[1, "premise"] == "none" and df["regime"].tolist() == ["retention"] * 3
    assert df.loc[2, "premise"].startswith("retention -- present: GRPO lowers rare_mix pass@256")
    assert verdict_counts(df) == {"reproduced": 2, "contradicted": 0, "unresolved": 0, "not specific": 0,
                                  "premise absent": 1}
    # the headline and the scorecard count it apart; the chance count is over the rows whose premise is not absent
    text = claims_summary(df)
    assert text.startswith("**2 reproduced, 0 contradicted, 0 unresolved, 0 not specific, 1 premise absent of 3 "
                           "claims** (chance alone, every effect at its threshold, would give 0.1 `reproduced` at the "
                           "one-sided 2.5% level over the 2 rows whose premise is not absent).")
    assert find_claims_headline(text) == ("2 reproduced, 0 contradicted, 0 unresolved, 0 not specific, 1 premise "
                                          "absent of 3 claims")
    assert find_claims_counts(text)["SAGE"]["premise absent"] == 1
    assert ("- **premise absent** (its interval alone would read `contradicted`): claim needs-discovery (SAGE) -- "
            "ours -0.020 [-0.030, -0.010]") in text
    assert "Regimes: 3 on the retention regime (1 needing the discovery premise, 1 needing no premise, 1 needing " \
           "the retention premise)." in text
    reading = claims_reading(df, "x")
    assert ("Premise absent (the row needs a premise measured absent on its regime, discovery -- absent: hinted round "
            "earns reward on 0.17%") in reading
    assert "claim needs-discovery (SAGE; its interval -0.020 [-0.030, -0.010] alone would read contradicted)" in reading
    assert "contradicted)" not in reading.split("Premise absent")[0]  # not read as the testbed disagreeing
    m = measurements_table([{"id": "m", "measurement": "m", "ours": _ci(0.01, 0.02), "expect": ">",
                             "regime": "retention", "premise": "discovery"}], regimes=_regimes("absent"))
    assert list(m.columns) == list(MEASUREMENT_COLUMNS)
    assert (m.loc[0, "verdict"], m.loc[0, "verdict_if_premise"]) == ("premise absent", "reproduced")
    assert measurements_summary(m).startswith("Additional measurements (no paper states these; not counted among "
                                              "claims): 0 reproduced, 0 contradicted, 0 unresolved, 1 premise absent")


def test_a_row_whose_premise_is_present_or_not_measured_keeps_its_interval_verdict():
    rows = [_row("a", _ci(-0.03, -0.01), premise="discovery"), _row("b", _ci(-0.01, 0.03), premise="discovery")]
    present = claims_table(rows, regimes=_regimes("present"))
    assert present["verdict"].tolist() == present["verdict_if_premise"].tolist() == ["contradicted", "unresolved"]
    assert present.loc[0, "premise"].startswith("discovery -- present: hinted round earns reward on 2.00%")
    # not measured yet: the interval's verdict stands, and the row says the premise is not measured
    unmeasured = claims_table(rows, regimes={})
    assert unmeasured["verdict"].tolist() == ["contradicted", "unresolved"]
    assert unmeasured["premise"].tolist() == ["discovery -- premise not measured"] * 2
    on_discovery = claims_table([_row("c", regime="discovery", premise="discovery")], regimes={})
    assert on_discovery.loc[0, "premise"] == ("discovery -- premise not measured (the discovery gate has no outcome "
                                              "yet)") and on_discovery.loc[0, "verdict"] == "reproduced"
    failed = {"discovery": {"gate": {"passed": False}}}
    assert claims_table([_row("c", regime="discovery", premise="discovery")],
                        regimes=failed).loc[0, "verdict"] == "premise absent"


def test_a_claims_row_without_a_regime_is_refused():
    no_regime = {k: v for k, v in _row().items() if k != "regime"}
    with pytest.raises(ValueError, match=r"^claims_table row 0 \('c'\): regime=None is invalid: must be one of "
                                         r"\['retention', 'discovery'\]$"):
        claims_table([no_regime])
    with pytest.raises(ValueError, match=r"^claims_table row 0 \('c'\): premise='exploration' is invalid: must be "
                                         r"one of \['discovery', 'retention', 'none'\]$"):
        claims_table([_row(premise="exploration")])
    with pytest.raises(ValueError, match=r"^measurements_table row 0 \('m'\): regime=None is invalid"):
        measurements_table([{"id": "m", "measurement": "m", "ours": _ci(0.01, 0.02), "expect": ">"}])


def test_headlines_written_before_the_fifth_verdict_are_still_read():
    old = ("**0 reproduced, 1 contradicted, 24 unresolved, 0 not specific of 25 claims** (chance ...).\n"
           '<!-- claims-scorecard {"NudgeRL": {"contradicted": 1, "not specific": 0, "reproduced": 0, '
           '"unresolved": 24}} -->')
    assert find_claims_headline(old) == "0 reproduced, 1 contradicted, 24 unresolved, 0 not specific of 25 claims"
    assert find_claims_counts(old) == {"NudgeRL": {"reproduced": 0, "contradicted": 1, "unresolved": 24,
                                                   "not specific": 0, "premise absent": 0}}
    new = "**1 reproduced, 0 contradicted, 0 unresolved, 0 not specific, 2 premise absent of 3 claims** (chance)."
    assert find_claims_headline(old + "\n" + new) == ("1 reproduced, 1 contradicted, 24 unresolved, 0 not specific, "
                                                      "2 premise absent of 28 claims, over 2 claims tables")


# ------------------------------------------------------------------ claims_rows: the numbers of a stored table
def _notebook(tmp_path, *outputs):
    import json

    path = tmp_path / "09_made_up.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "", "outputs": list(outputs)}],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_claims_rows_reads_back_the_numbers_of_a_displayed_claims_table(tmp_path):
    from rlvr_lib.study.claims.tables import claims_rows

    table = claims_table([
        _row("up", _ci(0.012, 0.034)),
        _row("down", _ci(-0.25, -0.125), expect="<", than=-0.01, source="VIGOR"),
        _row("flat", _ci(-0.004, 0.006), expect="within", margin=0.01),
        _row("one-seed", {"mean": 0.375, "ci_low": 0.375, "ci_high": 0.375, "n": 1}),
    ])
    measured = measurements_table([dict(id="m", measurement="m", ours=_ci(0.1, 0.2), expect=">",
                                        regime="retention", premise="none")])
    html = lambda df: {"output_type": "execute_result", "data": {"text/html": df._repr_html_(),  # noqa: E731
                                                                 "text/plain": repr(df)}}
    rows = claims_rows(_notebook(tmp_path, html(table), html(measured)))  # the measurements table is not claims
    assert [r["id"] for r in rows] == ["up", "down", "flat", "one-seed"]
    up, down, flat, one = rows
    assert up == {"notebook": "09_made_up", "id": "up", "claim": "claim up", "paper": "SAGE", "table": "T1",
                  "our_effect": 0.023, "low": 0.012, "high": 0.034, "threshold": 0.0, "expect": ">", "margin": None,
                  "verdict": "reproduced", "verdict_if_premise": "reproduced"}
    assert (down["paper"], down["low"], down["high"], down["threshold"], down["expect"]) == (
        "VIGOR", -0.25, -0.125, -0.01, "<")
    assert (flat["threshold"], flat["expect"], flat["margin"], flat["verdict"]) == (0.0, "within", 0.01, "reproduced")
    assert one["our_effect"] == 0.375 and np.isnan(one["low"]) and np.isnan(one["high"])


def test_claims_rows_refuses_a_cut_table_and_a_file_that_is_no_notebook(tmp_path):
    from rlvr_lib.study.claims.tables import claims_rows

    table = claims_table([_row(f"c{i}") for i in range(4)])
    with pd.option_context("display.max_rows", 2, "display.min_rows", 2):
        cut = pd.DataFrame.to_html(table, max_rows=2)
    with pytest.raises(ValueError, match=r"pandas cut the stored table short"):
        claims_rows(_notebook(tmp_path, {"data": {"text/html": cut}}))
    bad = tmp_path / "x.ipynb"
    bad.write_text("not json")
    with pytest.raises(ValueError, match=r"^notebook_path='.*x.ipynb' is invalid: must be an executed .ipynb file"):
        claims_rows(bad)


def _executed_notebooks():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return sorted({*root.glob("notebooks/[0-9][0-9]_*.ipynb"), *root.glob("results/notebooks/full/[0-9][0-9]_*.ipynb")})


@pytest.mark.parametrize("path", _executed_notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_claims_rows_of_each_committed_notebook_match_its_scorecard_and_verdicts(path):
    """The rows read back from a committed executed notebook are the ones its claims summary counts, per paper and
    verdict, and each row's interval, read against its threshold, gives the verdict the table shows."""
    from collections import Counter

    from rlvr_lib.study.claims.tables import NOT_SPECIFIC, REPRODUCED, claims_rows, notebook_outputs

    rows = claims_rows(path)
    scorecard = find_claims_counts(notebook_outputs(path))
    assert Counter((r["paper"], r["verdict"]) for r in rows) == Counter(
        {(paper, v): n for paper, counts in scorecard.items() for v, n in counts.items() if n})
    checked = 0
    for r in rows:
        if np.isnan(r["low"]):
            continue
        edges = [r["threshold"] + s * (r["margin"] or 0.0) for s in (-1, 1)]
        if {r["low"], r["high"]} & set(edges):
            continue  # rounded to 3 decimals onto the threshold: the shown numbers cannot say which side
        agg = {"mean": r["our_effect"], "ci_low": r["low"], "ci_high": r["high"], "n": 2}
        shown = REPRODUCED if r["verdict_if_premise"] == NOT_SPECIFIC else r["verdict_if_premise"]
        assert verdict(agg, r["expect"], r["threshold"], r["margin"]) == shown, r
        checked += 1
    assert checked or not rows


def test_claims_rows_of_a_table_equal_those_of_its_stored_display(tmp_path):
    from rlvr_lib.study.claims.tables import claims_rows

    table = claims_table([_row(f"c{i}", _ci(0.01 * i, 0.02 * i + 0.01)) for i in range(70)])  # past pandas' 60 rows
    stored = _notebook(tmp_path, {"data": {"text/html": table.to_html()}})
    assert claims_rows(table, notebook="09_made_up") == claims_rows(stored)
    assert len(claims_rows(table, notebook="x")) == 70
    with pytest.raises(ValueError, match=r"^notebook=None is invalid: must be a name for the rows of a claims table"):
        claims_rows(table)
