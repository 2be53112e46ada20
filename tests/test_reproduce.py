"""Tests of ``rlvr_lib.study.reproduce``: papermill runs, resuming, failures, the CLI.

One test starts real kernels (three short notebook runs); the others replace
``papermill.execute_notebook`` with a fake that writes what papermill writes,
so the skip / re-run / interrupt logic is checked without a kernel.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import nbformat
import papermill
import pytest

from rlvr_lib.study import executions
from rlvr_lib.study import reproduce as rp


def _write_notebook(path: Path, *cells: str) -> Path:
    """A notebook whose first code cell is the tagged ``parameters`` cell."""
    params = nbformat.v4.new_code_cell('profile = "quick"')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, *(nbformat.v4.new_code_cell(c) for c in cells)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def notebooks(tmp_path):
    """``ok`` appends the profile to ``runs.log`` (one line per execution); ``bad`` raises."""
    src = tmp_path / "nbs"
    src.mkdir()
    log = tmp_path / "runs.log"
    _write_notebook(
        src / "ok.ipynb",
        f"import rlvr_lib\nwith open({str(log)!r}, 'a') as f:\n    f.write(profile + '\\n')",
        "open('cwd_marker.txt', 'w').close()",
    )
    _write_notebook(src / "bad.ipynb", "raise ValueError('boom')")
    return src, tmp_path / "out", log


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_real_run_failure_skip_and_source_change(notebooks, capsys):
    src, out, log = notebooks
    argv = ["--profile", "full", "--notebooks-dir", str(src), "--out", str(out), "--no-progress"]
    assert rp.main(argv) == 1  # "bad" failed, "ok" still ran
    printed = capsys.readouterr().out
    assert "ok: ran in" in printed
    assert "bad: FAILED" in printed and "ValueError: boom" in printed

    executed = nbformat.read(str(out / "full" / "ok.ipynb"), as_version=4)
    assert executed.metadata.papermill.parameters == {"profile": "full"}
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and 'profile = "full"' in injected[0].source
    assert _lines(log) == ["full"]
    assert (src / "cwd_marker.txt").exists()  # the kernel ran in the notebook's folder
    failed = nbformat.read(str(out / "full" / "bad.ipynb"), as_version=4)
    assert failed.metadata.papermill.exception is True
    manifest = json.loads((out / "full" / "manifest.json").read_text())["notebooks"]
    assert manifest["ok"]["status"] == "ok" and manifest["bad"]["status"] == "failed"
    assert not list((out / "full").glob(".*"))  # no temp files left

    # Second call: the successful notebook is skipped, the failed one is tried again.
    res = rp.reproduce("full", notebooks_dir=src, out_dir=out, echo=None)
    assert res["ok"]["status"] == "skipped" and res["bad"]["status"] == "failed"
    assert _lines(log) == ["full"]

    # Changing the source re-runs it.
    _write_notebook(src / "ok.ipynb", f"with open({str(log)!r}, 'a') as f:\n    f.write('v2 ' + profile + '\\n')")
    res = rp.reproduce("full", only=["ok"], notebooks_dir=src, out_dir=out, echo=None)
    assert res == {"ok": {"status": "ran", "seconds": res["ok"]["seconds"], "error": None,
                          "output": str((out / "full" / "ok.ipynb").resolve())}}
    assert _lines(log) == ["full", "v2 full"]


def _kernel_dying_at_first(tmp_path: Path, monkeypatch, deaths: int) -> tuple[str, Path]:
    """A kernel spec ``dies-N`` whose first ``deaths`` starts exit before replying (as a kernel whose port was
    taken does); later starts are an ipykernel. Returns its name and the file counting its starts."""
    import sys

    starts = tmp_path / "kernel_starts"
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(f"""
        import pathlib, sys
        starts = pathlib.Path({str(starts)!r})
        n = int(starts.read_text()) if starts.exists() else 0
        starts.write_text(str(n + 1))
        if n < {deaths}:
            sys.exit(1)
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()
    """))
    name = f"dies-{deaths}"
    spec = tmp_path / "jupyter" / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(script), "-f", "{connection_file}"], "display_name": name, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return name, starts


def test_a_kernel_that_dies_while_starting_is_started_again(notebooks, tmp_path, monkeypatch, capsys):
    src, out, log = notebooks
    kernel, starts = _kernel_dying_at_first(tmp_path, monkeypatch, deaths=rp.KERNEL_START_ATTEMPTS - 1)
    res = rp.reproduce("quick", only=["ok"], notebooks_dir=src, out_dir=out, kernel=kernel, echo=None)
    assert res["ok"]["status"] == "ran" and res["ok"]["error"] is None
    assert starts.read_text() == str(rp.KERNEL_START_ATTEMPTS) and _lines(log) == ["quick"]  # ran once, not per start
    assert f"(attempt {rp.KERNEL_START_ATTEMPTS} of {rp.KERNEL_START_ATTEMPTS})" in capsys.readouterr().out
    assert not list((out / "quick").glob(".*"))


def test_a_kernel_that_never_starts_fails_after_the_last_attempt(notebooks, tmp_path, monkeypatch):
    src, out, log = notebooks
    kernel, starts = _kernel_dying_at_first(tmp_path, monkeypatch, deaths=99)
    res = rp.reproduce("quick", only=["ok"], notebooks_dir=src, out_dir=out, kernel=kernel, echo=None)
    assert res["ok"]["status"] == "failed" and "Kernel died before replying" in res["ok"]["error"]
    assert starts.read_text() == str(rp.KERNEL_START_ATTEMPTS) and _lines(log) == []


# ------------------------------------------------------- without a kernel
@pytest.fixture
def fake_papermill(monkeypatch):
    """Replaces papermill's execution by a copy with papermill's metadata; records the calls."""
    calls: list[str] = []
    behaviour = {"interrupt": False}

    def execute_notebook(input_path, output_path, parameters=None, **kwargs):
        calls.append(Path(input_path).stem)
        nb = nbformat.read(input_path, as_version=4)
        nb.metadata["papermill"] = {"parameters": parameters, "end_time": "2024-01-01T00:00:00", "exception": None}
        nbformat.write(nb, output_path)  # papermill saves progressively: a partial file exists
        if behaviour["interrupt"]:
            raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    monkeypatch.setattr(rp, "ensure_kernel", lambda name: None)
    return calls, behaviour


def test_version_change_force_and_profiles_rerun(notebooks, fake_papermill, monkeypatch):
    src, out, _ = notebooks
    calls, _ = fake_papermill
    run = lambda **kw: rp.reproduce(notebooks_dir=src, out_dir=out, only=["ok"], echo=None, **kw)
    assert run()["ok"]["status"] == "ran"
    assert run()["ok"]["status"] == "skipped"
    assert run(force=True)["ok"]["status"] == "ran"
    assert run(profile="quick")["ok"]["status"] == "ran"  # profiles are separate folders
    monkeypatch.setattr(rp, "__version__", "999.0")
    assert run()["ok"]["status"] == "ran"
    assert calls == ["ok"] * 4


def test_side_by_side_reproductions_keep_each_others_manifest_entries(notebooks, fake_papermill, monkeypatch):
    src, out, _ = notebooks
    manifest = out / "full" / rp.MANIFEST
    foreign = {"status": "ok", "source_sha256": "x", "finished_at": "2026-01-01T00:00:00+00:00"}
    execute = papermill.execute_notebook

    def execute_while_another_finishes(input_path, output_path, **kwargs):
        # Another reproduction (started before this one loaded the manifest) records its notebook meanwhile.
        manifest.write_text(json.dumps({"profile": "full", "notebooks": {"other": foreign}}))
        execute(input_path, output_path, **kwargs)

    monkeypatch.setattr(papermill, "execute_notebook", execute_while_another_finishes)
    assert rp.reproduce(notebooks_dir=src, out_dir=out, only=["ok"], echo=None)["ok"]["status"] == "ran"
    entries = json.loads(manifest.read_text())["notebooks"]
    assert entries["other"] == foreign and entries["ok"]["status"] == "ok"


def test_outputs_only_change_does_not_rerun(notebooks, fake_papermill):
    src, out, _ = notebooks
    calls, _ = fake_papermill
    rp.reproduce(notebooks_dir=src, out_dir=out, only=["ok"], echo=None)
    nb = nbformat.read(str(src / "ok.ipynb"), as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="stored quick output\n")]
    nb.cells[1].execution_count = 7
    nbformat.write(nb, str(src / "ok.ipynb"))
    assert rp.reproduce(notebooks_dir=src, out_dir=out, only=["ok"], echo=None)["ok"]["status"] == "skipped"
    assert len(calls) == 1


def test_interrupt_leaves_no_partial_copy(notebooks, fake_papermill):
    src, out, _ = notebooks
    calls, behaviour = fake_papermill
    behaviour["interrupt"] = True
    with pytest.raises(KeyboardInterrupt):
        rp.reproduce(notebooks_dir=src, out_dir=out, only=["ok"], echo=None)
    assert list((out / "full").iterdir()) == []  # no executed copy, no temp file, no manifest entry
    behaviour["interrupt"] = False
    assert rp.reproduce(notebooks_dir=src, out_dir=out, only=["ok"], echo=None)["ok"]["status"] == "ran"
    assert calls == ["ok", "ok"]


def test_bad_arguments(notebooks, fake_papermill, tmp_path):
    src, out, _ = notebooks
    with pytest.raises(ValueError, match="profile"):
        rp.reproduce("medium", notebooks_dir=src, out_dir=out)
    with pytest.raises(ValueError, match="only=.*nope.*available"):
        rp.reproduce(only=["nope"], notebooks_dir=src, out_dir=out)
    with pytest.raises(ValueError, match="notebooks_dir"):
        rp.reproduce(notebooks_dir=tmp_path / "missing", out_dir=out)
    assert rp.reproduce(only=["ok.ipynb"], notebooks_dir=src, out_dir=out, echo=None)["ok"]["status"] == "ran"


def test_ensure_kernel_installs_missing_spec(monkeypatch):
    import sys

    from ipykernel import kernelspec
    from jupyter_client import kernelspec as jk

    def missing(self, name):
        raise jk.NoSuchKernel(name)

    installed = {}
    monkeypatch.setattr(jk.KernelSpecManager, "get_kernel_spec", missing)
    monkeypatch.setattr(kernelspec, "install", lambda **kw: installed.update(kw) or "/somewhere")
    rp.ensure_kernel("python3")
    assert installed == {"kernel_name": "python3", "prefix": sys.prefix}


def test_workers_run_notebooks_side_by_side_with_kernel_threads(tmp_path, fake_papermill, monkeypatch):
    """Two workers: both notebooks execute at the same time, in two processes (each waits for the other to
    start), kernels get cores // 2 threads, the manifest holds both, results keep the notebooks' order."""
    import multiprocessing
    import os

    src = tmp_path / "nbs"
    src.mkdir()
    for name in ("a", "b"):
        _write_notebook(src / f"{name}.ipynb", "x = 1")
    both_started = multiprocessing.get_context("fork").Barrier(2, timeout=20)  # broken if run one after the other
    fake = papermill.execute_notebook

    def side_by_side(input_path, output_path, parameters=None, **kwargs):
        name = Path(input_path).stem
        (tmp_path / f"{name}.seen").write_text(f"{os.getpid()} {os.environ.get('OMP_NUM_THREADS')}")
        both_started.wait()
        fake(input_path, output_path, parameters, **kwargs)

    monkeypatch.setattr(papermill, "execute_notebook", side_by_side)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    lines = []
    res = rp.reproduce("full", notebooks_dir=src, out_dir=tmp_path / "out", echo=lines.append, workers=2)
    assert list(res) == ["a", "b"] and all(r["status"] == "ran" for r in res.values())
    seen = {name: (tmp_path / f"{name}.seen").read_text().split() for name in ("a", "b")}
    assert seen["a"][1] == seen["b"][1] == "2" and "OMP_NUM_THREADS" not in os.environ
    assert len({seen["a"][0], seen["b"][0], str(os.getpid())}) == 3  # two worker processes
    assert sorted(json.loads((tmp_path / "out" / "full" / "manifest.json").read_text())["notebooks"]) == ["a", "b"]
    assert sorted(line.split(":")[0] for line in lines) == ["[1/2] a", "[2/2] b"]
    with pytest.raises(ValueError, match=r"^workers=0 is invalid: must be an integer >= 1"):
        rp.reproduce("full", notebooks_dir=src, out_dir=tmp_path / "out", echo=None, workers=0)


