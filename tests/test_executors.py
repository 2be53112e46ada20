"""The executors of a plan's runs (rlvr_lib.study.executors): the local pool and a real Ray cluster.

A Ray cluster of 2 CPUs is started by this module on 127.0.0.1 (``ray.init``, no dashboard) and shut down after it;
its start takes about 25 s on a loaded 2-core machine, the whole module about 1.5 minutes. The runs are planned the
way a notebook's are (`rlvr_lib.study.plan.planning` around `pipeline.train_and_evaluate` with tiny configs), then
computed by the local executor into one results root and by Ray into another: the records are equal except the
fields that say when and how long (`rlvr_lib.study.verify.WHEN_FIELDS`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray executor's tests need ray (pip install ray; in the dev extra)")

from rlvr_lib.eval.policy_eval import EvalSpec  # noqa: E402
from rlvr_lib.methods.presets import method_config  # noqa: E402
from rlvr_lib.study import pipeline  # noqa: E402
from rlvr_lib.study.executors import RunsFailed, execute, local_ray_temp_dir  # noqa: E402
from rlvr_lib.study.plan import planning  # noqa: E402
from rlvr_lib.study.runs import cached_run, load_runs  # noqa: E402
from rlvr_lib.study.verify import comparable, compare_roots  # noqa: E402

SPEC = EvalSpec(families=("easy_mix",), problems_per_family=2, samples=4, group_size=2, diversity_problems=2,
                diversity_samples=2, max_new_tokens=12)


def _plan(root):
    """A tiny training run and the base evaluation, planned in ``root``."""
    small = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=12, train_family="easy_mix",
                 train_pool_size=8, seed=3)
    with planning() as planner:
        pipeline.train_and_evaluate("exec", "grpo", method_config("grpo", **small), SPEC, root=root)
        pipeline.evaluate_base("exec", SPEC, root=root)
    return list(planner.runs.values())


RAY_WAITS = {"RAY_worker_register_timeout_seconds": "300"}
"""A Ray worker process has 60 s to register with its raylet, made for an idle machine; on a loaded 2-core one,
importing torch in a new worker can take longer. (Ray's own start has fixed waits no variable changes: its raylet
gives its agent 15 s to start, the driver gives the raylet 30 s. On a machine loaded far beyond its cores the cluster
may not start: the fixture tries twice, then fails with Ray's message.)"""


@pytest.fixture(scope="module")
def ray_cluster():
    """A 2-CPU Ray cluster on 127.0.0.1 for this module (this process is its driver)."""
    if ray.is_initialized():
        ray.shutdown()
    saved = {k: os.environ.get(k) for k in RAY_WAITS}
    os.environ.update(RAY_WAITS)  # read by the raylet this starts
    temp = local_ray_temp_dir()  # pytest's TMPDIR under xdist is too long for Ray's socket paths
    try:
        try:
            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                     configure_logging=False, _temp_dir=temp)
        except Exception:  # its fixed waits missed once on a loaded machine: one more try
            ray.shutdown()
            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                     configure_logging=False, _temp_dir=temp)
        yield
    finally:
        ray.shutdown()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_ray_records_equal_the_local_executors_and_resume(tmp_path, ray_cluster, monkeypatch):
    local_root, ray_root = tmp_path / "local", tmp_path / "ray"
    local_runs, ray_runs = _plan(local_root), _plan(ray_root)
    assert [r.run_id for r in local_runs] == [r.run_id for r in ray_runs] and len(local_runs) == 2
    assert all(r.needs == {"cpus": 1, "gpus": 0} for r in ray_runs)

    # two local workers at one torch thread each (cores // workers on 2 cores; set here for any machine), as a 1-CPU
    # Ray task
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    local = execute(local_runs, "local", workers=2, progress=False)
    remote = execute(ray_runs, "ray", progress=False)
    assert [r.run_id for r in remote] == [r.run_id for r in local_runs]
    for a, b in zip(local, remote):
        assert a.extra["machine"]["torch_threads"] == 1
        assert comparable(a) == comparable(b), a.run_id
    assert compare_roots(local_root, ray_root) == {"equal": sorted(f"exec/{r.run_id}" for r in local_runs),
                                                   "different": {}, "only_a": [], "only_b": []}
    for run in ray_runs:  # the files are the records returned
        assert json.loads(run.path.read_text())["final"] == next(r for r in remote if r.run_id == run.run_id).final

    # resumable: done runs are not recomputed (their files untouched); a run whose record is gone (a run
    # interrupted before its atomic write leaves none) is computed again, equal to the first computation
    mtimes = {run.run_id: os.stat(run.path).st_mtime_ns for run in ray_runs}
    lost = ray_runs[0]  # the training run
    lost.path.unlink()
    again = execute(ray_runs, "ray", progress=False)
    for run in ray_runs:
        if run is not lost:
            assert os.stat(run.path).st_mtime_ns == mtimes[run.run_id], run.run_id
    assert os.stat(lost.path).st_mtime_ns != mtimes[lost.run_id]
    assert [comparable(r) for r in again] == [comparable(r) for r in remote]
    # nothing to do: neither executor starts a worker
    assert [comparable(r) for r in execute(local_runs, "local", progress=False)] == [comparable(r) for r in local]


