"""The study as a plan of runs (rlvr_lib/study/plan.py, issue 62 item 1): each notebook's cached runs listed from its
``runs`` cells without executing it, with the keys the notebook itself builds."""

import functools
import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from rlvr_lib.study import plan as planmod
from rlvr_lib.study.plan import (Plan, PlannedRecord, PlannedRun, PlanOnly, dynamics_runs, finished, notebook_plan,
                                 planning)
from rlvr_lib.study.runs import _PLANNER, PrerequisitesMissing, RunRecord, cached_run, results_root

ROOT = Path(__file__).resolve().parents[1]
STEMS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
RECOMPUTE = ROOT / "results" / "recompute-58"


@functools.lru_cache(maxsize=None)
def timed_plan(stem: str, profile: str) -> tuple[Plan, float]:
    """Each notebook's plan once per test session (the import of torch and transformers counts in the first)."""
    t0 = time.perf_counter()
    plan = notebook_plan(stem, profile)
    return plan, time.perf_counter() - t0


def test_there_are_notebooks_to_plan():
    assert len(STEMS) == 9, STEMS


# ---------------------------------------------------------------- (a) every notebook, both profiles
@pytest.mark.parametrize("profile", ["quick", "full"])
@pytest.mark.parametrize("stem", STEMS)
def test_every_notebook_has_a_plan_in_seconds(stem, profile):
    plan, seconds = timed_plan(stem, profile)
    assert plan.notebook == stem and plan.profile == profile
    assert plan.runs, f"{stem} at {profile}: no run planned"
    assert seconds < 180, f"{stem} at {profile}: planning took {seconds:.0f} s (no training may happen in it)"
    ids = [(r.experiment, r.run_id) for r in plan.runs]
    assert len(ids) == len(set(ids)), "deduplicated by (experiment, run id)"
    for run in plan.runs:
        assert isinstance(run, PlannedRun)
        assert run.run_id.startswith(f"{run.name}-") and run.run_id.endswith(f"-s{run.seed}")
        assert run.needs == {"cpus": 1, "gpus": 0}  # the study's configs name no CUDA device
    if profile == "quick":  # a scratch root: nothing finished, and nothing waits
        assert plan.complete and not any(r.done() for r in plan.runs)
        assert all(r.root is not None and r.root != str(results_root()) for r in plan.runs)


def test_the_quick_plans_are_complete_and_the_stages_of_the_full_ones_say_what_they_wait_on():
    """08 at the full profile is a stage until its gate's runs are finished (its methods run only when the gate
    passes); 07's waits on 02's and 04's records (its arm selection) or on the second size's policy."""
    for stem in STEMS:
        plan, _ = timed_plan(stem, "full")
        if stem not in ("07_head_to_head", "08_discovery"):
            assert plan.complete, (stem, plan.waiting_on)
    gate, _ = timed_plan("08_discovery", "full")
    if not gate.complete:
        assert "notebook 08's gate runs" in gate.waiting_on[0]
        assert {r.experiment for r in gate.runs} == {"discovery_full"}
        assert not all(r.done() for r in gate.runs)
    quick, _ = timed_plan("08_discovery", "quick")
    assert {r.name for r in quick.runs} > {r.name for r in gate.runs}  # the methods: quick runs them anyway
    h2h, _ = timed_plan("07_head_to_head", "full")
    if not h2h.complete:
        assert any(w in h2h.waiting_on[0] for w in ("notebooks 02 and 04", "second size")), h2h.waiting_on


# ---------------------------------------------------------------- (b) the keys the notebooks build
def test_notebook_00s_full_plan_is_the_committed_dynamics_records():
    plan, _ = timed_plan("00_testbed_calibration", "full")
    assert {r.experiment for r in plan.runs} == {"testbed_dynamics"}
    absent = [r.run_id for r in plan.runs if not r.done()]
    assert absent == [], f"planned but not committed under results/testbed_dynamics: {absent}"
    # the dynamics calibration of record: 2 base seeds x (main, wide), 3 seeds x (unanchored, one beta)
    assert len(plan.runs) == 10


def test_dynamics_runs_are_the_runs_measure_dynamics_reads():
    """measure_dynamics at the full profile, from the committed records (a planner that serves each finished record
    and records its key): the same run ids as `dynamics_runs`."""
    from rlvr_lib.study.dynamics import DynamicsConfig, measure_dynamics
    from rlvr_lib.study.testbed import TESTBED_KL_COEF

    config = DynamicsConfig(kl_coefs=(TESTBED_KL_COEF,))  # notebook 00's full profile
    read = []

    def serve(experiment, name, config, seed, fn, *, run_id, cached, **_):
        record = cached()
        assert record is not None, f"{experiment}/{run_id} is not committed"
        read.append(run_id)
        return record

    token = _PLANNER.set(serve)
    try:
        report = measure_dynamics(config)
    finally:
        _PLANNER.reset(token)
    assert report["kl_coef"] == TESTBED_KL_COEF
    with planning():
        declared = [r.run_id for r in dynamics_runs(config)]
    assert sorted(declared) == sorted(read) and len(set(read)) == 10


