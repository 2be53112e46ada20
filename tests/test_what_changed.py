"""What changed between an archived and a recomputed notebook (rlvr_lib.study.what_changed).

(a) Synthetic executed notebooks and records in tmp_path, where each cause is made to happen; (b) the first
recompute's archive (``results/archive/policy-7d06930f835fd77e``) against the committed notebooks and records:
the table covers every claims row of both versions (issue 58's test), once each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rlvr_lib.study import papers
from rlvr_lib.study.claims.tables import CLAIMS_COLUMNS, MEASUREMENT_COLUMNS, _claims_table_class
from rlvr_lib.study.what_changed import (ClaimRow, claims_rows, compare, config_keys_changed, executed_notebooks,
                                        main, notebook_changes, render, write_page)

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = "A"
NB = "03_nudgerl"  # a real notebook: its claims module's pairs and protocol rows are read
ABSENT = "discovery -- absent: hinted round earns reward on 0.22% of fresh samples of the RL pool"


def _row(rid, claim, verdict, premise, regime="retention"):
    row = {c: "-" for c in CLAIMS_COLUMNS}
    row.update(id=rid, claim=claim, source="NudgeRL", paper="T1", ours="0.010 [-0.005, 0.026]", verdict=verdict,
               verdict_if_premise=verdict, regime=regime, premise=premise)
    return row


def _measurement(rid, text, verdict, premise):
    row = {c: "-" for c in MEASUREMENT_COLUMNS}
    row.update(id=rid, measurement=text, ours="0.021 [-0.002, 0.045]", verdict=verdict, verdict_if_premise=verdict,
               regime="retention", premise=premise)
    return row


def _html(rows, columns):
    return _claims_table_class()(pd.DataFrame(rows, columns=list(columns)))._repr_html_()


def _notebook(path: Path, tables, markdown: str = "", profile: str = "full") -> Path:
    outputs = [{"output_type": "display_data", "metadata": {}, "data": {"text/markdown": markdown, "text/plain": ""}}]
    outputs += [{"output_type": "display_data", "metadata": {},
                 "data": {"text/html": html, "text/plain": "table"}} for html in tables]
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": outputs, "execution_count": 1}],
          "metadata": {"papermill": {"parameters": {"profile": profile}}}, "nbformat": 4, "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


def _record(folder: Path, name: str, seed: int, train: dict, commit: str, extra_evals: dict | None = None):
    config = {"eval": {"samples": 32, "seed": seed, "temperature": 1.0}, "policy_sha": "p1", "task_version": "v7",
              "train": {"seed": seed, "kl_coef": 0.0, "lr": 1e-4, "method_options": None, **train}}
    if extra_evals:
        config["extra_evals"] = extra_evals
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}-{abs(hash(json.dumps(config, sort_keys=True))) % 10**12:012x}-s{seed}.json").write_text(
        json.dumps({"name": name, "run_id": f"{name}-s{seed}", "seed": seed, "git_commit": commit * 40,
                    "config": config}))


OLD_ROWS = [
    _row("beats-grpo-g8", "NudgeRL@8 beats GRPO@8 (pass@1)", "unresolved", "none"),
    _row("beats-grpo-g16", "NudgeRL@8 beats GRPO@16 (pass@1)", "unresolved", ABSENT),
    _row("beats-grpo-g32", "NudgeRL@8 beats GRPO@32 (pass@1)", "contradicted", ABSENT),
    _row("ablation-p-drop-0.0", "p_drop 0.5 beats p_drop 0.0", "unresolved", ABSENT),
    _row("beats-base", "NudgeRL@8 raises pass@1 over the base policy", "reproduced", "none"),
    _row("beats-grpo-matched", "NudgeRL@8 beats GRPO@8 at NudgeRL's own settings (pass@1)", "unresolved", ABSENT),
]
NEW_ROWS = [
    _row("beats-grpo-g8", "NudgeRL@8 beats GRPO@8 (pass@1)", "premise absent", ABSENT),
    _row("beats-grpo-g16", "NudgeRL@8 beats GRPO@16 (pass@1)", "premise absent", ABSENT),
    _row("beats-grpo-g32", "NudgeRL@8 beats GRPO@32 (pass@1)", "unresolved", ABSENT),
    _row("ablation-p-drop-0.0", "p_drop 0.5 beats p_drop 0.0", "premise absent", ABSENT),
    _row("beats-base", "NudgeRL@8 raises pass@1 over the base policy", "reproduced", "none"),
    _row("beats-pope", "NudgeRL@8 beats POPE@8 (pass@1)", "premise absent", ABSENT),
]
MEASURED = [_measurement("beats-grpo-rare", "NudgeRL@8 beats GRPO@8 on rare_mix (pass@1)", "premise absent", ABSENT)]


def _study(tmp_path: Path, protocol: bool = False) -> Path:
    """A results root with notebook 03 archived under ``A`` and recomputed: the rows above and their records."""
    root = tmp_path / "results"
    _notebook(root / "archive" / ARCHIVE / "notebooks" / "full" / f"{NB}.ipynb",
              [_html(OLD_ROWS, CLAIMS_COLUMNS), _html(MEASURED, MEASUREMENT_COLUMNS)])
    _notebook(root / "notebooks" / "full" / f"{NB}.ipynb",
              [_html(NEW_ROWS, CLAIMS_COLUMNS), _html(MEASURED, MEASUREMENT_COLUMNS)])
    old, new = root / "archive" / ARCHIVE / "nudgerl_full", root / "nudgerl_full"
    evals = {"protocol-nudgerl": {"samples": 32, "temperature": 0.7}} if protocol else None
    for seed in (0, 1):
        for folder, commit, kl, options in ((old, "a", 0.0, {"p_drop": 0.0}),
                                            (new, "b", 0.2, {"p_drop": 0.0, "scheme": "single"})):
            _record(folder, "nudgerl", seed, {"method": "nudgerl"}, commit, evals if folder == new else None)
            _record(folder, "grpo-g8-nudgerl-settings", seed, {"method": "grpo"}, commit,
                    evals if folder == new else None)
            _record(folder, "grpo-g32-nudgerl-settings", seed, {"method": "grpo"}, commit)
            _record(folder, "grpo-g16-nudgerl-settings", seed, {"method": "grpo", "kl_coef": kl}, commit)
            _record(folder, "nudgerl-p-drop-0.0", seed, {"method": "nudgerl", "method_options": options}, commit)
    return root


def _by_id(rows):
    return {r.id: r for r in rows}


def test_claims_rows_reads_claims_and_measurements(tmp_path):
    root = _study(tmp_path)
    rows = claims_rows(root / "notebooks" / "full" / f"{NB}.ipynb")
    assert [r.id for r in rows] == [r["id"] for r in NEW_ROWS] + ["beats-grpo-rare"]
    g8 = rows[0]
    assert (g8.claim, g8.verdict, g8.regime, g8.premise_tag, g8.premise_status, g8.kind) == (
        "NudgeRL@8 beats GRPO@8 (pass@1)", "premise absent", "retention", "discovery", "absent", "claim")
    assert rows[-1].kind == "measurement" and rows[-1].source == "-"


def test_each_cause_from_its_evidence(tmp_path):
    root = _study(tmp_path)
    found = notebook_changes(NB, ARCHIVE, root)
    rows = _by_id(found["rows"])
    # every row of both versions, once (the test)
    ids = [r.id for r in found["rows"]]
    assert sorted(ids) == sorted({r["id"] for r in OLD_ROWS + NEW_ROWS + MEASURED}) and len(ids) == len(set(ids))
    # the premise tag changed (none -> discovery): regime; its records did not change: nothing else
    assert rows["beats-grpo-g8"].causes == ("regime: premise none -> discovery",)
    assert (rows["beats-grpo-g8"].old_verdict, rows["beats-grpo-g8"].new_verdict) == ("unresolved", "premise absent")
    # a config key changed in one of the row's arms: fidelity names it, and only that row's
    assert rows["beats-grpo-g16"].causes == ("fidelity: `kl_coef`",)
    assert rows["ablation-p-drop-0.0"].causes == ("fidelity: `method_options.scheme`",)
    # same tags, same configs: none, though the verdict moved
    assert rows["beats-grpo-g32"].causes == ("none",)
    assert rows["beats-grpo-rare"].causes == ("none",) and rows["beats-grpo-rare"].old_verdict == "premise absent"
    # a row no pair names reads every record of its notebook
    assert rows["beats-base"].causes == ("fidelity: `kl_coef`, `method_options.scheme` (every record the notebook "
                                         "reads)",)
    # rows of one version only, with the claims module's note on them
    assert rows["beats-pope"].status == "added" and rows["beats-pope"].old_verdict is None
    assert rows["beats-pope"].causes[0] == "added" and "POPE" in rows["beats-pope"].causes[1]
    assert rows["beats-grpo-matched"].status == "removed" and rows["beats-grpo-matched"].new_verdict is None
    assert rows["beats-grpo-matched"].causes[0] == "removed" and "'beats-grpo-matched'" in rows[
        "beats-grpo-matched"].causes[1]
    assert found["old_commits"] == ["a" * 10] and found["new_commits"] == ["b" * 10]


def test_protocol_cause_when_the_new_records_carry_the_protocol_evaluation(tmp_path):
    root = _study(tmp_path, protocol=True)
    rows = _by_id(notebook_changes(NB, ARCHIVE, root)["rows"])
    protocol = "protocol: NudgeRL: mean@128 at temperature 0.7, top_p 1"
    # the pass@1 rows read NudgeRL's protocol now: claims and the per-family measurement
    for rid in ("beats-grpo-g8", "beats-grpo-g16", "beats-grpo-g32", "beats-base", "beats-grpo-rare"):
        assert protocol in rows[rid].causes, rid
    assert rows["beats-grpo-g32"].causes == (protocol,)  # the extra evaluation is not a fidelity change
    # a row that is not a pass@1 row does not
    assert not any(c.startswith("protocol") for c in rows["ablation-p-drop-0.0"].causes)


def test_regime_and_premise_status_changes():
    old = ClaimRow("x", "c", "claim", "NudgeRL", "T1", "unresolved", "0", "retention", "discovery -- present: 3%")
    new = ClaimRow("x", "c", "claim", "NudgeRL", "T1", "premise absent", "0", "discovery", ABSENT)
    assert compare([old], [new])[0].causes == ("regime: retention -> discovery",
                                               "regime: premise discovery present -> absent")
    moved = ClaimRow("x", "c", "claim", "NudgeRL", "T1", "premise absent", "0", "retention", ABSENT)
    assert compare([old], [moved])[0].causes == ("regime: premise discovery present -> absent",)
    untagged = ClaimRow("x", "c", "claim", "NudgeRL", "T1", "unresolved", "0")
    assert compare([untagged], [moved])[0].causes == (
        "regime: tagged retention, premise discovery (the old row had no regime tag)",)


def test_config_keys_changed_names_leaves_and_skips_eval_fields():
    a = {"eval": {"samples": 32}, "train": {"seed": 0, "kl_coef": 0.0, "method_options": None}}
    b = {"eval": {"samples": 8}, "extra_evals": {"wide": {}}, "train": {"seed": 1, "kl_coef": 0.0,
                                                                       "method_options": {"scheme": "s"}}}
    assert config_keys_changed([a], [b]) == ["method_options.scheme"]
    assert config_keys_changed([a], [a]) == []


def test_table_without_ids_pairs_by_claim_text(tmp_path):
    """Notebook 04 before the claims registry: claim / holds / point_side columns and bullets, no ids."""
    columns = ["claim", "paper", "ours", "interval", "point_side", "holds"]
    old_rows = [["C3PO beats GRPO (pass@1)", "T1", "-0.126 [-0.149, -0.104]", "b", False, False],
                ["C3PO beats M3PO (pass@1)", "T1", "0.014 [-0.008, 0.036]", "b", True, False],
                ["A row no new table has", "T1", "0.1 [0.05, 0.2]", "b", True, True]]
    bullets = "- **does not hold** (point estimate against the claimed side): C3PO beats GRPO (pass@1) -- ours x"
    old = _notebook(tmp_path / "old.ipynb", [pd.DataFrame(old_rows, columns=columns).to_html()], bullets)
    new = _notebook(tmp_path / "new.ipynb", [_html(
        [_row("c3po-beats-grpo", "C3PO beats GRPO (pass@1)", "premise absent", ABSENT),
         _row("c3po-beats-m3po", "C3PO beats M3PO (pass@1)", "premise absent", ABSENT)], CLAIMS_COLUMNS)])
    old_rows_read = claims_rows(old)
    assert [r.verdict for r in old_rows_read] == ["does not hold", "not resolved", "holds"]
    out = compare(old_rows_read, claims_rows(new))
    assert [(r.id, r.matched_by, r.status) for r in out] == [
        ("c3po-beats-grpo", "claim text", "kept"), ("c3po-beats-m3po", "claim text", "kept"),
        (None, "none", "removed")]


def test_render_and_write_page(tmp_path):
    root = _study(tmp_path)
    text = render(ARCHIVE, root)
    assert "## Against the archive `A`" in text and f"### {NB} (NudgeRL)" in text
    assert "| `beats-grpo-g16` | NudgeRL@8 beats GRPO@16 (pass@1) | unresolved | premise absent | fidelity: `kl_coef` |" \
        in text
    assert "records at `aaaaaaaaaa`" in text and "records at `bbbbbbbbbb`" in text
    # every other notebook of the manifest: not recomputed yet (no archived copy), no invented rows
    for nb in papers.NOTEBOOKS:
        if nb.notebook != NB:
            assert f"- `{nb.notebook}` ({nb.title}): not recomputed yet (no archived executed copy)" in text
    page = tmp_path / "docs" / "what-changed.md"
    assert write_page(ARCHIVE, root, page) and not write_page(ARCHIVE, root, page)
    content = page.read_text()
    assert content.startswith("# What changed") and content.count("<!-- what-changed:begin A -->") == 1
    (root / "archive" / "B").mkdir()
    assert write_page("B", root, page)  # a second archive's part goes first, the first one stays
    content = page.read_text()
    assert content.index("what-changed:begin B") < content.index("what-changed:begin A")
    assert main(["--archive", ARCHIVE, "--root", str(root), "--write", "--page", str(page)]) == 0


def test_new_copy_found_in_notebooks_folder_at_the_full_profile_only(tmp_path):
    root = _study(tmp_path)
    earlier = root / "notebooks" / "full" / f"{NB}.ipynb"
    quick = _notebook(tmp_path / "notebooks" / f"{NB}.ipynb", [_html(NEW_ROWS, CLAIMS_COLUMNS)], profile="quick")
    assert executed_notebooks(NB, ARCHIVE, root)[1] == earlier  # a quick-profile copy is not the recomputed one
    earlier.rename(tmp_path / "moved.ipynb")
    assert executed_notebooks(NB, ARCHIVE, root)[1] is None
    assert "not recomputed yet (the new execution is not there yet)" in render(ARCHIVE, root)
    _notebook(quick, [_html(NEW_ROWS, CLAIMS_COLUMNS)], profile="full")
    assert executed_notebooks(NB, ARCHIVE, root)[1] == quick
    assert notebook_changes(NB, ARCHIVE, root) is not None
    # archived by copying and not executed again yet: the same file on both sides is not a recomputation
    quick.write_bytes((root / "archive" / ARCHIVE / "notebooks" / "full" / f"{NB}.ipynb").read_bytes())
    assert executed_notebooks(NB, ARCHIVE, root)[1] is None and notebook_changes(NB, ARCHIVE, root) is None


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    root = _study(tmp_path)
    with pytest.raises(ValueError, match=r"archive='nope' is invalid: must be an archive under .*present: \['A'\]"):
        render("nope", root)
    with pytest.raises(ValueError, match="archive"):
        render("../x", root)
    empty = _notebook(tmp_path / "empty.ipynb", [pd.DataFrame({"pass@1": [0.1]}).to_html()])
    with pytest.raises(ValueError, match="a claims table"):
        claims_rows(empty)
    with pytest.raises(ValueError, match="that exists"):
        claims_rows(tmp_path / "missing.ipynb")
    (tmp_path / "bad.ipynb").write_text("{not json")
    with pytest.raises(ValueError, match="readable .ipynb"):
        claims_rows(tmp_path / "bad.ipynb")
    _notebook(root / "notebooks" / "full" / f"{NB}.ipynb", [pd.DataFrame({"x": [1]}).to_html()])
    with pytest.raises(ValueError, match="claims table"):
        render(ARCHIVE, root)
    with pytest.raises(SystemExit) as exc:
        main(["--archive", "nope", "--root", str(root)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "archive='nope' is invalid" in err


# --- (b) the first recompute's archive against the committed notebooks and records ---------------------------------

REAL = "policy-7d06930f835fd77e"
needs_real = pytest.mark.skipif(not (REPO / "results" / "archive" / REAL / "notebooks").is_dir(),
                                reason="the committed archive of the first recompute is not in this checkout")


@needs_real
def test_real_archive_every_row_of_both_versions_once():
    root = REPO / "results"
    compared = 0
    for nb in papers.NOTEBOOKS:
        old, new = executed_notebooks(nb.notebook, REAL, root, REPO / "notebooks")
        found = notebook_changes(nb.notebook, REAL, root, REPO / "notebooks")
        if old is None or new is None:
            assert found is None
            continue
        compared += 1
        old_rows, new_rows = claims_rows(old), claims_rows(new)
        rows = found["rows"]
        ids = [r.id for r in rows if r.id is not None]
        assert len(ids) == len(set(ids)), nb.notebook
        new_ids = {r.id for r in new_rows}
        assert {r.id for r in rows if r.new_verdict is not None} == new_ids
        # every old row: by its id, by the claim text of a new row, or listed without an id
        texts = {r.claim: r.id for r in new_rows}
        expected_old = sorted((r.id or texts.get(r.claim) or "") for r in old_rows)
        assert sorted(r.id or "" for r in rows if r.old_verdict is not None) == expected_old, nb.notebook
        assert len(rows) == len(new_ids | {i for i in expected_old if i}) + expected_old.count(""), nb.notebook
        olds = {r.id: r for r in old_rows}
        for r in rows:
            assert r.causes, r
            if r.status == "kept" and r.id in olds and olds[r.id].regime is None:
                assert r.causes[0].startswith("regime: tagged"), r  # that archive predates the regime tags
        # that archive's records are of another policy: some row names the changed policy_sha
        assert any("`policy_sha`" in c for r in rows for c in r.causes), nb.notebook
    assert compared >= 1


def test_an_id_less_row_pairs_with_its_reworded_claim():
    """The claims text no longer names the workspace's PAPERS.md (REWORDED): an archived id-less row in the old wording
    still pairs with today's row; a row whose text differs otherwise does not."""
    old = [ClaimRow(None, "Polaris buys degenerate rollouts (no number in PAPERS.md)", "claim", "3PO", "Fig 3",
                    "holds", "0.1"),
           ClaimRow(None, "Polaris buys many degenerate rollouts (no number in PAPERS.md)", "claim", "3PO", "Fig 3",
                    "holds", "0.1")]
    new = [ClaimRow("polaris-degenerate", "Polaris buys degenerate rollouts (no number restated from the paper)",
                    "claim", "3PO", "Fig 3", "holds", "0.1")]
    out = compare(old, new)
    assert [(r.id, r.matched_by, r.status) for r in out] == [
        ("polaris-degenerate", "claim text", "kept"), (None, "none", "removed")]
