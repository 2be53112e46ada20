"""README's rendered parts and the results and reliability pages are exactly what `rlvr_lib.study.report` renders
from results/; the prose that quotes committed reports by hand follows them."""

import json
import re

import pytest

from rlvr_lib.study.report import (DOCS, END, README, README_PARTS, REPRODUCE_WORKERS, RESULTS_PAGE, START, marked,
                                   render, render_readme, section)
from rlvr_lib.tasks.arithmetic import TESTBED_VERSION

README_MAX_LINES = 250


def _words(*pages: str) -> str:
    """The docs pages' text (``docs/<page>``), whitespace collapsed: where README's former sections now live."""
    return " ".join(" ".join((DOCS / page).read_text().split()) for page in pages)


def test_results_page_matches_committed_results():
    assert section(RESULTS_PAGE, START, END) == render(), (
        "run `python -m rlvr_lib.study report` after changing results/")


def test_readme_is_a_front_page_whose_rendered_parts_match_the_results():
    """README holds at most 250 lines, and its scorecard, found lines, command times and methods table are the
    render of the committed results."""
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README has {len(lines)} lines: move a section to docs/"
    parts = render_readme()
    for name in README_PARTS:
        assert section(README, *marked(name)) == parts[name], f"README's {name}: run `python -m rlvr_lib.study report`"
    assert parts["scorecard"].startswith("**Scorecard**") and "| all |" in parts["scorecard"]
    assert 1 <= len(parts["found"].splitlines()) <= 10
    # The first screen: what this is, the two commands, the headline figure and the scorecard, in that order,
    # before any other section.
    text = README.read_text()
    head = text.split("\n## ", 2)
    assert head[1].startswith("The two commands\n") and "make test " in head[1] and "make reproduce " in head[1]
    assert "![" in head[1] and "docs/figures/claims.png" in head[1] and marked("scorecard")[0] in head[1]
    assert text.index("make reproduce ") < text.index("docs/figures/claims.png") < text.index(marked("scorecard")[0])
    # Every page README links (the paper pages of the methods table included) is in the repository.
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert links and [link for link in links if not (README.parent / link).exists()] == []


def test_every_claims_row_is_read_for_the_headline_figure():
    """The claims forest reads every claims row the scorecard counts, each with its interval around its effect."""
    from rlvr_lib.study.report import claims_rows, scorecard

    rows, card = claims_rows(), scorecard()
    assert len(rows) == sum(sum(c.values()) for c in card.values())
    for paper, counts in card.items():  # the figure's verdicts are the scorecard's, paper by paper
        assert {v: sum(r["paper"] == paper and r["verdict"] == v for r in rows) for v in counts} == counts, paper
    assert all(not r["low"] <= r["high"] or r["low"] <= r["our_effect"] <= r["high"] for r in rows)


def test_the_budget_verdicts_are_rendered_never_typed_into_the_two_commands_page():
    """Whether the committed runs fit each budget is the report's to say (from the records): the two commands' page
    names the budgets and points to the rendered lines, and states no verdict of its own that could drift."""
    from rlvr_lib.study.report import _budget_section
    from rlvr_lib.study.runs import results_root

    opening = " ".join((DOCS / "checking.md").read_text().split("## How long each takes", 1)[0].split())
    assert "Whether the committed runs fit each budget" in opening and "is rendered from the records" in opening
    assert not re.search(r"took less than|less than its own|within (it|its|the \d+)|over (it|its|the \d+)", opening)
    budgets = [line for line in _budget_section(results_root()) if line.startswith("- ")]
    assert len(budgets) == 4 and all(re.search(r", (within it \(|\*\*over it by)", line) for line in budgets), budgets


def test_the_compute_tables_workers_are_make_reproduces():
    makefile = (README.parent / "Makefile").read_text()
    assert re.search(r"^WORKERS \?= (\d+)$", makefile, re.M).group(1) == str(REPRODUCE_WORKERS)


def _fake_final(correct):
    fam = {"correct_counts": correct, "uids": [f"p{i}" for i in range(len(correct))],
           "pass_at_k": {"1": sum(correct) / (4 * len(correct)), "4": sum(c > 0 for c in correct) / len(correct)}}
    average = {"pass_at_k": fam["pass_at_k"], "families": ["a"], "strategy_entropy": 0.5, "malformed_rate": 0.01,
               "mean_modes": 2.0, "mean_length": 10.0}
    return {"families": {"a": fam}, "average": average}


def test_render_reads_shared_rows_and_sums_compute(tmp_path):
    from rlvr_lib.study.runs import cached_run

    def add(experiment, name, seed, correct, history=({"accuracy": 0.5},)):
        cfg = {"eval": {"samples": 4}, "name": name}
        cached_run(experiment, name, cfg, seed, lambda: (list(history), _fake_final(correct)), root=tmp_path)

    for seed in (0, 1):
        add("baselines_full", "base", seed, [1, 0, 2], history=())
        add("baselines_full", "grpo", seed, [2, 1, 4])
        add("baselines_full", "pope", seed, [4, 0, 4])
        add("nudgerl_full", "nudgerl", seed, [4, 4, 4])
    text = render(tmp_path)
    nudgerl = text.split("**NudgeRL**", 1)[1].split("\n\n**", 1)[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in nudgerl.splitlines() if line.startswith("| ")}
    assert {"base", "pope", "nudgerl"} <= set(rows) and "grpo" not in rows  # 02's base and POPE are 03's rows too
    assert rows["pope"].split(" | ")[1] == "2" and rows["pope"].split(" | ")[2].startswith("0.667")  # 16/24 correct
    compute = text.split("**Compute**", 1)[1]
    assert "| 02_baselines_sage_t1_anchors | 6 |" in compute  # base, grpo and pope x2, counted once
    assert "| 03_nudgerl | 2 |" in compute
    row = next(line for line in compute.splitlines() if line.startswith("| 02_"))
    run_hours, elapsed = (float(cell) for cell in row.split(" | ")[2:4])
    assert elapsed == pytest.approx(run_hours / 2, abs=0.006)  # two workers, never idle


