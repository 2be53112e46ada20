"""Check committed numbers: recompute a seeded sample of committed runs at HEAD and compare.

`verify` draws a few committed full-profile runs per notebook (a seeded, printed draw), retrains and
re-evaluates each from its stored config at HEAD into a scratch folder (never ``results/``), and compares:

* **same processor model**: bit for bit -- history (timings left out), final and extra evaluations equal;
* **another processor model**: each metric ``m`` of the evaluations' average within ``1.96 * sqrt(2) * sd_m``
  of the record's, ``sd_m`` the seed-to-seed standard deviation over the arm's committed seeds (unverifiable
  with one seed).

Only trained runs (config with ``"train"``) and base-policy evaluations (``"policy"``) are drawn. The summary is
written to ``results/verification.json``, rendered under README's results. Why: docs/study/reproduce.md
("Verifying committed numbers").

`compare_roots` (``python -m rlvr_lib.study compare-roots A B``) compares two whole results roots record by record,
bit for bit except when and how long each run took: e.g. a study computed on a Ray cluster against the same study
computed by local processes (docs/scaling-out.md).
"""

from __future__ import annotations

import datetime as _dt
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_lib.files import write_json_atomic
from rlvr_lib.study.report import SECTIONS, VERIFICATION_FILE
from rlvr_lib.study.runs import (RunRecord, cpu_model, current_testbed, git_commit, load_runs, measured_on,
                                 named_policy_shas, results_root)
from rlvr_lib.validation import invalid

__all__ = ["VERIFICATION_FILE", "WHEN_FIELDS", "comparable", "compare_records", "compare_roots", "draw_sample",
           "recompute", "seed_tolerances", "verify"]

WHEN_FIELDS = ("started", "finished", "wall_time_s", "git_commit", "checksum")
"""Record fields that differ between two computations of one run: when it started and finished, its seconds, the
checkout's HEAD when it ran, and the checksum over them. Besides these only each history step's seconds per phase
(``time_*``, `rlvr_lib.trainer.untimed`) differ: config, key, seed, every metric and the extras, including
``extra.machine`` (processor, torch threads, package versions), are equal bit for bit on one machine."""

TOLERANCE_Z = 1.96 * math.sqrt(2.0)
"""Tolerance per seed-to-seed sd: the 95% range of the difference of two independent seeds."""


def _kind(record: RunRecord) -> str | None:
    """``"train"`` (`train_and_evaluate`), ``"base"`` (`evaluate_base`) or ``None`` (not verifiable here)."""
    if "train" in record.config and "eval" in record.config:
        return "train"
    if "policy" in record.config and "eval" in record.config:
        return "base"
    return None


def verifiable_records(root: str | Path | None = None) -> dict[str, list[RunRecord]]:
    """The records `verify` can recompute, by notebook: its own trained runs and base evaluations on the shipped
    testbed (shipped or named policy), not rows shared from another notebook.
    """
    shipped, version = current_testbed()
    policies = {shipped, *named_policy_shas()}  # the second model size's runs too, where it is built
    return {notebook: [r for r in load_runs(experiment, root) if _kind(r) and measured_on(r)[1] == version
                       and measured_on(r)[0] in policies]
            for experiment, _, notebook, _ in SECTIONS}


def draw_sample(by_notebook: Mapping[str, Sequence[RunRecord]], per_notebook: int, seed: int) -> list[RunRecord]:
    """``per_notebook`` records of each notebook (all when fewer), drawn with ``seed`` from the sorted run ids."""
    if per_notebook < 1:
        raise invalid("sample", per_notebook, "a count >= 1 of runs per notebook")
    rng = random.Random(seed)
    sample = []
    for notebook in sorted(by_notebook):
        records = sorted(by_notebook[notebook], key=lambda r: (r.experiment, r.run_id))
        sample += rng.sample(records, min(per_notebook, len(records)))
    return sample


def recompute(record: RunRecord, scratch: str | Path) -> RunRecord:
    """Retrain and re-evaluate ``record`` from its stored config at HEAD into ``scratch`` (resumable there).

    Raises:
        ValueError: when the record is of a kind `verify` does not recompute, or when its config no longer
            maps to the same cache key (the stored config does not round-trip through today's configs).
    """
    import torch

    from rlvr_lib.eval.policy_eval import EvalSpec
    from rlvr_lib.study.pipeline import evaluate_base, train_and_evaluate
    from rlvr_lib.study.testbed import config_from_key

    threads = (record.extra or {}).get("machine", {}).get("torch_threads")
    if threads:
        torch.set_num_threads(int(threads))  # the record's, so the same processor sums in the same order
    cfg = record.config
    kind = _kind(record)
    if kind == "train":
        extra = {label: EvalSpec.from_dict(s) for label, s in (cfg.get("extra_evals") or {}).items()}
        fresh = train_and_evaluate(record.experiment, record.name, config_from_key(cfg["train"]),
                                   EvalSpec.from_dict(cfg["eval"]), root=scratch, extra_specs=extra or None)
    elif kind == "base":
        fresh = evaluate_base(record.experiment, EvalSpec.from_dict(cfg["eval"]), cfg["policy"], root=scratch,
                              name=record.name)
    else:
        raise invalid("record", f"{record.experiment}/{record.run_id}",
                      "a trained run (config with 'train') or a base evaluation (config with 'policy')")
    if fresh.run_id != record.run_id:
        raise invalid(f"recomputed run id of {record.experiment}/{record.run_id}", fresh.run_id,
                      f"{record.run_id}: the stored config no longer maps to the same cache key at HEAD")
    return fresh


