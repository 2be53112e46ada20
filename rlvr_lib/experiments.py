"""Runs and results: cached runs on disk, claims tables.

The intervals (`aggregate_seeds`, `format_ci`, `has_interval`) and `jsonable` moved to
`rlvr_lib.study.stats` and `rlvr_lib.study.runs` (issue 30); they are still importable from here.

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

import dataclasses
import datetime as _dt
import functools
import json
import logging
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from . import __version__
from .config import ConfigBase, hash_jsonable
from .files import atomic_file, file_lock, write_json_atomic  # noqa: F401 (atomic_file kept importable here)
from .study.runs import jsonable
from .study.stats import aggregate_seeds, bootstrap_ci, format_ci, has_interval
from .validation import check, check_choice, check_int, check_range

__all__ = [
    "AGAINST",
    "CHECK_COLUMNS",
    "CHECK_KINDS",
    "CLAIMS_COLUMNS",
    "EFFECT_FRACTION",
    "EXPECTS",
    "LARGE_EFFECT",
    "MEASUREMENT_COLUMNS",
    "PAPER_NAMES",
    "VERDICTS",
    "RESULTS_ENV",
    "RunRecord",
    "aggregate_seeds",
    "cached_run",
    "claims_headline",
    "claims_summary",
    "claims_table",
    "find_claims_counts",
    "find_claims_headline",
    "instrument_checks",
    "measurements_summary",
    "measurements_table",
    "min_effect",
    "format_ci",
    "git_commit",
    "has_interval",
    "jsonable",
    "load_runs",
    "render_markdown",
    "results_root",
    "run_dir",
    "runs_frame",
    "verdict",
    "verdict_counts",
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
    """Where a run ran: processor model, torch threads (when torch is imported), CPU count, and with what:
    the Python version and the installed versions of the libraries the numbers depend on
    (:data:`rlvr_lib.lockfile.KEY_PACKAGES`; ``None`` for one not installed): a record made outside the
    lock still says what it ran with."""
    import platform
    import sys

    from .lockfile import package_versions

    torch = sys.modules.get("torch")
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "python": platform.python_version(), "packages": package_versions()}


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


# ------------------------------------------------------------------- files
def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


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
    with file_lock(path.with_name(f".{run_id}.lock")) as waited:
        if waited:
            log.info("waited for another process computing %s", run_id)
        if waited and not force and (rec := cached()) is not None:  # another process computed it meanwhile
            return rec
        return _compute_run(path, experiment, name, run_id, cfg, chash, cfg_type, seed, fn, extra)


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


# ------------------------------------------------------------ claims tables
# Issue 28: a row's verdict is one of three, read from its 95% interval against the threshold on the
# paper's side; a row whose reference (the same test on GRPO) is also reproduced is `not specific`.
REPRODUCED, CONTRADICTED, UNRESOLVED, NOT_SPECIFIC = "reproduced", "contradicted", "unresolved", "not specific"
VERDICTS = (REPRODUCED, CONTRADICTED, UNRESOLVED, NOT_SPECIFIC)
"""Every verdict a claims-table row can have, in the order headlines count them."""

EXPECTS = (">", "<", "within")
"""The claimed side: above / below ``than``, or inside ``[than - margin, than + margin]`` (an equivalence)."""

PAPER_NAMES = ("NudgeRL", "3PO", "SAGE", "VIGOR")
"""The papers a claim can come from (``source``); the scorecard has one row per paper."""

AGAINST = ("base", "threshold", "baseline", "grpo", "method")
"""What a row compares with: the base policy, a fixed threshold, a baseline weaker than GRPO, GRPO itself, or
another variant of the method (ablations). The first three need a ``reference`` (the same test on GRPO)."""

NEEDS_REFERENCE = ("base", "threshold", "baseline")

LARGE_EFFECT = 0.2
"""A paper effect is *large* when its relative change ``|to - from| / |from|`` is at least this (20%)."""

EFFECT_FRACTION = 0.25
"""The one minimum-effect rule (issue 28, item 4): a claim whose paper effect is large needs at least this share
(a quarter) of the paper's relative change, taken relative to our comparator's level: see :func:`min_effect`."""

CHANCE_LEVEL = 0.025
"""One-sided error of a row's test: a 95% two-sided interval lies wholly beyond a threshold the true value sits
on with probability 2.5%, so ``CHANCE_LEVEL * rows`` reproduced verdicts are expected from chance alone."""

CLAIMS_COLUMNS = ("id", "claim", "source", "paper", "paper_effect", "ours", "our_effect", "threshold", "interval",
                  "verdict", "reference")
"""The fixed columns of :func:`claims_table`, in order; extra row keys follow."""

MEASUREMENT_COLUMNS = ("id", "measurement", "ours", "threshold", "interval", "verdict")
"""The fixed columns of :func:`measurements_table`."""

CHECK_COLUMNS = ("id", "check", "kind", "value", "passes")
"""The columns of :func:`instrument_checks`."""

CHECK_KINDS = ("construction", "measurement", "identity")
"""Why a row is an instrument check and not a claim: it cannot fail by construction, it measures the instrument
(e.g. how well the clustering recovers labels), or it checks two runs are the same computation."""

_CLAIM_KEYS = frozenset({"id", "claim", "source", "paper", "paper_effect", "ours", "expect", "than", "margin",
                         "against", "reference", "level", "bounds"})
_MEASUREMENT_KEYS = frozenset({"id", "measurement", "ours", "expect", "than", "margin", "bounds"})


@functools.lru_cache(maxsize=1)
def _claims_table_class():
    """``ClaimsTable``: a ``pandas.DataFrame`` whose notebook/console display never shortens cells.

    pandas cuts cells to ``display.max_colwidth`` (50) characters in
    ``repr`` and in notebooks' HTML, which hid the end of long claims; this
    subclass shows every cell (and every column) whole whatever the options. Built on first use so
    importing this module does not import pandas.
    """
    import pandas as pd

    class ClaimsTable(pd.DataFrame):
        _metadata: list[str] = []

        @property
        def _constructor(self):
            return ClaimsTable

        def __repr__(self) -> str:
            with pd.option_context("display.max_colwidth", None, "display.max_columns", None):
                return super().__repr__()

        def _repr_html_(self):
            with pd.option_context("display.max_colwidth", None, "display.max_columns", None):
                return super()._repr_html_()

    ClaimsTable.__module__ = __name__
    ClaimsTable.__qualname__ = "ClaimsTable"  # found through the module's __getattr__ (pickling)
    return ClaimsTable


def __getattr__(name: str) -> Any:  # ``rlvr_lib.experiments.ClaimsTable``, e.g. for unpickling
    if name == "ClaimsTable":
        return _claims_table_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _interval(where: str, ours: Any, bounds: Any = None, aggregate: Optional[Callable[..., Mapping[str, Any]]] = None):
    """The interval dict of a row's measurement: an interval dict as is, per-seed values aggregated."""
    if isinstance(ours, Mapping):
        missing = [k for k in ("mean", "ci_low", "ci_high", "n") if k not in ours]
        if missing:
            raise ValueError(f"{where}: ours={dict(ours)!r} is invalid: must be an interval dict with "
                             f"'mean', 'ci_low', 'ci_high', 'n' (and 'method'); missing {missing}")
        return ours
    try:
        return bootstrap_ci(ours, bounds=bounds) if aggregate is None else aggregate(ours)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def verdict(agg: Mapping[str, Any], expect: str, than: float = 0.0, margin: Optional[float] = None) -> str:
    """The verdict of one test: ``"reproduced"``, ``"contradicted"`` or ``"unresolved"`` (issue 28, item 1-2).

    One-sided (``expect`` ``">"``; ``"<"`` mirrored): reproduced when the whole interval lies beyond ``than``
    (``ci_low > than``), contradicted when the whole interval lies on the other side (``ci_high < than``),
    unresolved when it touches or straddles ``than``. Equivalence (``expect="within"``): reproduced when the
    whole interval lies strictly inside ``(than - margin, than + margin)``, contradicted when it lies wholly
    outside that band (entirely above or entirely below it), unresolved otherwise. A measurement without an
    interval (:func:`has_interval` false: one seed, no problems resampled) is always unresolved.

    Raises:
        ValueError: on an ``expect`` not in :data:`EXPECTS`, a non-finite ``than``, or a ``within`` test
            without a positive ``margin``.
    """
    check_choice("expect", expect, EXPECTS)
    than = check_range("than", than)
    if expect == "within":
        check(margin is not None, "margin", margin, "a number > 0 for expect='within'")
        margin = check_range("margin", margin, 0, None, lo_open=True)
    if not has_interval(agg):
        return UNRESOLVED
    lo, hi = float(agg["ci_low"]), float(agg["ci_high"])
    if expect == ">":
        return REPRODUCED if lo > than else CONTRADICTED if hi < than else UNRESOLVED
    if expect == "<":
        return REPRODUCED if hi < than else CONTRADICTED if lo > than else UNRESOLVED
    if than - margin < lo and hi < than + margin:
        return REPRODUCED
    return CONTRADICTED if (lo > than + margin or hi < than - margin) else UNRESOLVED