def test_the_compute_section_names_the_processors_of_notebook_00s_calibrations(tmp_path):
    import json

    from rlvr_lib.study.runs import cached_run

    for seed in (0, 1):
        cached_run("testbed_dynamics", "grpo", {"name": "grpo"}, seed, lambda: ([], {}), root=tmp_path)
    (tmp_path / "testbed").mkdir()
    # The reports name their machines; the folder's runs (made here) are not what the line reports.
    (tmp_path / "testbed" / "dynamics.json").write_text(json.dumps({"processors": ["Other CPU"]}))
    (tmp_path / "testbed" / "calibration.json").write_text(json.dumps({"machine": {"cpu_model": "Some CPU"}}))
    (tmp_path / "testbed" / "premises.json").write_text(json.dumps({"seconds": {}}))  # written before machines
    from rlvr_lib.study.report import _budget_section

    line = next(l for l in _budget_section(tmp_path) if l.startswith("Notebook 00"))
    assert "holds 2 dynamics runs" in line
    assert "made on dynamics: Other CPU; static: Some CPU; premises: not recorded;" in line


def test_the_dynamics_folder_line_splits_its_runs_by_policy(tmp_path, monkeypatch):
    """The second size's dynamics runs share notebook 00's folder: the line says how many and how long per policy."""
    import json

    from rlvr_lib.policy import load
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.study.report import _budget_section
    from rlvr_lib.study.runs import cached_run

    small = tmp_path / "small-mul"
    small.mkdir()
    (small / "config.json").write_text('{"hidden_size": 192}')
    monkeypatch.setitem(load.POLICY_NAMES, "small", small)
    for seed, sha, hours in ((0, policy_fingerprint(None), 1.0), (1, policy_fingerprint(None), 0.5),
                             (0, policy_fingerprint("small"), 2.25)):
        record = cached_run("testbed_dynamics", "grpo", {"policy_sha": sha}, seed, lambda: ([], {}), root=tmp_path)
        path = tmp_path / "testbed_dynamics" / f"{record.run_id}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "wall_time_s": hours * 3600}))
    line = next(l for l in _budget_section(tmp_path) if l.startswith("Notebook 00"))
    assert ("holds 3 dynamics runs (3.75 run hours): 2 of the shipped policy (1.50 run hours), 1 of `small` (2.25)."
            in line)


def test_each_budget_sums_its_notebooks_runs_on_the_shipped_policy_and_says_whether_they_fit(tmp_path, monkeypatch):
    """The 12 hours are notebooks 01-06's; notebook 07 has its own budget; the second size's runs get their own
    row and count toward neither: their own budget line adds the second size's pretraining, static calibration
    and dynamics runs (work outside `make reproduce`)."""
    import json

    from rlvr_lib.policy import load
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.study import papers
    from rlvr_lib.study.report import BUDGETS, SECTIONS, _budget_section
    from rlvr_lib.study.runs import cached_run

    assert sorted(nb for _, notebooks, _, _ in BUDGETS for nb in notebooks) == sorted(nb for _, _, nb, _ in SECTIONS)
    assert [(label, hours, policy) for label, _, hours, policy in BUDGETS] \
        == [(re.sub(r", issue \d+", "", b.label), b.hours, b.policy)  # the manifest's budgets, each over its
            for b in papers.BUDGETS]                                      # notebooks (no "issue N" on the page)
    small = tmp_path / "small-mul"
    small.mkdir()
    (small / "config.json").write_text('{"hidden_size": 192}')
    monkeypatch.setitem(load.POLICY_NAMES, "small", small)
    shipped, second = policy_fingerprint(None), policy_fingerprint("small")
    for experiment, name, sha, hours in (("grpo_baseline_full", "grpo", shipped, 10.0),
                                         ("baselines_full", "grpo", shipped, 16.0),
                                         ("head_to_head_full", "grpo", shipped, 3.0),
                                         ("head_to_head_full", "grpo", second, 7.0)):
        cfg = {"eval": {"samples": 4}, "name": name, "policy_sha": sha, "task_version": TESTBED_VERSION}
        cached_run(experiment, name, cfg, 0, lambda: ([], _fake_final([1, 0, 2])), root=tmp_path)
        for path in (tmp_path / experiment).glob(f"{name}-*.json"):
            record = json.loads(path.read_text())
            if record["config"]["policy_sha"] == sha:
                path.write_text(json.dumps({**record, "wall_time_s": hours * 3600}))
    lines = _budget_section(tmp_path)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:4] for line in lines if line.startswith("| 0")}
    assert rows["07_head_to_head"] == ["1", "3.00", "1.50"]
    assert rows["07_head_to_head, policy `small`"] == ["1", "7.00", "3.50"]
    budget = [line for line in lines if line.startswith("- ")]
    assert budget[0].startswith("- notebooks 01-06") and "take 13.00, **over it by 1.00**" in budget[0]
    assert budget[1].startswith("- notebook 07") and "take 1.50, within it (1.00 to spare)" in budget[1]
    assert budget[2].startswith("- notebook 08") and "take 0.00" in budget[2]  # no run of the discovery policy here
    assert len(budget) == 3  # the second size's own line needs its pretraining log and static calibration
    (small / "pretrain_log.json").write_text('{"train_seconds": 1800.0}')
    (tmp_path / "testbed").mkdir()
    (tmp_path / "testbed" / "calibration-small.json").write_text('{"seconds": 900}')
    record = cached_run("testbed_dynamics", "grpo", {"policy_sha": second}, 0, lambda: ([], {}), root=tmp_path)
    path = tmp_path / "testbed_dynamics" / f"{record.run_id}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "wall_time_s": 3600.0}))
    budget = [line for line in _budget_section(tmp_path) if line.startswith("- ")]
    # one thread in turn (0.5 + 0.25), then (1 + 7) run hours over two workers
    assert budget[3] == ("- the second model size (`make second-size` and notebook 07's runs on it): "
                         "a budget of 6 elapsed hours; its pretraining 0.50 and static calibration 0.25 hours on one "
                         "thread, then its dynamics runs 1.00 and notebook 07's runs 7.00 run hours on 2 workers take "
                         "4.75, within it (1.25 to spare).")


