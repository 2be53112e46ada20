"""The method registry: name -> (hook class, `TrainerConfig` preset, description).

``build_method(config)`` gives the hook object the trainer calls; modules that define methods call
`register_method` at import time. It imports nothing of the package but `rlvr_lib.config`, so that
`TrainerConfig` can check method names against :data:`METHODS`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields

from rlvr_lib.config import to_jsonable

__all__ = ["METHODS", "MethodSpec", "build_method", "register_method", "resolve_name", "resolved_method_options",
           "seal_shipped", "shipped_methods", "unknown_method"]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its hook class, preset, one-line description and ``doc`` (formula and paper)."""

    cls: type
    preset: dict = field(default_factory=dict)
    description: str = ""
    doc: str = ""
    tuned_lr: float | None = None
    """An lr registered with the method, which `method_config` applies over the preset's (a composite's,
    `rlvr_lib.methods.compose`: its components' when they agree)."""


METHODS: dict[str, MethodSpec] = {}

_SHIPPED: list[str] = []
_SEALED = False


def register_method(name: str, cls: type, description: str = "", *, doc: str | None = None,
                    tuned_lr: float | None = None, **preset) -> None:
    """Register ``name`` -> (hook class, TrainerConfig overrides); ``doc`` defaults to ``cls.__doc__``.

    Raises ValueError when ``name`` is taken.
    """
    if name in METHODS:
        raise ValueError(f"method {name!r} is already registered")
    METHODS[name] = MethodSpec(cls, dict(preset), description, inspect.cleandoc(doc or cls.__doc__ or ""), tuned_lr)
    if not _SEALED:
        _SHIPPED.append(name)


def seal_shipped() -> None:
    """End the library's own registrations: `rlvr_lib.methods` calls it once its modules have registered theirs.
    Every method registered later (a user's, a composite ``"a+b"`` resolved on demand) is not shipped."""
    global _SEALED
    _SEALED = True


def shipped_methods() -> tuple[str, ...]:
    """The methods this library ships, in registration order: those its own modules register while
    `rlvr_lib.methods` imports (a method a user registers is not one of them, nor a composite). Importing this
    module imports that package first, so the list is complete whenever it can be called from outside it."""
    return tuple(_SHIPPED)


NAME_RESOLVERS: list = []
"""Callables ``f(name, preset=..., given=...)`` that may register a method the name describes before it is looked up
(`rlvr_lib.methods.compose` adds one that composes ``"a+b"``). Kept here, not imported from there,
so the registry and the trainer config stay below the modules that build methods."""


def resolve_name(name, *, preset: bool = False, given=()) -> None:
    """Let each of :data:`NAME_RESOLVERS` register ``name`` if it describes a method not registered yet.

    With ``preset=True`` a resolver refuses a name whose preset it cannot settle without the keys ``given``.
    """
    if isinstance(name, str):
        if name not in METHODS:
            from rlvr_lib.plugins import load_entry_points

            load_entry_points()  # once per process: an installed package's methods (`rlvr_lib.plugins`)
        for resolver in NAME_RESOLVERS:
            resolver(name, preset=preset, given=frozenset(given))


def unknown_method(name, label: str = "method") -> ValueError:
    """The error for a method name that is not registered, listing the registered ones and how to import one
    (`rlvr_lib.plugins.missing_name`); ``label`` names the field (``"TrainerConfig.method"``)."""
    from rlvr_lib.plugins import missing_name

    return missing_name(label, name, METHODS)


def build_method(config):
    """The hook object (a `rlvr_lib.methods.base.Method`) for ``config.method`` (a `TrainerConfig`)."""
    if config.method not in METHODS:
        raise unknown_method(config.method)
    return METHODS[config.method].cls(config)


def resolved_method_options(config) -> dict:
    """Every option of ``config.method``'s options class, defaults filled in (JSON form), as run records store it.

    Raises ValueError on an unknown method or invalid ``method_options``.
    """
    if config.method not in METHODS:
        raise unknown_method(config.method)
    options = METHODS[config.method].cls.Options.from_dict(config.method_options or {})
    return {f.name: to_jsonable(getattr(options, f.name)) for f in fields(options)}
