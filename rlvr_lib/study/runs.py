"""Run records on disk: the run cache, provenance, the strict-JSON form of results.

A *run* is one call of a function (train + evaluate, usually) under one config and one seed.
:func:`cached_run` stores it as ``results/<experiment>/<run_id>.json`` with
``run_id = f"{name}-{config_hash}-s{seed}"``, atomically, and loads it instead of recomputing when called again
(how an interrupted ``make reproduce`` resumes); each record says where and with what it ran (:func:`machine`,
:func:`git_commit`).

Records are strict JSON (:func:`jsonable`): **NaN and +-inf are written as ``null``**, so a metric read back as
``None`` means "not finite" (or absent). A record is trusted only after :func:`check_record`: its fields have
:class:`RunRecord`'s types and, when it carries one, its ``checksum`` (:func:`record_checksum`)
matches; a record that fails is recomputed by :func:`cached_run` as an unreadable one is (records written before
checksums are read unchanged when their fields pass). The results root: the ``root`` argument, ``RLVR_RESULTS_DIR``,
``<repo>/results`` in a checkout, else ``./results``. Details: docs/study/README.md ("The run cache").
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import logging
import math
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from rlvr_lib import __version__
from rlvr_lib.config import ConfigBase, hash_jsonable
from rlvr_lib.files import file_lock, write_json_atomic
from rlvr_lib.validation import check, check_int

__all__ = [
    "FINISHED",
    "NAME_RE",
    "CHECKSUM_KEY",
    "PrerequisitesMissing",
    "RESUMED",
    "RecordInvalid",
    "RESULTS_ENV",
    "RunRecord",
    "cached_run",
    "check_one_processor",
    "check_record",
    "cpu_model",
    "current_testbed",
    "environment",
    "git_commit",
    "jsonable",
    "load_runs",
    "measured_on",
    "machine",
    "one_run_per_seed",
    "read_record",
    "record_checksum",
    "results_root",
    "run_dir",
    "runs_frame",
]

log = logging.getLogger(__name__)

RESULTS_ENV = "RLVR_RESULTS_DIR"
CACHE_ONLY_ENV = "RLVR_CACHE_ONLY"
"""``RLVR_CACHE_ONLY=1``: :func:`cached_run` serves finished records and raises :class:`CacheMiss` instead of computing
(re-executing a full-profile notebook from the committed records, e.g. under nbval, must never start a training)."""
_REPO_ROOT = Path(__file__).resolve().parents[2]
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]*$")
"""A file-name-safe name (experiments, runs, figures, claim ids): letters, digits and ``. _ + = @ -``, not
starting with a symbol."""
FINISHED = "finished"
_PLANNER: contextvars.ContextVar = contextvars.ContextVar("rlvr_lib.study.runs._PLANNER", default=None)
"""Plan mode (`rlvr_lib.study.plan`): when set, :func:`cached_run` hands each run to it and returns what it returns
(a stand-in record), computing and loading nothing."""


@contextlib.contextmanager
def environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """For the block, ``os.environ`` with ``changes`` applied (``None``: unset); every variable restored after."""
    saved = {k: os.environ.get(k) for k in changes}
    for k, v in changes.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------- JSON
def jsonable(value: Any) -> Any:
    """Converts a result value to strict-JSON Python objects (NaN and +-inf become ``None``).

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
        isinstance(value, str) and NAME_RE.match(value), kind, value,
        "a non-empty file-name-safe string (letters, digits and . _ + = @ -, not starting with a symbol)",
    )


