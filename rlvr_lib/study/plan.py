"""The study as a plan of runs: each notebook's cached runs, listed without executing the notebook.

One source of truth: a notebook declares its runs in code cells tagged ``runs`` (and the cells those need first --
imports, constants, profiles -- are tagged ``setup``; the ``parameters`` cell is papermill's). :func:`notebook_plan`
executes those cells only, in a fresh namespace (``exec``, not a kernel), with papermill's parameter injected after
the ``parameters`` cell as papermill would, and with *plan mode* on: every call of
:func:`rlvr_lib.study.runs.cached_run` -- direct, or through `pipeline.train_and_evaluate`/`evaluate_base`, the arms,
the dynamics calibration, the head-to-head protocols, the discovery gate -- is recorded as a :class:`PlannedRun` and
answered with a :class:`PlannedRecord` stand-in instead of being computed or loaded. The list therefore has the keys
the notebook itself builds and cannot drift from what it reads.

A ``runs`` cell must only declare: reading a result from a stand-in raises :class:`PlanOnly` naming the run. A cell
may read *finished* records of other notebooks (notebook 07's second stage reads 02's and 04's to pick its arms);
when they are missing it raises `PrerequisitesMissing`, and the plan is a stage: the runs declared so far and what
it waits on (:attr:`Plan.waiting_on`). A cell that decides on its own runs' results what to run next wraps them in
:func:`finished` (notebook 08: its methods run when its gate passes): a stage until they are finished.

Limits: only runs through the run cache are planned; what a notebook computes outside it is not a run (notebook 00's
calibration and premises reports, read from ``results/testbed/`` at the full profile; notebook 04's Fig. 1 weight-noise
probe and ESS rule; notebook 06's gradient-norm profile of the base policy). Notebook 00's quick profile searches two
anchor betas and stops at the first that meets its targets; its plan lists both (:func:`dynamics_runs`). Plan mode is
per context (a ``ContextVar``), but the cells' printed output is discarded through ``sys.stdout`` and ``root`` sets
``RLVR_RESULTS_DIR``, both process-wide for the call: list plans from one thread at a time.

``python -m rlvr_lib.study plan [--profile quick|full] [--only STEM ...] [--root DIR] [--json]`` prints each notebook's
plan: its runs, how many are done in the results root, and each run's key, method, steps, seed and evaluations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr_lib.study.executions import INJECTED_TAG, PROFILES
from rlvr_lib.study.runs import RESULTS_ENV, PrerequisitesMissing, _PLANNER, cached_run, environment

__all__ = ["PLAN_TAGS", "Plan", "PlanOnly", "PlannedRecord", "PlannedRun", "RUNS_TAG", "SETUP_TAG", "dynamics_runs",
           "finished", "main", "notebook_plan", "plan_cells", "planning", "study_plan"]

RUNS_TAG = "runs"
"""Cell tag: the cell declares cached runs (executed by :func:`notebook_plan`)."""
SETUP_TAG = "setup"
"""Cell tag: the cell is needed before the ``runs`` cells (imports, constants, profiles; executed by
:func:`notebook_plan`)."""
PARAMETERS_TAG = "parameters"
PLAN_TAGS = (SETUP_TAG, PARAMETERS_TAG, RUNS_TAG)
"""The tags of the cells :func:`notebook_plan` executes, in notebook order."""


class PlanOnly(RuntimeError):
    """A cell executed in plan mode read a result of a run that was only planned (the cell mixes declaration and
    analysis: move the reading to an untagged cell)."""


class _PlanOnlyExtra:
    """``record.extra`` of a :class:`PlannedRecord`: falsy (so ``record.extra or {}`` is ``{}``, as for a record made
    without extras), and any read raises :class:`PlanOnly`."""

    __slots__ = ("_run",)

    def __init__(self, run: str) -> None:
        self._run = run

    def __bool__(self) -> bool:
        return False

    def _refuse(self, *args: Any, **kwargs: Any):
        raise PlanOnly(f"run {self._run} is only planned: its extras cannot be read in plan mode")

    __getitem__ = get = keys = items = values = __iter__ = __len__ = __contains__ = _refuse

    def __repr__(self) -> str:
        return f"<extras of planned run {self._run}>"


@dataclasses.dataclass(frozen=True)
class PlannedRecord:
    """What :func:`cached_run` returns in plan mode: the run's identity, no results.

    Any other attribute (``final``, ``history``, ``wall_time_s`` ...) raises :class:`PlanOnly` naming the run;
    ``extra`` is a falsy stand-in whose every read raises it too. It is not a `RunRecord`.
    """

    experiment: str
    name: str
    run_id: str
    seed: int
    config: dict
    config_hash: str
    config_type: str
    run: "PlannedRun" = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def extra(self) -> _PlanOnlyExtra:
        return _PlanOnlyExtra(f"{self.experiment}/{self.run_id}")

    def __getattr__(self, attribute: str) -> Any:  # only called for attributes a PlannedRecord has not
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise PlanOnly(f"run {self.experiment}/{self.run_id} is only planned: its {attribute!r} cannot be read in "
                       "plan mode (a cell tagged 'runs' must only declare runs; read results in an untagged cell)")


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One cached run of a notebook's plan, with exactly the arguments the notebook passes to :func:`cached_run`.

    Attributes:
        experiment: Results folder name.
        name: Run name.
        run_id: The cache key, ``f"{name}-{config_hash}-s{seed}"`` as :func:`cached_run` builds it.
        seed: The run's seed.
        config: The run's cache key (``record.config``) as a JSON dict.
        config_type: ``record.config_type`` (the config's class name, ``"dict"`` for a key dict).
        root: The results root the notebook passes (``None``: `results_root`'s default).
        needs: Resources of one run, ``{"cpus": n, "gpus": n}`` (a GPU when the config names a CUDA device).
        call: ``call()`` runs it through :func:`cached_run` (computing it, or loading it when finished) and returns
            the `RunRecord`.
    """

    experiment: str
    name: str
    run_id: str
    seed: int
    config: dict
    config_type: str
    root: str | None
    needs: dict
    call: Callable[[], Any] = dataclasses.field(repr=False, compare=False)
    _cached: Callable[[], Any] = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def path(self) -> Path:
        """Where its record is (or will be) stored."""
        from rlvr_lib.study.runs import run_dir

        return run_dir(self.experiment, self.root) / f"{self.run_id}.json"

    def done(self) -> bool:
        """True when a finished record with this key exists (:func:`cached_run`'s own check; reads only)."""
        return self._cached is not None and self._cached() is not None

    def describe(self) -> dict[str, Any]:
        """A JSON summary: identity, method, steps, evaluations, needs (``call`` and the full config left out)."""
        train = self.config.get("train") if isinstance(self.config.get("train"), Mapping) else {}
        evaluations = {}
        if isinstance(self.config.get("eval"), Mapping):
            evaluations["main"] = _eval_summary(self.config["eval"])
        for label, spec in (self.config.get("extra_evals") or {}).items():
            evaluations[label] = _eval_summary(spec)
        return {"experiment": self.experiment, "run_id": self.run_id, "name": self.name, "seed": self.seed,
                "method": train.get("method", self.config.get("method")),
                "steps": train.get("steps", self.config.get("steps")), "evaluations": evaluations,
                "config_type": self.config_type, "root": self.root, "needs": dict(self.needs)}


