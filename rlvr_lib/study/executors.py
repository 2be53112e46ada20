"""Executing a plan's runs: on this machine's cores, as tasks of a Ray cluster, or as Slurm jobs.

:func:`execute` takes `rlvr_lib.study.plan.PlannedRun` s (a notebook's plan, `rlvr_lib.study.plan.notebook_plan`) and
runs those without a finished record, each through its own ``call()`` -- `rlvr_lib.study.runs.cached_run` with the
notebook's arguments -- so a record is the one the notebook would have written: same key, same file, written
atomically (an interrupted run leaves nothing and is computed again next time), and one computation per key across
processes sharing the results root (``cached_run``'s ``flock``). The executors (:data:`EXECUTORS`):

* ``"local"``: ``workers`` runs at a time, each in a fresh (spawned) process, with ``OMP_NUM_THREADS = cores //
  workers`` unless it is set (the rule of ``reproduce --workers``); Ctrl-C or SIGTERM stops the workers at once.
* ``"ray"``: one Ray task per run, ``num_cpus``/``num_gpus`` from the run's ``needs``, on the cluster at
  ``address`` (``None``: the cluster this process is already connected to, else a local one started for the call and
  shut down after it); the task's torch uses ``num_cpus`` threads, so a record equals the local executor's at the same
  thread count. Every worker writes into the same results root: **a cluster of several machines needs that root on a
  file system they all mount at the same path** (and the same code and lock on each node); ``cached_run``'s lock is an
  ``flock``, which holds across the processes of one machine and, on a network file system, only as far as that
  file system honours ``flock``.

* ``"slurm"``: one Slurm job per run through submitit (``sbatch``; ``cpus_per_task``/``gpus_per_node`` from the run's
  ``needs``), ``workers`` jobs queued or running at a time; ``options`` are submitit's parameters (``timeout_min``,
  ``mem_gb``, ``slurm_partition``, ``slurm_account``, ...) plus ``cluster`` (``"slurm"``, the default, or
  ``"local"``: the same jobs as processes on this machine, submitit's local executor, which is how it is tested
  here) and ``folder`` (the jobs' scripts, pickles and logs; default ``<results root>/.submitit``, which the compute
  nodes must see, as they see the results root).

All skip runs already done (resumable), show a progress bar (tqdm), run every run even when some fail, and then raise
:class:`RunsFailed` naming each failed run's id and error. A run's ``call`` travels to the worker by cloudpickle (the
closure the notebook gave ``cached_run`` with it); one that cannot be pickled is refused up front, naming the run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr_lib.cli_checks import default_threads
from rlvr_lib.study.runs import RESULTS_ENV, RunRecord, environment, results_root
from rlvr_lib.validation import check_choice, check_int

__all__ = ["EXECUTORS", "RunsFailed", "connected", "execute", "worker_env"]

FORWARDED_ENV_PREFIXES = ("RLVR_",)
"""Environment variables of the calling process every run sees in its worker: the package's own (``RLVR_*``)."""
FORWARDED_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "DNNL_MAX_CPU_ISA", "CUBLAS_WORKSPACE_CONFIG")
"""Environment variables of the calling process that decide float rounding (the stored notebooks are executed with
the first three set), forwarded to every worker when set."""


class RunsFailed(RuntimeError):
    """Some runs of :func:`execute` raised; the others finished (their records are written).

    Attributes:
        failures: ``{"<experiment>/<run_id>": "ErrorType: message"}`` of the failed runs.
        records: The records of the runs that finished, in the order of the runs given.
    """

    def __init__(self, failures: Mapping[str, str], records: Sequence[RunRecord]) -> None:
        self.failures = dict(failures)
        self.records = list(records)
        listed = "; ".join(f"{run}: {error}" for run, error in self.failures.items())
        super().__init__(f"{len(self.failures)} run(s) failed: {listed}")


# ------------------------------------------------------------------- in a worker
def worker_env(threads: int) -> dict[str, str]:
    """The environment a run gets in its worker: the forwarded variables (:data:`FORWARDED_ENV_PREFIXES`,
    :data:`FORWARDED_ENV`), ``OMP_NUM_THREADS = threads`` and ``RLVR_RESULTS_DIR`` = the results root as resolved
    here, so that the run reads what it would read in this process (the testbed's reports) and a run whose root is
    ``None`` writes where this process would; a run with a root of its own (a quick notebook's ``ROOT``) writes
    there, as in the notebook."""
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV}
    env["OMP_NUM_THREADS"] = str(threads)
    env[RESULTS_ENV] = str(results_root().resolve())
    return env