def _ci(lo, hi):
    return {"mean": (lo + hi) / 2, "ci_low": lo, "ci_high": hi, "n": 5, "method": "m"}


def _table(rows):
    from rlvr_lib.study.claims.tables import claims_table

    return claims_table([dict(id=f"c{i}", claim=f"claim {i}", source=source, paper="T1", paper_effect="-",
                              ours=_ci(lo, hi), expect=">", against="base", reference=ref, regime="retention",
                              premise="none")
                         for i, (source, lo, hi, ref) in enumerate(rows)])


def _write(path, tables):
    import nbformat

    from rlvr_lib.study.claims.tables import claims_summary

    cells = []
    for table in tables:
        cell = nbformat.v4.new_code_cell("display(Markdown(summary))")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": claims_summary(table)})]
        cells.append(cell)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))


def test_claims_line_and_scorecard_count_what_the_executed_notebooks_show(tmp_path):
    from rlvr_lib.study.claims.tables import verdict_counts
    from rlvr_lib.study.report import scorecard

    no_ref = "the row is GRPO's own"
    nudgerl = _table([("NudgeRL", 0.01, 0.02, _ci(0.01, 0.02)), ("NudgeRL", -0.02, -0.01, no_ref),
                      ("NudgeRL", -0.01, 0.02, no_ref)])
    sage = _table([("SAGE", 0.01, 0.02, no_ref), ("SAGE", 0.01, 0.02, _ci(-0.01, 0.0)), ("3PO", 0.1, 0.2, no_ref)])
    sage_k3 = _table([("SAGE", -0.3, -0.2, no_ref), ("SAGE", 0.01, 0.02, _ci(0.03, 0.04))])
    executed = tmp_path / "notebooks" / "full"
    executed.mkdir(parents=True)
    _write(executed / "03_nudgerl.ipynb", [nudgerl])
    _write(executed / "02_baselines_sage_t1_anchors.ipynb", [])  # no claims
    _write(executed / "05_sage.ipynb", [sage, sage_k3])  # a second table: both are counted
    text = render(tmp_path)
    lines = [line for line in text.splitlines() if line.startswith("Claims table and figures")]
    assert lines == [
        "Claims table and figures: `results/notebooks/full/02_baselines_sage_t1_anchors.ipynb`.",
        "Claims table and figures: `results/notebooks/full/03_nudgerl.ipynb` (0 reproduced, 1 contradicted, "
        "1 unresolved, 1 not specific, 0 premise absent of 3 claims).",
        "Claims table and figures: `results/notebooks/full/05_sage.ipynb` (3 reproduced, 1 contradicted, "
        "0 unresolved, 1 not specific, 0 premise absent of 5 claims, over 2 claims tables).",
    ]

    # the scorecard's counts equal the tables': per paper, summed over tables and notebooks
    card = scorecard(tmp_path)
    expected: dict = {}
    for table in (nudgerl, sage, sage_k3):
        for paper in table["source"].unique():
            mine = expected.setdefault(paper, {v: 0 for v in verdict_counts(table)})
            for v, c in verdict_counts(table[table["source"] == paper]).items():
                mine[v] += c
    assert card == expected
    assert list(card) == ["NudgeRL", "3PO", "SAGE"]  # papers in PAPER_NAMES order
    rows = {line.split(" | ")[0].strip("| "): line for line in text.split("**Scorecard**", 1)[1].splitlines()
            if line.startswith("| ")}
    assert rows["SAGE"] == "| SAGE | 4 | 2 | 1 | 0 | 1 | 0 | 0.1 (95%: at most 1) |"
    assert rows["all"].startswith("| all | 8 | 3 | 2 | 1 | 2 | 0 | 0.2 ")
    assert ("Not in the scorecard (their executed copies show no three-verdict claims table; re-execute them from "
            "the cache): `02_baselines_sage_t1_anchors`.") in text