def _paper_effect(where: str, effect: Any) -> tuple[str, Optional[tuple[str, float, float]]]:
    """(shown text, (metric, from, to) or None) of a row's ``paper_effect``."""
    if isinstance(effect, str) and effect:
        return effect, None
    ok = (isinstance(effect, (tuple, list)) and len(effect) == 3 and isinstance(effect[0], str)
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in effect[1:]))
    check(ok, f"{where}: paper_effect", effect,
          "a non-empty str (the paper gives no number) or (metric, from, to) with finite from and to")
    metric, a, b = effect[0], float(effect[1]), float(effect[2])
    rel = f" ({(b - a) / abs(a):+.0%})" if a != 0 else ""
    return f"{metric} {a:g} -> {b:g}{rel}", (metric, a, b)


def min_effect(paper_from: float, paper_to: float, level: float) -> Optional[float]:
    """The minimum effect a claim must show, from the paper's effect (issue 28, item 4; the rule written once).

    The paper's relative change ``rel = (paper_to - paper_from) / |paper_from|``. When it is large
    (``|rel| >= LARGE_EFFECT``, 20%) the claim needs at least a quarter of it (``EFFECT_FRACTION``) relative
    to our comparator's level: ``EFFECT_FRACTION * rel * |level|`` (signed like the paper's change), where
    ``level`` is our measured value of the side the paper's ``from`` stands for (e.g. our base policy's pass@1
    for "base -> method"). A small paper effect sets no minimum (None): 0 stays the threshold.

    Raises:
        ValueError: when ``paper_from`` is 0 (no relative change) or a value is not finite.
    """
    for name, v in (("paper_from", paper_from), ("paper_to", paper_to), ("level", level)):
        check_range(name, v)
    check(paper_from != 0, "paper_from", paper_from, "non-zero (the rule uses the paper's relative change)")
    rel = (paper_to - paper_from) / abs(paper_from)
    if abs(rel) < LARGE_EFFECT:
        return None
    return EFFECT_FRACTION * rel * abs(level)


