"""Run every notebook with papermill, resumably: ``python -m rlvr_lib.study.reproduce``.

``make reproduce`` calls this with ``--profile full``. Each ``notebooks/*.ipynb`` (sorted by name) is executed
with ``profile`` injected; one status line per notebook; exit status 1 when any notebook failed (the others still
run). Where the executed copy goes (:func:`executed_dir`):

* the full profile on the committed results root (``<repo>/results``, no ``RLVR_RESULTS_DIR``): **in place**,
  ``notebooks/<name>.ipynb`` -- the copy a reader opens is the full-profile execution of the committed records,
  and nbval re-executes it from them (``RLVR_CACHE_ONLY=1``, `make test`);
* any other profile or results root (the quick smoke run, a recompute's staging root): ``<root>/notebooks/<profile>/``
  (``results/notebooks/quick/``, ``results/recompute-58/notebooks/full/``), never over ``notebooks/``;
* ``--out OUT``: ``OUT/<profile>/``.

The manifest (the record of executions) is ``<out>/<profile>/manifest.json`` in every case
(``results/notebooks/full/manifest.json`` for the committed full copies).

* A notebook is skipped when its executed copy finished without error and neither its hash (cell types,
  sources and tags, without papermill's injected parameters and the claims opening: :func:`notebook_hash`) nor
  ``rlvr_lib.__version__`` changed (``<out>/<profile>/manifest.json``);
  its runs resume through `rlvr_lib.study.runs.cached_run`.
* The executed copy is written to a hidden temporary file and moved into place with ``os.replace``; a failed
  notebook is kept and runs again next time; one that stops on `rlvr_lib.study.runs.PrerequisitesMissing` is
  *waiting* (no copy kept, not a failure). An executed copy opens with its claims (:func:`open_with_claims`).
* The kernel runs in the notebook's folder with the library's parent folder on ``PYTHONPATH``.
* ``--workers N`` runs N notebooks at once, each kernel with ``OMP_NUM_THREADS = cores // N`` (unless set);
  Ctrl-C or SIGTERM stops every kernel; runs two notebooks share are computed once.
* ``--executor local|ray|slurm [--address ADDR] [--slurm KEY=VALUE ...]``: each notebook's plan (`rlvr_lib.study.plan`) is computed first by
  `rlvr_lib.study.executors` (local processes, or one Ray task per run), then the notebook is executed reading only
  the cache (``RLVR_CACHE_ONLY=1``); the quick profile's runs go to ``<out>/quick/runs`` (docs/scaling-out.md).

Each rule's reasons (what the hash covers, why one-thread workers, how a signal reaches every worker):
docs/study/reproduce.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr_lib import __version__
from rlvr_lib.cli_checks import OneLineParser, UsageError, check_out_folder, existing_folder, flag_errors, int_at_least
from rlvr_lib.study import executions
from rlvr_lib.study.executions import (_PACKAGE_PARENT, INJECTED_TAG, PROFILES, executed_copy, executed_dir,
                                       full_execution, stored_profile)
from rlvr_lib.validation import check_choice, check_int

__all__ = ["PROFILES", "ensure_kernel", "executed_copy", "executed_dir", "full_execution", "main", "notebook_hash",
           "open_with_claims", "reproduce", "stored_profile"]

MANIFEST = "manifest.json"


# ------------------------------------------------------------------ helpers
def _default_out_dir() -> Path:
    from rlvr_lib.study.runs import results_root

    return results_root() / "notebooks"


def notebook_hash(path: str | Path) -> str:
    """sha256 of what a notebook runs: each cell's type, source and tags.

    Outputs, execution counts and other metadata are left out, and so are the
    cells the execution adds (papermill's ``injected-parameters`` cell and the
    claims opening, :func:`open_with_claims`), so a notebook executed in place
    has the hash of its source.

    Args:
        path: The ``.ipynb`` file.

    Returns:
        The hex digest.
    """
    import nbformat

    from rlvr_lib.study.claims.tables import OPENING_TAG

    nb = nbformat.read(str(path), as_version=4)
    added = {INJECTED_TAG, OPENING_TAG}
    cells = [[c.cell_type, c.source, sorted(tags)] for c in nb.cells
             if not added & set(tags := c.get("metadata", {}).get("tags", []))]
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()


def ensure_kernel(name: str = "python3") -> None:
    """Makes sure a Jupyter kernel called ``name`` exists.

    When ``jupyter_client`` cannot find it, installs the ipykernel spec of the
    running interpreter under that name into ``sys.prefix`` (like
    ``python -m ipykernel install --sys-prefix``).

    Args:
        name: Kernel name.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        from ipykernel import kernelspec

        dest = kernelspec.install(kernel_name=name, prefix=sys.prefix)
        print(f"installed Jupyter kernel {name!r} for {sys.executable} in {dest}")


