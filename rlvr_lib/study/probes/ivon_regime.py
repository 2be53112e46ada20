"""3PO's IVON regime from the study side: the calibration probes that train, and the record check.

They train (`rlvr_lib.trainer`) and read run records, so they sit above the library; the rules they apply
are pure functions of `rlvr_lib.methods.threepo` (:func:`~rlvr_lib.methods.threepo.calibrate_clip_and_lr`,
:meth:`~rlvr_lib.methods.threepo.ThreePOOptions.ivon_lr`), whose docstring states them and the values
measured on the shipped policy.

* :func:`ivon_update_probe` -- IVON's per-weight update ratios over a run's first steps.
* :func:`calibrate_threepo` -- the regime calibration behind ``python -m rlvr_lib.study calibrate-threepo``.
* :func:`check_ivon_lr` -- refuses 3PO run records that did not step with the IVON lr their config gives.
* :func:`ivon_regime_flag` -- flags a run outside the calibrated IVON regime: after the warm-up, IVON clipped more
  than ``MAX_CLIPPED_SHARE`` of the weights on more than ``MAX_OVER_SHARE`` of its steps.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch

from rlvr_lib.methods.threepo import (AUTHORS_CLIP_RADIUS, MAX_CLIPPED_SHARE, ThreePOOptions,
                                      calibrate_clip_and_lr)
from rlvr_lib.validation import check, check_int

__all__ = ["COMPOSITE_REGIME", "IVON_METHODS", "MAX_OVER_SHARE", "calibrate_threepo", "check_ivon_lr",
           "composite_regime", "ivon_component", "ivon_options", "ivon_regime_flag", "ivon_regime_of",
           "ivon_update_probe"]

IVON_METHODS = ("b3po", "m3po", "c3po")
"""The registered methods that train with IVON (`rlvr_lib.methods.threepo`)."""

MAX_OVER_SHARE = 0.05
"""The regime flag's tolerance: a run may exceed ``MAX_CLIPPED_SHARE`` on at most this share of its post-warm-up
steps."""


COMPOSITE_REGIME: dict[str, dict[str, float]] = {
    "b3po+vigor": {"clip_radius": 0.445, "lr": 0.0419},
    "sage+b3po": {"clip_radius": 0.309, "lr": 0.183},
    "nudgerl+b3po": {"clip_radius": 0.196, "lr": 0.471},
}
"""The IVON regime of each composite notebook 07 trains, calibrated on its own trajectory by the
rule of :func:`calibrate_threepo` (the 3PO presets' rule: at most 20% of weights clipped after the warm-up, IVON's
mean step equal to the AdamW counterpart's -- the composite's other component at the composite's settings),
measured by ``python -m rlvr_lib.study calibrate-threepo --method <composite>`` into
``results/testbed/threepo_calibration_<composite>.json`` (a test ties each entry to its file). A composite of
another 3PO variant or pair has no entry: :func:`composite_regime` refuses it, naming the command.

Which arms get a calibration of their own: every arm whose loss or Hessian differs from the presets' (a composite; the
learnt-Hessian ablation, whose learnt ``h`` rescales IVON's update ratio itself: ``LEARNT_HESS_REGIME`` in
`rlvr_lib.methods.threepo`). The presets' other one-setting ablations (ESS, weight samples, group size, the importance
weight, C3PO's scheme) keep the presets' calibration, so that each differs from its preset in that setting only; the
regime check every IVON record stores (:func:`ivon_regime_of`) shows whether each stayed in the regime, and notebook 04
shows it per arm."""


def composite_regime(name: str) -> dict[str, float]:
    """The calibrated IVON options (``clip_radius``, ``lr``) of composite ``name`` (:data:`COMPOSITE_REGIME`).

    Raises:
        ValueError: ``name`` has no calibration (the message gives the command that measures it).
    """
    if name not in COMPOSITE_REGIME:
        raise ValueError(f"composite {name!r} has no IVON regime calibration: must be one of {sorted(COMPOSITE_REGIME)}; "
                         f"measure it with `python -m rlvr_lib.study calibrate-threepo --method {name}` and add its picks "
                         f"to rlvr_lib.study.probes.ivon_regime.COMPOSITE_REGIME")
    return dict(COMPOSITE_REGIME[name])


def ivon_component(method: str) -> str | None:
    """The IVON method ``method`` trains with: itself (``b3po``, ``m3po``, ``c3po``), a composite's IVON component
    (``"b3po+vigor"`` -> ``"b3po"``), else None. A composite name is composed first (`resolve_name`)."""
    from rlvr_lib.methods.registry import METHODS, resolve_name

    if method in IVON_METHODS:
        return method
    resolve_name(method)
    components = getattr(METHODS[method].cls, "COMPONENTS", ()) if method in METHODS else ()
    return next((c for c in components if c in IVON_METHODS), None)


def ivon_update_probe(config, steps: int, *, skip: int, model=None, tokenizer=None) -> dict:
    """Run the first ``steps`` RL steps of a 3PO ``config`` and collect IVON's update ratios after ``skip``.

    A fresh `rlvr_lib.trainer.Trainer` (nothing written): the steps are the
    first ``steps`` of the run ``config`` describes (its ``steps`` sets the lr
    schedule, not how many are run). Returns ``abs_update_ratio`` (every
    weight's |u| at RL steps ``skip .. steps - 1``, pooled, float32; at the
    last optimizer step of each RL step, the only one at
    the 3PO presets' ``minibatches=1``), and per RL step the logged
    ``ivon_clipped_frac`` and ``ivon_mean_abs_step``.

    Raises:
        ValueError: unless ``config.method`` is a 3PO method, ``steps >= 1`` and ``0 <= skip < steps``.
    """
    from rlvr_lib.trainer import Trainer

    check(ivon_component(config.method) is not None, "config.method", config.method,
          "a 3PO method (b3po, m3po, c3po) or a composite with one")
    check_int("steps", steps, 1)
    check_int("skip", skip, 0, steps - 1)
    trainer = Trainer(config, model, tokenizer)
    trainer.optimizer.keep_update_ratio = True
    pooled, clipped, moved = [], [], []
    for step in range(steps):
        row = trainer.step()
        clipped.append(row["ivon_clipped_frac"])
        moved.append(row["ivon_mean_abs_step"])
        if step >= skip:
            pooled.append(trainer.optimizer.last_abs_update_ratio)  # the RL step's last optimizer step
    return {"abs_update_ratio": torch.cat(pooled), "ivon_clipped_frac": clipped, "ivon_mean_abs_step": moved}


def calibrate_threepo(*, method: str = "b3po", adamw_method: str = "grpo", run_steps: int = 100, steps: int = 20,
                      skip: int = 5, rounds: int = 2, max_clipped: float = MAX_CLIPPED_SHARE, policy: str | None = None,
                      adamw_fields: dict | None = None, method_options: dict | None = None, **config_fields) -> dict:
    """The 3PO regime calibration: probe, :func:`calibrate_clip_and_lr`, repeated ``rounds`` times.

    1. AdamW's mean step: :func:`rlvr_lib.study.probes.weight_steps.weight_step_profile`
       of ``calibrated_config(adamw_method, steps=run_steps, **config_fields)`` over
       its first ``steps`` RL steps, mean of ``mean_abs`` from step ``skip`` on.
    2. Round r: :func:`ivon_update_probe` of ``calibrated_config(method,
       steps=run_steps, **config_fields)`` with ``clip_radius`` and ``lr`` the
       previous round's picks (round 1: the authors' clip radius and the matched lr), then
       :func:`calibrate_clip_and_lr`. Round r + 1 measures at round r's picks
       (the rule is exact only on the measured trajectory); each round records
       the clipped share and mean step it measured at its own setting.

    A composite with an IVON component (``method="b3po+vigor"``, :func:`ivon_component`) is
    calibrated by the same rule on its own trajectory: the options go to that component
    (``method_options={"b3po": {...}}``) and ``adamw_method`` is the composite's AdamW counterpart (its other
    component, ``"vigor"``) with ``adamw_fields`` (the composite's trainer settings, e.g.
    `rlvr_lib.study.head_to_head.pair_settings`) applied to that run only.

    ``method_options`` are the probed method's further options, kept in every round (the learnt-Hessian ablation:
    ``{"hess_init_steps": LEARNT_HESS_STEPS}``, calibrated by the same rule so that its mean step is matched too).

    The picks are the last round's. Returns a JSON-ready report (settings,
    AdamW's mean step, every round, the picks).
    """
    from rlvr_lib.study.probes.weight_steps import weight_step_profile
    from rlvr_lib.study.testbed import calibrated_config
    from rlvr_lib.policy import load_policy

    check_int("rounds", rounds, 1)
    component = ivon_component(method)
    check(component is not None, "method", method, "a 3PO method (b3po, m3po, c3po) or a composite with one")
    base = dict(config_fields, steps=run_steps, policy=policy)
    model, tokenizer = load_policy(policy)
    adamw = weight_step_profile(calibrated_config(adamw_method, **base, **(adamw_fields or {})), steps,
                                model=copy.deepcopy(model), tokenizer=tokenizer)
    adamw_mean = adamw.mean(skip)["mean_abs"]
    options: dict = {"clip_radius": AUTHORS_CLIP_RADIUS, "lr": None}  # round 1: the authors' clip, the matched lr
    history = []
    for r in range(rounds):
        mine = {**(method_options or {}), **options}
        config = calibrated_config(method, **base, method_options=mine if component == method else {component: mine})
        o = ivon_options(config.to_dict())
        probe = ivon_update_probe(config, steps, skip=skip, model=copy.deepcopy(model), tokenizer=tokenizer)
        pick = calibrate_clip_and_lr(probe["abs_update_ratio"], adamw_mean, max_clipped=max_clipped,
                                     hess_init=o.hess_init, weight_decay=o.weight_decay, rescale_lr=o.rescale_lr)
        history.append({"round": r + 1, "clip_radius": o.clip_radius, "lr": o.ivon_lr(config.lr),
                        "measured_clipped_frac": sum(probe["ivon_clipped_frac"][skip:]) / (steps - skip),
                        "measured_mean_abs_step": sum(probe["ivon_mean_abs_step"][skip:]) / (steps - skip),
                        "ivon_clipped_frac": probe["ivon_clipped_frac"], "ivon_mean_abs_step": probe["ivon_mean_abs_step"],
                        "pick": dataclasses.asdict(pick)})
        options = {"clip_radius": pick.clip_radius, "lr": pick.lr}
    return {"rule": "clip_radius: the (1 - max_clipped) quantile of IVON's |u| after warm-up, rounded up; "
                    "lr: IVON's mean |delta theta| at that clip equals AdamW's under adamw_method "
                    "(rlvr_lib.methods.threepo.calibrate_clip_and_lr)",
            "method": method, "adamw_method": adamw_method, **({"adamw_fields": adamw_fields} if adamw_fields else {}),
            **({"method_options": method_options} if method_options else {}),
            "run_steps": run_steps, "probe_steps": steps,
            "ess": o.ess, "hess_init": o.hess_init,
            "skip": skip, "max_clipped": max_clipped, "config_fields": config_fields, "policy": policy,
            "adamw_mean_abs_step": adamw_mean, "adamw_mean_abs_step_per_step": adamw.mean_abs.tolist(),
            "rounds": history, "clip_radius": options["clip_radius"], "lr": options["lr"]}


def ivon_options(train: dict) -> ThreePOOptions:
    """The IVON options of a run's ``config["train"]`` (a `TrainerConfig` as a dict): its 3PO method's ``Options``,
    or a composite's IVON component's part of ``method_options``, defaults filled in."""
    from rlvr_lib.methods.registry import METHODS

    from rlvr_lib.study.testbed import train_from_key

    component = ivon_component(train["method"])
    check(component is not None, "method", train["method"], "a 3PO method (b3po, m3po, c3po) or a composite with one")
    options = train_from_key(train).get("method_options") or {}
    return METHODS[component].cls.Options.from_dict(options if component == train["method"]
                                                    else options.get(component) or {})


def check_ivon_lr(records) -> None:
    """Raises unless every 3PO run record logged, at every step, the IVON lr its config gives under today's rule.

    For a record's ``config["train"]`` (a `TrainerConfig` as a dict, as
    `rlvr_lib.study.pipeline.train_and_evaluate` stores it) the expected lr is
    ``method_options["lr"]`` when given, else :func:`matched_ivon_lr` of the
    config's ``lr`` and the options' ``hess_init``, ``weight_decay``,
    ``clip_radius`` and ``rescale_lr``. A run cached before the matched rule
    logged no ``ivon_lr`` (it stepped with IVON lr 1.0) under the same cache
    key, since the key holds ``method_options`` as written: this check keeps
    such a record out of a table.

    Raises:
        ValueError: naming the first run whose logged ``ivon_lr`` is missing or
            differs (relative 1e-9), with the expected value.
    """
    records = list(records)
    if not records:
        raise ValueError("records=[] is invalid: must be a non-empty list of 3PO run records")
    for i, r in enumerate(records):
        train = r.config["train"]
        o = ivon_options(train)
        expected = o.ivon_lr(train["lr"])
        logged = [h.get("ivon_lr") for h in (r.history or [])]
        if not logged or any(v is None or not math.isclose(v, expected, rel_tol=1e-9) for v in logged):
            seen = sorted({v for v in logged if v is not None}) or "none"
            raise ValueError(f"records[{i}]={getattr(r, 'run_id', i)!r} is invalid: must be a 3PO run that logged "
                             f"ivon_lr = {expected:.6g} at every step (the lr rule of rlvr_lib.methods.threepo); "
                             f"it logged {seen}. A run cached before the matched IVON lr: delete its record "
                             f"and re-run it")


def ivon_regime_flag(record, *, max_clipped: float = MAX_CLIPPED_SHARE, max_over: float = MAX_OVER_SHARE) -> dict | None:
    """Whether a run stayed in the calibrated IVON regime, from its record's per-step ``ivon_clipped_frac``
    (:func:`ivon_regime_of` of ``record.history`` and ``record.config["train"]``)."""
    history = record.history or []
    if not any(h.get("ivon_clipped_frac") is not None for h in history):
        return None  # not an IVON run (a base evaluation has no training config at all)
    return ivon_regime_of(history, record.config["train"], max_clipped=max_clipped, max_over=max_over,
                          name=getattr(record, "run_id", "?"))


def ivon_regime_of(history, train: dict, *, max_clipped: float = MAX_CLIPPED_SHARE, max_over: float = MAX_OVER_SHARE,
                   name: str = "run") -> dict | None:
    """Whether a run stayed in the calibrated IVON regime, from its per-step ``ivon_clipped_frac`` (``history``).

    The warm-up is the first ``ceil(lr_warmup_ratio x steps)`` RL steps of ``train`` (a `TrainerConfig` as a dict;
    0 without a warm-up); over the steps after it, a step is *over* when its clipped share exceeds ``max_clipped``
    (the regime rule's 20%), and the run is ``flagged`` when over steps are more than ``max_over`` (5%) of them.
    `rlvr_lib.study.pipeline.train_and_evaluate` stores it in every IVON run's record (``extra["ivon_regime"]``).

    Returns:
        ``{"steps", "over", "over_share", "median", "max", "flagged"}``, or None for a run that logged no
        ``ivon_clipped_frac`` (not an IVON run).

    Raises:
        ValueError: a run whose IVON log stops before its warm-up ends (nothing to judge).
    """
    logged = [h.get("ivon_clipped_frac") for h in history]
    if not logged or all(v is None for v in logged):
        return None
    warm = math.ceil(float(train.get("lr_warmup_ratio") or 0.0) * int(train["steps"]) - 1e-9)
    after = [float(v) for v in logged[warm:] if v is not None]
    check(after, "record", name, f"an IVON run with logged clipped shares after its {warm}-step warm-up")
    over = sum(v > max_clipped for v in after)
    return {"steps": len(after), "over": over, "over_share": over / len(after), "median": float(np.median(after)),
            "max": max(after), "flagged": over / len(after) > max_over}