def _threshold(where: str, expect: str, than: float, effect: Optional[tuple], level: Any) -> tuple[float, str]:
    """(threshold, how it was set) of a claim row: ``than`` or, when stricter, the minimum effect."""
    if effect is None or expect == "within":
        return than, ""
    metric, a, b = effect
    sign = 1 if b > a else -1 if b < a else 0
    check(sign == (1 if expect == ">" else -1), f"{where}: expect", expect,
          f"the side of the paper's change {a:g} -> {b:g} ('>' for a rise, '<' for a fall)")
    if a == 0 or abs(b - a) / abs(a) < LARGE_EFFECT:  # no relative change, or a small one: 0 stays
        return than, ""
    check(level is not None and isinstance(level, (int, float)) and not isinstance(level, bool)
          and math.isfinite(level), f"{where}: level", level,
          f"our finite value of the paper's 'from' side: the paper's effect {a:g} -> {b:g} is large "
          f"(>= {LARGE_EFFECT:.0%} relative), so the row's threshold is a minimum effect")
    m = min_effect(a, b, float(level))
    if m is None:
        return than, ""
    m = than + m  # the minimum effect is measured from the claim's own threshold (usually 0)
    stricter = m > than if expect == ">" else m < than
    return (m, "min effect") if stricter else (than, "")