def _evaluations(record: RunRecord) -> dict[str, Any]:
    return {"final": record.final, **{f"evals.{k}": v for k, v in ((record.extra or {}).get("evals") or {}).items()}}


def _average_metrics(evaluation: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics of an evaluation's average: ``pass@k`` for every k and the other numbers."""
    avg = evaluation["average"]
    out = {f"pass@{k}": float(v) for k, v in avg["pass_at_k"].items()}
    out.update({k: float(v) for k, v in avg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return out


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The path of the first value that differs between two JSON trees, or ``None`` when they are equal."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}.{key}"
            found = _first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} != {len(b)})"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _first_difference(x, y, f"{path}[{i}]"))), None)
    return None if a == b else f"{path} ({a!r} != {b!r})"


def seed_tolerances(record: RunRecord, root: str | Path | None = None) -> dict[str, dict[str, float]] | None:
    """Per evaluation and metric, ``TOLERANCE_Z x`` the sd over ``record``'s arm's committed seeds (None below 2)."""
    def same_arm(r: RunRecord) -> bool:
        strip = lambda c: {k: ({kk: vv for kk, vv in v.items() if kk != "seed"} if isinstance(v, dict) else v)  # noqa: E731
                           for k, v in c.items()}
        return strip(r.config) == strip(record.config)

    arm = [r for r in load_runs(record.experiment, root, name=record.name) if same_arm(r)]
    if len({r.seed for r in arm}) < 2:
        return None
    tolerances = {}
    for label in _evaluations(record):
        per_seed = [_average_metrics(_evaluations(r)[label]) for r in arm]
        tolerances[label] = {m: TOLERANCE_Z * float(np.std([p[m] for p in per_seed], ddof=1))
                             for m in per_seed[0] if all(m in p for p in per_seed)}
    return tolerances


def compare_records(committed: RunRecord, fresh: RunRecord, *, same_processor: bool,
                    tolerances: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Compare a recomputed record with the committed one by the module's rules.

    Returns:
        ``{"mode": "exact" | "tolerance", "match": bool | None, "detail": str, "metrics": [...]}``; in
        tolerance mode ``metrics`` lists ``{evaluation, metric, committed, recomputed, difference, tolerance,
        within}`` and ``match`` is ``None`` when no tolerance exists (one committed seed).
    """
    if same_processor:
        from rlvr_lib.trainer import untimed

        diff = (_first_difference(untimed(committed.history), untimed(fresh.history), "history")
                or _first_difference(_evaluations(committed), _evaluations(fresh)))
        return {"mode": "exact", "match": diff is None, "detail": "bit-identical" if diff is None
                else f"first difference at {diff}", "metrics": []}
    if tolerances is None:
        return {"mode": "tolerance", "match": None, "metrics": [],
                "detail": "unverifiable on another processor: the arm has one committed seed, so no seed spread"}
    metrics = []
    for label, evaluation in _evaluations(committed).items():
        ours = _average_metrics(_evaluations(fresh)[label])
        for metric, value in _average_metrics(evaluation).items():
            if metric not in tolerances.get(label, {}):
                continue
            difference, tol = ours[metric] - value, tolerances[label][metric]
            metrics.append({"evaluation": label, "metric": metric, "committed": value, "recomputed": ours[metric],
                            "difference": difference, "tolerance": tol, "within": abs(difference) <= tol + 1e-12})
    outside = [f"{m['evaluation']} {m['metric']} {m['difference']:+.4f} (tolerance {m['tolerance']:.4f})"
               for m in metrics if not m["within"]]
    return {"mode": "tolerance", "match": not outside, "metrics": metrics,
            "detail": f"{len(metrics)} metrics within the seed spread" if not outside
            else "outside the seed spread: " + "; ".join(outside)}


def verify(per_notebook: int = 1, seed: int = 0, *, root: str | Path | None = None,
           scratch: str | Path | None = None, write: bool = True) -> dict[str, Any]:
    """Recompute `draw_sample`'s runs at HEAD into ``scratch`` and compare each with its record.

    Args:
        scratch: Where the recomputed runs go (default ``<repo>/.verify/``, resumable); never the results root.
        write: Store the summary as ``<root>/verification.json``.

    Returns:
        ``date``, ``commit``, ``processor``, ``seed``, ``per_notebook``, ``runs`` (one dict per drawn run) and
        ``matches`` / ``mismatches`` / ``unverifiable`` counts.
    """
    root = results_root(root)
    scratch = Path(scratch) if scratch is not None else root.parent / ".verify"
    if scratch.resolve() == root.resolve() or root.resolve() in scratch.resolve().parents:
        raise invalid("scratch", str(scratch), f"a folder outside the results root {root} (recomputed runs never go there)")
    by_notebook = verifiable_records(root)
    notebook_of = {(r.experiment, r.run_id): nb for nb, records in by_notebook.items() for r in records}
    sample = draw_sample(by_notebook, per_notebook, seed)
    here = cpu_model()
    runs = []
    for i, record in enumerate(sample, 1):
        theirs = (record.extra or {}).get("machine", {}).get("cpu_model")
        print(f"[{i}/{len(sample)}] {record.experiment}/{record.run_id} (made on {theirs})", flush=True)
        fresh = recompute(record, scratch)
        same = theirs == here
        result = compare_records(record, fresh, same_processor=same,
                                 tolerances=None if same else seed_tolerances(record, root))
        print(f"    {result['mode']}: {'match' if result['match'] else 'MISMATCH' if result['match'] is False else 'unverifiable'}"
              f" -- {result['detail']}", flush=True)
        runs.append({"notebook": notebook_of[(record.experiment, record.run_id)], "experiment": record.experiment,
                     "run_id": record.run_id, "record_processor": theirs, "record_commit": record.git_commit,
                     **result})
    summary = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
        "processor": here, "seed": seed, "per_notebook": per_notebook, "runs": runs,
        "matches": sum(r["match"] is True for r in runs), "mismatches": sum(r["match"] is False for r in runs),
        "unverifiable": sum(r["match"] is None for r in runs),
    }
    if write:
        write_json_atomic(root / VERIFICATION_FILE, summary)
    return summary


def comparable(record: Mapping[str, Any] | RunRecord) -> dict[str, Any]:
    """A record's JSON without `WHEN_FIELDS` and without its history's seconds: what two computations of one run on
    one machine agree on bit for bit."""
    from rlvr_lib.trainer import untimed

    data = dict(record.to_dict() if isinstance(record, RunRecord) else record)
    for field in WHEN_FIELDS:
        data.pop(field, None)
    data["history"] = untimed(data.get("history") or [])
    return data


def _records_by_key(root: Path) -> dict[str, RunRecord]:
    """``{"experiment/run_id": record}`` of every run record under ``root`` (one folder per experiment; hidden
    folders, a run's checkpoints and locks, skipped)."""
    if not root.is_dir():
        raise invalid("results root", str(root), "an existing folder of experiment folders")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {f"{r.experiment}/{r.run_id}": r for folder in folders for r in load_runs(folder.name, root)}


def compare_roots(a: str | Path, b: str | Path) -> dict[str, Any]:
    """Every run record under results root ``a`` against the one with its key under ``b``, by `comparable`.

    Returns:
        ``{"equal": [keys], "different": {key: first differing path}, "only_a": [keys], "only_b": [keys]}``, keys
        ``"experiment/run_id"``, sorted; the roots match when only ``equal`` is non-empty.
    """
    ours, theirs = _records_by_key(Path(a)), _records_by_key(Path(b))
    common = sorted(set(ours) & set(theirs))
    different = {k: d for k in common if (d := _first_difference(comparable(ours[k]), comparable(theirs[k])))}
    return {"equal": [k for k in common if k not in different], "different": different,
            "only_a": sorted(set(ours) - set(theirs)), "only_b": sorted(set(theirs) - set(ours))}


def compare_main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlvr_lib.study compare-roots A B``: prints `compare_roots`' verdict; exit status 0 when every
    record of each root is in the other and equal, 1 otherwise."""
    from rlvr_lib.cli_checks import OneLineParser, existing_folder

    parser = OneLineParser(prog="python -m rlvr_lib.study compare-roots",
                           description="Compare two results roots run record by run record, bit for bit except "
                                       "their times (rlvr_lib.study.verify.compare_roots).")
    parser.add_argument("a", type=existing_folder, help="a results root (one folder per experiment)")
    parser.add_argument("b", type=existing_folder, help="the other results root")
    args = parser.parse_args(argv)
    result = compare_roots(args.a, args.b)
    for key, where in result["different"].items():
        print(f"DIFFERENT {key}: first difference at {where}")
    for side in ("a", "b"):
        for key in result[f"only_{side}"]:
            print(f"ONLY IN {getattr(args, side)}: {key}")
    same = not (result["different"] or result["only_a"] or result["only_b"])
    print(f"{len(result['equal'])} records equal bit for bit (times left out), {len(result['different'])} "
          f"different, {len(result['only_a'])} only in {args.a}, {len(result['only_b'])} only in {args.b}"
          + ("" if same else " -- the roots differ"))
    return 0 if same else 1
