"""Run records summarised for tables and claims: what every notebook and the README compute.

A *run* is one method's records, one per seed (anything with ``.final`` / ``.history``; the base policy's are its
evaluations with different sampling seeds). Every number carries its interval method
(:data:`~rlvr_lib.study.stats.PASSK_INTERVAL`, :data:`~rlvr_lib.study.stats.SEED_INTERVAL`); ``passk_ci``,
``seed_ci``, ``RANGES`` and the interval names are re-exported from `rlvr_lib.study.stats`. mean@k, the metric
an evaluation protocol reads, is ``(1/P) sum_p (1/k) sum_j correct[p, j]`` (:func:`mean_at_k`).

Notes on each helper: docs/study/README.md ("Summaries of run records").
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from scipy.special import xlogy

from rlvr_lib.study.stats import (  # noqa: F401 - RANGES, SEED_INTERVAL: kept importable from here
                                  PASSK_INTERVAL,
                                  RANGES,
                                  SEED_INTERVAL,
                                  _evaluation,
                                  _records,
                                  eval_counts,
                                  passk_ci,
                                  rescued_lost_counts,
                                  seed_ci,
                                  seed_counts,
                                  )
from rlvr_lib.eval.policy_eval import STRATEGY_MEASURES, check_strategy_measure
from rlvr_lib.validation import check_int, invalid


def _scope(final: Mapping[str, Any], family: Optional[str]) -> Mapping[str, Any]:
    if family is None:
        return final["average"]
    if family not in final["families"]:
        raise invalid("family", family, f"a family of the evaluation, among {sorted(final['families'])}")
    return final["families"][family]


def seed_values(records: Sequence[Any], key: str, family: Optional[str] = None) -> list[float]:
    """``[record.final[scope][key] for each seed]``; scope is the in-distribution average or one family.

    Raises:
        ValueError: on no records, an unknown family, or a key the evaluation lacks.
    """
    out = []
    for i, r in enumerate(_records("records", records)):
        scope = _scope(_evaluation(f"records[{i}]", r), family)
        if key in STRATEGY_MEASURES:
            check_strategy_measure(scope, key, f"records[{i}]")  # refused on a task without strategy labels
        if key not in scope:
            raise invalid("key", key, f"a metric of the evaluation, among {sorted(scope)}")
        out.append(float(scope[key]))
    return out


def _logged(record: Any, key: str) -> list[float]:
    """A run's logged values of ``key`` in step order, skipping steps where it is ``None``/NaN."""
    return [h[key] for h in getattr(record, "history", []) if h.get(key) is not None and np.isfinite(h[key])]


def train_metric(records: Sequence[Any], key: str = "accuracy", last: int = 10) -> np.ndarray:
    """Per seed, the mean of the last ``last`` logged values of a training metric (unlogged steps skipped): ``(S,)``.

    Raises:
        ValueError: on no records, a bad ``last``, or a run with no logged value of ``key``.
    """
    last = check_int("last", last, 1)
    out = []
    for i, r in enumerate(_records("records", records)):
        values = _logged(r, key)
        if not values:
            raise invalid(f"records[{i}]", getattr(r, "run_id", i), f"a trained run that logged {key!r}")
        out.append(float(np.mean(values[-last:])))
    return np.asarray(out)


def train_change(records: Sequence[Any], key: str = "accuracy", window: int = 10) -> np.ndarray:
    """Per seed, mean of the last ``window`` logged values of a metric minus that of the first ``window``: ``(S,)``.

    Raises:
        ValueError: on no records, a bad ``window``, or fewer than ``2 * window`` logged values.
    """
    window = check_int("window", window, 1)
    out = []
    for i, r in enumerate(_records("records", records)):
        values = _logged(r, key)
        if len(values) < 2 * window:
            raise invalid(f"records[{i}]", getattr(r, "run_id", i),
                          f"a trained run with at least {2 * window} logged values of {key!r} (window={window})")
        out.append(float(np.mean(values[-window:]) - np.mean(values[:window])))
    return np.asarray(out)


def window_metrics(records: Sequence[Any], keys: Sequence[str], steps: range) -> np.ndarray:
    """``(S, K)``: per seed, the mean of each of ``keys`` over the logged steps whose ``"step"`` is in ``steps``.

    Raises:
        ValueError: on no records or keys, or a run with no logged value of a key in ``steps``.
    """
    if isinstance(keys, str) or not keys:
        raise invalid("keys", keys, "a non-empty sequence of metric names")
    out = []
    for i, r in enumerate(_records("records", records)):
        rows = [h for h in getattr(r, "history", []) if h.get("step") in steps]
        row = []
        for key in keys:
            values = _logged(SimpleNamespace(history=rows), key)
            if not values:
                raise invalid(f"records[{i}]", getattr(r, "run_id", i), f"a run that logged {key!r} at steps {steps}")
            row.append(float(np.mean(values)))
        out.append(row)
    return np.asarray(out)