def _check_rows(kind: str, rows: Sequence[Mapping[str, Any]], ids_key: str = "id",
                aggregate: Optional[Callable[..., Mapping[str, Any]]] = None) -> None:
    """Ids unique; no measurement tested by two one-sided rows of opposite sides (issue 28, item 2).

    The rule for two-sided claims: a claim that a value stays near another ("matches", "no gain", "keeps") is
    one row with ``expect="within"`` and a ``margin``. Two one-sided rows with opposite ``expect`` on the same
    measurement (equal mean and interval) are its two halves, each of which holds whenever the value is far
    off on the other side, so the table refuses them; so it does two rows with the same ``id``.
    """
    seen: dict[str, int] = {}
    sides: dict[tuple, tuple[int, str]] = {}
    for i, row in enumerate(rows):
        rid = row.get(ids_key)
        check(isinstance(rid, str) and _NAME_RE.match(rid), f"{kind} row {i}: id", rid,
              "a file-name-safe str naming the claim (letters, digits and . _ + = @ -)")
        check(rid not in seen, f"{kind} row {i}: id", rid, f"unique in the table (row {seen.get(rid)} has it)")
        seen[rid] = i
        ours, expect = row.get("ours"), row.get("expect")
        if ours is not None and not isinstance(ours, Mapping) and expect in (">", "<"):
            # per-seed values: compare the intervals the table will test (a bad row fails later, with its field)
            try:
                ours = _interval(f"{kind} row {i}", ours, row.get("bounds"), aggregate)
            except ValueError:
                ours = None
        if isinstance(ours, Mapping) and expect in (">", "<") and all(k in ours for k in ("mean", "ci_low", "ci_high")):
            key = (float(ours["mean"]), float(ours["ci_low"]), float(ours["ci_high"]))
            if key[1] == key[2]:
                # A zero-width interval (e.g. every value 0 on a small sample) matches other measurements by
                # coincidence; only the same measurement object counts as "the same measurement" then.
                key = ("object", id(ours))
            other = sides.get(key)
            if other is not None and other[1] != expect:
                raise ValueError(
                    f"{kind} row {i}: expect={expect!r} is invalid: row {other[0]} ({rows[other[0]].get(ids_key)!r}) "
                    f"tests the same measurement with expect={other[1]!r}, so the two rows are one-sided halves of "
                    "a two-sided claim; must be one row with expect='within' and a margin")
            sides.setdefault(key, (i, expect))


def _side_text(expect: str, than: float, margin: Optional[float], fmt: str) -> str:
    if expect == "within":
        return f"within {than:{fmt}} +- {margin:{fmt}}"
    return f"{expect} {than:{fmt}}"


def _test(where: str, row: Mapping[str, Any]) -> tuple[str, float, Optional[float]]:
    expect = check_choice(f"{where}: expect", row.get("expect"), EXPECTS)
    than = check_range(f"{where}: than", row.get("than", 0.0))
    margin = row.get("margin")
    if expect == "within":
        check(margin is not None and isinstance(margin, (int, float)) and not isinstance(margin, bool)
              and math.isfinite(margin) and margin > 0, f"{where}: margin", margin,
              "a number > 0 stated in the row (expect='within')")
    else:
        check(margin is None, f"{where}: margin", margin, "absent unless expect='within'")
    return expect, than, margin