def _records(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.json") if not p.name.startswith("."))


@pytest.mark.parametrize("experiment, owner", [("grpo_baseline_full", "01_grpo_pass_at_k_modes_group_size"),
                                               ("baselines_full", "02_baselines_sage_t1_anchors")])
def test_the_recomputes_records_are_in_the_plan_of_the_notebook_owning_their_folder(experiment, owner):
    """Every record the running recompute (issue 58) has written so far is a run of the restructured notebooks' full
    plan: the owner's, or (a shared folder) another's that trains into it. Read only."""
    folder = RECOMPUTE / experiment
    if not folder.is_dir():
        pytest.skip(f"{folder} is gone (its records were promoted): nothing to compare")
    ids = _records(folder)
    assert ids, f"{folder}: no record yet"
    plans = {stem: timed_plan(stem, "full")[0] for stem in STEMS if stem not in ("00_testbed_calibration",
                                                                                   "08_discovery")}
    planned = {stem: {r.run_id for r in p.runs if r.experiment == experiment} for stem, p in plans.items()}
    assert planned[owner], f"{owner} plans nothing in {experiment}"
    outside = [i for i in ids if not any(i in runs for runs in planned.values())]
    assert outside == [], f"records of {experiment} that no notebook's plan makes: {outside}"
    # the owner's own arms: every record of a run name the owner plans is one of the owner's run ids
    own_names = {r.name for r in plans[owner].runs if r.experiment == experiment}
    stray = [i for i in ids if i.rsplit("-", 2)[0] in own_names and i not in planned[owner]
             and not any(i in planned[s] for s in planned if s != owner)]
    assert stray == []


# ---------------------------------------------------------------- (c) plan mode itself
def _notebook(tmp_path: Path, cells: list[tuple[str, list[str]]], stored_profile: str | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = tags
        nb.cells.append(cell)
    if stored_profile:  # a stored execution's injected cell: ignored
        injected = nbformat.v4.new_code_cell(f"profile = {stored_profile!r}")
        injected.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(1, injected)
    path = tmp_path / "99_example.ipynb"
    nbformat.write(nb, path)
    return path


SETUP = """
from rlvr_lib.study.runs import cached_run
STEPS = {"quick": 2, "full": 50}[profile]
def fn():
    return [{"step": 0}], {"accuracy": 0.5}
"""


def test_a_runs_cell_that_reads_a_result_raises_planonly_naming_the_run(tmp_path):
    path = _notebook(tmp_path, [('profile = "quick"', ["parameters"]), (SETUP, ["setup"]),
                                (f"rec = cached_run('toy', 'arm', {{'steps': STEPS}}, 3, fn, root={str(tmp_path)!r})\n"
                                 "accuracy = rec.final['accuracy']", ["runs"])])
    with pytest.raises(PlanOnly, match=r"run toy/arm-[0-9a-f]+-s3 is only planned: its 'final' cannot be read"):
        notebook_plan(path, "quick")
    assert _PLANNER.get() is None  # plan mode ends with the call
    assert not (tmp_path / "toy").exists()  # nothing computed, nothing written


def test_methods_a_notebook_registers_while_planned_are_not_left_registered(tmp_path):
    """Notebook 07's cells compose pairs at calibrated presets: listing its plan must not leave those registered in
    the caller's process (a later compose of the pair at other presets would be refused)."""
    from rlvr_lib.methods.registry import METHODS

    path = _notebook(tmp_path, [('profile = "quick"', ["parameters"]), (SETUP, ["setup"]),
                                ("from rlvr_lib.methods import METHODS, register_method\n"
                                 "register_method('planned_only_method', METHODS['grpo'].cls, 'registered by a cell')\n"
                                 f"rec = cached_run('toy', 'arm', {{'steps': STEPS}}, 0, fn, root={str(tmp_path)!r})",
                                 ["runs"])])
    before = set(METHODS)
    plan = notebook_plan(path, "quick")
    assert [r.name for r in plan.runs] == ["arm"]
    assert set(METHODS) == before and "planned_only_method" not in METHODS


def test_a_planned_record_has_its_identity_and_nothing_else():
    with planning() as planner:
        rec = cached_run("toy", "arm", {"steps": 2}, 0, lambda: ([], {}), root="/nonexistent-plan-root")
    assert isinstance(rec, PlannedRecord) and not isinstance(rec, RunRecord)
    assert rec.run_id == rec.run.run_id == f"arm-{rec.config_hash}-s0" and rec.config == {"steps": 2}
    assert (rec.extra or {}) == {}  # as a record without extras: pipeline's option check passes
    for read in (lambda: rec.extra["evals"], lambda: rec.extra.get("evals"), lambda: rec.history,
                 lambda: rec.wall_time_s):
        with pytest.raises(PlanOnly, match="toy/arm-"):
            read()
    assert list(planner.runs) == [("toy", rec.run_id)]


def test_the_profile_is_injected_after_the_parameters_cell_and_runs_are_deduplicated(tmp_path):
    runs = (f"a = cached_run('toy', 'arm', {{'steps': STEPS}}, 0, fn, root={str(tmp_path)!r})\n"
            f"b = cached_run('toy', 'arm', {{'steps': STEPS}}, 0, fn, root={str(tmp_path)!r})\n"
            "print('printed output is discarded')\n")
    untagged = "raise AssertionError('an untagged cell is not executed')"
    path = _notebook(tmp_path, [('profile = "quick"', ["parameters"]), (SETUP, ["setup"]), (runs, ["runs"]),
                                (untagged, [])], stored_profile="quick")
    plan = notebook_plan(path, "full")
    assert [r.config for r in plan.runs] == [{"steps": 50}]  # full, not the parameters cell's nor the stored one
    run = plan.runs[0]
    assert run.root == str(tmp_path) and run.config_type == "dict" and not run.done()
    record = run.call()  # outside plan mode: through cached_run, computed and written
    assert isinstance(record, RunRecord) and record.run_id == run.run_id and record.final == {"accuracy": 0.5}
    assert run.done() and run.path.exists()
    assert notebook_plan(path, "full").runs[0].done()  # a fresh plan sees it


def test_a_stage_stops_at_prerequisites_and_finished_serves_done_runs(tmp_path):
    runs = (f"gate = [cached_run('toy', 'gate', {{'steps': STEPS}}, s, fn, root={str(tmp_path)!r}) for s in (0, 1)]\n"
            "from rlvr_lib.study.plan import finished\n"
            "if finished(gate, 'the gate')[0].final['accuracy'] > 0.4:\n"
            f"    cached_run('toy', 'method', {{'steps': STEPS}}, 0, fn, root={str(tmp_path)!r})\n")
    path = _notebook(tmp_path, [('profile = "quick"', ["parameters"]), (SETUP, ["setup"]), (runs, ["runs"])])
    first = notebook_plan(path, "quick")
    assert [r.name for r in first.runs] == ["gate", "gate"] and not first.complete
    assert first.waiting_on[0].startswith("the gate: 2 run(s) not finished yet (toy/gate-")
    for run in first.runs:
        run.call()
    second = notebook_plan(path, "quick")
    assert second.complete and [r.name for r in second.runs] == ["gate", "gate", "method"]
    assert [r.done() for r in second.runs] == [True, True, False]
    records = [object()]
    assert finished(records, "x") is records  # outside plan mode: as it is


def test_prerequisites_missing_in_a_setup_cell_is_a_stage_with_no_runs(tmp_path):
    path = _notebook(tmp_path, [('profile = "quick"', ["parameters"]),
                                ("from rlvr_lib.study.runs import PrerequisitesMissing\n"
                                 "raise PrerequisitesMissing('finish notebook 98 first')", ["setup"]),
                                ("x = 1", ["runs"])])
    plan = notebook_plan(path, "quick")
    assert plan.runs == () and plan.waiting_on == ("finish notebook 98 first",)


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"profile='medium' is not valid: must be one of \['quick', 'full'\]"):
        notebook_plan(STEMS[0], "medium")
    with pytest.raises(ValueError, match="notebook 'no_such_notebook': not a notebook path nor a stem"):
        notebook_plan("no_such_notebook", "quick")
    path = _notebook(tmp_path, [('profile = "quick"', ["parameters"]), ("x = 1", [])])
    with pytest.raises(ValueError, match="no code cell tagged 'runs'"):
        notebook_plan(path, "quick")
    no_root = _notebook(tmp_path, [('profile = "quick"', ["parameters"]), (SETUP, ["setup"]),
                                   ("rec = cached_run('toy', 'arm', {'steps': STEPS}, 0, fn)", ["runs"])])
    assert len(notebook_plan(no_root, "quick").runs) == 1  # its own root: planned where it would run
    with pytest.raises(ValueError, match="its setup cells define no ROOT, so root=.* cannot hold its runs"):
        notebook_plan(no_root, "quick", root=tmp_path)


def test_needs_read_a_cuda_device_from_the_key():
    assert planmod._needs({"train": {"device": "cuda:0"}}) == {"cpus": 1, "gpus": 1}
    assert planmod._needs({"device": "cpu"}) == {"cpus": 1, "gpus": 0}


def test_root_plans_the_runs_in_another_results_root(tmp_path):
    """As under a staging RLVR_RESULTS_DIR: the notebook reads the testbed's reports there too."""
    import shutil

    (tmp_path / "testbed").mkdir()
    shutil.copy(results_root() / "testbed" / "dynamics.json", tmp_path / "testbed")
    plan = notebook_plan("06_vigor", "full", root=tmp_path)
    assert {r.root for r in plan.runs} == {str(tmp_path)} and not any(r.done() for r in plan.runs)
    full, _ = timed_plan("06_vigor", "full")
    assert [r.run_id for r in plan.runs] == [r.run_id for r in full.runs]  # the root is not in a key
    assert os.environ.get("RLVR_RESULTS_DIR") != str(tmp_path)  # restored


# ---------------------------------------------------------------- (d) the command line
def test_the_cli_prints_each_plan_and_json_parses(capsys):
    from rlvr_lib.study.__main__ import main

    assert main(["plan", "--profile", "quick", "--only", "06_vigor"]) == 0
    text = capsys.readouterr().out
    plan, _ = timed_plan("06_vigor", "quick")
    assert text.startswith(f"06_vigor (quick): {len(plan.runs)} runs, 0 done, {len(plan.runs)} missing")
    assert f"vigor_quick/{plan.runs[-1].run_id}" in text and "method=" in text and "steps=" in text
    assert main(["plan", "--profile", "quick", "--only", "06_vigor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["notebook"] for d in data] == ["06_vigor"]
    assert [r["run_id"] for r in data[0]["planned"]] == [r.run_id for r in plan.runs]
    trained = [r for r in data[0]["planned"] if r["method"] is not None]
    assert trained and all(r["steps"] == 3 and "main" in r["evaluations"] for r in trained)


def test_a_reader_that_stops_early_gets_no_traceback():
    """`python -m rlvr_lib.study plan | head -1`, as a script counts what is missing: the pipe closes early."""
    import subprocess
    import sys

    done = subprocess.run(f"{sys.executable} -m rlvr_lib.study plan --profile quick --only 06_vigor | head -c 10",
                          shell=True, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[1])
    assert done.stdout == "06_vigor (" and done.stderr == "", done.stderr


def test_the_cli_names_a_bad_notebook_or_root(capsys, tmp_path):
    from rlvr_lib.study.plan import main

    with pytest.raises(SystemExit) as exit_:
        main(["--only", "nope"])
    assert exit_.value.code == 2
    assert "--only: unknown notebook(s) ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--root", str(tmp_path / "absent")])
    assert exit_.value.code == 2
    assert "is not an existing folder" in capsys.readouterr().err


def test_the_cli_counts_done_runs_in_a_root(capsys, tmp_path, monkeypatch):
    from rlvr_lib.study.plan import main

    monkeypatch.delenv("RLVR_RESULTS_DIR", raising=False)
    # a bare folder: at the quick profile the notebook reads the testbed's reports (the full profile's step count)
    # from the results root as set, and only its runs go into the root
    plan = notebook_plan("06_vigor", "quick", root=tmp_path)
    assert {r.root for r in plan.runs} == {str(tmp_path)} and os.environ.get("RLVR_RESULTS_DIR") is None
    plan.runs[0].call()  # the base policy's evaluation: seconds
    assert main(["--profile", "quick", "--only", "06_vigor", "--root", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)[0]
    assert (data["done"], data["missing"]) == (1, len(plan.runs) - 1)
    assert [r["done"] for r in data["planned"]][0] is True


def test_listing_a_plan_leaves_a_running_computations_checkpoint_alone(tmp_path):
    """train_and_evaluate removes its checkpoint after cached_run; a plan's stand-in is no finished run, so another
    process training that run (an executor) keeps it."""
    from rlvr_lib.config import hash_jsonable
    from rlvr_lib.eval import EvalSpec
    from rlvr_lib.study.pipeline import run_key, train_and_evaluate
    from rlvr_lib.study.testbed import calibrated_config

    config, spec = calibrated_config("grpo", steps=2, prompts_per_step=2, seed=0), EvalSpec(problems_per_family=2,
                                                                                            samples=8)
    ckpt = tmp_path / ".checkpoints" / "toy" / f"grpo-{hash_jsonable(run_key(config, spec))}-s0"
    ckpt.mkdir(parents=True)
    (ckpt / "checkpoint.pt").write_bytes(b"in progress")
    with planning() as planner:
        rec = train_and_evaluate("toy", "grpo", config, spec, root=tmp_path)
    assert isinstance(rec, PlannedRecord) and list(planner.runs) == [("toy", rec.run_id)]
    assert (ckpt / "checkpoint.pt").read_bytes() == b"in progress"