def test_the_guide_is_rendered_from_notebook_07s_map(tmp_path):
    import nbformat
    import numpy as np

    from rlvr_lib.study import head_to_head as h2h

    executed = tmp_path / "notebooks" / "full"
    executed.mkdir(parents=True)
    assert "Which method for which situation" not in render(tmp_path)  # no executed notebook 07, no guide
    levels, reference = np.array([0.0, 0.0, 0.5, 0.5]), np.tile([0.2, 0.2, 0.6, 0.6], (2, 1))
    gains = h2h.gain_map(levels, {"NudgeRL": reference + [0.3, 0.3, 0, 0]}, reference, edges=[0.0])
    rare = {"NudgeRL": {"mean": 0.0, "ci_low": -0.1, "ci_high": 0.1},
            "forward KL": {"mean": 0.25, "ci_low": 0.15, "ci_high": 0.35}}
    summary = h2h.map_summary(gains, beside={"rare pass@256 minus GRPO's": rare})
    cell = nbformat.v4.new_code_cell("display(Markdown(h2h.map_summary(gains, beside=...)))")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": summary})]
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), str(executed / "07_head_to_head.ipynb"))
    text = render(tmp_path)
    section = text.split("**Which method for which situation**", 1)[1]
    assert "beside the map, read the same way: rare pass@256 minus GRPO's):" in section
    assert "| arm | <= 0 | > 0 | rare pass@256 minus GRPO's |" in section
    assert "| NudgeRL | +0.300 [0.300, 0.300] helps | +0.000 [0.000, 0.000] | +0.000 [-0.100, 0.100] |" in section
    assert "| forward KL | - | - | +0.250 [0.150, 0.350] above 0 |" in section
    # every statement names its regime (issue 55, item 5): notebook 07's rows are all on the retention regime
    assert section.startswith(" (every statement on the retention regime, where the rare strategy earns (almost) no "
                              "reward in training")
    assert "- **forward KL** (retention regime): rare pass@256 minus GRPO's +0.250 [0.150, 0.350] (above 0)." in section
    assert ("In short, on the retention regime: NudgeRL gains over GRPO's pass@1 in some bucket. rare pass@256 minus "
            "GRPO's: above 0 for forward KL (+0.250); no difference shown for the other 1.") in section
    # a method that needs the discovery premise says whether it is measured there
    assert ("- **NudgeRL** (retention regime; the discovery premise its exploration needs: not measured): use it over "
            "GRPO where the base policy's per-problem pass@1 is <= 0 (+0.300") in section
    assert "the discovery premise, which the exploration of NudgeRL needs, is not measured there;" in section
    bullets = [line for line in section.splitlines() if line.startswith("- **")]
    assert len(bullets) == 2 and all("regime" in line.split(":")[0] for line in bullets)
    (tmp_path / "testbed").mkdir(exist_ok=True)
    (tmp_path / "testbed" / "regimes.json").write_text(json.dumps(
        {"retention": {"share": 0.0017, "correct": 41, "samples": 23808, "problems": 372, "problems_with_success": 30,
                       "bound": 0.005, "discovery_premise": "absent"}}))
    text = render(tmp_path)
    assert ("the discovery premise, which the exploration of NudgeRL needs, is absent there (hinted round earns reward "
            "on 0.17% of fresh samples of the RL pool (41 of 23808; bound 0.5%)); the discovery regime's statements "
            "follow under notebook 08; read off") in text
    assert "- **NudgeRL** (retention regime; the discovery premise its exploration needs: absent): use it" in text
    assert "What the testbed cannot tell: The testbed is a 0.62M-parameter policy" in section
    assert "not the papers' 4B-7B" in section  # notebook 07's own limits
    assert text.count("Which method for which situation") == 1  # only notebook 07's section carries it


def test_dynamics_and_policy_of_each_section_are_rendered(tmp_path):
    import json

    from rlvr_lib.study.runs import cached_run
    from rlvr_lib.policy.load import policy_fingerprint

    target = lambda v, met, ci: {"value": v, "bound": ">= 0.05, interval above 0", "met": met,  # noqa: E731
                                 "interval": ci}
    reported = {"value": 1.6, "bound": "(lost - null) / rescued >= 3.0", "met": False, "gates": False}
    report = {"policy_sha": "abc", "chosen_steps": 200, "config": {"seeds": [0, 1, 2], "base_seeds": [0, 1]},
              "kl_coef": 0.1,
              "search": [{"kl_coef": 0.05, "chosen_steps": None,
                          "targets_by_steps": {"200": {"pass_at_1_gain": target(0.04, False, [0.03, 0.05])}}},
                         {"kl_coef": 0.1, "chosen_steps": 200, "targets_by_steps": {
                             "100": {"pass_at_1_gain": target(0.03, False, [0.02, 0.04]), "lost_main": reported},
                             "200": {"pass_at_1_gain": target(0.07, True, [0.06, 0.08]), "lost_main": reported}}}],
              "targets": {"pass_at_1_gain": target(0.07, True, [0.06, 0.08])}, "reported": {"lost_main": reported}}
    (tmp_path / "testbed").mkdir()
    (tmp_path / "testbed" / "dynamics.json").write_text(json.dumps(report))
    for name, sha in (("base", "old0000000000000"), ("grpo-g8", "old0000000000000")):
        cfg = {"eval": {"samples": 4}, "name": name, "policy_sha": sha}
        cached_run("grpo_baseline_full", name, cfg, 0, lambda: ([], _fake_final([1, 0, 2])), root=tmp_path)
    text = render(tmp_path)
    dynamics = text.split("**Dynamics calibration**", 1)[1]
    assert "anchor beta 0.1; step count of the full profile: 200" in dynamics
    assert "| lost_main (reported, not a gate) | (lost - null) / rescued >= 3.0 | 1.6 **no** | 1.6 **no** |" in dynamics
    assert "every beta tried, at 200 steps" in dynamics
    assert "| target | beta 0.05 | beta 0.1 |" in dynamics
    assert "| pass_at_1_gain | 0.04 **no** | 0.07 yes |" in dynamics
    assert "| pass_at_1_gain | >= 0.05, interval above 0 | 0.03 [0.02, 0.04] **no** | 0.07 [0.06, 0.08] yes |" in dynamics
    grpo = text.split("**GRPO", 1)[1].split("\n", 1)[0]
    assert (f"a previous policy or testbed** (`old0000000000000`, an earlier testbed), not the shipped "
            f"`{policy_fingerprint(None)}` on `{TESTBED_VERSION}`") in grpo


