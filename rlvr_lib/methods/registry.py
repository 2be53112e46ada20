"""The method registry: name -> (hook class, `TrainerConfig` preset, description).

``method_config("grpo", steps=50)`` gives a validated config;
``build_method(config)`` the hook object the trainer calls. Modules that
define methods import `register_method` from here and register at import
time; `rlvr_lib.methods` imports them all. This module imports neither the
trainer nor any method module, so there is no import loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from rlvr_lib.config import to_jsonable
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["METHODS", "MethodSpec", "build_method", "method_config", "register_method", "resolved_method_options"]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its hook class, preset and one-line description."""

    cls: type
    preset: dict = field(default_factory=dict)
    description: str = ""


METHODS: dict[str, MethodSpec] = {}


def register_method(name: str, cls: type, description: str = "", **preset) -> None:
    """Register ``name`` -> (hook class, TrainerConfig overrides).

    Raises:
        ValueError: ``name`` is taken, or a preset key is not a `TrainerConfig` field.
    """
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered")
    fields = set(TrainerConfig.__dataclass_fields__)
    unknown = sorted(set(preset) - fields)
    if unknown:
        raise ValueError(f"method {name!r}: preset key(s) {unknown} are not TrainerConfig fields: {sorted(fields)}")
    METHODS[name] = MethodSpec(cls, dict(preset), description)


def _unknown(name) -> ValueError:
    return ValueError(f"method={name!r} is not registered: must be one of {sorted(METHODS)}")


def method_config(name: str, **overrides) -> TrainerConfig:
    """A validated `TrainerConfig` for a registered method: preset, then ``overrides``.

    Raises:
        ValueError: unknown method (the message lists the registered ones) or a bad value.
    """
    if name not in METHODS:
        raise _unknown(name)
    return TrainerConfig(**{**METHODS[name].preset, **overrides, "method": name})


def build_method(config: TrainerConfig):
    """The hook object (a `rlvr_lib.methods.base.Method`) for ``config.method``."""
    if config.method not in METHODS:
        raise _unknown(config.method)
    return METHODS[config.method].cls(config)


def resolved_method_options(config: TrainerConfig) -> dict:
    """Every option of ``config.method``'s options class, its defaults filled in (JSON form).

    A run's cache key holds ``config.method_options`` as given, so changing an
    option's default does not change the key; run records store this dict, and
    `rlvr_lib.pipeline.train_and_evaluate` refuses a cached run trained under
    other option values.

    Raises:
        ValueError: unknown method or invalid ``method_options``.
    """
    if config.method not in METHODS:
        raise _unknown(config.method)
    options = METHODS[config.method].cls.Options.from_dict(config.method_options or {})
    return {f.name: to_jsonable(getattr(options, f.name)) for f in fields(options)}