def claims_table(
    rows: Sequence[Mapping[str, Any]],
    fmt: str = ".3f",
    *,
    aggregate: Optional[Callable[..., Mapping[str, Any]]] = None,
):
    """Builds a notebook's claims table: each paper claim's verdict at our scale (issue 28).

    Each row is a mapping with:
        ``id`` (str): the claim's id, unique in the table (the pre-registered rows of
            :mod:`rlvr_lib.study.claims` carry it).
        ``claim`` (str): the paper's claim in words; ``source``: the paper (one of :data:`PAPER_NAMES`);
            ``paper``: where the paper states it (table, figure, text).
        ``paper_effect``: the paper's effect as ``(metric, from, to)``, e.g. ``("pass@1", .227, .266)`` with
            ``from`` the comparator's number, or a str when the paper gives no number.
        ``ours``: the measurement of ``claim``'s quantity (usually a difference): an interval dict (from
            :mod:`rlvr_lib.study.stats` or :func:`aggregate_seeds`), per-seed values (aggregated by
            ``bootstrap_ci`` with the row's ``bounds``, or ``aggregate``), or one number (no interval).
        ``expect``: ``">"`` / ``"<"`` with ``than`` (default 0), or ``"within"`` with ``margin`` (> 0): an
            equivalence claim ("matches", "no gain", "keeps", "stable"), see :func:`verdict`. Two one-sided
            rows on one measurement with opposite sides are refused (:func:`_check_rows`).
        ``level`` (number): our value of the side the paper's ``from`` stands for; required when the paper's
            effect is large, whose minimum effect (:func:`min_effect`) then replaces ``than`` when stricter;
            also gives ``our_effect`` (our relative change, ``mean / level``).
        ``against``: what the row compares with, one of :data:`AGAINST`. Rows against ``base``, a fixed
            ``threshold`` or a weaker ``baseline`` need ``reference``: the same test on GRPO (an interval dict;
            shown with its verdict), or a str saying why there is none (e.g. the row is GRPO's own). A row
            reproduced whose reference is also reproduced is ``not specific``: any RL run passes it.
        ``bounds`` (optional): see ``ours``.
    Any other keys (e.g. ``note``, ``changed``) become extra columns.

    Returns:
        A ``ClaimsTable`` (a ``pandas.DataFrame`` that shows cells whole) with :data:`CLAIMS_COLUMNS`, then the
        extra columns. ``threshold`` shows the tested side (``"> 0.010"``, ``"within 0 +- 0.010"``, with
        ``(min effect)`` when :func:`min_effect` set it); ``verdict`` is one of :data:`VERDICTS`.

    Raises:
        ValueError: naming the row, the field, its value and what is allowed: a missing field, a bad
            ``expect``/``than``/``margin``/``source``/``against``/``paper_effect``, a large paper effect
            without ``level``, a paper change against ``expect``'s side, a row given ``holds`` (instrument
            checks go to :func:`instrument_checks`), a missing ``reference``, duplicate ids, or the one-sided
            halves of a two-sided claim.
    """
    _check_rows("claims_table", rows, aggregate=aggregate)
    out = []
    for i, row in enumerate(rows):
        where = f"claims_table row {i}"
        check("holds" not in row, f"{where}: holds", row.get("holds"),
              "absent: a claim's verdict comes from its interval; a check that cannot fail or that measures the "
              "instrument goes to instrument_checks")
        missing = [k for k in ("claim", "source", "paper", "paper_effect", "ours", "expect", "against") if k not in row]
        check(not missing, f"{where}: fields", sorted(row), f"a mapping with {missing} as well")
        check_choice(f"{where}: source", row["source"], PAPER_NAMES)
        against = check_choice(f"{where}: against", row["against"], AGAINST)
        expect, than, margin = _test(where, row)
        shown_effect, effect = _paper_effect(where, row["paper_effect"])
        threshold, how = _threshold(where, expect, than, effect, row.get("level"))
        agg = _interval(where, row["ours"], row.get("bounds"), aggregate)
        result = verdict(agg, expect, threshold, margin)
        reference = row.get("reference")
        if against in NEEDS_REFERENCE:
            check(reference is not None, f"{where}: reference", reference,
                  f"the same test on GRPO (an interval dict) or a str saying why there is none (against={against!r})")
        if isinstance(reference, Mapping):
            ref = _interval(f"{where}: reference", reference)
            ref_verdict = verdict(ref, expect, threshold, margin)
            reference_text = f"GRPO {format_ci(ref, fmt)}: {ref_verdict}"
            if result == REPRODUCED and ref_verdict == REPRODUCED:
                result = NOT_SPECIFIC  # GRPO passes the same test: the row says nothing about the method
        else:
            check(reference is None or isinstance(reference, str), f"{where}: reference", reference,
                  "an interval dict or a str")
            reference_text = reference or "-"
        level = row.get("level")
        our_effect = (f"{agg['mean'] / abs(level):+.0%} of {abs(level):{fmt}}"
                      if isinstance(level, (int, float)) and not isinstance(level, bool) and level else "-")
        extra = {k: v for k, v in row.items() if k not in _CLAIM_KEYS}
        out.append({"id": row["id"], "claim": row["claim"], "source": row["source"], "paper": row["paper"],
                    "paper_effect": shown_effect, "ours": format_ci(agg, fmt), "our_effect": our_effect,
                    "threshold": _side_text(expect, threshold, margin, fmt) + (f" ({how})" if how else ""),
                    "interval": agg.get("method", "unspecified"), "verdict": result, "reference": reference_text,
                    **extra})
    cls = _claims_table_class()
    return cls(out, columns=None if out else list(CLAIMS_COLUMNS))