def _run_in_worker(call: Callable[[], RunRecord] | bytes, threads: int, env: Mapping[str, str]) -> RunRecord:
    """Runs one ``call()`` with ``env`` set and torch at ``threads`` threads; restores both after (a Ray worker
    process is reused by later tasks)."""
    import torch

    if isinstance(call, bytes):
        import cloudpickle

        call = cloudpickle.loads(call)
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with environment(env):
            return call()
    finally:
        torch.set_num_threads(saved_threads)


def _ignore_sigint() -> None:
    """Local pool initializer: Ctrl-C reaches the whole process group; the parent stops the workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ------------------------------------------------------------------- helpers
def _label(run: Any) -> str:
    return f"{run.experiment}/{run.run_id}"


def _error_text(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # ray.exceptions.RayTaskError carries the task's own exception
    exc = cause if isinstance(cause, BaseException) else exc
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".rstrip(": ")


def _pickled(run: Any) -> bytes:
    """``run.call`` pickled by cloudpickle, or a ValueError naming the run and what could not be pickled."""
    import cloudpickle

    try:
        return cloudpickle.dumps(run.call)
    except Exception as exc:
        raise ValueError(f"run {_label(run)}: its call cannot be sent to a worker process ({type(exc).__name__}: "
                         f"{exc}); the function the notebook passes to cached_run must hold only picklable "
                         "values (configs, specs, paths)") from exc


def _resources(run: Any) -> tuple[float, int, int]:
    """``(cpus, gpus, torch threads)`` of a run from its ``needs``: threads = its CPUs, at least 1."""
    cpus = run.needs.get("cpus", 1)
    return cpus, run.needs.get("gpus", 0), max(1, int(cpus))


def _progress_bar(total: int, executor: str, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"runs ({executor})", unit="run", disable=not progress)


# ------------------------------------------------------------------- executors
def _execute_local(todo: Sequence[Any], *, workers: int, address: str | None, options: Mapping[str, Any],
                   progress: bool) -> dict[int, Any]:
    """Runs ``todo`` in a pool of ``workers`` spawned processes; ``{index: RunRecord or its error's text}``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    payloads = [_pickled(run) for run in todo]
    outcomes: dict[int, Any] = {}
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no OpenMP pool inherited through fork
    threads = default_threads(cores=os.cpu_count() or 1, processes=workers)  # OMP_NUM_THREADS, else cores // workers
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context, initializer=_ignore_sigint)
    try:
        futures = {pool.submit(_run_in_worker, payload, threads, worker_env(threads)): i
                   for i, (run, payload) in enumerate(zip(todo, payloads))}
        with _progress_bar(len(todo), "local", progress) as bar:
            for future in as_completed(futures):
                exc = future.exception()
                outcomes[futures[future]] = _error_text(exc) if exc is not None else future.result()
                bar.update(1)
    except BaseException:
        # Ctrl-C, SIGTERM (as KeyboardInterrupt) or an error here: no run is started, the running ones are
        # stopped (a run stopped mid-way wrote nothing: cached_run writes its record atomically at the end).
        pool.shutdown(wait=False, cancel_futures=True)
        for child in set(multiprocessing.active_children()) - before:
            with contextlib.suppress(ProcessLookupError):
                child.terminate()
        raise
    pool.shutdown(wait=True)
    return outcomes


def _execute_ray(todo: Sequence[Any], *, workers: int, address: str | None, options: Mapping[str, Any],
                 progress: bool) -> dict[int, Any]:
    """Runs ``todo`` as Ray tasks (one per run, its ``needs``); ``{index: RunRecord or its error's text}``."""
    with connected("ray", address):
        return _ray_tasks(todo, progress=progress)


def _ray_tasks(todo: Sequence[Any], *, progress: bool) -> dict[int, Any]:
    import ray

    task = ray.remote(_run_in_worker)
    refs: dict[Any, int] = {}
    try:
        for i, run in enumerate(todo):
            payload = _pickled(run)  # checked here: a closure Ray cannot send fails with the run's name
            cpus, gpus, threads = _resources(run)
            env = worker_env(threads)
            refs[task.options(num_cpus=cpus, num_gpus=gpus, name=run.run_id,
                              runtime_env={"env_vars": env}).remote(payload, threads, env)] = i
        outcomes: dict[int, Any] = {}
        pending = list(refs)
        with _progress_bar(len(todo), "ray", progress) as bar:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    try:
                        outcomes[refs[ref]] = ray.get(ref)
                    except Exception as exc:  # the run raised (RayTaskError) or its worker died
                        outcomes[refs[ref]] = _error_text(exc)
                    bar.update(1)
        return outcomes
    except BaseException:
        for ref in refs:  # interrupted: stop every task still queued or running (nothing half-written is kept)
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise


SLURM_CLUSTERS = ("slurm", "local")
"""``options["cluster"]`` of the ``"slurm"`` executor: Slurm itself, or submitit's local executor (processes here)."""


def _execute_slurm(todo: Sequence[Any], *, workers: int, address: str | None, options: Mapping[str, Any],
                   progress: bool) -> dict[int, Any]:
    """Runs ``todo`` as submitit jobs (one per run, its ``needs``), at most ``workers`` queued or running at a time;
    ``{index: RunRecord or its error's text}``."""
    try:
        import submitit
    except ImportError as exc:
        raise ImportError("executor='slurm' needs submitit: pip install submitit (in the extras cluster and dev)") from exc

    options = dict(options)
    cluster = options.pop("cluster", "slurm")
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise ValueError("executor='slurm' submits with Slurm's sbatch, which is not on this machine's PATH (run it on "
                         "a cluster's login node; options={'cluster': 'local'} runs the same jobs as processes here)")
    folder = Path(options.pop("folder", None) or results_root() / ".submitit")
    payloads = [_pickled(run) for run in todo]  # refused before anything is submitted
    executor = submitit.AutoExecutor(folder=folder / "%j", cluster=cluster)
    try:
        executor.update_parameters(**options)
    except (ValueError, AssertionError, TypeError) as exc:
        raise ValueError(f"options={options!r}: not submitit parameters for cluster {cluster!r} ({exc})") from None
    outcomes: dict[int, Any] = {}
    running: dict[int, Any] = {}  # index -> submitit Job
    queue = list(range(len(todo)))
    try:
        with _progress_bar(len(todo), "slurm", progress) as bar:
            while queue or running:
                while queue and len(running) < workers:
                    i = queue.pop(0)
                    _, gpus, threads = _resources(todo[i])
                    executor.update_parameters(name=todo[i].run_id, cpus_per_task=threads, gpus_per_node=gpus)
                    running[i] = executor.submit(_run_in_worker, payloads[i], threads, worker_env(threads))
                finished = [i for i, job in running.items() if job.done()]
                for i in finished:
                    job = running.pop(i)
                    try:
                        outcomes[i] = job.result()
                    except Exception as exc:  # the run raised (FailedJobError) or its job ended without a result
                        outcomes[i] = _job_error(job, exc)
                    bar.update(1)
                if not finished:
                    time.sleep(SLURM_POLL_S)
        return outcomes
    except BaseException:
        for job in running.values():  # interrupted: cancel what is queued or running (nothing half-written is kept)
            with contextlib.suppress(Exception):
                job.cancel(check=False)
        raise


def _job_error(job: Any, exc: BaseException) -> str:
    """A failed job's error as the other executors name a run's: the last line of the traceback submitit sends back
    (the run's own exception), and where the job's log is."""
    lines = str(exc).split("\n\n----------------------")[0].strip().splitlines()
    line = lines[-1].strip() if lines else type(exc).__name__
    return f"{line} (job {job.job_id}; its log: {job.paths.stderr})"


SLURM_POLL_S = 1.0
"""Seconds between two looks at the submitted jobs (submitit caches Slurm's answers: ``sacct`` at most every few
seconds, whatever this is)."""


def _check_executor(executor: str, address: str | None, options: Mapping[str, Any] | None = None) -> None:
    """ValueError for an unknown executor, an address given to one that is not ``"ray"``, or options given to one
    that is not ``"slurm"`` (or a cluster it does not know)."""
    check_choice("executor", executor, tuple(EXECUTORS))
    if executor != "ray" and address is not None:
        raise ValueError(f"address={address!r}: only the 'ray' executor takes an address (the local one runs here)")
    if options and executor != "slurm":
        raise ValueError(f"options={dict(options)!r}: only the 'slurm' executor takes options (submitit's parameters)")
    if options and "cluster" in options:
        check_choice("options['cluster']", options["cluster"], SLURM_CLUSTERS)