@contextlib.contextmanager
def _library_on_pythonpath() -> Iterator[None]:
    """Prepends the folder above ``rlvr_lib/`` to ``PYTHONPATH`` (inherited by kernels) for the block."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), old) if p)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _load_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data.get("notebooks", {}) if isinstance(data, dict) else {}


def _write_manifest(path: Path, profile: str, entries: dict[str, Any]) -> None:
    """Writes the manifest atomically (temp file in the same folder, then ``os.replace``)."""
    text = json.dumps({"profile": profile, "notebooks": entries}, indent=1, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _update_manifest(path: Path, profile: str, name: str, entry: dict[str, Any]) -> None:
    """Sets ``name``'s entry, re-reading the file under an exclusive lock first.

    Two reproductions may run side by side (e.g. ``--only`` different
    notebooks): each keeps the entries the other wrote since it started.
    """
    folder = os.open(path.parent, os.O_RDONLY)  # the lock is on the folder: no lock file is left behind
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        entries = _load_manifest(path)
        entries[name] = entry
        _write_manifest(path, profile, entries)
    finally:
        os.close(folder)  # releases the lock


def _finished_ok(executed: Path, profile: str) -> bool:
    """True when papermill finished ``executed`` at ``profile`` without an error."""
    import nbformat

    try:
        nb = nbformat.read(str(executed), as_version=4)
    except Exception:
        return False
    meta = nb.metadata.get("papermill", {})
    if meta.get("exception") or not meta.get("end_time"):
        return False
    if meta.get("parameters", {}).get("profile") != profile:
        return False
    return not any(out.get("output_type") == "error" for cell in nb.cells for out in cell.get("outputs", []))


def _waiting(exc: BaseException) -> bool:
    """True when a notebook stopped on `rlvr_lib.study.runs.PrerequisitesMissing`: it waits for another's runs."""
    from papermill.exceptions import PapermillExecutionError

    from rlvr_lib.study.runs import PrerequisitesMissing

    return isinstance(exc, PapermillExecutionError) and exc.ename == PrerequisitesMissing.__name__


def _error_text(exc: BaseException) -> str:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        return f"{exc.ename}: {exc.evalue} (cell [{exc.exec_count}])"
    return f"{type(exc).__name__}: {exc}"


def _notebooks_in(folder: Path) -> list[Path]:
    """The notebooks of ``folder``, by name; hidden ones (an execution's temporary file) are not notebooks."""
    return sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))


def _select(notebooks: list[Path], only: Sequence[str] | None) -> list[Path]:
    if only is None:
        return notebooks
    by_name = {p.stem: p for p in notebooks}
    wanted = [Path(n).stem for n in only]
    unknown = [n for n in wanted if n not in by_name]
    if unknown or not wanted:
        raise ValueError(f"only={list(only)!r}: unknown notebook(s) {unknown}; available: {sorted(by_name)}")
    return [by_name[n] for n in sorted(set(wanted))]


#: How many times a notebook's kernel is started when it dies before it answers. Kernels started at once (two
#: workers, or another program's) can be handed the same free port, as jupyter_client picks the ports before the
#: kernel binds them (jupyter/jupyter_client#487); the loser dies before running a cell, so starting it again
#: loses nothing.
KERNEL_START_ATTEMPTS = 3


def _died_starting(exc: BaseException) -> bool:
    """True when ``exc`` is jupyter_client's error for a kernel that died before its first reply (no cell ran)."""
    return isinstance(exc, RuntimeError) and str(exc).startswith("Kernel died before replying to kernel_info")