def test_a_signal_landing_inside_the_workers_signal_handler_does_not_deadlock():
    """Ctrl-C reaches a worker twice (the terminal's SIGINT, then the parent forwarding it), and the second can
    land at any bytecode of the first handler. Emulated exactly: a trace function calls the handler again at
    every opcode of the first call and of everything it calls. A handler that takes a lock (an Event's) hangs
    on the nested call (seen in CI); the lock-free flag does not. Run in a child with a timeout, as it can hang."""
    import subprocess
    import sys

    script = textwrap.dedent("""
        import multiprocessing, signal, sys
        from rlvr_lib.study import reproduce as rp
        rp._init_worker(rp._new_stop_flag(multiprocessing.get_context("fork")))
        nested = 0
        def tracer(frame, event, arg):
            global nested
            frame.f_trace_opcodes = True
            if event == "opcode":
                nested += 1
                rp._stop_worker(signal.SIGINT, None)  # trace functions are not traced: no recursion
            return tracer
        sys.settrace(tracer)
        rp._stop_worker(signal.SIGINT, None)
        sys.settrace(None)
        print(nested, rp._stopping())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30,
                          cwd=Path(rp.__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    nested, stopping = done.stdout.split()
    assert int(nested) > 0 and stopping == "True"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("signame, reaches", [("SIGINT", "group"), ("SIGTERM", "group"),
                                              ("SIGTERM", "reproduce processes"), ("SIGTERM", "parent")])
def test_interrupt_with_workers_stops_every_kernel_and_keeps_nothing_half_done(tmp_path, signame, reaches):
    """Real kernels, two workers, three notebooks: Ctrl-C (SIGINT to the process group, as a terminal sends it)
    or ``kill`` (SIGTERM: to the group; to the reproduction's processes but not the kernels, as
    ``pkill -f rlvr_lib.study.reproduce`` does; or to the parent alone) ends the reproduction within seconds, shuts
    down both kernels mid-cell, never starts the third notebook, and leaves neither an executed copy, a hidden
    temp copy nor a manifest entry, so the next run executes every notebook again."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    src = tmp_path / "nbs"
    src.mkdir()
    for name in ("a", "b", "c"):
        _write_notebook(
            src / f"{name}.ipynb",
            f"import os, time\nopen({str(tmp_path / name)!r} + '.pid', 'w').write(str(os.getpid()))\n"
            "for _ in range(600):\n    time.sleep(0.1)",
        )
    out = tmp_path / "out"
    # A shell's background job ignores SIGINT, and an ignored signal stays ignored in children: restore it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr_lib.study.reproduce", "--profile", "quick", "--workers", "2", "--no-progress",
         "--notebooks-dir", str(src), "--out", str(out)],
        cwd=Path(rp.__file__).resolve().parents[2], start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    pid_files = [tmp_path / "a.pid", tmp_path / "b.pid"]  # the two workers take a and b; c waits its turn
    kernels: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not all(p.exists() and p.read_text() for p in pid_files):  # both kernels inside their long cell
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0].decode()[-2000:]
            time.sleep(0.2)
        kernels += [int(p.read_text()) for p in pid_files]
        parent_of = lambda pid: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        workers = [parent_of(pid) for pid in kernels]
        assert len(set(workers)) == 2 and proc.pid not in workers
        started = time.monotonic()
        sig = getattr(signal, signame)
        if reaches == "group":
            os.killpg(proc.pid, sig)
        else:
            for pid in [proc.pid] + (workers if reaches == "reproduce processes" else []):
                os.kill(pid, sig)
        output = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode != 0 and time.monotonic() - started < 60, output[-2000:]

        def alive(pid: int) -> bool:  # a zombie (exited, not yet reaped by its new parent) counts as gone
            try:
                return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False

        deadline = time.monotonic() + 15  # a kernel told to shut down may take a moment to exit
        while any(map(alive, kernels + workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(alive, kernels)), f"a kernel outlived {signame} to the {reaches}"
        assert not any(map(alive, workers)), f"a worker outlived {signame} to the {reaches}"
        assert not (tmp_path / "c.pid").exists(), f"the third notebook started after {signame} to the {reaches}"
        executed = out / "quick"
        assert not any(executed.glob("*.ipynb")) and not any(executed.glob(".*"))  # no copy, no hidden temp file
        manifest = executed / "manifest.json"
        assert not manifest.exists() or json.loads(manifest.read_text())["notebooks"] == {}
    finally:  # a failed check must not leave a reproduction or a kernel running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in kernels:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_notebook_waiting_for_another_notebooks_runs_is_not_a_failure(notebooks, fake_papermill, monkeypatch,
                                                                         capsys):
    """A notebook that raises PrerequisitesMissing keeps no copy and no manifest entry and does not fail the run."""
    from papermill.exceptions import PapermillExecutionError

    src, out, _ = notebooks
    (src / "bad.ipynb").unlink()
    _write_notebook(src / "later.ipynb", "raise PrerequisitesMissing('needs notebook 02')")
    execute = papermill.execute_notebook

    def execute_notebook(input_path, output_path, **kwargs):
        execute(input_path, output_path, **kwargs)  # papermill has written its copy when the cell raises
        if Path(input_path).stem == "later":
            raise PapermillExecutionError(1, 1, "raise ...", "PrerequisitesMissing", "needs notebook 02", [])

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    argv = ["--profile", "full", "--notebooks-dir", str(src), "--out", str(out), "--no-progress"]
    assert rp.main(argv) == 0
    printed = capsys.readouterr().out
    assert "later: waiting -- PrerequisitesMissing: needs notebook 02" in printed
    assert "1 ran, 0 skipped, 0 failed, 1 waiting" in printed
    assert not (out / "full" / "later.ipynb").exists() and not list((out / "full").glob(".*"))
    assert set(json.loads((out / "full" / "manifest.json").read_text())["notebooks"]) == {"ok"}
    res = rp.reproduce("full", notebooks_dir=src, out_dir=out, echo=None)  # tried again, the other skipped
    assert res["later"]["status"] == "waiting" and res["ok"]["status"] == "skipped"


