"""Runs and results: cached runs on disk, seed aggregation, claims tables.

A *run* is one call of a function (train + evaluate, usually) under one
config and one seed. :func:`cached_run` stores it as
``results/<experiment>/<run_id>.json`` with ``run_id =
f"{name}-{config_hash}-s{seed}"``; calling it again with the same experiment,
name, config and seed loads the stored record instead of recomputing, which
is how an interrupted ``make reproduce`` resumes. Records are written
atomically (temp file in the same folder, then ``os.replace``), so a run that
is killed midway leaves no partial record behind.

JSON conventions for records: numpy scalars/arrays and torch tensors are
converted to Python numbers/lists; dataclasses to dicts; **NaN and +-inf are
written as ``null``** so every record is strict JSON that any tool (pandas,
``jq``, a browser) reads. A metric read back as ``None`` therefore means
"not finite" (or absent); :func:`aggregate_seeds` refuses it rather than
silently dropping a seed.

The results root is, in order: the ``root`` argument, the environment
variable ``RLVR_RESULTS_DIR``, ``<repo>/results`` when the package runs from
a checkout (the folder above ``rlvr_lib/`` has ``pyproject.toml``), else
``./results``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import json
import logging
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Iterator, Optional

from . import __version__
from .config import ConfigBase, hash_jsonable
from .validation import check, check_choice, check_int, check_range

__all__ = [
    "CLAIMS_COLUMNS",
    "RESULTS_ENV",
    "RunRecord",
    "aggregate_seeds",
    "cached_run",
    "claims_summary",
    "claims_table",
    "format_ci",
    "git_commit",
    "has_interval",
    "jsonable",
    "load_runs",
    "render_markdown",
    "results_root",
    "run_dir",
    "runs_frame",
]

log = logging.getLogger(__name__)

RESULTS_ENV = "RLVR_RESULTS_DIR"
_REPO_ROOT = Path(__file__).resolve().parent.parent
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]*$")
FINISHED = "finished"


# ---------------------------------------------------------------- locations
def results_root(root: str | Path | None = None) -> Path:
    """Returns the results root folder (see module docstring for the order)."""
    if root is not None:
        return Path(root)
    env = os.environ.get(RESULTS_ENV)
    if env:
        return Path(env)
    if (_REPO_ROOT / "pyproject.toml").exists():
        return _REPO_ROOT / "results"
    return Path.cwd() / "results"


def _check_name(kind: str, value: str) -> None:
    check(
        isinstance(value, str) and _NAME_RE.match(value), kind, value,
        "a non-empty file-name-safe string (letters, digits and . _ + = @ -, not starting with a symbol)",
    )


def run_dir(experiment: str, root: str | Path | None = None, *, create: bool = False) -> Path:
    """Returns ``<results root>/<experiment>``.

    Args:
        experiment: Experiment name, e.g. ``"nudgerl_t1_main"``; file-name safe.
        root: Results root; default from :func:`results_root`.
        create: Create the folder if it does not exist.
    """
    _check_name("experiment", experiment)
    d = results_root(root) / experiment
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


def cpu_model() -> str:
    """The processor's model name: float rounding, hence bit identity of a run, depends on it."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """Where a run ran: processor model, torch threads (when torch is imported), CPU count."""
    import sys

    torch = sys.modules.get("torch")
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads() if torch is not None else None}