def measurements_table(
    rows: Sequence[Mapping[str, Any]],
    fmt: str = ".3f",
    *,
    aggregate: Optional[Callable[..., Mapping[str, Any]]] = None,
):
    """Additional measurements: tests no paper states (issue 28, item 7), with verdicts but never counted.

    Rows as in :func:`claims_table` with ``measurement`` (the repository's own reading, in words) instead of
    ``claim``, and no ``source``, ``paper``, ``paper_effect``, ``against``, ``reference`` or ``level``.

    Returns:
        A ``ClaimsTable`` with :data:`MEASUREMENT_COLUMNS` then the extra keys.
    """
    _check_rows("measurements_table", rows, aggregate=aggregate)
    out = []
    for i, row in enumerate(rows):
        where = f"measurements_table row {i}"
        missing = [k for k in ("measurement", "ours", "expect") if k not in row]
        check(not missing, f"{where}: fields", sorted(row), f"a mapping with {missing} as well")
        expect, than, margin = _test(where, row)
        agg = _interval(where, row["ours"], row.get("bounds"), aggregate)
        extra = {k: v for k, v in row.items() if k not in _MEASUREMENT_KEYS}
        out.append({"id": row["id"], "measurement": row["measurement"], "ours": format_ci(agg, fmt),
                    "threshold": _side_text(expect, than, margin, fmt), "interval": agg.get("method", "unspecified"),
                    "verdict": verdict(agg, expect, than, margin), **extra})
    return _claims_table_class()(out, columns=None if out else list(MEASUREMENT_COLUMNS))


def instrument_checks(rows: Sequence[Mapping[str, Any]]):
    """Instrument checks (issue 28, item 5): rows that cannot fail by construction, measurements of the
    instrument and identity checks, shown with whether they pass; never counted among paper claims.

    Each row: ``id``, ``check`` (in words), ``kind`` (one of :data:`CHECK_KINDS`), ``value`` (what was
    measured: a number, an interval dict or a str) and ``passes`` (bool).
    """
    out = []
    seen = set()
    for i, row in enumerate(rows):
        where = f"instrument_checks row {i}"
        missing = [k for k in CHECK_COLUMNS if k not in row]
        check(not missing, f"{where}: fields", sorted(row), f"a mapping with {missing} as well")
        check(row["id"] not in seen, f"{where}: id", row["id"], "unique in the table")
        seen.add(row["id"])
        check_choice(f"{where}: kind", row["kind"], CHECK_KINDS)
        check(isinstance(row["passes"], bool) or type(row["passes"]).__name__ == "bool_", f"{where}: passes",
              row["passes"], "a bool")
        value = row["value"]
        shown = format_ci(value) if isinstance(value, Mapping) else f"{value:.3f}" if isinstance(value, float) else str(value)
        out.append({"id": row["id"], "check": row["check"], "kind": row["kind"], "value": shown,
                    "passes": bool(row["passes"])})
    return _claims_table_class()(out, columns=list(CHECK_COLUMNS))


def verdict_counts(table) -> dict[str, int]:
    """How many rows of a claims table have each verdict, in :data:`VERDICTS` order (zeros included)."""
    counts = {v: 0 for v in VERDICTS}
    for v in table["verdict"]:
        counts[check_choice("verdict", v, VERDICTS)] += 1
    return counts


def claims_headline(counts: Mapping[str, int]) -> str:
    """The count :func:`claims_summary` opens with, e.g.
    ``"3 reproduced, 1 contradicted, 5 unresolved, 2 not specific of 11 claims"``."""
    n = sum(int(counts.get(v, 0)) for v in VERDICTS)
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in VERDICTS) + f" of {n} claims"