def run_dir(experiment: str, root: str | Path | None = None, *, create: bool = False) -> Path:
    """Returns ``<results root>/<experiment>`` (``experiment`` file-name safe), created when ``create``."""
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
    """Where a run ran (processor, torch threads, CPUs) and with what (Python, :data:`KEY_PACKAGES` versions)."""
    import platform
    import sys

    from rlvr_lib.lockfile import package_versions

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
        run_id: ``f"{name}-{config_hash}-s{seed}"``; also the file stem.
        config_hash: :func:`rlvr_lib.config.hash_jsonable` of ``config``.
        config_type: Class name of the config (``"dict"`` for a plain dict).
        status: ``"finished"`` (only finished runs are written).
        wall_time_s: Seconds in the run function, plus earlier processes' for a resumed run.
        history, final, extra: Per-step metrics, final evaluation, anything else.
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
        """Reads a record from a JSON file, checked by :func:`read_record` (raises :class:`RecordInvalid`)."""
        return cls.from_dict(read_record(path))

    def save(self, path: str | Path) -> Path:
        """Writes the record atomically to ``path``, with its :func:`record_checksum`, and returns it."""
        path = Path(path)
        write_json_atomic(path, _sealed(self.to_dict()))
        return path


# ------------------------------------------------------------ record trust
CHECKSUM_KEY = "checksum"
"""Key of a record's checksum on disk (not a :class:`RunRecord` field: ``from_dict`` drops it)."""

_NUMBER = (int, float)
_RECORD_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {
    # field: (allowed JSON types, required). Required are RunRecord's fields without a default: a record written
    # by `rlvr_lib.run.record_dict` (a run without the study) has no git_commit, yet the study reads it.
    "experiment": ((str,), True),
    "name": ((str,), True),
    "run_id": ((str,), True),
    "config": ((dict,), True),
    "config_hash": ((str,), True),
    "seed": ((int,), True),
    "config_type": ((str,), False),
    "status": ((str,), False),
    "version": ((str,), False),
    "git_commit": ((str, type(None)), False),
    "started": ((str,), False),
    "finished": ((str,), False),
    "wall_time_s": (_NUMBER, False),
    "history": ((list,), False),
    "final": ((dict,), False),
    "extra": ((dict,), False),
    CHECKSUM_KEY: ((str,), False),
}


class RecordInvalid(ValueError):
    """A run record that is not valid JSON, lacks a field, has a field of the wrong type, or fails its checksum."""