@functools.lru_cache(maxsize=1)
def git_commit() -> Optional[str]:
    """Returns ``git rev-parse HEAD`` of the package's checkout, or ``None``; never raises."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=_REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except Exception:  # no git, timeout, odd filesystem: provenance is best effort
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", sha) else None


# ------------------------------------------------------------------- JSON
def jsonable(value: Any) -> Any:
    """Converts a result value to strict-JSON Python objects.

    numpy scalars/arrays and torch tensors become numbers/lists, dataclasses
    dicts, tuples/sets lists, paths strings, mapping keys strings; NaN and
    +-inf become ``None``.

    Raises:
        TypeError: for an object with no JSON form.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, ConfigBase):
            return jsonable(value.to_dict())
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    # torch tensors and numpy arrays/scalars, without importing either here
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch (bf16 has no numpy form)
        return jsonable(value.detach().cpu().tolist())
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    raise TypeError(f"cannot serialise {type(value).__name__} value {value!r} to JSON")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", *, permissions: int | None = None) -> Iterator[IO]:
    """Open ``path`` for writing so that readers see the old file or the whole new one, never a part.

    Writes go to a temp file in the same folder (created with its parents),
    which is flushed, fsynced and ``os.replace``-d onto ``path`` when the block
    exits; on an exception the temp file is removed and ``path`` is untouched.

    Args:
        path: Destination.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        permissions: ``chmod`` applied to the file (``mkstemp`` makes it owner-only), or ``None``.
    """
    check_choice("mode", mode, ("w", "wb"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if permissions is not None:
            os.chmod(tmp, permissions)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes ``data`` as JSON to ``path`` atomically (:func:`atomic_file`)."""
    text = json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"
    with atomic_file(path) as f:
        f.write(text)


# ------------------------------------------------------------------ records
@dataclasses.dataclass
class RunRecord:
    """One finished run as stored in ``results/<experiment>/<run_id>.json``.

    Attributes:
        experiment: Experiment (folder) name.
        name: Run name within the experiment, e.g. ``"grpo-g8"``.
        run_id: ``f"{name}-{config_hash}-s{seed}"``; also the file stem.
        config: The config as a JSON dict.
        config_hash: :func:`rlvr_lib.config.hash_jsonable` of ``config``.
        config_type: Class name of the config (``"dict"`` for a plain dict).
        seed: The run's seed.
        status: ``"finished"`` (only finished runs are written).
        version: ``rlvr_lib.__version__`` that produced the run.
        git_commit: Commit of the checkout, or ``None`` when unknown.
        started: UTC ISO-8601 timestamp.
        finished: UTC ISO-8601 timestamp.
        wall_time_s: Seconds spent in the run function.
        history: Metric history, one dict per logged step.
        final: Final evaluation metrics.
        extra: Anything else worth keeping (diagnostics, per-problem data).
    """

    experiment: str
    name: str
    run_id: str
    config: dict[str, Any]
    config_hash: str
    seed: int
    config_type: str = "dict"
    status: str = FINISHED
    version: str = __version__
    git_commit: Optional[str] = None
    started: str = ""
    finished: str = ""
    wall_time_s: float = 0.0
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    final: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON dict of the record (see :func:`jsonable`)."""
        return jsonable({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunRecord":
        """Builds a record from :meth:`to_dict` output; unknown keys are ignored (forward compatibility)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def load(cls, path: str | Path) -> "RunRecord":
        """Reads a record from a JSON file."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def save(self, path: str | Path) -> Path:
        """Writes the record atomically to ``path`` and returns it."""
        path = Path(path)
        write_json_atomic(path, self.to_dict())
        return path


def _config_dict(config: ConfigBase | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    if isinstance(config, ConfigBase):
        return config.to_dict(), type(config).__name__
    if isinstance(config, Mapping):
        return jsonable(config), "dict"
    raise TypeError(f"config must be a ConfigBase or a dict, got {type(config).__name__}")


def cached_run(
    experiment: str,
    name: str,
    config: ConfigBase | Mapping[str, Any],
    seed: int,
    fn: Callable[[], tuple],
    *,
    force: bool = False,
    root: str | Path | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RunRecord:
    """Runs ``fn`` once per (experiment, name, config, seed) and caches the record.

    If ``<root>/<experiment>/<run_id>.json`` exists, has status
    ``"finished"`` and the same config hash and seed, it is loaded and
    returned without calling ``fn``. Otherwise ``fn()`` is called and its
    result written atomically; if ``fn`` raises, nothing is written and the
    exception propagates.

    Processes that share a results root (notebooks run side by side, e.g.
    ``reproduce --workers 2``) compute each run once: the computation holds an
    exclusive lock on the hidden file ``<root>/<experiment>/.<run_id>.lock``
    (``fcntl.flock``, released by the operating system if the process dies),
    and a process that waited for it loads the record the other one wrote.

    Args:
        experiment: Experiment (folder) name.
        name: Run name, file-name safe, e.g. ``"c3po-n4"``.
        config: The run's config (a :class:`ConfigBase` or a JSON-able dict);
            only its hash decides cache hits.
        seed: The run's seed. ``fn`` is responsible for using it.
        fn: Zero-argument callable returning ``(history, final)`` or
            ``(history, final, extra)``: a list of metric dicts, a dict of
            final metrics and optionally a dict of extras.
        force: Recompute and overwrite even if a finished record exists.
        root: Results root; default from :func:`results_root`.
        extra: Extras stored with the record (merged under ``fn``'s extras).

    Returns:
        The stored (or loaded) :class:`RunRecord`; values are as read back
        from JSON (NaN appears as ``None``) whether computed now or cached.
    """
    _check_name("name", name)
    seed = check_int("seed", seed)
    cfg, cfg_type = _config_dict(config)
    chash = hash_jsonable(cfg)
    run_id = f"{name}-{chash}-s{seed}"
    path = run_dir(experiment, root) / f"{run_id}.json"

    def cached() -> RunRecord | None:
        if not path.exists():
            return None
        try:
            rec = RunRecord.load(path)
        except (OSError, ValueError, TypeError) as e:  # unreadable: recompute
            log.warning("ignoring unreadable run record %s: %s", path, e)
            return None
        if rec.status == FINISHED and rec.config_hash == chash and rec.seed == seed:
            log.info("cache hit: %s", path)
            return rec
        log.info("stale run record %s (status/hash/seed differ): recomputing", path)
        return None

    if not force and (rec := cached()) is not None:
        return rec
    with _run_lock(path.with_name(f".{run_id}.lock")) as waited:
        if waited and not force and (rec := cached()) is not None:  # another process computed it meanwhile
            return rec
        return _compute_run(path, experiment, name, run_id, cfg, chash, cfg_type, seed, fn, extra)


@contextlib.contextmanager
def _run_lock(path: Path) -> Iterator[bool]:
    """Holds an exclusive ``flock`` on ``path`` (created if missing); yields whether it had to wait for it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            log.info("waiting for another process computing %s", path.stem)
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = True
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compute_run(path, experiment, name, run_id, cfg, chash, cfg_type, seed, fn, extra) -> RunRecord:
    """Calls ``fn`` and writes its run record (the body of :func:`cached_run` on a cache miss)."""
    started, t0 = _now(), time.perf_counter()
    out = fn()
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise TypeError(f"fn must return (history, final) or (history, final, extra), got {type(out).__name__}")
    history, final = out[0], out[1]
    fn_extra = out[2] if len(out) == 3 else {}
    rec = RunRecord(
        experiment=experiment,
        name=name,
        run_id=run_id,
        config=cfg,
        config_hash=chash,
        config_type=cfg_type,
        seed=seed,
        git_commit=git_commit(),
        started=started,
        finished=_now(),
        wall_time_s=time.perf_counter() - t0,
        history=list(history),
        final=dict(final),
        extra={"machine": machine(), **dict(extra or {}), **dict(fn_extra or {})},
    )
    data = rec.to_dict()
    write_json_atomic(path, data)
    return RunRecord.from_dict(data)


def load_runs(experiment: str, root: str | Path | None = None, *, name: str | None = None) -> list[RunRecord]:
    """Loads every run record of an experiment, sorted by (name, seed, run_id).

    JSON files in the folder that are not run records (no ``run_id`` key,
    e.g. summaries) are skipped. A missing folder gives ``[]``.

    Args:
        experiment: Experiment (folder) name.
        root: Results root; default from :func:`results_root`.
        name: Keep only runs with this name.
    """
    d = run_dir(experiment, root)
    if not d.is_dir():
        return []
    records = []
    for p in sorted(d.glob("*.json")):
        data = json.loads(p.read_text())
        if not isinstance(data, dict) or "run_id" not in data:
            continue
        rec = RunRecord.from_dict(data)
        if name is None or rec.name == name:
            records.append(rec)
    return sorted(records, key=lambda r: (r.name, r.seed, r.run_id))


def runs_frame(records: Sequence[RunRecord]):
    """One row per run: ``name``, ``seed``, ``config_hash``, ``run_id`` and the ``final`` metrics as columns.

    Returns:
        ``pandas.DataFrame``.
    """
    import pandas as pd

    rows = [
        {"name": r.name, "seed": r.seed, "config_hash": r.config_hash, "run_id": r.run_id, **r.final}
        for r in records
    ]
    return pd.DataFrame(rows)


# -------------------------------------------------------------- statistics
def aggregate_seeds(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean and Student-t confidence interval over per-seed values.

    ``half = t_{(1+confidence)/2, n-1} * s / sqrt(n)`` with ``s`` the sample
    standard deviation (ddof=1). With ``n == 1`` there is no interval:
    ``std`` is 0 and ``ci_low == ci_high == mean``; read such a row as a
    single measurement, not a certainty.

    When to use something else (:mod:`rlvr_lib.eval.stats`): the t-interval
    assumes roughly normal per-seed values and knows no range, so on 3 seeds
    (``t = 4.30``) of a rate it often reaches below 0 or above 1, and it
    ignores the variance from the fixed draw of evaluation problems. Prefer
    :func:`~rlvr_lib.eval.stats.bootstrap_ci` with ``bounds=(0, 1)`` for
    per-seed rates (never leaves the range),
    :func:`~rlvr_lib.eval.stats.hierarchical_bootstrap_ci` when per-problem
    results exist (puts problem sampling in the interval and gives the
    single-evaluation base policy one), and
    :func:`~rlvr_lib.eval.stats.paired_difference_ci` for a difference
    between two methods on the same problems. This function stays for
    unbounded metrics (lengths, entropies) and for training curves.

    Args:
        values: One number per seed (lists, numpy arrays, tensors all work).
        confidence: Two-sided confidence level in (0, 1).

    Returns:
        ``{"mean", "ci_low", "ci_high", "n", "std", "method"}``: numbers as
        Python floats/int, ``method`` ``"Student-t over seeds"`` (or
        ``"single value: no interval (n=1)"``), as the interval dicts of
        :mod:`rlvr_lib.eval.stats` carry, for :func:`claims_table`.

    Raises:
        ValueError: if ``values`` is empty or holds a non-finite value or
            ``None`` (a NaN written to JSON reads back as ``None``).
    """
    from scipy import stats

    check_range("confidence", confidence, 0, 1, lo_open=True, hi_open=True)
    xs = jsonable(values)
    xs = [xs] if not isinstance(xs, list) else xs
    if not xs:
        raise ValueError("aggregate_seeds: no values")
    bad = [v for v in xs if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)]
    if bad:
        raise ValueError(f"aggregate_seeds: non-finite or non-numeric values {bad!r} in {xs!r}; filter them explicitly")
    n = len(xs)
    mean = math.fsum(xs) / n
    if n == 1:
        return {"mean": mean, "ci_low": mean, "ci_high": mean, "n": 1, "std": 0.0,
                "method": "single value: no interval (n=1)"}
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * std / math.sqrt(n)
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n, "std": std,
            "method": "Student-t over seeds"}


def has_interval(agg: Mapping[str, Any]) -> bool:
    """Whether an interval dict carries an interval at all.

    A dict has one when it was resampled over at least two units: ``n >= 2``
    seeds, or ``n_problems >= 2`` problems (the seeds x problems and paired
    bootstraps of :mod:`rlvr_lib.eval.stats`, where a single evaluation still
    varies over problems). A single seed's value (``n == 1`` and no
    ``n_problems``) has none: its ``ci_low == ci_high == mean`` is a
    measurement, not a certainty. Also exported as
    ``rlvr_lib.eval.stats.has_interval``.
    """
    return int(agg.get("n", 1)) >= 2 or int(agg.get("n_problems", 1)) >= 2


def format_ci(agg: Mapping[str, Any], fmt: str = ".3f") -> str:
    """Formats an interval dict as ``"mean [lo, hi]"``.

    Takes :func:`aggregate_seeds` dicts and those of :mod:`rlvr_lib.eval.stats`
    (:func:`~rlvr_lib.eval.stats.bootstrap_ci`, the seeds x problems and paired
    bootstraps). A dict without an interval
    (:func:`has_interval` false: one seed, no problems
    resampled) gives ``"mean (n=1)"``.
    """
    if not has_interval(agg):
        return f"{agg['mean']:{fmt}} (n={agg.get('n', 1)})"
    return f"{agg['mean']:{fmt}} [{agg['ci_low']:{fmt}}, {agg['ci_high']:{fmt}}]"


# ------------------------------------------------------------ claims tables
CLAIMS_COLUMNS = ("claim", "paper", "ours", "interval", "point_side", "holds")
"""The fixed columns of :func:`claims_table`, in order; extra row keys follow."""

_ROW_KEYS = frozenset(CLAIMS_COLUMNS) | {"expect", "than", "bounds"}


@functools.lru_cache(maxsize=1)
def _claims_table_class():
    """``ClaimsTable``: a ``pandas.DataFrame`` whose notebook/console display never shortens cells.

    pandas cuts cells to ``display.max_colwidth`` (50) characters in
    ``repr`` and in notebooks' HTML, which hid the end of long claims; this
    subclass shows every cell whole whatever the option. Built on first use so
    importing this module does not import pandas.
    """
    import pandas as pd

    class ClaimsTable(pd.DataFrame):
        _metadata: list[str] = []

        @property
        def _constructor(self):
            return ClaimsTable

        def __repr__(self) -> str:
            with pd.option_context("display.max_colwidth", None):
                return super().__repr__()

        def _repr_html_(self):
            with pd.option_context("display.max_colwidth", None):
                return super()._repr_html_()

    ClaimsTable.__module__ = __name__
    ClaimsTable.__qualname__ = "ClaimsTable"  # found through the module's __getattr__ (pickling)
    return ClaimsTable


def __getattr__(name: str) -> Any:  # ``rlvr_lib.experiments.ClaimsTable``, e.g. for unpickling
    if name == "ClaimsTable":
        return _claims_table_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _row_interval(i: int, row: Mapping[str, Any], aggregate: Optional[Callable[..., Mapping[str, Any]]]):
    """The interval dict of a claims-table row's ``ours``."""
    from .eval.stats import bootstrap_ci

    ours = row["ours"]
    if isinstance(ours, Mapping):
        missing = [k for k in ("mean", "ci_low", "ci_high", "n") if k not in ours]
        if missing:
            raise ValueError(f"claims_table row {i}: ours={dict(ours)!r} is invalid: must be an interval dict with "
                             f"'mean', 'ci_low', 'ci_high', 'n' (and 'method'); missing {missing}")
        return ours
    try:
        return bootstrap_ci(ours, bounds=row.get("bounds")) if aggregate is None else aggregate(ours)
    except ValueError as e:
        raise ValueError(f"claims_table row {i}: {e}") from None


def claims_table(
    rows: Sequence[Mapping[str, Any]],
    fmt: str = ".3f",
    *,
    aggregate: Optional[Callable[..., Mapping[str, Any]]] = None,
):
    """Builds a notebook's claims table: does each paper claim hold in our runs, with what interval.

    Each row is a mapping with:
        ``claim`` (str): the paper's claim, e.g. ``"NudgeRL@8 > GRPO@32
            (avg pass@1)"``; kept whole, whatever its length (the returned
            table also displays it whole, see Returns).
        ``paper``: the paper's number(s), shown as given (str or number).
        ``ours``: our measurement, one of
            * an interval dict carrying a ``"method"``: from
              :mod:`rlvr_lib.eval.stats` (:func:`~rlvr_lib.eval.stats.bootstrap_ci`,
              :func:`~rlvr_lib.eval.stats.hierarchical_bootstrap_ci`,
              :func:`~rlvr_lib.eval.stats.paired_difference_ci`) or
              :func:`aggregate_seeds`; a dict without ``"method"`` is shown
              with interval ``"unspecified"``;
            * a sequence of per-seed values: aggregated here, by default
              with :func:`~rlvr_lib.eval.stats.bootstrap_ci` (percentile
              bootstrap, 95%, 10000 resamples, seed 0), clipped to the row's
              ``bounds`` when given (e.g. ``(0, 1)`` for a rate,
              ``(-1, 1)`` for a difference of rates); or with ``aggregate``;
            * one number: a single measurement, no interval.
        ``expect`` (``">"`` or ``"<"``) with optional ``than`` (default 0):
            the claimed side. Then
            ``point_side = mean > than`` (or ``<``): the point estimate lies on
            the claimed side; and
            ``holds = ci_low > than`` (or ``ci_high < than``): the *whole
            interval* clears ``than`` on the claimed side. A row without an
            interval (one seed, :func:`has_interval` false) never
            holds.
        or ``holds`` (bool) given directly, for a claim that is no
            comparison with a threshold: kept as given, ``point_side`` None.
            (``holds`` wins when a row has both.)
        ``bounds`` (optional): see ``ours``.
    Any other keys (e.g. ``note``) become extra columns.

    Args:
        rows: The claims, as above.
        fmt: Number format of ``ours``.
        aggregate: How to turn per-seed values into an interval dict:
            ``aggregate(values)``, e.g. :func:`aggregate_seeds` for the
            Student-t interval. Default (None):
            ``bootstrap_ci(values, bounds=row.get("bounds"))``; a row's
            ``bounds`` is used only by the default.

    ``holds`` used to mean "the mean is on the claimed side" with a separate
    ``ci_clears`` column for the interval; now ``holds`` is the interval test
    (what ``ci_clears`` was) and ``point_side`` the mean test, and
    ``ci_clears`` is gone (read ``holds``).

    Returns:
        A ``ClaimsTable`` (a ``pandas.DataFrame`` that displays cells whole,
        never cut to ``display.max_colwidth``) with columns ``claim``,
        ``paper``, ``ours`` (``"mean [lo, hi]"``, or ``"mean (n=1)"``),
        ``interval`` (how the interval was made: the dict's ``method``),
        ``point_side`` (bool, or None for rows given ``holds``), ``holds``
        (bool), then the extra columns (:data:`CLAIMS_COLUMNS` first).

    Raises:
        ValueError: on a row without ``claim``/``paper``/``ours``, without
            either ``holds`` or ``expect``, with a bad ``expect``, an
            ``ours`` dict lacking interval keys, or per-seed values that
            :func:`~rlvr_lib.eval.stats.bootstrap_ci` refuses.
    """
    out = []
    for i, row in enumerate(rows):
        missing = [k for k in ("claim", "paper", "ours") if k not in row]
        if missing:
            raise ValueError(f"claims_table row {i} lacks {missing}: {dict(row)!r}")
        if "holds" not in row and "expect" not in row:
            raise ValueError(f"claims_table row {i} needs 'holds' or 'expect': {dict(row)!r}")
        agg = _row_interval(i, row, aggregate)
        point_side = None
        if "holds" in row:
            holds = bool(row["holds"])
        else:
            expect = check_choice(f"claims_table row {i}: expect", row["expect"], (">", "<"))
            than = check_range(f"claims_table row {i}: than", row.get("than", 0.0))
            ok = has_interval(agg)
            if expect == ">":
                point_side, holds = bool(agg["mean"] > than), bool(ok and agg["ci_low"] > than)
            else:
                point_side, holds = bool(agg["mean"] < than), bool(ok and agg["ci_high"] < than)
        extra = {k: v for k, v in row.items() if k not in _ROW_KEYS}
        out.append({"claim": row["claim"], "paper": row["paper"], "ours": format_ci(agg, fmt),
                    "interval": agg.get("method", "unspecified"), "point_side": point_side, "holds": holds,
                    **extra})
    cls = _claims_table_class()
    df = cls(out, columns=None if out else list(CLAIMS_COLUMNS))
    df["holds"] = df["holds"].astype(bool)
    df["point_side"] = df["point_side"].astype(object)
    return df


def claims_headline(held: int, n: int) -> str:
    """The count :func:`claims_summary` opens with, e.g. ``"2 of 27 claims hold at our scale"``."""
    return f"{held} of {n} claims hold at our scale"


_CLAIMS_HEADLINE = re.compile(r"\*\*(\d+) of (\d+) claims hold at our scale\*\*")


def find_claims_headline(text: str) -> str | None:
    """The claims count of every :func:`claims_summary` in ``text`` (e.g. a notebook's stored outputs), summed,
    as :func:`claims_headline` writes it, naming the number of tables when there are several; None if none."""
    counts = [(int(held), int(n)) for held, n in _CLAIMS_HEADLINE.findall(text)]
    if not counts:
        return None
    headline = claims_headline(sum(held for held, _ in counts), sum(n for _, n in counts))
    return headline if len(counts) == 1 else f"{headline}, over {len(counts)} claims tables"


def claims_summary(table) -> str:
    """A markdown summary of a claims table, for the top of a notebook's results.

    One line with how many claims hold, then one bullet per claim: whether it
    holds (its whole interval on the claimed side), where the point estimate
    alone lies when it does not, our number with its interval and method, and
    the paper's.
    """
    n, held = len(table), int(table["holds"].sum())
    lines = [f"**{claims_headline(held, n)}** (a claim holds only when its whole 95% interval "
             "lies on the claimed side).", ""]
    for _, row in table.iterrows():
        if row["holds"]:
            verdict = "**holds**"
        elif row["point_side"]:
            verdict = "**not resolved** (point estimate on the claimed side, interval crosses the threshold)"
        elif row["point_side"] is None:
            verdict = "**does not hold**"
        else:
            verdict = "**does not hold** (point estimate against the claimed side)"
        lines.append(f"- {verdict}: {row['claim']} -- ours {row['ours']} ({row['interval']}); paper: {row['paper']}")
    return "\n".join(lines)


def render_markdown(df) -> str:
    """Renders a DataFrame (e.g. a claims table) as a GitHub markdown table (via ``tabulate``)."""
    return df.to_markdown(index=False)
