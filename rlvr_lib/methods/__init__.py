"""Methods as plug-ins of the one RL loop, and the registry of named presets.

A registry entry is a `Method` subclass plus the `TrainerConfig` fields its
paper fixes (its preset), and a one-line description
(``METHODS[name].description``). The baselines the papers compare against
live in `rlvr_lib.methods.baselines`. ``method_config("grpo", steps=50)`` gives a validated
config; ``build_method(config)`` the hook object the trainer calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_lib.methods.base import Method, StepBatch


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its hook class, preset and one-line description."""

    cls: type
    preset: dict = field(default_factory=dict)
    description: str = ""


METHODS: dict[str, MethodSpec] = {}


def register_method(name: str, cls: type, description: str = "", **preset) -> None:
    """Register ``name`` -> (hook class, TrainerConfig overrides)."""
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered")
    METHODS[name] = MethodSpec(cls, dict(preset), description)


def method_config(name: str, **overrides):
    """A validated `TrainerConfig` for a registered method: preset, then ``overrides``.

    Raises:
        ValueError: unknown method (the message lists the registered ones) or a bad value.
    """
    from rlvr_lib.trainer import TrainerConfig

    if name not in METHODS:
        raise ValueError(f"method={name!r} is not registered: must be one of {sorted(METHODS)}")
    return TrainerConfig(**{**METHODS[name].preset, **overrides, "method": name})


def build_method(config) -> Method:
    """The hook object for ``config.method``."""
    if config.method not in METHODS:
        raise ValueError(f"method={config.method!r} is not registered: must be one of {sorted(METHODS)}")
    return METHODS[config.method].cls(config)


# GRPO (DeepSeekMath, arXiv 2402.03300) with the KL anchor SAGE's baseline uses (beta 0.05, k3).
register_method("grpo", Method, "GRPO: group-normalised advantages, PPO-clip, k3 KL to the base policy", kl_coef=0.05)

# The GRPO-family baselines (DAPO, Dr.GRPO, BNPO, KL anchors, EntReg, Polaris, KL-/Clip-Cov, POPE,
# INTUITOR) register themselves on import.
from rlvr_lib.methods import baselines  # noqa: E402,F401

__all__ = ["METHODS", "Method", "MethodSpec", "StepBatch", "build_method", "method_config", "register_method"]