def _executed_with_claims(path: Path, tables: int = 1) -> Path:
    """An executed-looking notebook: a title, then per claims table a cell showing its summary, its reading and
    a measurements line (not a claim)."""
    from rlvr_lib.study.claims.tables import claims_reading, claims_summary, claims_table

    ci = {"mean": 0.1, "ci_low": 0.05, "ci_high": 0.15, "n": 5, "method": "m"}
    cells = [nbformat.v4.new_markdown_cell("# 99 — a title")]
    for t in range(tables):
        table = claims_table([dict(id=f"c{t}", claim=f"claim {t}", source="SAGE", paper="T1", paper_effect="-",
                                   ours=ci, expect=">", against="grpo", regime="retention", premise="none")])
        cell = nbformat.v4.new_code_cell("display(...)")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": claims_summary(table)}),
                        nbformat.v4.new_output("display_data", data={"text/markdown": claims_reading(table, "Tiny.")}),
                        nbformat.v4.new_output("stream", name="stdout", text="Additional measurements: 1 of 1\n")]
        cells.append(cell)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    return path


def test_an_executed_notebook_opens_with_its_claims_headline_and_reading(tmp_path):
    from rlvr_lib.study.claims.tables import OPENING_TAG, find_claims_counts, notebook_outputs

    path = _executed_with_claims(tmp_path / "nb.ipynb", tables=2)
    counts = find_claims_counts(notebook_outputs(path))
    assert rp.open_with_claims(path) is True
    nb = nbformat.read(str(path), as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "markdown", "code", "code"]  # after the title
    opening = nb.cells[1]
    assert opening.metadata["tags"] == [OPENING_TAG]
    parts = opening.source.split("\n\n")
    assert parts[0] == "## At a glance"
    assert [p.split(" ", 1)[0] for p in parts[2:]] == ["**1", "**Reading.**", "**What", "**1", "**Reading.**",
                                                      "**What"]  # each table's headline, reading and limits
    assert parts[2].startswith("**1 reproduced, 0 contradicted, 0 unresolved, 0 not specific, 0 premise absent of 1 "
                               "claims**")
    assert "Additional measurements" not in opening.source
    assert find_claims_counts(notebook_outputs(path)) == counts  # the copy is not an output: nothing counted twice
    before = path.read_text()
    assert rp.open_with_claims(path) is False and path.read_text() == before  # idempotent