def test_slurm_jobs_through_submitit_equal_the_local_executors_records(tmp_path, monkeypatch):
    """The Slurm path, tested with submitit's local executor (the same jobs, pickles and logs, as processes here)."""
    local_root, jobs_root = tmp_path / "local", tmp_path / "jobs"
    local_runs, job_runs = _plan(local_root), _plan(jobs_root)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the local executor's threads, as a 1-CPU job's
    local = execute(local_runs, "local", workers=2, progress=False)
    options = {"cluster": "local", "folder": str(tmp_path / "submitit"), "timeout_min": 30}
    jobs = execute(job_runs, "slurm", workers=2, options=options, progress=False)
    assert [comparable(r) for r in jobs] == [comparable(r) for r in local]
    assert jobs[0].extra["machine"]["torch_threads"] == 1
    assert compare_roots(local_root, jobs_root)["different"] == {}
    assert len(list((tmp_path / "submitit").rglob("*_log.out"))) == 2  # one job per run, its log kept
    # resumable: done runs submit nothing
    assert [comparable(r) for r in execute(job_runs, "slurm", options=options, progress=False)] == \
        [comparable(r) for r in jobs]
    assert len(list((tmp_path / "submitit").rglob("*_log.out"))) == 2


def _failing_plan(root):
    def fine():
        return [], {"value": 1.0}

    def broken():
        raise ValueError("this run is broken on purpose")

    with planning() as planner:
        cached_run("exec-fail", "fine", {"k": 1}, 0, fine, root=root)
        cached_run("exec-fail", "broken", {"k": 2}, 0, broken, root=root)
    return list(planner.runs.values())


@pytest.mark.parametrize("executor", ["local", "ray", "slurm"])
def test_a_failing_run_is_reported_with_its_run_id_and_the_others_finish(tmp_path, executor, request):
    if executor == "ray":
        request.getfixturevalue("ray_cluster")
    runs = _failing_plan(tmp_path)
    options = {"cluster": "local", "folder": str(tmp_path / "jobs")} if executor == "slurm" else None
    with pytest.raises(RunsFailed) as info:
        execute(runs, executor, workers=2, options=options, progress=False)
    broken = f"exec-fail/{runs[1].run_id}"
    assert list(info.value.failures) == [broken]
    error = info.value.failures[broken]
    if executor == "slurm":  # the run's own error, then where its job's log is
        error, log = error.split(" (job ", 1)
        assert "ValueError: this run is broken on purpose" in Path(log.split("its log: ")[1].rstrip(")")).read_text()
    assert error == "ValueError: this run is broken on purpose"
    assert broken in str(info.value) and runs[1].run_id.startswith("broken-")
    assert [r.run_id for r in info.value.records] == [runs[0].run_id]
    assert runs[0].done() and not runs[1].done() and not runs[1].path.exists()