def _execute(source: Path, target: Path, profile: str, kernel: str, progress: bool) -> None:
    """Runs ``source`` into ``target`` through a temp file; moves it into place unless interrupted.

    A failed run keeps papermill's annotated copy for the reader at ``target``; executed in place (``target`` is
    ``source``), at ``.<name>.failed.ipynb`` beside it instead, so the stored notebook is never replaced by a failed
    execution.
    """
    import papermill

    tmp = target.with_name(f".{target.stem}.running.ipynb")
    moved = False
    try:
        for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
            try:
                papermill.execute_notebook(
                    str(source),
                    str(tmp),
                    parameters={"profile": profile},
                    kernel_name=kernel,
                    cwd=str(source.parent),
                    progress_bar=progress,
                )
                break
            except RuntimeError as exc:
                if not _died_starting(exc) or attempt == KERNEL_START_ATTEMPTS or _stopping():
                    raise
                print(f"{source.stem}: its kernel died while starting ({exc}); starting it again "
                      f"(attempt {attempt + 1} of {KERNEL_START_ATTEMPTS})", flush=True)
        open_with_claims(tmp)
        os.replace(tmp, target)
        moved = True
    except Exception as exc:
        # a failed run: keep papermill's annotated copy for the reader (a waiting one has nothing to show)
        if tmp.exists() and not _stopping() and not _waiting(exc):
            in_place = target.resolve() == source.resolve()
            os.replace(tmp, target.with_name(f".{target.stem}.failed.ipynb") if in_place else target)
            moved = True
        raise
    finally:
        if not moved:
            tmp.unlink(missing_ok=True)


def open_with_claims(executed: str | Path) -> bool:
    """Puts the claims headline and reading of an executed notebook at its top.

    The cell (markdown, tagged :data:`~rlvr_lib.study.claims.tables.OPENING_TAG`, after the title cell) holds
    :func:`~rlvr_lib.study.claims.tables.opening_summary` of the notebook's own outputs; an earlier such cell is
    replaced, so the call is idempotent. A notebook without a claims table is left as it is.

    Returns:
        Whether the file was rewritten.
    """
    import nbformat

    from rlvr_lib.study.claims.tables import OPENING_TAG, notebook_outputs, opening_summary

    executed = Path(executed)
    nb = nbformat.read(str(executed), as_version=4)
    mine = [c for c in nb.cells if OPENING_TAG not in c.get("metadata", {}).get("tags", [])]
    text = opening_summary(notebook_outputs(executed))
    if text is not None:
        cell = nbformat.v4.new_markdown_cell(text, metadata={"tags": [OPENING_TAG]})
        mine.insert(1 if mine and mine[0].cell_type == "markdown" else 0, cell)
    old = [(c.cell_type, c.source) for c in nb.cells]
    if old == [(c.cell_type, c.source) for c in mine]:
        return False
    nb.cells = mine
    nbformat.write(nb, str(executed))
    return True