def record_checksum(data: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of a record's canonical JSON (sorted keys, no spaces), its ``checksum`` key left out.

    A record read back from its file hashes as it did when written: the file is strict JSON (:func:`jsonable`),
    whose floats, ints and strings come back equal.
    """
    body = {k: v for k, v in data.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sealed(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, CHECKSUM_KEY: record_checksum(data)}


def _type_names(types: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else "number" if t is float else t.__name__ for t in types
                       if not (t is int and float in types))


def check_record(data: Any) -> None:
    """Checks a run record as read from JSON; raises :class:`RecordInvalid` saying what is wrong.

    Checked: an object; :class:`RunRecord`'s fields without a default present; every field present of its JSON
    type (``seed`` an integer, not a bool; ``wall_time_s`` a number; ``git_commit`` a string or null; ``history`` a
    list of objects; ``config``, ``final`` and ``extra`` objects); ``config_hash`` the hash of ``config`` and
    ``run_id`` ``f"{name}-{config_hash}-s{seed}"``; and, when the record carries one, its ``checksum`` equal to
    :func:`record_checksum` of the rest. Keys it does not know are allowed (forward compatibility). A record without
    a checksum (the older records) passes on its fields alone.
    """
    if not isinstance(data, dict):
        raise RecordInvalid(f"expected a JSON object, got {type(data).__name__}")
    missing = [k for k, (_, required) in _RECORD_TYPES.items() if required and k not in data]
    if missing:
        raise RecordInvalid(f"missing required field(s) {missing}")
    for key, (types, _) in _RECORD_TYPES.items():
        if key not in data:
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, types):  # bool is an int to Python, not to the schema
            raise RecordInvalid(f"field {key!r} must be {_type_names(types)}, got {type(value).__name__} {value!r:.60}")
    for i, row in enumerate(data.get("history", [])):
        if not isinstance(row, dict):
            raise RecordInvalid(f"history[{i}] must be an object, got {type(row).__name__}")
    if hash_jsonable(data["config"]) != data["config_hash"]:
        raise RecordInvalid(f"config_hash {data['config_hash']!r} is not the hash of the record's config "
                            f"({hash_jsonable(data['config'])!r})")
    expected_id = f"{data['name']}-{data['config_hash']}-s{data['seed']}"
    if data["run_id"] != expected_id:
        raise RecordInvalid(f"run_id {data['run_id']!r} is not {expected_id!r} (name-config_hash-sseed)")
    if CHECKSUM_KEY in data and data[CHECKSUM_KEY] != (want := record_checksum(data)):
        raise RecordInvalid(f"checksum mismatch: the file says {data[CHECKSUM_KEY]!r}, its content hashes to "
                            f"{want!r} (edited after it was written)")


def read_record(path: str | Path) -> dict[str, Any]:
    """Reads a run record's JSON and :func:`check_record` s it.

    Raises:
        RecordInvalid: naming the file and what failed (unreadable, not JSON, a field, the checksum).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RecordInvalid(f"run record {path}: unreadable ({type(e).__name__}: {e})") from e
    try:
        check_record(data)
    except RecordInvalid as e:
        raise RecordInvalid(f"run record {path}: {e}") from None
    return data


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
    one_processor: bool = False,
) -> RunRecord:
    """Runs ``fn`` once per (experiment, name, config, seed) and caches the record.

    A finished record with the same config hash and seed is loaded without calling ``fn``; else ``fn()`` runs and
    its result is written atomically (nothing when it raises). Processes sharing a root compute each run once (an
    ``fcntl.flock`` on ``<root>/<experiment>/.<run_id>.lock``).

    Args:
        fn: Returns ``(history, final)`` or ``(history, final, extra)``; ``extra[RESUMED]`` =
            ``{"at_step": k, "earlier_s": t}`` adds ``t`` to ``wall_time_s``.
        force: Recompute and overwrite a finished record.
        extra: Extras stored with the record (merged under ``fn``'s).
        one_processor: Refuse (:func:`check_one_processor`) to mix processor models in the experiment.

    A record that fails :func:`read_record` (unreadable, a field missing or of the wrong type, a checksum mismatch)
    is recomputed with a warning naming the file and what failed; under ``RLVR_CACHE_ONLY=1`` it raises
    :class:`CacheMiss` with that reason. A lock a killed process held is released by the kernel with the process
    (flock), so the next call proceeds; the ``.lock`` file itself stays, empty and harmless.

    Returns:
        The stored (or loaded) :class:`RunRecord`, as read back from JSON.
    """
    _check_name("name", name)
    seed = check_int("seed", seed)
    cfg, cfg_type = _config_dict(config)
    chash = hash_jsonable(cfg)
    run_id = f"{name}-{chash}-s{seed}"
    path = run_dir(experiment, root) / f"{run_id}.json"

    failed: list[str] = []  # why the last look at the record found none to serve

    def cached() -> RunRecord | None:
        failed.clear()
        if not path.exists():
            return None
        try:
            rec = RunRecord.from_dict(read_record(path))
        except (RecordInvalid, TypeError) as e:  # unreadable, damaged or edited: recompute
            log.warning("ignoring untrusted run record (recomputing it): %s", e)
            failed.append(str(e))
            return None
        if rec.status == FINISHED and rec.config_hash == chash and rec.seed == seed:
            log.info("cache hit: %s", path)
            return rec
        log.info("stale run record %s (status/hash/seed differ): recomputing", path)
        failed.append(f"status {rec.status!r}, config_hash {rec.config_hash!r}, seed {rec.seed} (wanted "
                      f"{FINISHED!r}, {chash!r}, {seed})")
        return None

    if (planner := _PLANNER.get()) is not None:  # plan mode (rlvr_lib.study.plan): list the run, compute nothing
        return planner(experiment, name, config, seed, fn, run_id=run_id, config_dict=cfg, config_type=cfg_type,
                       config_hash=chash, cached=cached, force=force, root=root, extra=extra,
                       one_processor=one_processor)
    if not force and (rec := cached()) is not None:
        return rec
    if os.environ.get(CACHE_ONLY_ENV) == "1":
        why = ("would be recomputed (force=True)" if force else
               "is stale or unreadable" + (f" ({failed[0]})" if failed else "")) if path.exists() \
            else "does not exist"
        raise CacheMiss(f"{CACHE_ONLY_ENV}=1 and the run record {path} {why} (experiment {experiment!r}, run "
                        f"{name!r}, seed {seed}): unset {CACHE_ONLY_ENV} to compute it, or commit the record")
    with file_lock(path.with_name(f".{run_id}.lock")) as waited:
        if waited:
            log.info("waited for another process computing %s", run_id)
        if waited and not force and (rec := cached()) is not None:  # another process computed it meanwhile
            return rec
        if one_processor:
            check_one_processor(path.parent, cfg)
        return _compute_run(path, experiment, name, run_id, cfg, chash, cfg_type, seed, fn, extra)


