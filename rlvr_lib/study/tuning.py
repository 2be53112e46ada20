"""An equal learning-rate tuning budget for every method.

A negative result against GRPO means something only if no method got a
tuning choice the others did not. Every method gets the same budget, by one
rule:

* the grid: its default learning rate times :data:`LR_FACTORS` (x1/3, x1, x3).
  The learning rate is the one the method's optimizer steps with,
  ``Method.tuning_lr``: ``config.lr`` (AdamW) for the GRPO family, NudgeRL,
  SAGE, VIGOR and INTUITOR; IVON's lr for 3PO (around the value its preset's
  rule gives; the rule stays the stated default and the pick is reported beside it);
* the seeds: :data:`TUNING_SEEDS`, never used for evaluation (the notebooks
  train and evaluate on seeds 0-4);
* the score: the final training accuracy, the mean verifier ``accuracy`` of
  the last ``tail`` logged steps, averaged over the tuning seeds. VIGOR and
  INTUITOR log the same verifier accuracy (their reward never reads it, and it
  only selects their lr here);
* the pick: the grid value with the highest score; a tie goes to the default
  (x1), then to the smaller lr.

Every tuning run is cached as a run record under ``<results>/lr_tuning/``
(`rlvr_lib.study.runs.cached_run`, keyed by the training config, the policy
hash and the testbed version), so an interrupted sweep resumes where it
stopped, and several processes can share one sweep.

:func:`tune_lr` runs one method's grid; ``python -m rlvr_lib.study tune-lr`` runs
several and writes ``results/testbed/lr_tuning.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlvr_lib.validation import check, check_int

__all__ = ["LR_FACTORS", "TUNING_SEEDS", "methods_to_tune", "pick_lr", "record_tuning", "tune_lr"]

LR_FACTORS = (1 / 3, 1.0, 3.0)
"""The grid around each method's default learning rate."""
TUNING_SEEDS = (1000, 1001)
"""Seeds of the tuning runs: disjoint from every evaluation seed (0-4)."""


def methods_to_tune() -> tuple[str, ...]:
    """The methods the sweep must cover: every method the study's notebooks run (`rlvr_lib.study.papers`), each
    one the library ships (`rlvr_lib.methods.registry.shipped_methods`), but those that take another method's pick
    (`rlvr_lib.study.testbed.LR_SHARED`; composites take their components'). A method a user registers is never one
    of them, nor a library method no notebook runs.

    Raises:
        ValueError: a notebook of the manifest names a method the library does not ship.
    """
    from rlvr_lib.methods.registry import shipped_methods
    from rlvr_lib.study import papers
    from rlvr_lib.study.testbed import LR_SHARED

    shipped = shipped_methods()
    wanted = papers.study_methods()
    unknown = [name for name in wanted if name not in shipped]
    check(not unknown, "papers.NOTEBOOKS methods", unknown, f"methods the library ships: {list(shipped)}")
    return tuple(name for name in wanted if name not in LR_SHARED)


def pick_lr(scores: dict[float, float], default: float) -> float:
    """The lr with the highest score; ties go to ``default``, then to the smaller lr.

    Raises:
        ValueError: on an empty ``scores`` or a NaN score.
    """
    check(len(scores) > 0, "scores", scores, "a non-empty {lr: score} mapping")
    check(all(s == s for s in scores.values()), "scores", scores, "free of NaN")
    best = max(scores.values())
    tied = [lr for lr, s in scores.items() if s == best]
    return default if default in tied else min(tied)


