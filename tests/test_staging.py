"""A recompute's staged folders replace the committed ones; the previous ones go to the archive, nothing is lost."""

import json

import pytest

from rlvr_lib.study.staging import main, promote, staged_experiments


def _record(folder, name, value):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"value": value}))


@pytest.fixture
def roots(tmp_path):
    root, staging = tmp_path / "results", tmp_path / "results" / "recompute"
    _record(root / "grpo_baseline_full", "grpo-aaa-s0", "old")
    _record(staging / "grpo_baseline_full", "grpo-bbb-s0", "new")
    _record(staging / "sage_full", "sage-ccc-s0", "new")
    (staging / "empty_full").mkdir()
    executed = root / "notebooks" / "full" / "01_grpo.ipynb"
    executed.parent.mkdir(parents=True)
    executed.write_text("{}")
    return root, staging


def test_promote_moves_the_staged_folder_in_and_the_committed_one_to_the_archive(roots):
    root, staging = roots
    assert staged_experiments(staging) == ["grpo_baseline_full", "sage_full"]
    moves = promote(["grpo_baseline_full", "sage_full"], staging, "pre-x", notebooks=["01_grpo"], root=root)
    assert len(moves) == 4
    assert json.loads((root / "grpo_baseline_full" / "grpo-bbb-s0.json").read_text())["value"] == "new"
    assert not (root / "grpo_baseline_full" / "grpo-aaa-s0.json").exists()
    assert json.loads((root / "archive" / "pre-x" / "grpo_baseline_full" / "grpo-aaa-s0.json").read_text())["value"] == "old"
    assert (root / "sage_full" / "sage-ccc-s0.json").exists()  # no committed folder before: moved in, nothing archived
    assert not (root / "archive" / "pre-x" / "sage_full").exists()
    assert (root / "archive" / "pre-x" / "notebooks" / "full" / "01_grpo.ipynb").exists()
    assert not (root / "notebooks" / "full" / "01_grpo.ipynb").exists() and staged_experiments(staging) == []
    # each staged folder is now a relative link to where it went: a later run of the recompute writes there
    for name in ("grpo_baseline_full", "sage_full"):
        link = staging / name
        assert link.is_symlink() and str(link.readlink()) == f"../{name}"
    _record(staging / "sage_full", "sage-ddd-s1", "later")
    assert (root / "sage_full" / "sage-ddd-s1.json").exists()
    with pytest.raises(ValueError, match=r"not one promoted already"):  # a link is never promoted again
        promote(["sage_full"], staging, "pre-y", root=root)


def test_promote_refuses_bad_input_and_moves_nothing(roots):
    root, staging = roots
    with pytest.raises(ValueError, match="experiment"):
        promote(["empty_full"], staging, "pre-x", root=root)
    with pytest.raises(ValueError, match="experiment"):
        promote(["../grpo_baseline_full"], staging, "pre-x", root=root)
    with pytest.raises(ValueError, match="archive"):
        promote(["grpo_baseline_full"], staging, "a/b", root=root)
    (root / "archive" / "pre-x" / "grpo_baseline_full").mkdir(parents=True)
    with pytest.raises(ValueError, match="an archive without grpo_baseline_full"):
        promote(["grpo_baseline_full"], staging, "pre-x", root=root)
    assert (root / "grpo_baseline_full" / "grpo-aaa-s0.json").exists()  # nothing moved
    assert (staging / "grpo_baseline_full" / "grpo-bbb-s0.json").exists()


def test_the_command_line_promotes_and_a_bad_folder_is_a_usage_error(roots, monkeypatch, capsys):
    root, staging = roots
    monkeypatch.setenv("RLVR_RESULTS_DIR", str(root))
    assert main(["promote", "sage_full", "--staging", str(staging), "--archive", "pre-x"]) == 0
    assert "sage_full" in capsys.readouterr().out and (root / "sage_full").is_dir()
    with pytest.raises(SystemExit) as exit_info:
        main(["promote", "nope_full", "--staging", str(staging), "--archive", "pre-x"])
    assert exit_info.value.code == 2


def test_the_staged_gate_report_is_the_committed_gate_outcome():
    """The recompute's staging root keeps the discovery gate's outcome beside the records it read; it is the file
    ``regimes --gate`` wrote from them (results/testbed/discovery_gate.json), byte for byte, and it passed."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "results"
    staged = results / "recompute-58" / "testbed" / "discovery_gate.json"
    if not staged.exists():
        pytest.skip("no recompute is staged at this checkout")
    assert staged.read_bytes() == (results / "testbed" / "discovery_gate.json").read_bytes()
    assert json.loads(staged.read_text())["gate"]["passed"] is True


def test_promote_copies_the_committed_full_copy_that_is_also_the_notebook(roots, tmp_path, monkeypatch):
    """At the committed results root the full-profile execution is ``notebooks/<stem>.ipynb`` (executed in place):
    promote archives a copy and leaves the notebook where a reader opens it; a notebook still stored at the quick
    profile has its earlier full execution under ``notebooks/full/``, which is moved as before."""
    import nbformat

    from rlvr_lib.study import executions

    root, staging = roots
    src = tmp_path / "nbs"
    src.mkdir()
    monkeypatch.setattr(executions, "_committed_results_root", lambda: root)
    monkeypatch.setattr(executions, "_default_notebooks_dir", lambda: src)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["papermill"] = {"parameters": {"profile": "full"}, "end_time": "2026-01-01T00:00:00"}
    nbformat.write(nb, str(src / "03_nudgerl.ipynb"))
    nb.metadata["papermill"] = {"parameters": {}, "end_time": "2026-01-01T00:00:00"}  # stored at the quick profile
    nbformat.write(nb, str(src / "01_grpo.ipynb"))
    stored = (src / "03_nudgerl.ipynb").read_bytes()
    moves = promote(["sage_full"], staging, "pre-x", notebooks=["03_nudgerl", "01_grpo"], root=root)
    shelf = root / "archive" / "pre-x" / "notebooks" / "full"
    assert moves[-2:] == [(src / "03_nudgerl.ipynb", shelf / "03_nudgerl.ipynb"),
                          (root / "notebooks" / "full" / "01_grpo.ipynb", shelf / "01_grpo.ipynb")]
    assert (shelf / "03_nudgerl.ipynb").read_bytes() == stored == (src / "03_nudgerl.ipynb").read_bytes()
    assert (shelf / "01_grpo.ipynb").exists() and not (root / "notebooks" / "full" / "01_grpo.ipynb").exists()
    assert (src / "01_grpo.ipynb").exists()  # the quick copy stays: the notebook is executed in place next
    with pytest.raises(ValueError, match="notebook"):
        promote(["grpo_baseline_full"], staging, "pre-y", notebooks=["../x"], root=root)
