"""Configs from the registered presets: ``method_config("grpo", steps=50)``.

Above both the registry (`rlvr_lib.methods.registry`, which holds the presets) and
`rlvr_lib.trainer_config` (which checks its method name against the registry).
"""

from __future__ import annotations

from rlvr_lib.methods.registry import METHODS, resolve_name, unknown_method
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["TUNED_LR", "method_config"]

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
"""Each AdamW method's learning rate from the equal tuning budget (issue 29, item 5; `rlvr_lib.study.tuning`):
the pick of ``results/testbed/lr_tuning.json`` (x1/3, x1, x3 around the preset's lr, runs as long as the full
profile's, tuning seeds 1000/1001, final training accuracy), which a test ties to this table. `method_config`
applies it over the preset. 3PO's picks scale IVON's lr and are reported beside its calibrated rule, not used;
a method the sweep has not reached keeps its preset's lr."""


def method_config(name: str, *, tuned_lr: bool = True, **overrides) -> TrainerConfig:
    """A validated `TrainerConfig` for a registered method: preset, its tuned lr (:data:`TUNED_LR`), ``overrides``.

    ``tuned_lr=False`` leaves the preset's lr: the tuning grid is centred there, not on an earlier pick.
    A composite's name (``"nudgerl+sage"``) is composed first when it is not registered yet
    (`rlvr_lib.methods.registry.resolve_name`), and refused while its components' presets disagree on a key
    that neither a `compose` call nor ``overrides`` chose; its tuned lr is its components'
    (``METHODS[name].tuned_lr``).

    Raises:
        ValueError: unknown method (the message lists the registered ones), a preset key that is not a
            `TrainerConfig` field, or a bad value.
    """
    resolve_name(name, preset=True, given=overrides)
    if name not in METHODS:
        raise unknown_method(name)
    preset = METHODS[name].preset
    fields = set(TrainerConfig.__dataclass_fields__)
    unknown = sorted(set(preset) - fields)
    if unknown:
        raise ValueError(f"method {name!r}: preset key(s) {unknown} are not TrainerConfig fields: {sorted(fields)}")
    lr = TUNED_LR.get(name, METHODS[name].tuned_lr)
    tuned = {"lr": lr} if tuned_lr and lr is not None else {}
    return TrainerConfig(**{**preset, **tuned, **overrides, "method": name})
