"""The budget page's plan of the second recompute (docs/budget.md) quotes its plan file
(results/testbed/recompute_plan_58.json), not numbers typed beside it."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readmes_plan_quotes_the_plan_file():
    plan = json.loads((ROOT / "results" / "testbed" / "recompute_plan_58.json").read_text())
    readme = " ".join((ROOT / "docs" / "budget.md").read_text().split())
    notebooks = {k: v for k, v in plan["notebooks"].items() if k != "07-small"}
    records = sum(v["records"] for v in notebooks.values())
    run_hours = sum(v["run_hours_uncut"] for v in notebooks.values())
    elapsed = sum(v["elapsed_hours"] for v in notebooks.values())
    assert abs(elapsed - plan["total_elapsed_hours"]) < 0.015
    assert f"| **total** | | **{records}** | **{run_hours:.2f}** | **{plan['total_elapsed_hours']:.2f}** " \
           f"({plan['total_elapsed_hours_uncut']:.2f} uncut) |" in readme
    for name, v in notebooks.items():
        label = "gate (`regimes --gate`)" if name == "gate" else name
        assert f"| {label} |" in readme and f"| {v['records']} | {v['run_hours_uncut']:.2f} | " \
                                              f"{v['elapsed_hours']:.2f} |" in readme, name
    assert f"the plan takes **{plan['total_elapsed_hours']:.2f} elapsed hours" in readme
    applied = [c for c in plan["cuts"] if c.get("applied")]
    assert len(applied) == 1 and "100 -> 50" in applied[0]["cut"]
