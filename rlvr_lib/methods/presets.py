"""Configs from the registered presets: ``method_config("grpo", steps=50)``.

Above both the registry (`rlvr_lib.methods.registry`, which holds the presets) and
`rlvr_lib.trainer_config` (which checks its method name against the registry).
"""

from __future__ import annotations

from rlvr_lib.methods.registry import METHODS, resolve_name, unknown_method
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["method_config"]


def method_config(name: str, *, tuned_lr: bool = True, **overrides) -> TrainerConfig:
    """A validated `TrainerConfig` for a registered method: its preset (the paper's settings), ``overrides``.

    A method registered with an lr of its own (``register_method(..., tuned_lr=...)``) takes it over the preset's
    unless ``tuned_lr=False``. The testbed's calibrations are the study's (`rlvr_lib.study.testbed.calibrated_config`).
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
    lr = METHODS[name].tuned_lr
    tuned = {"lr": lr} if tuned_lr and lr is not None else {}
    return TrainerConfig(**{**preset, **tuned, **overrides, "method": name})