def test_a_recompute_in_progress_gets_its_own_table_first(tmp_path):
    """Runs on the shipped policy and testbed beside earlier ones: two tables, never pooled (their problems differ)."""
    from rlvr_lib.study.runs import cached_run
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.study.report import _method_section

    shipped = policy_fingerprint(None)
    for name, sha, version, correct in (("base", "old0000000000000", None, [1, 0, 2]),
                                        ("grpo-g8", "old0000000000000", None, [2, 2, 2]),
                                        ("base", shipped, TESTBED_VERSION, [0, 0, 1])):
        cfg = {"eval": {"samples": 4}, "name": name, "policy_sha": sha, **({"task_version": version} if version else {})}
        cached_run("grpo_baseline_full", name, cfg, 0, lambda c=correct: ([], _fake_final(c)), root=tmp_path)
    lines = _method_section(tmp_path, "grpo_baseline_full", "GRPO baseline")
    titles = [i for i, line in enumerate(lines) if line.startswith("**GRPO baseline**")]
    assert len(titles) == 2
    assert f"policy `{shipped}` on testbed `{TESTBED_VERSION}`, the shipped ones" in lines[titles[0]]
    assert "an earlier testbed" in lines[titles[1]]
    first = lines[titles[0]:titles[1]]
    assert [line.split(" | ")[0] for line in first if line.startswith("| ") and not line.startswith("| run")] == ["| base"]


def test_the_second_model_size_gets_its_own_table_named_as_such(tmp_path, monkeypatch):
    """Notebook 07's second-size runs share its folder, told apart by policy: one table for them, named."""
    from rlvr_lib.policy import load
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.study.report import _method_section
    from rlvr_lib.study.runs import cached_run

    small = tmp_path / "small-mul"
    small.mkdir()
    (small / "config.json").write_text('{"hidden_size": 192}')
    monkeypatch.setitem(load.POLICY_NAMES, "small", small)
    shipped, second = policy_fingerprint(None), policy_fingerprint("small")
    for name, sha, correct in (("grpo", shipped, [1, 0, 2]), ("grpo", second, [2, 2, 2])):
        cfg = {"eval": {"samples": 4}, "name": name, "policy_sha": sha, "task_version": TESTBED_VERSION}
        cached_run("head_to_head_full", name, cfg, 0, lambda c=correct: ([], _fake_final(c)), root=tmp_path)
    lines = [line for line in _method_section(tmp_path, "head_to_head_full", "Head to head")
             if line.startswith("**Head to head**")]
    assert len(lines) == 2 and "the shipped ones" in lines[0]
    assert (f"policy `{second}`, the second model size (`small`), on the shipped testbed `{TESTBED_VERSION}`"
            in lines[1])


def test_a_table_whose_runs_come_from_two_processor_models_says_so(tmp_path):
    """Issue 31, item 5: the table's title names its processor; rows made on two models mark the table.
    Issue 35: it names the commits its runs were made at, the first to the last by start time."""
    import json

    from rlvr_lib.study.runs import cached_run
    from rlvr_lib.study.report import _method_section

    for name, seed in (("base", 0), ("grpo-g8", 0), ("grpo-g8", 1)):
        cfg = {"eval": {"samples": 4}, "name": name}
        cached_run("grpo_baseline_full", name, cfg, seed, lambda: ([], _fake_final([1, 0, 2])), root=tmp_path)
    title = lambda: next(line for line in _method_section(tmp_path, "grpo_baseline_full", "GRPO")  # noqa: E731
                         if line.startswith("**GRPO**"))
    paths = sorted((tmp_path / "grpo_baseline_full").glob("*.json"))
    for i, path in enumerate(paths):
        record = json.loads(path.read_text())
        record["extra"]["machine"]["cpu_model"] = "Model A"
        record["git_commit"], record["started"] = str(2 - i) * 40, f"2026-01-0{i + 1}T00:00:00+00:00"
        path.write_text(json.dumps(record))
    assert "; processor Model A; made at 3 commits, `2222222` to `0000000`)" in title() and "mixed" not in title()
    for path in paths:
        record = json.loads(path.read_text())
        record["git_commit"] = "a" * 40
        path.write_text(json.dumps(record))
    assert "; processor Model A; made at commit `aaaaaaa`)" in title()
    record = json.loads(paths[-1].read_text())
    record["extra"]["machine"]["cpu_model"] = "Model B"
    paths[-1].write_text(json.dumps(record))
    assert "**mixed processors** (Model A: 2 runs, Model B: 1 run)" in title()


