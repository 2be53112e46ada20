"""The committed notebooks are whole executions: the quick-profile outputs nbval checks (`notebooks/`) and the
full-profile copies the report reads (`results/notebooks/full/`). A notebook committed while papermill was still
writing it has cells marked pending or running and no end time; nbval-lax would pass it (it has no outputs to
compare), so this is where it fails."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("results/notebooks/full/*.ipynb")])


def test_there_are_stored_notebooks():
    assert list(ROOT.glob("notebooks/*.ipynb"))  # an empty parametrisation below would pass silently


@pytest.mark.parametrize("path", STORED, ids=[str(p.relative_to(ROOT)) for p in STORED])
def test_every_cell_of_a_stored_notebook_finished(path):
    nb = json.loads(path.read_text())
    run = nb["metadata"].get("papermill", {})
    assert run.get("end_time") and not run.get("exception"), f"{path.name}: papermill did not finish it"
    # code cells only: the opening cell `make reproduce` adds after execution is markdown (`open_with_claims`)
    unfinished = {i: c.get("metadata", {}).get("papermill", {}).get("status") for i, c in enumerate(nb["cells"])
                  if c["cell_type"] == "code" and c.get("metadata", {}).get("papermill", {}).get("status") != "completed"}
    assert unfinished == {}, f"{path.name}: code cells not completed (index: status)"