class CacheMiss(RuntimeError):
    """A run :func:`cached_run` would have to compute while ``RLVR_CACHE_ONLY=1``."""


class PrerequisitesMissing(RuntimeError):
    """Runs a notebook reads from another notebook's cache are not all there yet (reported as *waiting*, not failed)."""


MIXED_PROCESSORS_ENV = "RLVR_ALLOW_MIXED_PROCESSORS"

RESUMED = "resumed"
"""Key of a run function's extras saying it resumed from a checkpoint (`cached_run`)."""


def check_one_processor(folder: Path, config: Mapping[str, Any]) -> None:
    """Refuses a run made on this processor model in ``folder`` when its records of the same policy and testbed were
    made on another model (``RLVR_ALLOW_MIXED_PROCESSORS=1`` allows it; cached records load anywhere).

    Raises:
        ValueError: naming the folder, its processor models and this one.
    """
    if os.environ.get(MIXED_PROCESSORS_ENV) == "1":
        return
    here, theirs = cpu_model(), Counter()
    same = {k: config.get(k) for k in ("policy_sha", "task_version")}
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if {k: data.get("config", {}).get(k) for k in same} == same:
            theirs[((data.get("extra") or {}).get("machine") or {}).get("cpu_model")] += 1
    others = {model: n for model, n in theirs.items() if model != here}
    if others:
        made = ", ".join(f"{n} on {model}" for model, n in sorted(others.items(), key=str))
        raise ValueError(
            f"{folder}: its runs of this policy and testbed were made on another processor model ({made}); this "
            f"machine is {here!r}. A table mixing models is not reproducible seed by seed: run it on that model, "
            f"move those records to results/archive/, or set {MIXED_PROCESSORS_ENV}=1 to mix (the report marks "
            "the table)")


def _compute_run(path, experiment, name, run_id, cfg, chash, cfg_type, seed, fn, extra) -> RunRecord:
    """Calls ``fn`` and writes its run record (the body of :func:`cached_run` on a cache miss)."""
    started, t0 = _now(), time.perf_counter()
    out = fn()
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise TypeError(f"fn must return (history, final) or (history, final, extra), got {type(out).__name__}")
    history, final = out[0], out[1]
    fn_extra = dict(out[2] or {}) if len(out) == 3 else {}
    if RESUMED in fn_extra and fn_extra[RESUMED] is None:  # not resumed: nothing to keep
        del fn_extra[RESUMED]
    earlier_s = fn_extra[RESUMED]["earlier_s"] if RESUMED in fn_extra else 0.0
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
        wall_time_s=time.perf_counter() - t0 + earlier_s,
        history=list(history),
        final=dict(final),
        extra={"machine": machine(), **dict(extra or {}), **fn_extra},
    )
    data = rec.to_dict()
    write_json_atomic(path, _sealed(data))
    return RunRecord.from_dict(data)