def test_the_last_verification_is_rendered_under_the_results(tmp_path):
    """The results page shows `make verify`'s date, commit, draw and every comparison."""
    import json

    from rlvr_lib.study.report import render

    assert "*No verification committed yet" in render(tmp_path)
    runs = [{"notebook": "02_baselines_sage_t1_anchors", "experiment": "baselines_full", "run_id": "grpo-abc-s0",
             "record_processor": "AMD EPYC", "record_commit": "a" * 40, "mode": "exact", "match": True,
             "detail": "bit-identical"},
            {"notebook": "03_nudgerl", "experiment": "nudgerl_full", "run_id": "nudgerl-def-s1",
             "record_processor": "Intel Xeon", "record_commit": "b" * 40, "mode": "tolerance", "match": False,
             "detail": "outside the seed spread: final pass@1 +0.0500"}]
    (tmp_path / "verification.json").write_text(json.dumps(
        {"date": "2026-12-04T03:00:00+00:00", "commit": "f" * 40, "processor": "AMD EPYC", "seed": 7,
         "per_notebook": 1, "runs": runs, "matches": 1, "mismatches": 1, "unverifiable": 0}))
    for experiment, run_id, commit in (("baselines_full", "grpo-abc-s0", "a" * 40),  # the verified record
                                       ("nudgerl_full", "nudgerl-def-s1", "c" * 40)):  # recomputed since
        (tmp_path / experiment).mkdir()
        (tmp_path / experiment / f"{run_id}.json").write_text(json.dumps({"git_commit": commit}))
    text = render(tmp_path)
    assert ("`make verify` on 2026-12-04, commit `fffffff`, AMD EPYC; 1 run(s) per notebook drawn with seed 7: "
            "1 match, 1 mismatch, 0 unverifiable") in text
    assert "| 02_baselines_sage_t1_anchors | `grpo-abc-s0` | AMD EPYC | exact | match: bit-identical |" in text
    assert ("| 03_nudgerl | `nudgerl-def-s1` (record replaced since: archived or recomputed) | "
            "Intel Xeon | tolerance | **mismatch**: outside the seed spread: final pass@1 +0.0500 |") in text


# --------------------------------------------------------------------------- reliability table


def test_readme_reliability_table_matches_committed_results():
    from rlvr_lib.study.report import RELIABILITY_END, RELIABILITY_START, render_reliability

    from rlvr_lib.study.report import RELIABILITY_PAGE

    assert section(RELIABILITY_PAGE, RELIABILITY_START, RELIABILITY_END) == render_reliability(), (
        "run `python -m rlvr_lib.study report` after `pytest tests/hostile`")


def _suite(tmp_path, classes):
    from rlvr_lib.files import write_json_atomic

    write_json_atomic(tmp_path / "hostile" / "suite.json",
                      {"date": "2030-01-02T03:04:05+00:00", "git_commit": "0123456789abcdef", "worktree_clean": True,
                       "duration_s": 1.0, "command": "pytest tests/hostile", "classes": classes})


