"""The testbed's calibrations: what the study sets over the papers' presets, and the one way it builds a config.

The library's presets (`rlvr_lib.methods`) are the papers' settings. On the 0.62M-parameter testbed some of them
are calibrated (README, "The testbed"; how each was measured: docs/study/testbed.md):

1. the KL anchor's beta: 0.2 for GRPO, its estimator variants and every SAGE preset (the papers: 0.04-0.05);
2. SAGE's branch threshold tau: 0.24 nats, the 90th percentile of the base policy's token entropies on the ``train``
   family (all 372 of v7's pool); the paper: 1.2;
3. 3PO's IVON: ESS 1e8, clip radius 0.254, IVON lr 0.216 (the authors: 1e9, 1e-3, 1.0);
4. the AdamW lr: the testbed's 1e-4 where a paper's preset sets its own (the papers': 1e-6 to 2e-5), then each
   method's pick of the equal-budget lr sweep (:data:`TUNED_LR`).

:func:`calibrated_config` is `method_config` with those applied (every arm of the notebooks is built by it);
:func:`calibration` lists them per method; ``python -m rlvr_lib.study testbed-config NAME`` writes them as a
settings file for ``python -m rlvr_lib train --config``.

Run keys are unchanged by the move: a study run's key holds ``method_options`` as the arm wrote them, so
:func:`key_train` drops the options equal to the calibration's and :func:`train_from_key` puts them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlvr_lib.methods.compose import SEPARATOR, merged_claims
from rlvr_lib.methods.presets import method_config
from rlvr_lib.methods.registry import METHODS, unknown_method
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["ANCHORED", "CALIBRATION", "IVON_METHODS", "LEARNT_HESS_REGIME", "LEARNT_HESS_STEPS", "LR_SHARED",
           "SAGE_ANCHOR", "TAU_METHODS", "TESTBED_CLIP_RADIUS", "TESTBED_ESS", "TESTBED_IVON_LR", "TESTBED_KL_COEF",
           "TESTBED_LR", "TESTBED_TAU", "TUNED_LR", "agreed_settings", "calibrated_claims", "calibrated_config",
           "calibrated_conflicts", "calibration", "config_from_key", "key_train", "testbed_settings",
           "train_from_key", "tuned_lr"]

TESTBED_KL_COEF = 0.2
"""Beta of the KL anchor on the testbed: the first of 0.05, 0.1, 0.2, 0.4 at which GRPO meets every dynamics target,
the anchor's included (``results/testbed/dynamics.json``, ``kl_coef``; a test holds the two equal)."""
TESTBED_TAU = 0.24
"""SAGE's branch threshold on the testbed (nats): the 90th percentile of the base policy's token entropies
(`rlvr_lib.methods.sage.calibrate_tau` with its defaults: 0.240 on testbed v7)."""
TESTBED_ESS = 1e8
"""3PO's ESS on the testbed: `rlvr_lib.study.probes.premises.ess_by_noise_rule` on the shipped policy
(``results/testbed/premises.json``)."""
TESTBED_CLIP_RADIUS = 0.254
"""3PO's IVON ``clip_radius`` on the testbed: `calibrate_threepo`'s pick, at most 20% of weights clipped
(``results/testbed/threepo_calibration.json``)."""
TESTBED_IVON_LR = 0.216
"""3PO's IVON lr on the testbed: `calibrate_threepo`'s pick, IVON's mean step equal to AdamW's under ``grpo``
(``results/testbed/threepo_calibration.json``)."""
LEARNT_HESS_STEPS = 100
"""The K of the learnt-Hessian ablation (``hess_init_steps``; docs/methods/threepo.md, "Warm-up settings")."""
LEARNT_HESS_REGIME = {"clip_radius": 0.0208, "lr": 3.14}
"""The learnt-Hessian ablation's IVON ``clip_radius`` and ``lr``: the same calibration rule
(`rlvr_lib.methods.threepo.calibrate_clip_and_lr`) run with the Hessian learnt first
(``results/testbed/threepo_calibration_learnt_hess.json``; a test ties them), so both arms' mean steps are matched by
one rule (docs/methods/threepo.md)."""
SAGE_ANCHOR = {"kl_coef": TESTBED_KL_COEF, "kl_estimator": "k3"}
"""SAGE's k3 anchor at the testbed's beta: what the study's "+ k3 anchor" comparators write over their presets."""
TESTBED_LR = 1e-4
"""The testbed's AdamW lr where a paper's preset sets its own (`TrainerConfig`'s default lr): the lr sweep's centre."""