def measured_on(record: RunRecord) -> tuple:
    """The policy and testbed a run was measured on: ``(policy_sha, task_version)`` from its cache key."""
    return record.config.get("policy_sha"), record.config.get("task_version")


def current_testbed() -> tuple:
    """``(policy_sha, task_version)`` of the shipped policy and testbed, as `measured_on` reads a record's."""
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.tasks import task_version

    return policy_fingerprint(None), task_version("arith")


def named_policy_shas() -> dict[str, str]:
    """``{policy_sha: name}`` of this package's named policies that are built here (`rlvr_lib.policy.load.POLICY_NAMES`:
    the second model size), as `measured_on` reads a record's ``policy_sha``."""
    from rlvr_lib.policy.load import POLICY_NAMES, policy_fingerprint

    out = {}
    for name in POLICY_NAMES:
        try:
            out[policy_fingerprint(name)] = name
        except FileNotFoundError:  # not built in this checkout
            continue
    return out


def load_runs(experiment: str, root: str | Path | None = None, *, name: str | None = None,
              current: bool = False) -> list[RunRecord]:
    """Loads every run record of an experiment, sorted by (name, seed, run_id); non-records skipped, ``[]`` without a
    folder.

    ``name`` keeps one run name; ``current`` keeps runs measured on the shipped policy and testbed. A record (a
    JSON object with ``run_id``) whose fields fail :func:`check_record` raises :class:`RecordInvalid` naming the
    file: a table is never built from it. A checksum mismatch alone is logged as a warning naming the file (there is
    nothing to recompute here; committed records' edits are tracked by git) and the record is read as it is.
    """
    d = run_dir(experiment, root)
    if not d.is_dir():
        return []
    records = []
    for p in sorted(d.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except ValueError as e:
            raise RecordInvalid(f"run record {p}: unreadable ({type(e).__name__}: {e})") from e
        if not isinstance(data, dict) or "run_id" not in data:
            continue
        try:
            check_record({k: v for k, v in data.items() if k != CHECKSUM_KEY})
        except RecordInvalid as e:
            raise RecordInvalid(f"run record {p}: {e}") from None
        if CHECKSUM_KEY in data and data[CHECKSUM_KEY] != record_checksum(data):
            log.warning("run record %s: checksum mismatch (edited after it was written); read as it is", p)
        rec = RunRecord.from_dict(data)
        if name is None or rec.name == name:
            records.append(rec)
    if current:
        here = current_testbed()
        records = [r for r in records if measured_on(r) == here]
    return sorted(records, key=lambda r: (r.name, r.seed, r.run_id))


def one_run_per_seed(records: Sequence[RunRecord]) -> list[RunRecord]:
    """``records`` less the repeats of a run: of records with one name, seed and config but for their extra
    evaluations, the first is kept. A notebook that trains another notebook's arm again only to add an evaluation
    (notebook 03's POPE, notebook 02's run with NudgeRL's protocol) makes the same run twice, not another seed."""
    seen, kept = set(), []
    for r in records:
        key = (r.name, r.seed, json.dumps({k: v for k, v in r.config.items() if k != "extra_evals"}, sort_keys=True))
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept


def runs_frame(records: Sequence[RunRecord]):
    """A ``pandas.DataFrame``, one row per run: ``name``, ``seed``, ``config_hash``, ``run_id``, ``final`` metrics."""
    import pandas as pd

    rows = [
        {"name": r.name, "seed": r.seed, "config_hash": r.config_hash, "run_id": r.run_id, **r.final}
        for r in records
    ]
    return pd.DataFrame(rows)