def tune_lr(name: str, *, factors=LR_FACTORS, seeds=TUNING_SEEDS, tail: int = 5, policy: str | None = None,
            progress: bool = False, root=None, **config_fields) -> dict:
    """Train ``name`` at every lr of the grid on every tuning seed; score and pick (rules in the module docstring).

    Each run is ``calibrated_config(name, **config_fields, seed=s)`` with its
    ``Method.tuning_lr`` replaced by ``default x factor`` (``with_tuning_lr``),
    trained from scratch, its history cached as ``<root>/lr_tuning/<name>-lr<lr>-...``
    (``root``: default `rlvr_lib.study.runs.results_root`). Returns a
    JSON-ready dict: the default lr, the grid, per lr and seed the final
    accuracy, per lr the mean, the pick, the run ids and the processor models they ran on.

    Raises:
        ValueError: on an unknown method, an empty grid or seed list, ``tail < 1``, a seed in 0-4
            (evaluation seeds), or a run with fewer than ``tail`` steps.
    """
    from rlvr_lib.study.runs import cached_run
    from rlvr_lib.study.testbed import key_train, calibrated_config
    from rlvr_lib.trainer_config import TrainerConfig
    from rlvr_lib.methods.registry import METHODS
    from rlvr_lib.study.pipeline import versioned_key
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.trainer import Trainer, nan_to_none

    check(len(factors) > 0 and all(f > 0 for f in factors), "factors", factors, "a non-empty list of numbers > 0")
    check(len(seeds) > 0 and not set(seeds) & set(range(5)), "seeds", seeds,
          "a non-empty list of seeds outside the evaluation seeds 0-4")
    check_int("tail", tail, 1)
    base = calibrated_config(name, tuned_lr=False, **config_fields, policy=policy)
    check(base.steps >= tail, "tail", tail, f"at most the runs' steps ({base.steps})")
    cls = METHODS[name].cls
    default = cls.tuning_lr(base)
    grid = [float(f"{default * f:.6g}") for f in factors]
    sha = policy_fingerprint(policy)
    finals: dict[str, dict[str, float]] = {}
    run_ids: dict[str, dict[str, str]] = {}
    cpu_models: set[str] = set()
    for lr in grid:
        finals[repr(lr)], run_ids[repr(lr)] = {}, {}
        for seed in seeds:
            config = cls.with_tuning_lr(base.replace(seed=seed), lr)
            # The key holds the options as the sweep writes them over the papers' defaults (`key_train`).
            written = cls.with_tuning_lr(TrainerConfig.from_dict(key_train(base.replace(seed=seed))), lr)
            key = versioned_key({"train": written.to_dict(), "policy_sha": sha}, config.task)
            record = cached_run("lr_tuning", f"{name}-lr{lr:g}", key, seed,
                                lambda c=config: (nan_to_none(Trainer(c).train(progress=progress)), {}), root=root)
            last = [row["accuracy"] for row in record.history[-tail:]]
            finals[repr(lr)][str(seed)] = sum(last) / len(last)
            run_ids[repr(lr)][str(seed)] = record.run_id
            cpu_models.add(record.extra.get("machine", {}).get("cpu_model", "unknown"))
    means = {lr: sum(finals[repr(lr)].values()) / len(seeds) for lr in grid}
    default_in_grid = float(f"{default:.6g}")
    return {"method": name, "default_lr": default, "grid": grid, "factors": list(factors), "seeds": list(seeds),
            "tail": tail, "config_fields": config_fields, "final_accuracy": finals,
            "mean_final_accuracy": {repr(lr): m for lr, m in means.items()},
            "pick": pick_lr(means, default_in_grid), "run_ids": run_ids,
            "cpu_models": sorted(cpu_models)}  # a sweep that spans sessions may span processor models


def record_tuning(path: str | Path, header: dict, name: str, result: dict) -> dict:
    """Adds one method's :func:`tune_lr` result to the report at ``path`` and writes it atomically.

    The report is ``{**header, "methods": {name: result, ...}}``. Entries of a
    report with the same ``header`` (the rule, policy hash and run settings)
    are kept, so sweeps run one after the other, or side by side in several
    processes (the read-modify-write holds an exclusive lock on a hidden lock
    file beside ``path``), add up to one report; a report with another
    header is replaced (its picks belong to another policy or setting).

    Returns:
        The report as written.
    """
    from rlvr_lib.files import file_lock, write_json_atomic

    path = Path(path)
    with file_lock(path.with_name(f".{path.name}.lock")):
        try:
            old = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            old = {}
        same = {k: v for k, v in old.items() if k != "methods"} == header
        report = {**header, "methods": {**(old.get("methods", {}) if same else {}), name: result}}
        write_json_atomic(path, report)
    return report