TUNED_LR: dict[str, float] = {
    "bnpo_beta": 3.33333e-05,
    "bnpo_loss": 0.0001,
    "bnpo_loss_branch": 3.33333e-05,
    "clip_cov": 0.0001,
    "dapo": 0.0001,
    "dapo_branch": 0.0001,
    "dr_grpo": 0.0001,
    "entropy_reg": 0.0001,
    "grpo": 0.0001,
    "grpo_forward_kl": 3.33333e-05,
    "grpo_k1": 0.0001,
    "grpo_k2": 0.0001,
    "grpo_k3": 0.0001,
    "grpo_no_kl": 0.0001,
    "intuitor": 3.33333e-05,
    "kl_cov": 0.0001,
    "nudgerl": 0.0001,
    "polaris": 0.0001,
    "polaris_fixed": 3.33333e-05,
    "pope": 0.0001,
    "sage": 0.0001,
    "sage_random": 0.0001,
    "sage_token": 3.33333e-05,
    "vigor": 3.33333e-05,
}
"""Each AdamW method's lr from the equal tuning budget (`rlvr_lib.study.tuning`): the pick of
``results/testbed/lr_tuning.json`` (x1/3, x1, x3 around :data:`TESTBED_LR`, runs as long as the full profile's,
tuning seeds 1000/1001, final training accuracy), which a test ties to this table. 3PO's picks scale IVON's lr
and are reported beside its calibrated rule, not used."""

LR_SHARED = {"oracle_explore": "grpo"}
"""Methods that take another's tuned lr rather than a sweep of their own: the oracle arm differs from GRPO only in
its forced rollouts."""

ANCHORED = ("grpo", "grpo_forward_kl", "grpo_k1", "grpo_k2", "grpo_k3", "sage", "sage_token", "sage_random",
            "dapo_branch", "bnpo_loss_branch", "oracle_explore")
"""Methods whose KL anchor takes :data:`TESTBED_KL_COEF` (and :data:`TESTBED_LR` for the paper's lr)."""
TAU_METHODS = ("sage", "dapo_branch", "bnpo_loss_branch")
"""Methods with SAGE's branch guide: ``tau`` takes :data:`TESTBED_TAU`."""
IVON_METHODS = ("b3po", "m3po", "c3po")
"""Methods with 3PO's IVON: ``ess``, ``clip_radius`` and ``lr`` take the testbed's."""
_LR_SET = ("nudgerl", "pope", "vigor", "intuitor")
"""Further methods whose paper preset sets an lr (the testbed's :data:`TESTBED_LR` replaces it)."""


def _build_calibration() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in ANCHORED:
        out[name] = {"kl_coef": TESTBED_KL_COEF, "lr": TESTBED_LR}
    for name in _LR_SET:
        out[name] = {"lr": TESTBED_LR}
    for name in TAU_METHODS:
        out[name]["method_options"] = {"tau": TESTBED_TAU}
    for name in IVON_METHODS:
        out[name] = {"method_options": {"ess": TESTBED_ESS, "clip_radius": TESTBED_CLIP_RADIUS,
                                        "lr": TESTBED_IVON_LR}}
    return out


CALIBRATION: dict[str, dict[str, Any]] = _build_calibration()
"""``{method: {TrainerConfig field: value, "method_options": {option: value}}}``: what the testbed sets over each
registered method's preset (its tuned lr, :data:`TUNED_LR`, comes on top)."""


def _components(name: str) -> tuple[str, ...]:
    return tuple(name.split(SEPARATOR)) if SEPARATOR in name else (name,)


def calibration(name: str) -> dict[str, Any]:
    """The testbed's settings over method ``name``'s preset (a composite's: per component in ``method_options``)."""
    parts = _components(name)
    if len(parts) == 1:
        cal = CALIBRATION.get(name, {})
        return {**cal, **({"method_options": dict(cal["method_options"])} if "method_options" in cal else {})}
    out: dict[str, Any] = {}
    options = {p: dict(CALIBRATION[p]["method_options"]) for p in parts if "method_options" in CALIBRATION.get(p, {})}
    if options:
        out["method_options"] = options
    return out


def tuned_lr(name: str) -> float | None:
    """Method ``name``'s tuned lr on the testbed (:data:`TUNED_LR`; :data:`LR_SHARED`'s), ``None`` if it has none."""
    return TUNED_LR.get(LR_SHARED.get(name, name))


def calibrated_claims(name: str) -> tuple[dict, float | None]:
    """A component's testbed preset (its paper preset with :func:`calibration` over it) and tuned lr: the claims
    `rlvr_lib.methods.compose.merged_claims` merges for the study's composites."""
    preset = dict(METHODS[name].preset)
    cal = calibration(name)
    options = {**(preset.get("method_options") or {}), **cal.pop("method_options", {})}
    preset.update(cal)
    if options:
        preset["method_options"] = options
    else:
        preset.pop("method_options", None)
    return preset, tuned_lr(name)


