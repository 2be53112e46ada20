"""Configs from the registered presets: ``method_config("grpo", steps=50)``.

Above both the registry (`rlvr_lib.methods.registry`, which holds the presets) and
`rlvr_lib.trainer_config` (which checks its method name against the registry).
"""

from __future__ import annotations

from rlvr_lib.methods.registry import METHODS, unknown_method
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["method_config"]


def method_config(name: str, **overrides) -> TrainerConfig:
    """A validated `TrainerConfig` for a registered method: preset, then ``overrides``.

    Raises:
        ValueError: unknown method (the message lists the registered ones), a preset key that is not a
            `TrainerConfig` field, or a bad value.
    """
    if name not in METHODS:
        raise unknown_method(name)
    preset = METHODS[name].preset
    fields = set(TrainerConfig.__dataclass_fields__)
    unknown = sorted(set(preset) - fields)
    if unknown:
        raise ValueError(f"method {name!r}: preset key(s) {unknown} are not TrainerConfig fields: {sorted(fields)}")
    return TrainerConfig(**{**preset, **overrides, "method": name})