def mean_pass_curve(records: Sequence[Any], family: Optional[str] = None) -> dict[str, float]:
    """``{k: mean over seeds of pass@k}`` (string keys, as stored)."""
    curves = [_scope(_evaluation(f"records[{i}]", r), family)["pass_at_k"]
              for i, r in enumerate(_records("records", records))]
    return {k: float(np.mean([c[k] for c in curves])) for k in curves[0]}


def per_problem_shares(evaluations: Sequence[Any], families: Sequence[str], strategy: str) -> np.ndarray:
    """``(S, P)`` matrix ``X[s, p] = n_{s,p}(strategy) / n_{s,p}`` from each evaluation's ``strategy_counts``.

    Raises:
        ValueError: on evaluations without ``strategy_counts``, an unknown strategy, or different problems.
    """
    rows, uids0 = [], None
    for i, ev in enumerate(_records("evaluations", evaluations)):
        final, row, uids = _evaluation(f"evaluations[{i}]", ev), [], []
        for f in families:
            fam = _scope(final, f)
            check_strategy_measure(fam, "strategy_counts", f"evaluations[{i}]['families'][{f!r}]")
            counts = fam.get("strategy_counts")
            if counts is None:
                raise invalid(f"evaluations[{i}]['families'][{f!r}]", sorted(fam),
                              "a family summary with 'strategy_counts' (re-run the evaluation with this version)")
            if strategy not in counts:
                raise invalid("strategy", strategy, f"one of {sorted(counts)}")
            total = np.sum([counts[s] for s in counts], axis=0)
            row.append(np.asarray(counts[strategy], dtype=float) / np.maximum(total, 1))
            uids += list(fam["uids"])
        if uids0 is None:
            uids0 = uids
        elif uids != uids0:
            raise invalid(f"evaluations[{i}]", "<evaluation>", "an evaluation on the same problems as evaluations[0]")
        rows.append(np.concatenate(row))
    return np.stack(rows)


def per_problem_strategy_entropy(evaluations: Sequence[Any], families: Sequence[str],
                                 strategies: Sequence[str]) -> np.ndarray:
    """``(S, P)`` per-problem strategy entropy (nats): ``H[s, p] = -sum_k q_k ln q_k``, ``q`` over named strategies."""
    shares = np.stack([per_problem_shares(evaluations, families, s) for s in strategies])  # (K, S, P)
    total = shares.sum(axis=0, keepdims=True)
    q = np.divide(shares, total, out=np.zeros_like(shares), where=total > 0)
    return -xlogy(q, q).sum(axis=0)  # xlogy(0, 0) = 0


def top_strategy(records: Sequence[Any], strategies: Sequence[str], family: Optional[str] = None) -> str:
    """The strategy with the largest seed-mean share (ties: first in ``strategies``)."""
    scopes = [_scope(_evaluation(f"records[{i}]", r), family) for i, r in enumerate(_records("records", records))]
    for i, scope in enumerate(scopes):
        check_strategy_measure(scope, "strategy_freq", f"records[{i}]")
    freqs = [scope["strategy_freq"] for scope in scopes]
    means = [np.mean([f[s] for f in freqs]) for s in strategies]
    return strategies[int(np.argmax(means))]