def calibrated_conflicts(names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The `TrainerConfig` keys two of ``names``' testbed presets set to different values: ``{key: {name: value}}``."""
    return merged_claims(tuple(names), claims=calibrated_claims)[3]


def agreed_settings(names: tuple[str, ...], *, tuned_lr: bool = True) -> tuple[dict[str, Any], dict[str, dict]]:
    """``(agreed, conflicts)`` of a composite's components on the testbed: the keys their testbed presets agree on
    (``lr``: their tuned lr when they agree and ``tuned_lr``), and the keys they set differently."""
    preset, _, tuned, conflicts = merged_claims(tuple(names), claims=calibrated_claims)
    agreed = {k: v for k, v in preset.items() if k not in conflicts}
    if tuned_lr and tuned and "lr" not in conflicts:
        agreed["lr"] = next(iter(set(tuned.values())))
    return agreed, conflicts


def _merge_options(name: str, written: Any) -> Any:
    """``method_options`` with the calibration's under the ones the arm wrote (``written``: the arm's, or the
    preset's when the arm wrote none)."""
    cal = calibration(name).get("method_options")
    if not cal:
        return written
    written = dict(written or {})
    if SEPARATOR not in name:
        return {**cal, **written}
    parts = _components(name)
    return {p: {**cal.get(p, {}), **(written.get(p) or {})} for p in parts if p in cal or p in written}


def calibrated_config(name: str, *, tuned_lr: bool = True, **overrides) -> TrainerConfig:
    """`method_config` with the testbed's calibration: preset, :func:`calibration`, tuned lr, ``overrides``.

    A composite takes the keys its components' testbed presets agree on and its components' tuned lr (when they
    agree); a key they set differently must be in ``overrides`` (`rlvr_lib.study.head_to_head.pair_settings`).
    ``tuned_lr=False`` leaves :data:`TESTBED_LR` (the sweep's centre).

    Raises:
        ValueError: an unknown method, a composite conflict ``overrides`` does not settle, or a bad value.
    """
    parts = _components(name)
    for part in parts:
        if part not in METHODS:
            raise unknown_method(part)
    if len(parts) == 1:
        fields, lr = calibrated_claims(name)
        written = overrides["method_options"] if "method_options" in overrides else fields.get("method_options")
    else:
        # A composite: the keys its components' testbed presets agree on; a key they set differently comes from
        # ``overrides`` or from the `compose` call that registered it (`rlvr_lib.study.head_to_head.pair_name`).
        agreed, conflicts = agreed_settings(parts, tuned_lr=tuned_lr)
        registered = METHODS[name].preset if name in METHODS else {}
        settled = {k: registered[k] for k in conflicts if k in registered}
        open_keys = sorted(k for k in conflicts if k not in overrides and k not in settled)
        if open_keys:
            raise ValueError(f"calibrated_config({name!r}): its components' testbed presets set different values of "
                             f"{open_keys} ({ {k: conflicts[k] for k in open_keys} }); pass them")
        fields, lr = {**agreed, **settled}, None
        library = registered.get("method_options") if name in METHODS else merged_claims(parts)[1]
        written = overrides["method_options"] if "method_options" in overrides else (library or None)
    fields.pop("method_options", None)
    if not tuned_lr:
        lr = None
    fields = {**fields, **({"lr": lr} if lr is not None else {}), **overrides}
    options = _merge_options(name, written)
    if options is not None or "method_options" in overrides:
        fields["method_options"] = options
    return method_config(name, tuned_lr=False, **fields)


def _strip(cal: Mapping, options: Mapping) -> dict:
    return {k: v for k, v in options.items() if not (k in cal and cal[k] == v)}


def key_train(config: TrainerConfig) -> dict:
    """``config.to_dict()`` with the ``method_options`` the calibration sets (at its values) left out: the ``train``
    part of a study run's key, as the arm wrote it before the calibration moved out of the presets."""
    train = config.to_dict()
    cal = calibration(config.method).get("method_options")
    options = train.get("method_options")
    if not cal or not options:
        return train
    if SEPARATOR not in config.method:
        stripped = _strip(cal, options)
    else:
        stripped = {p: s for p, o in options.items() if (s := _strip(cal.get(p, {}), o or {})) or p not in cal}
    return {**train, "method_options": stripped or None}


def train_from_key(train: Mapping) -> dict:
    """The inverse of :func:`key_train`: a record's ``config["train"]`` with the calibration's options put back."""
    train = dict(train)
    name = train["method"]
    if calibration(name).get("method_options"):
        train["method_options"] = _merge_options(name, train.get("method_options"))
    return train


def config_from_key(train: Mapping) -> TrainerConfig:
    """The `TrainerConfig` a study record was trained with (:func:`train_from_key` of its ``config["train"]``)."""
    return TrainerConfig.from_dict(train_from_key(train))


def testbed_settings(name: str) -> dict[str, Any]:
    """The settings file ``python -m rlvr_lib train --config`` takes for ``name`` at the testbed's calibration:
    ``method`` plus every field :func:`calibrated_config` sets differently from ``method_config(name)``."""
    ours, paper = calibrated_config(name).to_dict(), method_config(name).to_dict()
    return {"method": name, **{k: v for k, v in ours.items() if k != "method" and v != paper.get(k)}}