@contextlib.contextmanager
def connected(executor: str, address: str | None = None) -> Iterator[None]:
    """For the block, this process is connected to the executor's cluster (``"ray"``: ``ray.init(address=address)``,
    a local cluster when None, shut down after; already connected: that cluster, left as it is). :func:`execute`
    calls inside the block share the connection (a local Ray cluster takes ~25 s to start). ``"local"``: nothing."""
    _check_executor(executor, address)
    if executor != "ray":
        yield
        return
    try:
        import ray
    except ImportError as exc:
        raise ImportError("executor='ray' needs Ray: pip install ray (in the extras cluster and dev)") from exc
    if ray.is_initialized():
        if address is not None:
            raise ValueError(f"address={address!r}: this process is already connected to a Ray cluster; leave "
                             "address None to use it, or ray.shutdown() first")
        yield
        return
    temp = local_ray_temp_dir() if address is None else None
    ray.init(address=address, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        yield
    finally:
        ray.shutdown()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


RAY_SOCKET_TAIL = len("/session_2026-12-06_18-11-18_052291_20014/sockets/plasma_store")
"""What a Ray session adds to its temporary folder for its longest socket path (time stamp and pid included)."""


def local_ray_temp_dir() -> str | None:
    """A short temporary folder for a local Ray cluster when Ray's default (``<RAY_TMPDIR or TMPDIR>/ray``) is too
    long, else None.

    Ray puts its sockets under ``<temp>/session_<time>_<pid>/sockets/`` and a Unix socket path holds at most 107
    bytes: under a long ``TMPDIR`` (a job scheduler's, pytest's) Ray fails to start. The folder, under ``/tmp``, is
    the caller's to remove."""
    default = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"  # Ray's own rule, on Linux
    if len(os.path.join(default, "ray")) + RAY_SOCKET_TAIL <= 107:
        return None
    return tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp")


EXECUTORS: dict[str, Callable[..., dict[int, Any]]] = {"local": _execute_local, "ray": _execute_ray,
                                                       "slurm": _execute_slurm}
"""The executors by name: each takes the runs to compute (keywords ``workers``, ``address``, ``options``,
``progress``) and returns ``{index: RunRecord or its error's text}`` (`_error_text`, or a job's own line)."""


def execute(runs: Sequence[Any], executor: str = "local", *, workers: int = 1, address: str | None = None,
            options: Mapping[str, Any] | None = None, progress: bool = True) -> list[RunRecord]:
    """Computes the runs of ``runs`` that are not done with ``executor``; returns every run's record.

    Args:
        runs: `rlvr_lib.study.plan.PlannedRun` s (a `rlvr_lib.study.plan.Plan`'s ``runs``).
        executor: ``"local"``, ``"ray"`` or ``"slurm"`` (:data:`EXECUTORS`).
        workers: ``"local"``: runs computed at once (``>= 1``), each with ``cores // workers`` threads unless
            ``OMP_NUM_THREADS`` is set. ``"ray"``: unused (the cluster's CPUs and each run's ``needs`` decide).
            ``"slurm"``: jobs queued or running at once.
        address: ``"ray"``: the cluster's address (``ray.init(address=...)``, e.g. ``"auto"`` or
            ``"ray://head:10001"``); None: the cluster this process is connected to, else a local one.
        options: ``"slurm"``: submitit's parameters, ``cluster`` and ``folder`` (the module's docstring).
        progress: Show a progress bar over the runs.

    Returns:
        The `RunRecord` of each run, in the order given (runs done before are read from their files).

    Raises:
        ValueError: an unknown executor, ``workers < 1``, an address for an executor other than Ray, options for
            one other than Slurm (or parameters submitit refuses), or a run whose call cannot be pickled.
        RunsFailed: some runs raised (after every other run finished); names each one's ``experiment/run_id``.
    """
    _check_executor(executor, address, options)
    check_int("workers", workers, 1)
    runs = list(runs)
    todo_at = [i for i, run in enumerate(runs) if not run.done()]
    outcomes = EXECUTORS[executor]([runs[i] for i in todo_at], workers=workers, address=address,
                                   options=options or {}, progress=progress) if todo_at else {}
    records: list[RunRecord | None] = [None] * len(runs)
    failures: dict[str, str] = {}
    for j, i in enumerate(todo_at):
        outcome = outcomes.get(j)
        if isinstance(outcome, RunRecord):
            records[i] = outcome
        else:
            failures[_label(runs[i])] = outcome if outcome is not None else "not run"
    for i, run in enumerate(runs):
        if records[i] is None and _label(run) not in failures:
            records[i] = RunRecord.load(Path(run.path))
    if failures:
        raise RunsFailed(failures, [r for r in records if r is not None])
    return records
