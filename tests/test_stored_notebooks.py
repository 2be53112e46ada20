"""The committed notebooks are whole executions. `notebooks/NN_*.ipynb`, the copy a reader opens, is the full-profile
execution of the committed records (`python -m rlvr_lib.study.reproduce --profile full` executes it in place; nbval
re-executes it from the committed run cache in `make test`, RLVR_CACHE_ONLY=1). A notebook whose code reads records a
recompute has not delivered yet keeps its quick execution there, and its earlier full execution stays in
`results/notebooks/full/` (the report reads it) until the records land: AWAITING_RECORDS names those notebooks, and
only shrinks. A notebook committed while papermill was still writing it has cells marked pending or running and no
end time; nbval-lax would pass it (it has no outputs to compare), so this is where it fails."""

import json
from pathlib import Path

import pytest

from rlvr_lib.study.reproduce import INJECTED_TAG, stored_profile

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in ROOT.glob("notebooks/*.ipynb") if not p.name.startswith("."))
EARLIER = ROOT / "results" / "notebooks" / "full"
STORED = sorted([*NOTEBOOKS, *EARLIER.glob("*.ipynb")])

AWAITING_RECORDS = {
    # Executed at the full profile from the committed cache, their current code (issue 56's protocol evaluations,
    # the second recompute's 50-problem wide evaluation) stops on CacheMiss: the records it reads are the second
    # recompute's (issue 58, results/recompute-58/), not committed yet. When a notebook's records are promoted
    # (`python -m rlvr_lib.study.staging promote ... --notebooks NN`), it is executed in place
    # (`python -m rlvr_lib.study.reproduce --profile full --only NN --force`) and leaves this set.
    "04_3po", "05_sage",
    "06_vigor", "07_head_to_head", "08_discovery",
}


def test_there_are_stored_notebooks():
    assert NOTEBOOKS  # an empty parametrisation below would pass silently


@pytest.mark.parametrize("path", STORED, ids=[str(p.relative_to(ROOT)) for p in STORED])
def test_every_cell_of_a_stored_notebook_finished(path):
    nb = json.loads(path.read_text())
    run = nb["metadata"].get("papermill", {})
    assert run.get("end_time") and not run.get("exception"), f"{path.name}: papermill did not finish it"
    # code cells only: the opening cell `make reproduce` adds after execution is markdown (`open_with_claims`)
    unfinished = {i: c.get("metadata", {}).get("papermill", {}).get("status") for i, c in enumerate(nb["cells"])
                  if c["cell_type"] == "code" and c.get("metadata", {}).get("papermill", {}).get("status") != "completed"}
    assert unfinished == {}, f"{path.name}: code cells not completed (index: status)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_a_reader_opens_is_the_full_profile_execution(path):
    """Papermill ran it with ``profile = "full"`` (its parameters and its one injected cell say so), so nbval
    re-executes it at the full profile, from the committed records; or it waits for its records (AWAITING_RECORDS),
    with its earlier full execution kept in results/notebooks/full/."""
    profile = stored_profile(path)
    if path.stem in AWAITING_RECORDS:
        assert profile == "quick", (f"{path.stem} is stored at the full profile: its records have landed, so take it "
                                    f"out of AWAITING_RECORDS (and its earlier copy out of {EARLIER.relative_to(ROOT)})")
        assert stored_profile(EARLIER / path.name) == "full", f"{path.stem}: no earlier full execution to show"
        return
    assert profile == "full", (f"{path.stem} is stored at the {profile} profile: execute it in place from the cache, "
                               f"RLVR_CACHE_ONLY=1 python -m rlvr_lib.study.reproduce --profile full --only {path.stem}")
    injected = [c for c in json.loads(path.read_text())["cells"] if INJECTED_TAG in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "".join(injected[0]["source"]).strip().endswith('profile = "full"'), path.stem
    assert not (EARLIER / path.name).exists(), f"two full executions of {path.stem}: remove the earlier one"


def test_awaiting_records_names_notebooks_only():
    assert AWAITING_RECORDS <= {p.stem for p in NOTEBOOKS}


def test_an_in_place_executions_temporary_and_failed_copies_are_ignored():
    """The full profile is executed in place: papermill's temporary file and a failed execution's annotated copy lie
    beside the notebook (hidden), never committed; the notebook itself is."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    paths = ["notebooks/.03_x.running.ipynb", "notebooks/.03_x.failed.ipynb", "notebooks/03_x.ipynb"]
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths],
                             capture_output=True, text=True, timeout=30).stdout.split()
    assert ignored == paths[:2]
