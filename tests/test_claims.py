"""Tests for rlvr_lib.study.claims: pre-registered rows, their provenance in run records, rows changed after the runs."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from rlvr_lib.study.claims import (REGISTRIES, Check, Claim, Measurement, Registry, _last_change, _module_commit,
                                   provenance, registry, registry_for)
from rlvr_lib.study.runs import cached_run, load_runs


def _ci(lo, hi):
    return {"mean": (lo + hi) / 2, "ci_low": lo, "ci_high": hi, "n": 5, "method": "m"}


_RET = {"regime": "retention", "premise": "retention"}
_NONE = {"regime": "retention", "premise": "none"}
REG = Registry(
    notebook="99_test", experiment="testexp",
    claims=(Claim("gain", "X beats GRPO at pass@{n}", "SAGE", "T1", ("pass@1", 0.266, 0.284), ">", "grpo", **_RET),
            Claim("keeps", "X keeps OOD", "SAGE", "OOD", "no number", "within", "base", margin=0.01, **_NONE)),
    measurements=(Measurement("rescued", "rescued > lost", ">", **_RET),),
    checks=(Check("ari", "ARI >= 0.8", "measurement"),),
)


def _run(root, experiment, seed, claims):
    return cached_run(experiment, "grpo", {"seed": seed}, seed, lambda: ([], {"x": 1.0}), root=root,
                      extra={"claims": claims})


def test_rows_come_only_from_the_registry():
    rows = REG.claim_rows({"gain": _ci(0.01, 0.02), "keeps": {"ours": _ci(-0.005, 0.005), "reference": _ci(0, 0.004)}},
                          n=32)
    assert rows[0]["claim"] == "X beats GRPO at pass@32" and rows[1]["margin"] == 0.01
    table = REG.claims_table({"gain": _ci(0.01, 0.02), "keeps": {"ours": _ci(-0.005, 0.005),
                                                                 "reference": _ci(0.0, 0.004)}}, n=32)
    assert table["verdict"].tolist() == ["reproduced", "not specific"]
    with pytest.raises(ValueError, match=r"^99_test claims measured ids=\['extra', 'gain'\] is invalid: must be "
                                         r"exactly the registered ids \['gain', 'keeps'\] \(unknown: \['extra'\], "
                                         r"unmeasured: \['keeps'\]\)$"):
        REG.claim_rows({"gain": _ci(0.01, 0.02), "extra": _ci(0, 1)}, n=32)
    with pytest.raises(ValueError, match=r"^row 'gain': text='X beats GRPO at pass@\{n\}' is invalid"):
        REG.claim_rows({"gain": _ci(0.01, 0.02), "keeps": {"ours": _ci(0, 0.001), "reference": "-"}})
    assert REG.measurements_table({"rescued": _ci(0.1, 0.2)})["verdict"].tolist() == ["reproduced"]
    assert REG.instrument_checks({"ari": (0.91, True)})["passes"].tolist() == [True]


def test_a_row_changed_after_the_first_full_record_is_flagged(tmp_path):
    first = {"module": "x", "commit": None, "fingerprints": REG.fingerprints(), "tags": REG.tags()}
    _run(tmp_path, "testexp_full", 0, first)
    assert REG.changed_rows(tmp_path).empty  # nothing changed since the first record
    # the margin of "keeps" widened and a row added after the first record; a later record does not excuse them
    keeps = dataclasses.replace(REG.claims[1], margin=0.02)
    later = dataclasses.replace(REG, claims=(REG.claims[0], keeps,
                                             Claim("new", "new row", "SAGE", "T1", "-", ">", "grpo", **_NONE)))
    _run(tmp_path, "testexp_full", 1, {"module": "x", "commit": None, "fingerprints": later.fingerprints(),
                                       "tags": later.tags()})
    changed = later.changed_rows(tmp_path)
    assert changed[["id", "what"]].values.tolist() == [["keeps", "changed"], ["new", "added"]]
    assert changed.attrs["first_record"].startswith(load_runs("testexp_full", tmp_path)[0].run_id.split("-s")[0])
    dropped = dataclasses.replace(REG, claims=REG.claims[:1])
    assert dropped.changed_rows(tmp_path)[["id", "what"]].values.tolist() == [["keeps", "removed"]]
    assert REG.changed_rows(tmp_path, profile="quick").empty  # no quick record: nothing after it


def test_records_before_fingerprints_list_the_rows_that_say_they_changed(tmp_path):
    _run(tmp_path, "testexp_full", 0, None)  # a record from before the scheme: no fingerprints
    reg = dataclasses.replace(REG, claims=(dataclasses.replace(REG.claims[1], changed="item 2: now within"),),
                              removed=(("old half", "item 2"),))
    changed = reg.changed_rows(tmp_path)
    assert changed[["id", "what", "why"]].values.tolist() == [["keeps", "changed", "item 2: now within"],
                                                             ["-", "removed", "item 2"],
                                                             ["keeps", "tagged", "-"], ["rescued", "tagged", "-"]]


def test_tags_added_after_the_first_record_are_listed_as_tagged_not_as_changed_statements(tmp_path):
    from rlvr_lib.study.claims import TAGGED, changed_summary

    # The first record stored fingerprints but no tags (before issue 55): every row's statement is as it was, and
    # each tagged row is listed as "tagged", with the registry's note, grouped by regime and premise.
    _run(tmp_path, "testexp_full", 0, {"module": "x", "commit": None, "fingerprints": REG.fingerprints()})
    reg = dataclasses.replace(REG, tagged=TAGGED)
    changed = reg.changed_rows(tmp_path)
    assert changed[["id", "what", "why"]].values.tolist() == [["gain", "tagged", TAGGED], ["keeps", "tagged", TAGGED],
                                                             ["rescued", "tagged", TAGGED]]
    assert changed.loc[0, "row"] == "X beats GRPO at pass@{n} [retention/retention]"
    text = changed_summary(changed)
    assert text.startswith("**Pre-registration:** no row's statement changed after the first full-profile record")
    assert f"- tagged: regime retention, premise retention (2 rows: gain, rescued) -- {TAGGED}" in text
    assert f"- tagged: regime retention, premise none (1 rows: keeps) -- {TAGGED}" in text
    # a row's fingerprint is what it states: its tags and its note are not part of it
    retagged = dataclasses.replace(REG.claims[0], premise="discovery", changed="re-tagged")
    assert retagged.fingerprint() == REG.claims[0].fingerprint() and retagged.tags() != REG.claims[0].tags()


def test_a_row_retagged_after_a_record_that_stored_tags_is_listed(tmp_path):
    _run(tmp_path, "testexp_full", 0, {"module": "x", "commit": None, "fingerprints": REG.fingerprints(),
                                       "tags": REG.tags()})
    moved = dataclasses.replace(REG, claims=(dataclasses.replace(REG.claims[0], premise="discovery"), REG.claims[1]),
                                tagged="the rule changed")
    assert moved.changed_rows(tmp_path)[["id", "what", "why"]].values.tolist() == [["gain", "tagged",
                                                                                   "the rule changed"]]
    reworded = dataclasses.replace(REG, claims=(dataclasses.replace(REG.claims[0], text="reworded"), REG.claims[1]))
    assert reworded.changed_rows(tmp_path)[["id", "what"]].values.tolist() == [["gain", "changed"]]


def test_a_claims_row_without_a_regime_or_premise_is_refused():
    with pytest.raises(ValueError, match=r"^Claim 'x': regime=None is invalid: must be one of \['retention', "
                                         r"'discovery'\]$"):
        Claim("x", "x", "SAGE", "T1", "-", ">", "grpo")
    with pytest.raises(ValueError, match=r"^Claim 'x': premise=None is invalid: must be one of \['discovery', "
                                         r"'retention', 'none'\]$"):
        Claim("x", "x", "SAGE", "T1", "-", ">", "grpo", regime="retention")
    with pytest.raises(ValueError, match=r"^Measurement 'm': regime='arith' is invalid: must be one of"):
        Measurement("m", "m", ">", regime="arith", premise="none")
    with pytest.raises(ValueError, match=r"^Claim 'x': premise='exploration' is invalid: must be one of"):
        Claim("x", "x", "SAGE", "T1", "-", ">", "grpo", regime="discovery", premise="exploration")
    # the rows a registry hands to the tables carry them
    rows = REG.claim_rows({"gain": _ci(0.01, 0.02), "keeps": {"ours": _ci(-0.005, 0.005), "reference": "-"}}, n=8)
    assert [(r["regime"], r["premise"]) for r in rows] == [("retention", "retention"), ("retention", "none")]


def test_every_registered_row_names_the_retention_regime_and_a_premise():
    # issue 55: every row of notebooks 01-07 (registered before it) is measured on the testbed's RL pool; NudgeRL's
    # and 3PO's rows against GRPO need the discovery premise, their rows against the base policy none
    for module in ("nb01_grpo", "nb02_baselines", "nb03_nudgerl", "nb04_3po", "nb05_sage", "nb06_vigor",
                   "nb07_head_to_head"):
        reg = registry(module)
        assert {r.regime for r in (*reg.claims, *reg.measurements)} == {"retention"}, module
        assert reg.tagged, module
    nb03, nb04, nb07 = (registry(m).tags() for m in ("nb03_nudgerl", "nb04_3po", "nb07_head_to_head"))
    assert nb03["beats-grpo-g8"] == nb03["ablation-hint-random"] == nb03["fig4-rare-solved"] == "retention/discovery"
    assert nb03["beats-base"] == nb03["fig1-naive-one-mode"] == "retention/none"
    assert nb04["c3po-beats-grpo"] == nb04["fig5-ess-x10"] == "retention/discovery"
    assert nb04["fig1-weight-reorders"] == nb04["fig3-polaris-degenerate-train"] == "retention/none"
    assert nb07["nudgerl-beats-grpo"] == nb07["pair-nudgerl-sage"] == nb07["threepo-rare-wide"] == "retention/discovery"
    assert nb07["sage-rare-wide"] == "retention/retention" and nb07["pair-sage-vigor"] == "retention/none"


def test_run_records_store_the_commit_and_fingerprints_of_their_notebooks_claims(tmp_path, monkeypatch):
    import rlvr_lib.study.pipeline as pipeline
    from rlvr_lib.study.claims import record_extra
    from rlvr_lib.eval import EvalSpec

    rec = cached_run("sage_full", "probe", {"a": 1}, 0, lambda: ([], {"x": 1.0}), root=tmp_path,
                     extra=record_extra("sage_full"))
    stored = rec.extra["claims"]
    assert stored["module"] == "nb05_sage" and stored["fingerprints"] == registry("nb05_sage").fingerprints()
    assert stored["commit"] is None or len(stored["commit"]) == 40
    assert record_extra("other") == {} and provenance("unknown_full") is None
    # The notebooks' runs go through the pipeline, which passes the provenance to the cache.
    seen = []
    monkeypatch.setattr(pipeline, "cached_run", lambda *a, **k: seen.append(k["extra"]))
    pipeline.evaluate_base("sage_full", EvalSpec(problems_per_family=8, samples=8, diversity_problems=8,
                                                 diversity_samples=8), root=tmp_path)
    assert seen == [record_extra("sage_full")]


def test_every_registry_loads_and_its_ids_are_unique():
    for prefix, module in REGISTRIES.items():
        reg = registry(module)
        assert reg.experiment == prefix and registry_for(f"{prefix}_full") is not None
        ids = list(reg.fingerprints())
        assert len(ids) == len(set(ids)) == len(reg.claims) + len(reg.measurements) + len(reg.checks)
    with pytest.raises(ValueError, match=r"^Claim 'x': expect='>=' is invalid: must be one of"):
        Claim("x", "x", "SAGE", "T1", "-", ">=", "grpo", **_NONE)
    with pytest.raises(ValueError, match=r"^Registry 'r': ids=\['a'\] is invalid: must be unique"):
        Registry("r", "e", claims=(Claim("a", "x", "SAGE", "T1", "-", ">", "grpo", **_NONE),),
                 measurements=(Measurement("a", "y", ">", **_NONE),))


def test_registered_paper_effects_agree_with_their_side():
    # the table builder checks this when a notebook runs; checked here for every registry without running one
    for module in REGISTRIES.values():
        for c in registry(module).claims:
            if isinstance(c.paper_effect, tuple) and c.expect != "within":
                _, a, b = c.paper_effect
                assert (b > a) == (c.expect == ">"), (module, c.id, c.paper_effect, c.expect)
            if c.expect == "within":
                assert c.margin is not None and c.margin > 0, (module, c.id)


def test_zero_width_intervals_of_different_measurements_are_not_taken_for_two_halves():
    # On a tiny sample two different measurements can both be exactly 0 with no spread; that is a coincidence,
    # not one measurement tested from both sides. The same measurement object still is refused.
    from rlvr_lib.study.claims.tables import _check_rows

    zero = lambda: {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0}  # noqa: E731
    _check_rows("t", [{"id": "a", "ours": zero(), "expect": ">"}, {"id": "b", "ours": zero(), "expect": "<"}])
    same = zero()
    with pytest.raises(ValueError, match="one-sided halves"):
        _check_rows("t", [{"id": "a", "ours": same, "expect": ">"}, {"id": "b", "ours": same, "expect": "<"}])


def _git(cwd, *args) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
                         cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_a_claims_module_keeps_its_commit_when_it_moves(tmp_path):
    # A record stores the last commit that changed its claims module. The modules moved (issue 30): a commit that
    # only moves the file changed no row, and the history before the move still counts.
    _git(tmp_path, "init", "-q")
    old = tmp_path / "rlvr_lib" / "claims" / "nb09_x.py"
    old.parent.mkdir(parents=True)
    old.write_text("ROWS = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "rows")
    old.write_text("ROWS = 2\n")
    _git(tmp_path, "commit", "-qam", "a row changed")
    changed = _git(tmp_path, "rev-parse", "HEAD")
    new = tmp_path / "rlvr_lib" / "study" / "claims" / "nb09_x.py"
    new.parent.mkdir(parents=True)
    _git(tmp_path, "mv", str(old), str(new))
    _git(tmp_path, "commit", "-qm", "moved")
    assert _last_change(new) == changed
    new.write_text("ROWS = 3\n")
    _git(tmp_path, "commit", "-qam", "changed after the move")
    assert _last_change(new) == _git(tmp_path, "rev-parse", "HEAD")
    assert _last_change(tmp_path / "rlvr_lib" / "study" / "claims" / "never_committed.py") is None


def test_each_claims_modules_commit_holds_its_rows_and_changed_them():
    # On this checkout: the commit a record would store holds the module's committed content, and its parent
    # does not (so it is the commit that made the rows, not one that only moved the file).
    root = Path(__file__).resolve().parent.parent
    if shutil.which("git") is None or subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root,
                                                     capture_output=True, text=True).stdout.strip() != "false":
        pytest.skip("needs a git checkout with its whole history")
    for module in REGISTRIES.values():
        path = f"rlvr_lib/study/claims/{module}.py"
        head = subprocess.run(["git", "rev-parse", f"HEAD:{path}"], cwd=root, capture_output=True, text=True)
        if head.returncode != 0 or subprocess.run(["git", "diff", "--quiet", "HEAD", "--", path], cwd=root).returncode:
            continue  # not committed yet, or changed since: the stored commit says less then
        commit = _module_commit(module)
        assert commit is not None, module
        assert head.stdout.strip() in _git(root, "ls-tree", "-r", commit), (module, commit)
        assert head.stdout.strip() not in _git(root, "ls-tree", "-r", f"{commit}^"), (module, commit)