def test_a_notebook_without_claims_is_left_as_it_is(tmp_path):
    path = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t")]), str(path))
    before = path.read_text()
    assert rp.open_with_claims(path) is False and path.read_text() == before


def test_reproduce_puts_the_opening_on_executed_and_skipped_copies(notebooks, fake_papermill, tmp_path):
    src, out, _ = notebooks
    rp.reproduce("quick", only=["ok"], notebooks_dir=src, out_dir=out, echo=None)
    # an executed copy made before the opening existed, with a claims table: the next (skipping) pass adds it
    copy = out / "quick" / "ok.ipynb"
    nb = nbformat.read(str(copy), as_version=4)
    claims = nbformat.read(str(_executed_with_claims(tmp_path / "c.ipynb")), as_version=4)
    nb.cells = [*claims.cells, *nb.cells]
    nbformat.write(nb, str(copy))
    assert rp.reproduce("quick", only=["ok"], notebooks_dir=src, out_dir=out, echo=None)["ok"]["status"] == "skipped"
    assert nbformat.read(str(copy), as_version=4).cells[1].source.startswith("## At a glance")
    # a notebook executed now (papermill's copy keeps the outputs): its copy opens with them too
    _executed_with_claims(src / "claims.ipynb")
    assert rp.reproduce("quick", only=["claims"], notebooks_dir=src, out_dir=out, echo=None)["claims"]["status"] == "ran"
    assert nbformat.read(str(out / "quick" / "claims.ipynb"), as_version=4).cells[1].source.startswith("## At a glance")
    assert not nbformat.read(str(src / "claims.ipynb"), as_version=4).cells[1].source.startswith("## At")  # source kept