def summary_row(records: Sequence[Any], ks: Sequence[int], *, families: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """One table row: pass@k (seeds x problems) and per-seed metrics (seeds), each an interval dict.

    Returns:
        ``{"pass@k": ci, ..., "strategy entropy", "modes/problem", "malformed", "length",
        "train accuracy (last 10)"}``; the last only for trained runs, the strategy entropy only on a task with
        strategy labels (`rlvr_lib.eval.policy_eval.STRATEGY_MEASURES`).
    """
    records = _records("records", records)
    fams = list(families or _evaluation("records[0]", records[0])["average"]["families"])
    row = {f"pass@{k}": passk_ci(records, fams, k) for k in ks}
    labelled = "strategy_freq" in _evaluation("records[0]", records[0])["average"]  # else no strategy entropy
    for label, key in (("strategy entropy", "strategy_entropy"), ("modes/problem", "mean_modes"),
                       ("malformed", "malformed_rate"), ("length", "mean_length")):
        if key == "strategy_entropy" and not labelled:  # a task without strategy labels: the row has no such cell
            continue
        row[label] = seed_ci(seed_values(records, key), key)
    if all(getattr(r, "history", None) for r in records):
        row["train accuracy (last 10)"] = seed_ci(train_metric(records, "accuracy"), "accuracy")
    return row


def family_table(runs: Mapping[str, Sequence[Any]], families: Sequence[str], k: int = 1):
    """pass@k per family (columns) and run (rows): a ``pandas.DataFrame`` of seeds x problems interval dicts."""
    import pandas as pd

    table = pd.DataFrame({name: {f: passk_ci(recs, [f], k) for f in families} for name, recs in runs.items()}).T
    table.attrs["interval"] = PASSK_INTERVAL
    return table


def _with_yardsticks(runs: Mapping[str, Sequence[Any]], reference: Sequence[Any], null: Optional[Sequence[Any]],
                     pairs: Any) -> dict[str, dict]:
    """``pairs(run_seeds, reference_seeds)`` per run, plus the reference against itself and the sampling null."""
    rows = {name: pairs(_records(f"runs[{name!r}]", recs), reference) for name, recs in runs.items()}
    if len(reference) >= 2:
        rows["reference vs itself (other seed)"] = pairs(reference[1:], reference[:-1])
    if null is not None:
        null = _records("null", null)
        if len(null) < 2:
            raise invalid("null", f"<{len(null)} evaluation>", "two or more evaluations of one policy (sampling seeds)")
        rows["sampling null"] = pairs(null[1:2], null[:1])
    return rows


def rescued_lost(runs: Mapping[str, Sequence[Any]], reference: Sequence[Any], families: Sequence[str], *,
                 null: Optional[Sequence[Any]] = None):
    """Problems rescued and lost against a reference run, seed ``i`` against seed ``i``, with two yardsticks.

    Counts (:func:`~rlvr_lib.study.stats.rescued_lost_counts`) averaged over ``min(S_run, S_ref)`` pairs; yardstick
    rows: the reference against itself (seed ``i`` vs ``i + 1``) and the ``"sampling null"`` of ``null``.

    Returns:
        ``pandas.DataFrame`` by run: ``pairs``, ``solved_ref``, ``solved``, ``rescued``, ``lost``, ``net``.
    """
    import pandas as pd

    reference = _records("reference", reference)

    def pairs(a: Sequence[Any], b: Sequence[Any]) -> dict[str, float]:
        out = []
        for x, y in zip(a, b):
            (c, u), (d, v) = eval_counts(y, families), eval_counts(x, families)
            out.append(rescued_lost_counts(c, d, uids_before=u, uids_after=v))
        keys = ("solved_before", "solved_after", "rescued", "lost", "net")
        return {"pairs": len(out), **{k: float(np.mean([o[k] for o in out])) for k in keys}}

    rows = _with_yardsticks(runs, reference, null, pairs)
    table = pd.DataFrame(rows).T.rename(columns={"solved_before": "solved_ref", "solved_after": "solved"})
    table["pairs"] = table["pairs"].astype(int)
    return table


def case_study(reference: Sequence[Any], run: Sequence[Any], family: str) -> dict[str, Any]:
    """The problem of ``family`` maximising ``mean_s c_run[s, p] - mean_s c_ref[s, p]`` (NudgeRL Fig 4; ties: problem
    order).

    Returns:
        ``{"uid", "gap", "samples", "reference": side, "run": side}``, a side
        ``{"correct": [per seed], "strategy_counts": {strategy: mean}}``.

    Raises:
        ValueError: on runs without per-problem counts, on different problems, or an unknown family.
    """
    sides = {}
    for label, records in (("reference", reference), ("run", run)):
        records = _records(label, records)
        counts, uids = zip(*(eval_counts(r, [family]) for r in records))
        if any(u != uids[0] for u in uids):
            raise invalid(label, "<records>", "evaluations of one run on the same problems")
        finals = [_scope(_evaluation(f"{label}[{i}]", r), family) for i, r in enumerate(records)]
        strategy_counts = {s: np.mean([f["strategy_counts"][s] for f in finals], axis=0)
                           for s in finals[0].get("strategy_counts", {})}
        sides[label] = (np.stack(counts), list(uids[0]), strategy_counts, finals[0]["pass_at_k"])
    (c_ref, u_ref, s_ref, curve), (c_run, u_run, s_run, _) = sides["reference"], sides["run"]
    if u_ref != u_run:
        raise invalid("run", "<records>", "evaluations on the same problems as the reference's")
    gap = c_run.mean(0) - c_ref.mean(0)
    p = int(np.argmax(gap))  # first maximum: the family's problem order breaks ties
    side = lambda c, s: {"correct": c[:, p].astype(int).tolist(),  # noqa: E731
                         "strategy_counts": {k: float(v[p]) for k, v in s.items()}}
    return {"uid": u_ref[p], "gap": float(gap[p]), "samples": int(max(int(k) for k in curve)),
            "reference": side(c_ref, s_ref), "run": side(c_run, s_run)}


def per_problem_modes(evaluations: Sequence[Any], families: Sequence[str]) -> np.ndarray:
    """``(S, P)`` matrix of reasoning modes per clustered problem, from each family's ``diversity["counts"]``.

    Raises:
        ValueError: on evaluations whose clustered problem counts differ.
    """
    rows = []
    for i, ev in enumerate(_records("evaluations", evaluations)):
        final = _evaluation(f"evaluations[{i}]", ev)
        rows.append(np.concatenate([np.asarray(_scope(final, f)["diversity"]["counts"], dtype=float)
                                    for f in families]))
    if len({len(r) for r in rows}) > 1:
        raise invalid("evaluations", f"<clustered problems {[len(r) for r in rows]}>",
                      "evaluations that clustered the same number of problems per family")
    return np.stack(rows)


def train_decline(records: Sequence[Any], key: str = "accuracy", window: int = 10) -> np.ndarray:
    """Per seed, how far a training curve falls from its peak: ``max_w m_w - m_last`` (NudgeRL Fig 3): ``(S,)``.

    ``m_w``: mean of ``key`` over window ``w`` of ``window`` steps (a last partial window merged into the one before).

    Raises:
        ValueError: on no records, a bad ``window``, or fewer than two windows of logged ``key``.
    """
    check_int("window", window, 1)
    out = []
    for r in _records("records", records):
        values = [h.get(key) for h in (r.history or [])]
        values = np.array([np.nan if v is None else float(v) for v in values])
        n = len(values) // window
        if n < 2:
            raise invalid("records", f"<run of {len(values)} steps>",
                          f"trained runs with at least {2 * window} logged steps (window={window})")
        means = [np.nanmean(values[i * window:(i + 1) * window if i < n - 1 else None]) for i in range(n)]
        out.append(float(np.nanmax(means) - means[-1]))
    return np.asarray(out)


@dataclass(frozen=True)
class ExtraEvaluation:
    """A record's extra evaluation shaped as a record (``run_id`` + ``:<label>``, ``config = {"eval": spec}``)."""

    name: str
    run_id: str
    seed: int
    config: dict
    history: list
    final: dict


def extra_evaluation(records: Sequence[Any], label: str) -> list[ExtraEvaluation]:
    """Each record's extra evaluation ``label`` as an :class:`ExtraEvaluation`, which every helper here takes.

    Raises:
        ValueError: on no records, or a record without an extra evaluation ``label``.
    """
    out = []
    for i, r in enumerate(_records("records", records)):
        evals = (getattr(r, "extra", None) or {}).get("evals", {})
        specs = (getattr(r, "config", None) or {}).get("extra_evals", {})
        if label not in evals or label not in specs:
            raise invalid("label", label, f"an extra evaluation of records[{i}] ({getattr(r, 'run_id', i)}), "
                                          f"among {sorted(evals)} (train_and_evaluate's extra_specs)")
        out.append(ExtraEvaluation(name=r.name, run_id=f"{r.run_id}:{label}", seed=r.seed,
                                   config={"eval": specs[label]}, history=list(r.history or []),
                                   final=evals[label]))
    return out


def mean_at_k(correct: Any) -> float:
    """mean@k of a ``(P, k)`` 0/1 correctness matrix: ``(1/P) sum_p (1/k) sum_j correct[p, j]``.

    3PO's mean@8 (arXiv 2608.09805), NudgeRL's pass@1 (arXiv 2605.15726), VIGOR's greedy pass@1 at ``k = 1``
    (arXiv 2605.09920); equal to the unbiased pass@1 ``c / n``.

    Raises:
        ValueError: on an array that is not 2-D and non-empty, or a value other than 0/1.
    """
    x = np.asarray(correct)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise invalid("correct", f"an array of shape {x.shape}", "a (problems, k) 0/1 matrix with P, k >= 1")
    values = x.astype(float)
    if not np.isin(values, (0.0, 1.0)).all():
        raise invalid("correct", sorted(set(np.unique(values).tolist()) - {0.0, 1.0})[:5],
                      "0/1 (or bool) entries only: one verdict per sample")
    return float(values.mean(axis=1).mean())


def per_problem_mean_at_k(records: Sequence[Any], families: Sequence[str]) -> np.ndarray:
    """``(S, P)`` per-seed, per-problem mean@k: ``correct_counts / k``, ``k = config["eval"]["samples"]``.

    Raises:
        ValueError: on no records, records with different sample counts, or a missing family.
    """
    records = _records("records", records)
    ks = sorted({int(r.config["eval"]["samples"]) for r in records})
    if len(ks) != 1:
        raise invalid("records", f"sample counts {ks}", "records of one evaluation spec (one sample count k)")
    counts, _ = seed_counts(records, families)
    return np.stack([np.asarray(c, dtype=float) / ks[0] for c in counts])


def per_problem_alive(evaluations: Sequence[Any], families: Sequence[str]) -> np.ndarray:
    """``(S, P)`` 0/1 matrix ``X[s, p] = 1[0 < c_{s,p} < n]``: a non-zero GRPO advantage in the group (3PO Fig 3).

    Raises:
        ValueError: on no records, a missing family, or evaluations on different problems.
    """
    records = _records("evaluations", evaluations)
    n = int(records[0].config["eval"]["samples"])
    counts, _ = seed_counts(records, families)
    return np.stack([((c > 0) & (c < n)).astype(float) for c in counts])


def zero_advantage_rescued_lost(runs: Mapping[str, Sequence[Any]], reference: Sequence[Any],
                                families: Sequence[str], *, null: Optional[Sequence[Any]] = None):
    """Zero-advantage groups rescued and lost against a reference run, seed by seed (3PO Fig 3), as
    :func:`rescued_lost`.

    Returns:
        ``pandas.DataFrame`` by run: ``pairs``, ``dead_ref``, ``dead``, ``rescued``, ``lost``, ``net``.

    Raises:
        ValueError: on no records, a missing family, different problems, or a ``null`` with < 2 evaluations.
    """
    import pandas as pd

    from rlvr_lib.eval.diagnostics import rescued_lost_groups

    reference = _records("reference", reference)

    def groups(record: Any) -> tuple[list[np.ndarray], list[str]]:
        n = int(record.config["eval"]["samples"])
        counts, uids = eval_counts(record, families)
        return [np.r_[np.ones(c), np.zeros(n - c)] for c in counts], uids

    def pairs(a: Sequence[Any], b: Sequence[Any]) -> dict[str, float]:
        out = []
        for x, y in zip(a, b):
            (gx, ux), (gy, uy) = groups(x), groups(y)
            if ux != uy:
                raise invalid("runs", "<evaluation>", "evaluations on the same problems as the reference's")
            out.append(rescued_lost_groups(gy, gx, criterion="zero_advantage").to_dict())
        keys = ("dead_base", "dead_other", "rescued", "lost", "net")
        return {"pairs": len(out), **{k: float(np.mean([o[k] for o in out])) for k in keys}}

    rows = _with_yardsticks(runs, reference, null, pairs)
    table = pd.DataFrame(rows).T.rename(columns={"dead_base": "dead_ref", "dead_other": "dead"})
    table["pairs"] = table["pairs"].astype(int)
    return table


def train_outcome_rates(records: Sequence[Any], last: Optional[int] = None) -> dict[str, np.ndarray]:
    """Per seed, the training rollouts' outcome rates (3PO Fig 3), over the last ``last`` steps logging both::

        correct = mean_t a_t,  malformed = mean_t m_t,  incorrect = mean_t (1 - a_t - m_t)

    Returns:
        ``{"correct": (S,), "malformed": (S,), "incorrect": (S,)}``.

    Raises:
        ValueError: on no records, a bad ``last``, or a run with no step logging both rates.
    """
    if last is not None:
        last = check_int("last", last, 1)
    out: dict[str, list[float]] = {"correct": [], "malformed": [], "incorrect": []}
    for i, r in enumerate(_records("records", records)):
        steps = [(h["accuracy"], h["malformed_rate"]) for h in (getattr(r, "history", None) or [])
                 if h.get("accuracy") is not None and h.get("malformed_rate") is not None
                 and np.isfinite(h["accuracy"]) and np.isfinite(h["malformed_rate"])]
        if not steps:
            raise invalid(f"records[{i}]", getattr(r, "run_id", i), "a trained run that logged 'accuracy' and "
                                                                    "'malformed_rate'")
        a, m = np.asarray(steps[-last:] if last else steps, dtype=float).T
        out["correct"].append(float(a.mean()))
        out["malformed"].append(float(m.mean()))
        out["incorrect"].append(float(np.clip(1.0 - a - m, 0.0, 1.0).mean()))
    return {k: np.asarray(v) for k, v in out.items()}