def test_bad_arguments_are_refused(tmp_path, monkeypatch):
    runs = _failing_plan(tmp_path)
    with pytest.raises(ValueError, match="executor"):
        execute(runs, "pbs")
    with pytest.raises(ValueError, match="workers"):
        execute(runs, "local", workers=0)
    with pytest.raises(ValueError, match="only the 'ray' executor takes an address"):
        execute(runs, "local", address="127.0.0.1:6379")
    with pytest.raises(ValueError, match="only the 'slurm' executor takes options"):
        execute(runs, "ray", options={"timeout_min": 5})
    with pytest.raises(ValueError, match=r"options\['cluster'\]='pbs' is invalid: must be one of \['slurm', 'local'\]"):
        execute(runs, "slurm", options={"cluster": "pbs"})
    monkeypatch.setattr("rlvr_lib.study.executors.shutil.which", lambda name: None)  # a machine without Slurm
    with pytest.raises(ValueError, match="submits with Slurm's sbatch, which is not on this machine's PATH"):
        execute(runs, "slurm")
    with pytest.raises(ValueError, match="not submitit parameters for cluster 'local'"):
        execute(runs, "slurm", options={"cluster": "local", "folder": str(tmp_path / "jobs"), "timeout_min": "soon"})
    assert not any(run.done() for run in runs) and not list((tmp_path / "jobs").rglob("*.pkl"))  # nothing submitted


def test_a_call_that_cannot_be_pickled_is_refused_naming_the_run(tmp_path):
    import threading

    lock = threading.Lock()

    def holds_a_lock():
        with lock:
            return [], {}

    with planning() as planner:
        cached_run("exec-pickle", "locked", {"k": 3}, 0, holds_a_lock, root=tmp_path)
    (run,) = planner.runs.values()
    with pytest.raises(ValueError, match=f"run exec-pickle/{run.run_id}: its call cannot be sent"):
        execute([run], "local", progress=False)