# ------------------------------------------- where executed copies go (issue 59 item 3)
@pytest.fixture
def committed(tmp_path, monkeypatch):
    """``tmp_path/results`` stands for the committed results root and ``tmp_path/nbs`` for ``<repo>/notebooks``;
    papermill is replaced by a copy that injects the parameters cell as papermill does (its own function)."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    root, src = tmp_path / "results", tmp_path / "nbs"
    src.mkdir(exist_ok=True)
    monkeypatch.setenv("RLVR_RESULTS_DIR", str(root))  # the results root is the committed one
    monkeypatch.setattr(executions, "_committed_results_root", lambda: root)
    monkeypatch.setattr(executions, "_default_notebooks_dir", lambda: src)
    monkeypatch.setattr(rp, "_default_out_dir", lambda: root / "notebooks")
    monkeypatch.setattr(rp, "ensure_kernel", lambda name: None)
    behaviour = {"fail": False, "calls": []}

    def execute_notebook(input_path, output_path, parameters=None, **kwargs):
        behaviour["calls"].append((Path(input_path).name, Path(output_path).parent))
        nb = parameterize_notebook(load_notebook_node(str(input_path)), parameters)
        nb.metadata["papermill"] = {"parameters": parameters, "end_time": "2024-01-01T00:00:00", "exception": None}
        nb.cells[-1].outputs = [nbformat.v4.new_output("stream", text=f"ran at {parameters['profile']}\n")]
        nbformat.write(nb, output_path)
        if behaviour["fail"]:
            raise RuntimeError("CacheMiss: no record")

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    _write_notebook(src / "ok.ipynb", "print(profile)")
    return root, src, behaviour


def test_executed_dir_is_the_notebooks_folder_for_the_committed_full_profile_only(committed, tmp_path, monkeypatch):
    root, src, _ = committed
    assert rp.executed_dir("full") == src and rp.executed_copy("03_x") == src / "03_x.ipynb"
    assert rp.executed_dir("quick") == root / "notebooks" / "quick"
    staged = root / "recompute-58"  # a recompute's staging root: its copies stay under it, never over notebooks/
    monkeypatch.setenv("RLVR_RESULTS_DIR", str(staged))
    assert rp.executed_dir("full") == staged / "notebooks" / "full"
    assert rp.executed_copy("03_x.ipynb") == staged / "notebooks" / "full" / "03_x.ipynb"
    assert rp.executed_dir("full", root=tmp_path / "other") == tmp_path / "other" / "notebooks" / "full"
    with pytest.raises(ValueError, match="profile"):
        rp.executed_dir("medium")


def test_the_full_profile_executes_in_place_and_keeps_its_manifest_under_results(committed):
    root, src, behaviour = committed
    res = rp.reproduce("full", echo=None)
    assert res["ok"]["status"] == "ran" and res["ok"]["output"] == str((src / "ok.ipynb").resolve())
    executed = nbformat.read(str(src / "ok.ipynb"), as_version=4)
    assert rp.stored_profile(src / "ok.ipynb") == "full"
    assert [c.metadata.get("tags") for c in executed.cells][:2] == [["parameters"], ["injected-parameters"]]
    assert executed.cells[-1].outputs[0]["text"] == "ran at full\n"
    manifest = json.loads((root / "notebooks" / "full" / rp.MANIFEST).read_text())["notebooks"]
    assert manifest["ok"]["status"] == "ok" and not (root / "notebooks" / "full" / "ok.ipynb").exists()
    assert sorted(p.name for p in src.iterdir()) == ["ok.ipynb"]  # no temporary file left
    # the injected cell is the execution's, not the source's: the notebook is up to date, not changed
    assert rp.reproduce("full", echo=None)["ok"]["status"] == "skipped"
    # executed again in place (papermill replaces its injected cell): still one injected cell
    assert rp.reproduce("full", echo=None, force=True)["ok"]["status"] == "ran"
    tags = [c.metadata.get("tags", []) for c in nbformat.read(str(src / "ok.ipynb"), as_version=4).cells]
    assert sum("injected-parameters" in t for t in tags) == 1
    # the quick smoke run reads the full copy and writes under results/notebooks/quick/, never over notebooks/
    assert rp.reproduce("quick", echo=None)["ok"]["status"] == "ran"
    assert rp.stored_profile(root / "notebooks" / "quick" / "ok.ipynb") == "quick"
    assert rp.stored_profile(src / "ok.ipynb") == "full"
    assert [where for _, where in behaviour["calls"]] == [src.resolve()] * 2 + [(root / "notebooks" / "quick").resolve()]


def test_a_failed_execution_in_place_keeps_the_stored_notebook(committed):
    root, src, behaviour = committed
    stored = (src / "ok.ipynb").read_bytes()
    behaviour["fail"] = True
    res = rp.reproduce("full", echo=None)
    assert res["ok"]["status"] == "failed" and "CacheMiss" in res["ok"]["error"]
    assert (src / "ok.ipynb").read_bytes() == stored  # never replaced by a failed execution
    failed = src / ".ok.failed.ipynb"
    assert res["ok"]["output"] == str(failed.resolve()) and rp.stored_profile(failed) == "full"
    assert [p.stem for p in rp._notebooks_in(src)] == ["ok"]  # the failed copy is not a notebook to run
    behaviour["fail"] = False
    assert rp.reproduce("full", echo=None)["ok"]["status"] == "ran"  # a failure is tried again


def test_notebook_hash_leaves_out_the_cells_an_execution_adds(tmp_path):
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    from rlvr_lib.study.claims.tables import OPENING_TAG

    source = _write_notebook(tmp_path / "a.ipynb", "x = 1")
    nb = parameterize_notebook(load_notebook_node(str(source)), {"profile": "full"})
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("claims", metadata={"tags": [OPENING_TAG]}))
    nbformat.write(nb, str(tmp_path / "b.ipynb"))
    assert rp.notebook_hash(tmp_path / "b.ipynb") == rp.notebook_hash(source)
    nb.cells[-1].source = "x = 2"  # a code change still changes it
    nbformat.write(nb, str(tmp_path / "b.ipynb"))
    assert rp.notebook_hash(tmp_path / "b.ipynb") != rp.notebook_hash(source)


def test_stored_profile_and_the_command_line_listing(committed, tmp_path, capsys, monkeypatch):
    root, src, _ = committed
    _write_notebook(src / "two.ipynb", "print(2)")
    with pytest.raises(ValueError, match="not executed by papermill"):
        rp.stored_profile(src / "two.ipynb")
    rp.reproduce("full", only=["ok"], echo=None)
    nb = nbformat.read(str(src / "two.ipynb"), as_version=4)
    nb.metadata["papermill"] = {"parameters": {}}  # executed by papermill without parameters: the default, quick
    nbformat.write(nb, str(src / "two.ipynb"))
    assert (rp.stored_profile(src / "ok.ipynb"), rp.stored_profile(src / "two.ipynb")) == ("full", "quick")
    monkeypatch.chdir(tmp_path)
    assert rp.main(["--stored", "full"]) == 0 and capsys.readouterr().out.split() == ["nbs/ok.ipynb"]
    assert rp.main(["--stored", "quick"]) == 0 and capsys.readouterr().out.split() == ["nbs/two.ipynb"]
    _write_notebook(src / "three.ipynb", "print(3)")  # never executed: nbval could not say at which profile
    with pytest.raises(SystemExit) as exit_info:
        rp.main(["--stored", "full"])
    assert exit_info.value.code == 2 and "three.ipynb: not executed by papermill" in capsys.readouterr().err


def test_full_execution_prefers_the_in_place_copy_and_falls_back_to_the_earlier_one(committed):
    root, src, _ = committed
    earlier = root / "notebooks" / "full" / "ok.ipynb"
    assert rp.full_execution("ok") is None  # the stored copy is not an execution yet, no earlier one
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    assert rp.full_execution("ok") == earlier  # waiting for its records: the earlier full execution is shown
    rp.reproduce("full", echo=None)
    assert rp.full_execution("ok") == src / "ok.ipynb"