_CLAIMS_HEADLINE = re.compile(r"\*\*(\d+) reproduced, (\d+) contradicted, (\d+) unresolved, (\d+) not specific "
                              r"of (\d+) claims\*\*")
_SCORECARD = re.compile(r"<!-- claims-scorecard (\{.*?\}) -->")


def find_claims_headline(text: str) -> str | None:
    """The claims counts of every :func:`claims_summary` in ``text`` (e.g. a notebook's stored outputs), summed,
    as :func:`claims_headline` writes them, naming the number of tables when there are several; None if none."""
    found = _CLAIMS_HEADLINE.findall(text)
    if not found:
        return None
    counts = {v: sum(int(f[j]) for f in found) for j, v in enumerate(VERDICTS)}
    headline = claims_headline(counts)
    return headline if len(found) == 1 else f"{headline}, over {len(found)} claims tables"


def find_claims_counts(text: str) -> dict[str, dict[str, int]]:
    """Per paper, the verdict counts of every :func:`claims_summary` in ``text``, summed (the scorecard's data,
    read from the machine-readable comment each summary carries)."""
    totals: dict[str, dict[str, int]] = {}
    for blob in _SCORECARD.findall(text):
        for paper, counts in json.loads(blob).items():
            mine = totals.setdefault(paper, {v: 0 for v in VERDICTS})
            for v in VERDICTS:
                mine[v] += int(counts.get(v, 0))
    return totals


_VERDICT_WORDS = {
    REPRODUCED: "the whole 95% interval lies on the paper's side of the threshold",
    CONTRADICTED: "the whole interval lies on the other side",
    UNRESOLVED: "the interval straddles or touches the threshold (or the band's edge)",
    NOT_SPECIFIC: "reproduced, but GRPO passes the same test (the `reference` column)",
}


def claims_summary(table) -> str:
    """A markdown summary of a claims table, for the top of a notebook's results.

    One line counting the four verdicts (the headline README quotes), a hidden comment with the counts per
    paper (read by :func:`find_claims_counts` for README's scorecard), the chance count (how many
    ``reproduced`` the rows would give at the one-sided 2.5% level if every effect sat on its threshold),
    then one bullet per claim: its verdict, our number and threshold, the paper's effect, GRPO's reference.
    """
    counts = verdict_counts(table)
    per_paper: dict[str, dict[str, int]] = {}
    for _, row in table.iterrows():
        per_paper.setdefault(row["source"], {v: 0 for v in VERDICTS})[row["verdict"]] += 1
    n = len(table)
    lines = [f"**{claims_headline(counts)}** (chance alone, every effect at its threshold, would give "
             f"{CHANCE_LEVEL * n:.1f} `reproduced` at the one-sided {CHANCE_LEVEL:.1%} level).",
             f"<!-- claims-scorecard {json.dumps(per_paper, sort_keys=True)} -->", ""]
    lines += [f"- `{v}`: {words}" for v, words in _VERDICT_WORDS.items()] + [""]
    for _, row in table.iterrows():
        ref = f"; reference: {row['reference']}" if row["reference"] != "-" else ""
        lines.append(f"- **{row['verdict']}**: {row['claim']} ({row['source']}) -- ours {row['ours']}, "
                     f"threshold {row['threshold']} ({row['interval']}); paper: {row['paper_effect']}{ref}")
    return "\n".join(lines)


def measurements_summary(table) -> str:
    """A markdown summary of :func:`measurements_table` (not counted among paper claims)."""
    counts = verdict_counts(table)
    head = ", ".join(f"{counts[v]} {v}" for v in VERDICTS[:3])
    lines = [f"Additional measurements (no paper states these; not counted among claims): {head} of {len(table)}.", ""]
    lines += [f"- {row['verdict']}: {row['measurement']} -- ours {row['ours']}, threshold {row['threshold']}"
              for _, row in table.iterrows()]
    return "\n".join(lines)


def render_markdown(df) -> str:
    """Renders a DataFrame (e.g. a claims table) as a GitHub markdown table (via ``tabulate``)."""
    return df.to_markdown(index=False)