# ------------------------------------------------------------ reproduce --executor
def _notebook(path, setup: str, runs: str, reads: str) -> None:
    """A notebook shaped as the study's: a ``parameters`` cell, a ``setup`` cell that picks ``ROOT`` as they do (a
    temporary folder at the quick profile), a ``runs`` cell, and an untagged cell that reads the records."""
    import nbformat

    def cell(source, *tags):
        return nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)})

    nb = nbformat.v4.new_notebook(cells=[
        cell('profile = "quick"', "parameters"),
        cell("import tempfile\nfrom pathlib import Path\n"
             "from rlvr_lib.study.runs import PrerequisitesMissing, cached_run, load_runs, results_root\n"
             'ROOT = results_root() if profile == "full" else Path(tempfile.mkdtemp())\n' + setup, "setup"),
        cell(runs, "runs"),
        cell(reads)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


RUN = '''def run(x=X):
    return [], {"x": x}

REC = cached_run("NAME", "r", {"x": X}, 0, run, root=ROOT)
'''


@pytest.mark.parametrize("executor", ["ray", "slurm"])
def test_reproduce_with_an_executor_computes_the_plans_then_the_notebooks_only_read(tmp_path, executor, request):
    import nbformat

    from rlvr_lib.study.reproduce import reproduce

    if executor == "ray":
        request.getfixturevalue("ray_cluster")
    how = dict(executor=executor, executor_options={"cluster": "local", "folder": str(tmp_path / "jobs")}
               if executor == "slurm" else None)

    src, out = tmp_path / "notebooks", tmp_path / "out"
    src.mkdir()
    # the first notebook's plan waits on the second one's records (a stage, as notebook 07's on 02's and 04's)
    _notebook(src / "01_waits.ipynb", "",
              'if not load_runs("second", root=ROOT):\n    raise PrerequisitesMissing("finish 02_provides first")\n'
              + RUN.replace("NAME", "first").replace("X", "1"),
              'print("first", REC.final["x"] + load_runs("second", root=ROOT)[0].final["x"])')
    _notebook(src / "02_provides.ipynb", "", RUN.replace("NAME", "second").replace("X", "2"),
              'print("second", load_runs("second", root=ROOT)[0].final["x"], results_root() == ROOT)')
    lines = []
    results = reproduce("quick", notebooks_dir=src, out_dir=out, echo=lines.append, **how)
    assert {name: r["status"] for name, r in results.items()} == {"01_waits": "ran", "02_provides": "ran"}, results
    assert lines[:3] == [f"01_waits: 0 planned run(s) (a first stage), 0 to compute ({executor})",
                         f"02_provides: 1 planned run(s), 1 to compute ({executor})",
                         f"01_waits: 1 planned run(s), 1 to compute ({executor})"], lines
    runs_root = out / "quick" / "runs"  # the quick profile's runs, kept (resumable), not the notebooks' temp folders
    assert [r.final for r in load_runs("first", runs_root)] == [{"x": 1}]
    executed = nbformat.read(str(out / "quick" / "01_waits.ipynb"), as_version=4)
    assert executed.cells[-1].outputs[0]["text"] == "first 3\n"
    # the reports of record are read where a quick notebook reads them (the results root as set), not in the runs' root
    executed = nbformat.read(str(out / "quick" / "02_provides.ipynb"), as_version=4)
    assert executed.cells[-1].outputs[0]["text"] == "second 2 False\n"
    assert not list(src.glob(".*.ipynb"))  # the copies that set ROOT are gone

    # a notebook whose plan waits on one not selected fails, naming what it waits on
    (runs_root / "second").rename(tmp_path / "elsewhere")
    results = reproduce("quick", only=["01_waits"], notebooks_dir=src, out_dir=out, force=True, echo=None, **how)
    assert results["01_waits"]["status"] == "failed"
    assert "waiting on: finish 02_provides first" in results["01_waits"]["error"]


def test_the_address_flag_needs_the_ray_executor_and_slurm_options_the_slurm_one(capsys):
    from rlvr_lib.study.reproduce import _slurm_option, main

    for argv, error in [(["--address", "127.0.0.1:6379", "--executor", "local"],
                         "--address 127.0.0.1:6379: only with --executor ray"),
                        (["--slurm", "timeout_min=60", "--executor", "ray"],
                         "--slurm timeout_min=60: only with --executor slurm"),
                        (["--executor", "slurm", "--slurm", "partition"],
                         "argument --slurm: 'partition' is invalid: must be KEY=VALUE (e.g. timeout_min=600)")]:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert error in capsys.readouterr().err
    assert [_slurm_option(t) for t in ("timeout_min=60", "mem_gb=7.5", "slurm_partition=cpu", "cluster=local")] == \
        [("timeout_min", 60), ("mem_gb", 7.5), ("slurm_partition", "cpu"), ("cluster", "local")]


def test_a_long_tmpdir_gets_a_short_folder_for_rays_sockets(monkeypatch, tmp_path):
    """Ray's socket paths (at most 107 bytes) fit: a short default is kept, a long TMPDIR gets a folder under /tmp."""
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", "/tmp")
    assert local_ray_temp_dir() is None
    long = tmp_path / ("x" * 60)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    short = local_ray_temp_dir()
    try:
        assert short is not None and short.startswith("/tmp/rlvr-ray-") and os.path.isdir(short)
        assert len(short) + len("/session_2026-12-06_18-11-18_052291_20014/sockets/plasma_store") <= 107
    finally:
        shutil.rmtree(short, ignore_errors=True)