# ------------------------------------------------------------------------ API
def reproduce(
    profile: str = "full",
    only: Sequence[str] | None = None,
    notebooks_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    kernel: str = "python3",
    force: bool = False,
    progress: bool = False,
    echo: Callable[[str], Any] | None = print,
    workers: int = 1,
    executor: str | None = None,
    address: str | None = None,
    executor_options: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Executes the notebooks with papermill, skipping those already done.

    Args:
        profile: ``"quick"`` or ``"full"``, injected as the notebook parameter
            ``profile``.
        only: Notebook names (with or without ``.ipynb``) to run; all when None.
        notebooks_dir: Folder of the source notebooks; default
            ``<repo>/notebooks``.
        out_dir: Root of the executed copies, written to
            ``<out_dir>/<profile>/``; default: :func:`executed_dir` (in place
            in ``notebooks_dir`` for the full profile on the committed results
            root, else ``<results root>/notebooks/<profile>``). The manifest is
            ``<out_dir or results root/notebooks>/<profile>/manifest.json``.
        kernel: Jupyter kernel name; ``python3`` is installed for this
            interpreter if missing (:func:`ensure_kernel`).
        force: Run every selected notebook even if it is up to date.
        progress: Show papermill's per-cell progress bar.
        echo: Called with each status line; None for silence.
        workers: Notebooks executed at once (``>= 1``); see the module docstring.
        executor: None (default): each notebook trains its own runs in its kernel. ``"local"``, ``"ray"`` or
            ``"slurm"``: each notebook's plan (`rlvr_lib.study.plan.notebook_plan`) is computed first by that executor
            (`rlvr_lib.study.executors.execute`; ``workers`` runs at once for ``"local"``, jobs at once for
            ``"slurm"``), then the notebook is executed with ``RLVR_CACHE_ONLY=1`` (it only reads):
            :func:`_execute_plans`.
        address: The Ray cluster's address for ``executor="ray"`` (None: a local cluster).
        executor_options: submitit's parameters for ``executor="slurm"`` (`rlvr_lib.study.executors`).

    Returns:
        ``{name: {"status", "seconds", "error", "output"}}`` in run order, with
        status ``"skipped"``, ``"ran"`` or ``"failed"``.

    Raises:
        ValueError: on an unknown ``profile``, a missing ``notebooks_dir``,
            a name in ``only`` that is not a notebook there, or ``workers < 1``.
    """
    check_choice("profile", profile, PROFILES)
    check_int("workers", workers, 1)
    src_dir = Path(notebooks_dir) if notebooks_dir is not None else executions._default_notebooks_dir()
    if not src_dir.is_dir():
        raise ValueError(f"notebooks_dir={str(src_dir)!r} is not a folder")
    notebooks = _select(_notebooks_in(src_dir), only)
    records = (Path(out_dir) if out_dir is not None else _default_out_dir()).resolve() / profile
    dest = records if out_dir is not None else executed_dir(profile, notebooks_dir=src_dir).resolve()
    records.mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = records / MANIFEST
    manifest = _load_manifest(manifest_path)
    say = echo or (lambda _line: None)
    if notebooks:
        ensure_kernel(kernel)
    else:
        say(f"no notebooks in {src_dir}")

    results: dict[str, dict[str, Any]] = {}
    pending = []  # (prefix, name, source, target, digest) of the notebooks to execute, in order
    for i, source in enumerate(notebooks, 1):
        name, target = source.stem, dest / source.name
        prefix = f"[{i}/{len(notebooks)}] {name}:"
        try:
            digest = notebook_hash(source)
        except Exception as exc:  # unreadable notebook: report it, go on with the others
            results[name] = {"status": "failed", "seconds": 0.0, "error": _error_text(exc), "output": None}
            say(f"{prefix} FAILED -- cannot read it: {_error_text(exc)}")
            continue
        entry = manifest.get(name, {})
        up_to_date = (
            entry.get("status") == "ok"
            and entry.get("source_sha256") == digest
            and entry.get("rlvr_lib_version") == __version__
            and _finished_ok(target, profile)
        )
        if up_to_date and not force:
            open_with_claims(target)  # an executed copy made before the opening cell existed gains it
            results[name] = {"status": "skipped", "seconds": 0.0, "error": None, "output": str(target)}
            say(f"{prefix} skipped (unchanged since {entry.get('finished_at', '?')})")
            continue
        pending.append((prefix, name, source, target, digest))

    def record(prefix, name, target, digest, seconds, error) -> None:
        if error and error.startswith(WAITING_PREFIX):  # not run yet: no copy, the manifest keeps its entry
            results[name] = {"status": "waiting", "seconds": seconds, "error": error[len(WAITING_PREFIX):],
                             "output": None}
            say(f"{prefix} waiting -- {error[len(WAITING_PREFIX):]}")
            return
        failed_copy = target.with_name(f".{target.stem}.failed.ipynb")
        output = failed_copy if error and target.parent == src_dir.resolve() else target
        results[name] = {"status": "failed" if error else "ran", "seconds": seconds, "error": error,
                         "output": str(output) if output.exists() else None}
        _update_manifest(manifest_path, profile, name, {
            "source_sha256": digest,
            "rlvr_lib_version": __version__,
            "status": "failed" if error else "ok",
            "seconds": seconds,
            "error": error,
            "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        })
        say(f"{prefix} FAILED after {seconds:.1f} s -- {error}" if error else f"{prefix} ran in {seconds:.1f} s")

    planned = contextlib.nullcontext()
    if executor is not None and pending:  # the runs first, by the executor; then the notebooks only read them
        runs_root = None if profile == "full" else records / "runs"  # full: the notebooks' own root
        errors = _execute_plans([job[2] for job in pending], profile, executor, address=address,
                                options=executor_options, workers=workers,
                                root=runs_root, progress=progress, say=say)
        for prefix, name, _, target, digest in [job for job in pending if job[1] in errors]:
            record(prefix, name, target, digest, 0.0, errors[name])
        pending = [(*job[:2], _reading_root(job[2], runs_root), *job[3:]) for job in pending if job[1] not in errors]
        planned = _cache_only([job[2] for job in pending])
    with planned, _library_on_pythonpath(), _kernel_threads(workers):
        if workers == 1:
            for prefix, name, source, target, digest in pending:
                record(prefix, name, target, digest, *_execute_timed(source, target, profile, kernel, progress))
        elif pending:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            # Processes, not threads: Ctrl-C reaches every worker's papermill, which shuts its kernel down.
            context = multiprocessing.get_context("fork")
            stop = _new_stop_flag(context)
            with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                                     initargs=(stop,)) as pool:
                futures = {}
                for job in pending:
                    _, _, source, target, _ = job
                    futures[pool.submit(_execute_timed, source, target, profile, kernel, progress)] = job
                try:
                    for future in as_completed(futures):
                        prefix, name, _, target, digest = futures[future]
                        record(prefix, name, target, digest, *future.result())
                except BaseException:
                    # Interrupted (or failed) here: no worker may start another notebook, and a worker the
                    # signal did not reach (`kill` of this process alone) is interrupted now. Leaving the `with`
                    # then waits for the kernels to be shut down.
                    stop.value = 1
                    for future in futures:
                        future.cancel()
                    for child in multiprocessing.active_children():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(child.pid, signal.SIGINT)
                    raise
    order = [source.stem for source in notebooks]
    return {name: results[name] for name in order if name in results}


def _execute_plans(sources: Sequence[Path], profile: str, executor: str, *, address: str | None,
                   options: Mapping[str, Any] | None = None, workers: int, root: Path | None, progress: bool,
                   say: Callable[[str], Any]) -> dict[str, str]:
    """Computes the runs of each notebook's plan with ``executor``; ``{name: error}`` of those that cannot be read.

    A plan that waits on other notebooks' records (notebook 07's second stage on 02's and 04's) has its first stage
    computed; the plans are then made again, round after round, until each is complete or a round computes nothing
    (then the waiting notebooks fail, naming what they wait on: select the notebooks they name too).
    """
    from rlvr_lib.study.executors import RunsFailed, connected, execute
    from rlvr_lib.study.plan import notebook_plan

    errors: dict[str, str] = {}
    waiting = {source.stem: source for source in sources}
    waits_on: dict[str, str] = {}
    with connected(executor, address):
        while waiting:
            progressed = False
            for name, source in list(waiting.items()):
                try:
                    plan = notebook_plan(source, profile, root=root)
                except Exception as exc:  # a notebook without tagged cells, a cell that fails
                    errors[name] = f"its plan could not be made: {type(exc).__name__}: {exc}"
                    del waiting[name]
                    continue
                missing = plan.missing()
                say(f"{name}: {len(plan.runs)} planned run(s){'' if plan.complete else ' (a first stage)'}, "
                    f"{len(missing)} to compute ({executor})")
                try:
                    execute(missing, executor, workers=workers, options=options, progress=progress)
                except RunsFailed as exc:
                    errors[name] = str(exc)
                    del waiting[name]
                    continue
                progressed = progressed or bool(missing)
                if plan.complete:
                    del waiting[name]
                    progressed = True
                else:
                    waits_on[name] = "; ".join(plan.waiting_on)
            if waiting and not progressed:
                for name in waiting:
                    errors[name] = (f"its plan stays incomplete, waiting on: {waits_on[name]} (no notebook of this "
                                    "reproduction computed anything more: select the notebooks it names too)")
                break
    return errors


ROOT_TAG = "injected-root"
"""Tag of the cell :func:`_reading_root` adds to a notebook executed after its plan: it sets ``ROOT``."""


def _reading_root(source: Path, root: Path | None) -> Path:
    """The notebook to execute so that it reads its runs from ``root`` (None: ``source`` itself, the notebook's own root).

    ``notebook_plan(..., root=root)`` sets the notebook's ``ROOT`` after the cell that defines it; the same is done
    here: a copy of ``source`` (hidden, beside it: the kernel's folder is the same) with a cell tagged
    :data:`ROOT_TAG` after the first code cell that assigns ``ROOT`` (not papermill's ``injected-parameters``:
    papermill replaces the cells it tagged). (At the quick profile a notebook without ``ROOT`` has no plan in a
    root: `rlvr_lib.study.plan.notebook_plan` refuses it.)
    """
    import ast

    import nbformat

    if root is None:
        return source
    nb = nbformat.read(str(source), as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics: not a cell that defines ROOT
            continue
        if any(isinstance(t, ast.Name) and t.id == "ROOT" for node in ast.walk(tree) if isinstance(node, ast.Assign)
               for t in node.targets):
            injected = nbformat.v4.new_code_cell(f"# the runs' root (reproduce --executor)\nimport pathlib\n"
                                                 f"ROOT = pathlib.Path({str(root)!r})",
                                                 metadata={"tags": [ROOT_TAG]})
            nb.cells.insert(i + 1, injected)
            break
    fd, copy = tempfile.mkstemp(dir=source.parent, prefix=f".{source.stem}.", suffix=".planned.ipynb")
    os.close(fd)  # a name of its own: reproductions side by side (other roots) each execute their copy
    nbformat.write(nb, copy)
    return Path(copy)


@contextlib.contextmanager
def _cache_only(sources: Sequence[Path]) -> Iterator[None]:
    """For the block, kernels read only (``RLVR_CACHE_ONLY=1``): from their own results root at the full profile,
    from the ``ROOT`` :func:`_reading_root` injected at the quick (``RLVR_RESULTS_DIR`` as set: the testbed's reports
    of record); the copies :func:`_reading_root` made are removed after it."""
    from rlvr_lib.study.runs import CACHE_ONLY_ENV, environment

    try:
        with environment({CACHE_ONLY_ENV: "1"}):
            yield
    finally:
        for source in sources:
            if source.name.endswith(".planned.ipynb"):
                source.unlink(missing_ok=True)


def _execute_timed(source: Path, target: Path, profile: str, kernel: str, progress: bool) -> tuple[float, str | None]:
    """:func:`_execute` and its outcome: ``(seconds, error text or None)``.

    In a pool worker, once the reproduction is interrupted a notebook is not
    started, and one that ends in an error (a kernel shut down mid-cell) is an
    interruption, raised as `KeyboardInterrupt`, not a failure to record.
    """
    global _RUNNING
    if _stopping():
        raise KeyboardInterrupt(f"{source.name}: not started, the reproduction was interrupted")
    start = time.perf_counter()
    error = None
    _RUNNING = True
    try:
        _execute(source, target, profile, kernel, progress)
    except Exception as exc:
        if _stopping():
            raise KeyboardInterrupt(f"{source.name}: interrupted") from exc
        error = (WAITING_PREFIX if _waiting(exc) else "") + _error_text(exc)
    finally:
        _RUNNING = False
    return round(time.perf_counter() - start, 2), error


WAITING_PREFIX = "waiting: "
"""Marks the error text of a notebook that raised `rlvr_lib.study.runs.PrerequisitesMissing` (status "waiting")."""


# Pool workers only (set by `_init_worker`): the pool's shared stop flag; whether this worker is executing a
# notebook; whether it has already been interrupted.
_STOP: Any = None
_RUNNING = False
_INTERRUPTED = False


def _new_stop_flag(context: Any) -> Any:
    """The pool's shared stop flag: a lock-free byte, not an Event. The workers' signal handler sets it, and
    a handler that takes a lock deadlocks when a second signal (the parent forwarding Ctrl-C) lands while the
    first holds it."""
    return context.RawValue("b", 0)


def _init_worker(stop: Any) -> None:
    """Pool initializer: any worker's interrupt stops the whole reproduction (``stop`` is shared)."""
    global _STOP
    _STOP = stop
    signal.signal(signal.SIGINT, _stop_worker)
    if callable(signal.getsignal(signal.SIGTERM)):  # the command line's `_interrupt`: SIGTERM stays an interrupt
        signal.signal(signal.SIGTERM, _stop_worker)


def _stop_worker(signum: int, frame: Any) -> None:
    """A worker's SIGINT/SIGTERM handler: sets the shared stop flag and interrupts the running notebook once.

    A second signal (the parent forwarding an interrupt this worker already got) and a signal to an idle
    worker raise nothing: papermill's kernel shutdown must not itself be interrupted, and an idle worker that
    died would break the pool and get its busy siblings killed before their kernels are shut down.
    """
    global _INTERRUPTED
    _STOP.value = 1  # a plain write to shared memory: no lock, so safe if this handler is re-entered
    if _RUNNING and not _INTERRUPTED:
        _INTERRUPTED = True
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _stopping() -> bool:
    """True in a pool worker once the reproduction has been interrupted."""
    return _STOP is not None and bool(_STOP.value)


@contextlib.contextmanager
def _kernel_threads(workers: int) -> Iterator[None]:
    """With several workers, kernels share the cores: ``OMP_NUM_THREADS = cores // workers`` unless already set
    (`rlvr_lib.cli_checks.default_threads`, the rule of every command's ``--threads``)."""
    from rlvr_lib.cli_checks import default_threads
    from rlvr_lib.study.runs import environment

    if workers == 1 or "OMP_NUM_THREADS" in os.environ:
        yield
        return
    with environment({"OMP_NUM_THREADS": str(default_threads(cores=os.cpu_count() or 1, processes=workers))}):
        yield


# ------------------------------------------------------------------------ CLI
def _interrupt(signum: int, frame: Any) -> None:
    """Signal handler: raises `KeyboardInterrupt`, as Ctrl-C does."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _verify(parser, args) -> int:
    """``--verify``: exit 1 when a recomputed run does not match its record."""
    from rlvr_lib.study.verify import verify

    try:
        check_out_folder("--scratch", args.scratch)
    except UsageError as exc:
        parser.error(str(exc))
    print(f"verify: {args.sample} run(s) per notebook, drawn with seed {args.seed}", flush=True)
    try:
        summary = verify(args.sample, args.seed, scratch=args.scratch)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{len(summary['runs'])} run(s): {summary['matches']} match, {summary['mismatches']} mismatch, "
          f"{summary['unverifiable']} unverifiable; wrote results/verification.json")
    return 1 if summary["mismatches"] else 0


def _print_stored(parser, args) -> int:
    """``--stored PROFILE``: the notebooks of the notebooks folder stored at ``PROFILE``, one path a line."""
    src_dir = Path(args.notebooks_dir) if args.notebooks_dir is not None else executions._default_notebooks_dir()
    try:
        chosen = [path for path in _select(_notebooks_in(src_dir), args.only) if stored_profile(path) == args.stored]
    except ValueError as exc:
        parser.error(str(exc))
    for path in chosen:
        print(os.path.relpath(path))
    return 0


REPRODUCE_INT_FLAGS: dict[str, tuple[int, int]] = {"--workers": (1, 256), "--sample": (1, 1_000_000),
                                                   "--seed": (0, 2**32 - 1)}
"""Each integer flag's allowed range ``(lowest, highest)``, as ``python -m rlvr_lib``'s ``INT_FLAGS``: a value outside
is a usage error naming the flag, the value and the range."""


def _slurm_option(text: str) -> tuple[str, Any]:
    """``type=`` of ``--slurm``: ``KEY=VALUE``, the value an int, a float or else the text (``cluster=local``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be KEY=VALUE (e.g. timeout_min=600)")
    for kind in (int, float):
        try:
            return key.strip(), kind(value)
        except ValueError:
            pass
    return key.strip(), value


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 if any notebook failed)."""
    parser = OneLineParser(
        prog="python -m rlvr_lib.study.reproduce", description="Run the notebooks with papermill, resumably."
    )
    parser.add_argument("--profile", choices=PROFILES, default="full")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="notebook names to run (default: all)")
    parser.add_argument("--notebooks-dir", type=existing_folder, default=None,
                        help="source notebooks (default: <repo>/notebooks)")
    parser.add_argument("--out", default=None,
                        help="executed copies go to OUT/PROFILE (default: the full profile in place in notebooks/, "
                             "quick to results/notebooks/quick; under a staging RLVR_RESULTS_DIR, ROOT/notebooks/PROFILE)")
    parser.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    parser.add_argument("--force", action="store_true", help="re-run notebooks that are up to date")
    parser.add_argument("--no-progress", action="store_true", help="hide the per-cell progress bar")
    parser.add_argument("--workers", type=int_at_least(*REPRODUCE_INT_FLAGS["--workers"]), default=1,
                        help="notebooks executed at once, each with cores // workers threads (default 1; 1 to 256)")
    parser.add_argument("--executor", choices=("local", "ray", "slurm"), default=None,
                        help="compute each notebook's planned runs with this executor first (local: --workers runs at "
                             "once; ray: one task per run; slurm: one submitit job per run, --workers at once), then "
                             "execute the notebooks reading only the cache (default: each notebook trains its own "
                             "runs)")
    parser.add_argument("--address", default=None,
                        help="--executor ray: the cluster's address (e.g. auto, HOST:6379; default: a local cluster)")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE", type=_slurm_option,
                        help="--executor slurm: a submitit parameter (timeout_min=600, slurm_partition=cpu, mem_gb=8, "
                             "...), cluster=slurm|local, folder=PATH; repeat for several")
    parser.add_argument("--stored", choices=PROFILES, default=None,
                        help="instead of running notebooks, print the notebooks (one path a line) whose stored "
                             "execution in the notebooks folder is at this profile (make test's nbval stage)")
    parser.add_argument("--verify", action="store_true",
                        help="instead of running notebooks, recompute a seeded sample of committed runs at HEAD and "
                             "compare them with their records (rlvr_lib.study.verify)")
    parser.add_argument("--sample", type=int_at_least(*REPRODUCE_INT_FLAGS["--sample"]), default=1,
                        help="--verify: runs drawn per notebook (default 1; 1 to 1_000_000)")
    parser.add_argument("--seed", type=int_at_least(*REPRODUCE_INT_FLAGS["--seed"]), default=0,
                        help="--verify: the draw's seed (default 0; 0 to 4_294_967_295)")
    parser.add_argument("--scratch", default=None,
                        help="--verify: folder for the recomputed runs (default <repo>/.verify; resumable)")
    args = parser.parse_args(argv)
    if args.address is not None and args.executor != "ray":
        parser.error(f"--address {args.address}: only with --executor ray")
    if args.slurm and args.executor != "slurm":
        parser.error(f"--slurm {args.slurm[0][0]}={args.slurm[0][1]}: only with --executor slurm")
    if args.verify:
        return _verify(parser, args)
    if args.stored is not None:
        return _print_stored(parser, args)
    try:  # checked before reproduce() creates OUT/PROFILE
        check_out_folder("--out", args.out)
        with flag_errors({"only": "--only"}, "--only"):
            src_dir = Path(args.notebooks_dir) if args.notebooks_dir is not None else executions._default_notebooks_dir()
            _select(_notebooks_in(src_dir), args.only)
    except UsageError as exc:
        parser.error(str(exc))
    # `kill` is how a background reproduction is stopped (a shell's background job ignores Ctrl-C's SIGINT):
    # handle SIGTERM as Ctrl-C, so kernels are shut down and no half-written copy is left (forked workers inherit it).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = reproduce(
            profile=args.profile,
            only=args.only,
            notebooks_dir=args.notebooks_dir,
            out_dir=args.out,
            kernel=args.kernel,
            force=args.force,
            progress=not args.no_progress,
            workers=args.workers,
            executor=args.executor,
            address=args.address,
            executor_options=dict(args.slurm),
        )
    except ValueError as exc:
        parser.error(str(exc))
    counts = {s: sum(r["status"] == s for r in results.values()) for s in ("ran", "skipped", "failed", "waiting")}
    print(f"{len(results)} notebook(s): {counts['ran']} ran, {counts['skipped']} skipped, {counts['failed']} failed"
          + (f", {counts['waiting']} waiting for other notebooks' runs" if counts["waiting"] else ""))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