def _eval_summary(spec: Mapping[str, Any]) -> str:
    """``"<samples> samples x <problems> problems"``-like one-liner of an `EvalSpec` dict."""
    parts = [f"{k}={spec[k]}" for k in ("samples", "problems_per_family", "temperature") if k in spec]
    return ", ".join(parts) or json.dumps(spec, sort_keys=True)[:80]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A notebook's runs at one profile, in the order the notebook declares them (deduplicated by experiment and
    run id).

    Attributes:
        notebook: The notebook's stem.
        profile: ``"quick"`` or ``"full"``.
        runs: The planned runs.
        waiting_on: Empty for a complete plan; else what the next stage waits for (`PrerequisitesMissing`'s
            message: other notebooks' records, a policy to build), and ``runs`` are the stage's runs so far.
    """

    notebook: str
    profile: str
    runs: tuple[PlannedRun, ...]
    waiting_on: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.waiting_on

    def missing(self) -> list[PlannedRun]:
        """The runs without a finished record."""
        return [r for r in self.runs if not r.done()]

    def to_dict(self) -> dict[str, Any]:
        done = [r.done() for r in self.runs]
        return {"notebook": self.notebook, "profile": self.profile, "complete": self.complete,
                "waiting_on": list(self.waiting_on), "runs": len(self.runs), "done": sum(done),
                "missing": len(done) - sum(done),
                "planned": [{**r.describe(), "done": d} for r, d in zip(self.runs, done)]}


# ---------------------------------------------------------------- the planner
def _needs(config: Mapping[str, Any]) -> dict[str, int]:
    """One run's resources from its key: a GPU when a ``device`` field (top level or under ``train``) names CUDA."""
    devices = [config.get("device")]
    if isinstance(config.get("train"), Mapping):
        devices.append(config["train"].get("device"))
    gpu = any(isinstance(d, str) and d.startswith("cuda") for d in devices)
    return {"cpus": 1, "gpus": 1 if gpu else 0}


class _Planner:
    """Records each :func:`cached_run` call of plan mode (the hook in `rlvr_lib.study.runs`)."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str], PlannedRun] = {}

    def __call__(self, experiment, name, config, seed, fn, *, run_id, config_dict, config_type, config_hash, cached,
                 force, root, extra, one_processor) -> PlannedRecord:
        key = (experiment, run_id)
        if key not in self.runs:
            self.runs[key] = PlannedRun(
                experiment=experiment, name=name, run_id=run_id, seed=seed, config=config_dict,
                config_type=config_type, root=None if root is None else str(root), needs=_needs(config_dict),
                call=functools.partial(cached_run, experiment, name, config, seed, fn, root=root, extra=extra,
                                       one_processor=one_processor, force=force),
                _cached=cached)
        return PlannedRecord(experiment=experiment, name=name, run_id=run_id, seed=seed, config=config_dict,
                             config_hash=config_hash, config_type=config_type, run=self.runs[key])


@contextlib.contextmanager
def planning() -> Iterator[_Planner]:
    """Plan mode for the block: :func:`cached_run` records runs in the yielded planner instead of running them."""
    planner = _Planner()
    token = _PLANNER.set(planner)
    try:
        yield planner
    finally:
        _PLANNER.reset(token)


def finished(records: Any, what: str) -> Any:
    """A stage boundary in a ``runs`` cell: ``records`` as they are outside plan mode; in plan mode, the same
    structure (a record, or lists / tuples / dicts of them) with each planned run's finished record loaded, so a cell
    can decide on results what to run next (notebook 08's methods run when its gate passes).

    Raises:
        PrerequisitesMissing: in plan mode, when a planned run of ``records`` is not finished yet (``what`` names
            them): the plan stops there, a stage (:attr:`Plan.waiting_on`).
    """
    missing: list[str] = []

    def load(value: Any) -> Any:
        if isinstance(value, PlannedRecord):
            record = value.run._cached() if value.run is not None and value.run._cached is not None else None
            if record is None:
                missing.append(f"{value.experiment}/{value.run_id}")
            return record
        if isinstance(value, Mapping):
            return {k: load(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(load(v) for v in value)
        return value

    if _PLANNER.get() is None:
        return records
    out = load(records)
    if missing:
        raise PrerequisitesMissing(f"{what}: {len(missing)} run(s) not finished yet ({', '.join(missing[:3])}"
                                   f"{', ...' if len(missing) > 3 else ''}); the runs after them depend on their "
                                   "results")
    return out


def dynamics_runs(config, *, root: str | Path | None = None) -> list:
    """The runs of `rlvr_lib.study.dynamics.measure_dynamics` (``config``), through the run cache, without reading
    them: the base policy's two evaluations per base seed, GRPO without its anchor, and GRPO anchored at each of
    ``config.kl_coefs``. `measure_dynamics` stops its beta search at the first beta that meets every gating target,
    so with several betas (the quick profile's) the later ones are listed although they may not be trained; the
    full profile has one (tests/test_plan.py checks these ids against the runs `measure_dynamics` reads).
    """
    from rlvr_lib.study.dynamics import ANCHORED, EXPERIMENT, UNANCHORED, train_with_checkpoint_evals
    from rlvr_lib.study.pipeline import evaluate_base

    runs = [evaluate_base(EXPERIMENT, config.spec(s), config.policy, root=root) for s in config.base_seeds]
    runs += [evaluate_base(EXPERIMENT, config.wide_spec(s), config.policy, root=root, name="base-wide")
             for s in config.base_seeds]
    runs += [train_with_checkpoint_evals(config, UNANCHORED, s, root=root, wide=False) for s in config.seeds]
    for beta in config.kl_coefs:
        runs += [train_with_checkpoint_evals(config, ANCHORED, s, root=root, kl_coef=beta) for s in config.seeds]
    return runs


# ---------------------------------------------------------------- notebooks
def _notebooks_dir() -> Path:
    from rlvr_lib.study.executions import _default_notebooks_dir

    return _default_notebooks_dir()


def _notebook_path(path_or_stem: str | Path) -> Path:
    p = Path(path_or_stem)
    if p.suffix == ".ipynb" and p.exists():
        return p
    folder = _notebooks_dir()
    candidate = folder / f"{p.stem}.ipynb"
    if candidate.exists():
        return candidate
    known = sorted(q.stem for q in folder.glob("[0-9]*.ipynb"))
    raise ValueError(f"notebook {str(path_or_stem)!r}: not a notebook path nor a stem of {folder}; "
                     f"allowed stems: {known}")


def plan_cells(nb) -> list[tuple[int, str, str]]:
    """``(index, tag, source)`` of the cells :func:`notebook_plan` executes: ``setup``, ``parameters`` and ``runs``
    cells in notebook order (a stored ``injected-parameters`` cell is left out: the profile is injected instead)."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", ()))
        if INJECTED_TAG in tags:
            continue
        tag = next((t for t in PLAN_TAGS if t in tags), None)
        if tag is not None:
            out.append((i, tag, cell.source))
    return out


def notebook_plan(path_or_stem: str | Path, profile: str, *, root: str | Path | None = None) -> Plan:
    """The cached runs of a notebook at ``profile``, listed without training or evaluating anything.

    Executes the notebook's ``setup``, ``parameters`` and ``runs`` cells (in order, in a fresh namespace, their
    printed output discarded) with ``profile`` injected after the ``parameters`` cell, in plan mode.

    Args:
        path_or_stem: A notebook path, or the stem of one in ``notebooks/`` (e.g. ``"01_grpo_pass_at_k_modes_group_size"``).
        profile: ``"quick"`` or ``"full"``.
        root: Results root to plan the runs in: the notebook's ``ROOT`` rebound to it after each cell that is not a
            ``runs`` cell. At the full profile also as if the notebook ran with ``RLVR_RESULTS_DIR=root`` (a
            staging root: there ``ROOT`` is the results root, and the cells read the testbed's reports and other
            notebooks' records in it too); at the quick profile ``ROOT`` is a folder of the notebook's own (a fresh
            temporary one) and the reports are read from the results root as set, so ``RLVR_RESULTS_DIR`` is left
            as it is. Default: the notebook's own (the committed ``results/`` at the full profile, a temporary
            folder at the quick).

    Returns:
        A :class:`Plan`; at a stage that waits on other notebooks' records (`PrerequisitesMissing`), the runs so
        far and ``waiting_on``.

    Raises:
        ValueError: an unknown notebook or profile, a notebook without a ``runs`` cell, or ``root`` at the quick
            profile for a notebook whose setup cells define no ``ROOT``.
        PlanOnly: a ``runs`` cell read a planned run's result.
    """
    import nbformat

    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not valid: must be one of {list(PROFILES)}")
    path = _notebook_path(path_or_stem)
    cells = plan_cells(nbformat.read(path, as_version=4))
    if not any(tag == RUNS_TAG for _, tag, _ in cells):
        raise ValueError(f"{path.name}: no code cell tagged {RUNS_TAG!r}: tag the cells that declare its runs "
                         f"(and those they need first {SETUP_TAG!r})")
    namespace: dict[str, Any] = {"__name__": "__plan__"}
    waiting: tuple[str, ...] = ()
    with planning() as planner, _results_env(root if profile == "full" else None), _registries_restored(), \
            contextlib.redirect_stdout(io.StringIO()):
        for index, tag, source in cells:
            try:
                exec(compile(source, f"<{path.stem} cell {index}>", "exec"), namespace)  # noqa: S102
            except PrerequisitesMissing as err:
                waiting = (str(err),)
                break
            if tag == PARAMETERS_TAG:
                namespace["profile"] = profile  # papermill's injected-parameters cell
            if root is not None and "ROOT" in namespace and tag != RUNS_TAG:
                namespace["ROOT"] = Path(root)
    if root is not None and profile == "quick" and "ROOT" not in namespace:
        raise ValueError(f"{path.name}: its setup cells define no ROOT, so root={str(root)!r} cannot hold its runs at "
                         "the quick profile (cached_run(..., root=ROOT), ROOT a folder of its own, as the study's "
                         "notebooks do)")
    return Plan(notebook=path.stem, profile=profile, runs=tuple(planner.runs.values()), waiting_on=waiting)


@contextlib.contextmanager
def _registries_restored() -> Iterator[None]:
    """The methods and tasks a notebook's cells register (notebook 07's composites, at their calibrated presets) stay
    the notebook's: the caller's registries are as they were after the plan (a later ``compose`` of the same pair at
    other presets is not refused because a plan was listed first)."""
    from rlvr_lib.methods.registry import METHODS
    from rlvr_lib.tasks.registry import TASKS

    saved = [(registry, dict(registry)) for registry in (METHODS, TASKS)]
    try:
        yield
    finally:
        for registry, before in saved:
            registry.clear()
            registry.update(before)


def _results_env(root: str | Path | None):
    """``RLVR_RESULTS_DIR=root`` for the block (None: unchanged)."""
    return contextlib.nullcontext() if root is None else environment({RESULTS_ENV: str(root)})


def study_plan(profile: str, only: Sequence[str] | None = None, *, root: str | Path | None = None) -> list[Plan]:
    """:func:`notebook_plan` of every numbered notebook in ``notebooks/`` (or of the stems in ``only``)."""
    stems = sorted(p.stem for p in _notebooks_dir().glob("[0-9]*.ipynb"))
    if only:
        wanted = [Path(s).stem for s in only]
        unknown = [s for s in wanted if s not in stems]
        if unknown:
            raise ValueError(f"--only: unknown notebook(s) {unknown}; allowed: {stems}")
        stems = [s for s in stems if s in wanted]
    return [notebook_plan(stem, profile, root=root) for stem in stems]


# ---------------------------------------------------------------- command line
def format_plan(plan: Plan) -> str:
    """A plan as text: a heading with done/missing counts, then one line per run."""
    done = [r.done() for r in plan.runs]
    head = (f"{plan.notebook} ({plan.profile}): {len(plan.runs)} runs, {sum(done)} done, "
            f"{len(done) - sum(done)} missing")
    lines = [head + ("" if plan.complete else f"; a stage, waiting on: {'; '.join(plan.waiting_on)}")]
    for run, d in zip(plan.runs, done):
        info = run.describe()
        evals = "; ".join(f"{label}: {text}" for label, text in info["evaluations"].items()) or "-"
        lines.append(f"  [{'x' if d else ' '}] {run.experiment}/{run.run_id}  method={info['method']} "
                     f"steps={info['steps']} seed={run.seed}  evaluations: {evals}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from rlvr_lib.cli_checks import OneLineParser

    parser = OneLineParser(prog="python -m rlvr_lib.study plan",
                           description="Each notebook's cached runs (config, seed, evaluations, cache key), listed "
                                       "without executing it; done/missing against the results root.")
    parser.add_argument("--profile", choices=PROFILES, default="full", help="the profile to plan (default: full)")
    parser.add_argument("--only", nargs="+", metavar="STEM", default=None, help="these notebooks only (stems)")
    parser.add_argument("--root", default=None, metavar="DIR",
                        help="plan in this results root, as the notebooks run under RLVR_RESULTS_DIR=DIR (a staging "
                             "root; default: each notebook's own)")
    parser.add_argument("--json", action="store_true", help="print the plans as JSON")
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.root is not None and not Path(args.root).is_dir():
        parser.error(f"--root: {args.root!r} is not an existing folder")
    try:
        plans = study_plan(args.profile, args.only, root=args.root)
    except ValueError as err:
        parser.error(str(err))
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=1))
    else:
        print("\n\n".join(format_plan(p) for p in plans))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