def _rows(text):
    return {line.split(" | ")[0].strip("| "): [cell.strip(" |") for cell in line.split(" | ")[1:]]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| class")}


def test_reliability_table_reads_the_suite_json(tmp_path):
    from rlvr_lib.study.report import render_reliability

    _suite(tmp_path, {
        "sandbox escape": {"tried": 10, "passed": 10, "failed": 0, "skipped": 0, "host_checked": True},
        "math answers": {"tried": 4, "passed": 4, "failed": 0, "skipped": 1, "host_checked": False},
    })
    text = render_reliability(tmp_path)
    assert "on 2030-01-02, commit `0123456789`; 14 of 14 inputs blocked or graded right" in text
    assert _rows(text) == {"sandbox escape": ["10", "10", "yes"],
                           "math answers": ["4 (1 skipped)", "4", "n/a (grading only)"]}


def test_reliability_table_shows_a_failing_case_as_not_all_passed(tmp_path):
    from rlvr_lib.study.report import render_reliability

    _suite(tmp_path, {
        "sandbox forgery": {"tried": 5, "passed": 4, "failed": 1, "skipped": 0, "host_checked": True},
        "math answers": {"tried": 3, "passed": 2, "failed": 1, "skipped": 0, "host_checked": False},
    })
    text = render_reliability(tmp_path)
    assert "6 of 8 inputs blocked or graded right" in text
    rows = _rows(text)
    assert rows["sandbox forgery"] == ["5", "**4 (1 failed)**", "**not shown** (a failed test)"]
    assert rows["math answers"] == ["3", "**2 (1 failed)**", "n/a (grading only)"]


def test_reliability_table_without_results_says_how_to_make_them(tmp_path):
    from rlvr_lib.study.report import render_reliability

    assert "pytest tests/hostile" in render_reliability(tmp_path)


def test_the_budget_prose_quotes_the_committed_dynamics_calibration():
    """The budget page quotes dynamics.json by hand (prose, not a rendered table): it must follow it."""
    import json

    from rlvr_lib.study.runs import results_root

    readme = _words("checking.md", "budget.md")
    d = json.loads((results_root() / "testbed" / "dynamics.json").read_text())
    # The beta search was made once, on the Intel Xeon (archived); the calibration of record measures its beta.
    search = json.loads((results_root() / "archive" / "intel-xeon" / "testbed" / "dynamics.json").read_text())
    by_beta = {b["kl_coef"]: b for b in search["search"]}
    by_beta[d["kl_coef"]] = d["search"][-1]

    def dot(x, digits=2):  # .086, the README's style for values below 1
        return f"{x:.{digits}f}".replace("0.", ".", 1) if abs(x) < 1 else f"{x:.{digits}f}"

    def v(beta, steps, name):
        return by_beta[beta]["targets_by_steps"][str(steps)][name]

    chosen, steps = d["kl_coef"], d["chosen_steps"]
    assert f"chose {steps} steps at anchor beta {chosen:g}" in readme and by_beta[chosen]["chosen_steps"] == steps
    papers = (f"in-distribution pass@1 +{dot(v(0.05, 300, 'pass_at_1_gain')['value'], 3)}, `rare_mix` pass@256 "
              f"-{dot(v(0.05, 300, 'rare_pass_at_256_drop')['value'])}, crossover at k = "
              f"{v(0.05, 300, 'crossover_k')['value']:g}, strategy entropy "
              f"-{round(100 * v(0.05, 300, 'strategy_entropy_fall')['value'])}%, `round`'s share "
              f"{v(0.05, 300, 'rare_share_fall')['value']:.1f}x lower, and (lost - null) / rescued "
              f"{v(0.05, 300, 'rare_lost_vs_rescued')['value']:.0f}")
    assert papers in readme
    assert (f"{dot(v(0.05, 300, 'kl_binds')['value'])} at .05 and {dot(v(0.1, 300, 'kl_binds')['value'])} at .1 "
            f"(300 steps; {dot(v(0.1, 200, 'kl_binds')['value'])} at 200)") in readme
    g, drop = v(chosen, steps, "pass_at_1_gain"), v(chosen, steps, "rare_pass_at_256_drop")
    ours = (f"pass@1 +{dot(g['value'], 3)} [{dot(g['interval'][0], 3)}, {dot(g['interval'][1], 3)}], `rare_mix` "
            f"pass@256 -{dot(drop['value'])} [{dot(drop['interval'][0])}, {dot(drop['interval'][1])}], crossover at "
            f"k = {v(chosen, steps, 'crossover_k')['value']:g}, strategy entropy "
            f"-{round(100 * v(chosen, steps, 'strategy_entropy_fall')['value'])}%, `round`'s share "
            f"{v(chosen, steps, 'rare_share_fall')['value']:.1f}x lower, (lost - null) / rescued "
            f"{v(chosen, steps, 'rare_lost_vs_rescued')['value']:.1f}, KL ratio {dot(v(chosen, steps, 'kl_binds')['value'])}")
    assert ours in readme
    assert f"samples (reported, not a gate) is {v(chosen, steps, 'rare_lost_vs_rescued_main')['value']:.1f}" in readme


def test_premises_section_says_which_premise_holds(tmp_path):
    import json

    from rlvr_lib.study.report import _premises_section

    assert "No premises committed" in _premises_section(tmp_path)[0]
    interval = lambda m, lo, hi: {"mean": m, "ci_low": lo, "ci_high": hi}  # noqa: E731
    premises = {"key": {"policy_sha": "abc", "testbed_version": "v", "problems": 10, "samples": 8},
                "nudgerl": {"k": 8, "share": 0.8, "interval": interval(0.8, 0.76, 0.84)},
                "threepo": {"ess": [1e9, 1e6], "share": [0.0, 0.1], "training_ess": 1e6,
                            "quality": {"accuracy": [0.3, 0.29], "malformed": [0.01, 0.02], "accuracy_mean": 0.3},
                            "noise_rule": {"premise_holds": True, "max_malformed": 0.1, "min_accuracy_ratio": 0.9}},
                "sage": {"branch_mean": 0.1, "other_mean": 0.05, "all": {"p90": 0.2}},
                "vigor": {"within": interval(0.1, -0.05, 0.2)}}
    (tmp_path / "testbed").mkdir()
    (tmp_path / "testbed" / "premises.json").write_text(json.dumps(premises))
    rows = {line.split(" | ")[0][2:]: line.rsplit(" | ", 2)[-1] for line in _premises_section(tmp_path)
            if line.startswith("| ") and not line.startswith("| paper")}
    assert rows == {"NudgeRL": "yes |", "3PO": "yes |", "SAGE": "**no** |", "VIGOR": "**no** |"}
    assert "first at ESS 1e+06: 0.100 of prompts" in _premises_section(tmp_path)[4 + 1]
    assert _premises_section(tmp_path)[0].startswith("**Premises of the four methods**")


def test_premises_rows_follow_the_manifests_papers(tmp_path, monkeypatch):
    """One row per paper of `rlvr_lib.study.papers.PAPERS` that premises.json measures, in the manifest's order; a
    paper measured there without a row to render it is an error naming it, not a silent gap."""
    import dataclasses

    from rlvr_lib.study import papers
    from rlvr_lib.study.report import _premises_section

    premises = {"key": {"policy_sha": "abc", "testbed_version": "v", "problems": 10, "samples": 8},
                "sage": {"branch_mean": 0.1, "other_mean": 0.05, "all": {"p90": 0.2}},
                "nudgerl": {"k": 8, "share": 0.8, "interval": {"mean": 0.8, "ci_low": 0.76, "ci_high": 0.84}}}
    (tmp_path / "testbed").mkdir()
    (tmp_path / "testbed" / "premises.json").write_text(json.dumps(premises))
    lines = _premises_section(tmp_path)
    assert lines[0].startswith("**Premises of the two methods**")
    assert [line.split(" | ")[0] for line in lines[4:]] == ["| NudgeRL", "| SAGE"]  # the manifest's order
    new = dataclasses.replace(papers.PAPERS[0], key="newmethod", name="New")
    monkeypatch.setattr(papers, "PAPERS", (*papers.PAPERS, new))
    (tmp_path / "testbed" / "premises.json").write_text(json.dumps({**premises, "newmethod": {}}))
    with pytest.raises(ValueError, match=r"premises.json: papers measured=\['newmethod'\] is invalid: must be "
                                         r"papers with a row in PREMISE_ROWS"):
        _premises_section(tmp_path)


def test_the_second_size_prose_quotes_its_committed_calibrations():
    """The second-size paragraph (testbed page) quotes calibration-small.json's misses and dynamics-small.json's
    figures by hand: it must follow the files."""
    import json

    from rlvr_lib.study.runs import results_root

    readme = _words("testbed-guide.md", "budget.md")
    t = json.loads((results_root() / "testbed" / "calibration-small.json").read_text())["targets"]
    missed = [name for name, target in t.items() if not target["met"]]
    words = ["no", "one", "two", "three", "four", "five"]
    assert f"meets {len(t) - len(missed)} of the {len(t)} targets and misses {words[len(missed)]}" in readme
    assert (f"mean pass@1 {t['mean_pass_at_1']['value']:.2f}".replace("0.", ".") in readme
            and f"pass@256 / pass@1 {t['pass_at_256_over_pass_at_1']['value']:.2f}" in readme
            and f"pass@1 {t['pass_at_1[rare_mix]']['value']:.2f}".replace("0.", ".") + " (bound .10" in readme
            and f"accuracy over `split`'s {t['acc_ratio[rare_mix: round/split]']['value']:.1f}x" in readme)
    dynamics = json.loads((results_root() / "testbed" / "dynamics-small.json").read_text())
    d, d_sha = dynamics["targets"], dynamics["policy_sha"]
    missed = [name for name, target in d.items() if not target["met"]]
    short = lambda x: f"{x:.3f}".replace("0.", ".")
    gain, drop = d["pass_at_1_gain"], d["rare_pass_at_256_drop"]
    assert f"meets {len(d) - len(missed)} of the {len(d)} gating targets" in readme
    assert (f"pass@1 +{short(gain['value'])} [{short(gain['interval'][0])}, {short(gain['interval'][1])}]" in readme
            and f"pass@256 -{short(drop['value'])} [{short(drop['interval'][0])}, {short(drop['interval'][1])}]"
            in readme and f"crossover k = {d['crossover_k']['value']:.0f}," in readme
            and f"strategy entropy -{d['strategy_entropy_fall']['value']:.0%}" in readme
            and f"rescued on `rare_mix` {d['rare_lost_vs_rescued']['value']:.1f}" in readme)
    assert sorted(missed) == ["kl_binds", "rare_share_fall"]  # the two the prose names as missed
    assert (f"share falls {d['rare_share_fall']['value']:.1f}x" in readme
            and f"unanchored KL {d['kl_binds']['value']:.2f}".replace("0.", ".") in readme)
    # The tiny policy's figures beside them are the shipped dynamics report's.
    tiny = json.loads((results_root() / "testbed" / "dynamics.json").read_text())["targets"]
    assert (f"(tiny -{tiny['rare_pass_at_256_drop']['value']:.2f}".replace("0.", ".") in readme
            and f"(tiny -{tiny['strategy_entropy_fall']['value']:.0%})" in readme
            and f"(tiny {tiny['rare_lost_vs_rescued']['value']:.1f})" in readme
            and f"tiny {tiny['rare_share_fall']['value']:.1f}x)" in readme
            and f"tiny {tiny['kl_binds']['value']:.2f})".replace("0.", ".") in readme)
    # The budget's measured total of the second size's dynamics runs is the committed records' sum.
    from rlvr_lib.study.runs import load_runs

    small = [r for r in load_runs("testbed_dynamics") if r.config.get("policy_sha") == d_sha]
    assert f"its {len(small)} runs took {int(sum(r.wall_time_s for r in small) + 0.5):,} s in the end" in readme


def test_the_prose_quotes_the_committed_seconds_of_pretraining_and_calibration():
    """The dated paragraphs of the testbed and budget pages quote some measured times by hand (pretraining, static
    calibrations): each must be the committed log's or report's, so a re-run that changes one makes the prose wrong
    loudly."""
    import json
    from pathlib import Path

    from rlvr_lib.policy.load import resolve_policy_path
    from rlvr_lib.study.runs import results_root

    readme = _words("testbed-guide.md", "budget.md")
    testbed = results_root() / "testbed"

    def seconds(path, key):
        return f"{int(json.loads(path.read_text())[key] + 0.5):,}"  # half up: 1078.5 s reads 1,079

    tiny, small = (Path(resolve_policy_path(n)) for n in (None, "small"))
    assert f"(the tiny policy took {seconds(tiny / 'pretrain_log.json', 'train_seconds')} s on one thread)" in readme
    assert f"in {seconds(small / 'pretrain_log.json', 'train_seconds')} s on one thread" in readme
    assert f"(`results/testbed/calibration-small.json`, {seconds(testbed / 'calibration-small.json', 'seconds')} s)" \
        in readme
    intel = results_root() / "archive" / "intel-xeon" / "testbed" / "calibration.json"
    assert (f"The static calibration took {seconds(testbed / 'calibration.json', 'seconds')} s (the Intel record "
            f"says {seconds(intel, 'seconds')})") in readme
