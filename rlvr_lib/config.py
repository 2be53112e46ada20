"""Validated, serialisable configuration dataclasses.

Every config is a frozen dataclass inheriting :class:`ConfigBase`; building one runs
:meth:`ConfigBase.validate`, whose ``check_*`` helpers raise a ``ValueError`` naming the class, the field, the
value and what is allowed, e.g. ``GRPOConfig.lr=-1.0 is invalid: must be a number in (0, 1]``.

Configs round-trip through JSON (:meth:`ConfigBase.to_json` / :meth:`ConfigBase.from_json`), nested configs,
tuples, enums and ``Optional`` included (classes at module level). :meth:`ConfigBase.config_hash` is a short
sha256 of the canonical JSON, used to name and cache runs. A field with
``metadata={"omit_if_default": True}`` (:data:`OMIT_IF_DEFAULT`) is left out of :func:`to_jsonable` while it
holds its default, so adding it keeps every stored run id. Worked examples: docs/library/config.md.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, TypeVar, Union

from rlvr_lib import validation

__all__ = ["OMIT_IF_DEFAULT", "ConfigBase", "canonical_json", "hash_jsonable", "to_jsonable"]

C = TypeVar("C", bound="ConfigBase")

HASH_LENGTH = 12
"""Hex characters kept from the sha256 digest in :meth:`ConfigBase.config_hash`."""

OMIT_IF_DEFAULT = "omit_if_default"
"""Field-metadata key: a field marked with it is not serialised while it holds its default."""


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return hasattr(value, "dtype") and getattr(value, "ndim", None) == 0 and value.dtype.kind in "iu"


@dataclasses.dataclass(frozen=True)
class ConfigBase:
    """Mixin for frozen (``@dataclass(frozen=True)``), validated, JSON-serialisable configs; validation runs on every construction."""

    # ------------------------------------------------------------------ hooks
    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Checks field values (the ``check_*`` helpers); subclasses of a validating config call ``super().validate()``."""

    # ------------------------------------------------------------- checkers
    # Thin wrappers over rlvr_lib.validation that name the value
    # "<Class>.<field>"; the message format is validation.invalid's.
    @classmethod
    def invalid(cls, field: str, value: Any, must: str) -> ValueError:
        """The ``ValueError`` ``"<Class>.<field>=<value!r> is invalid: must be <must>"`` (to be raised by the caller)."""
        return validation.invalid(f"{cls.__name__}.{field}", value, must)

    @classmethod
    def check(cls, condition: bool, field: str, value: Any, must: str) -> None:
        """Raises :meth:`invalid` ``(field, value, must)`` unless ``condition`` holds."""
        validation.check(condition, f"{cls.__name__}.{field}", value, must)

    @classmethod
    def check_range(
        cls,
        field: str,
        value: Any,
        lo: float | None,
        hi: float | None,
        *,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> None:
        """Checks that ``value`` is a real number (no bool, no NaN) within ``lo``..``hi`` (``None``: unbounded; ``*_open``: excluded).

        Raises ValueError, e.g. ``"Cfg.lr=-1 is invalid: must be a number in (0, 1]"``.
        """
        validation.check_range(f"{cls.__name__}.{field}", value, lo, hi, lo_open=lo_open, hi_open=hi_open)

    @classmethod
    def check_choice(cls, field: str, value: Any, choices: Iterable[Any]) -> None:
        """Checks that ``value`` is one of ``choices`` (ValueError, e.g. ``"Cfg.kl='k2' is invalid: must be one of ['k1', 'k3']"``)."""
        validation.check_choice(f"{cls.__name__}.{field}", value, choices)

    @classmethod
    def check_positive_int(cls, field: str, value: Any) -> None:
        """Checks that ``value`` is an int >= 1 (bools are rejected)."""
        validation.check_int(f"{cls.__name__}.{field}", value, 1)

    @classmethod
    def check_int_in(cls, field: str, value: Any, lo: int, hi: int) -> None:
        """Checks that ``value`` is an int with ``lo <= value <= hi`` (bools are rejected)."""
        validation.check_int(f"{cls.__name__}.{field}", value, lo, hi)

    @classmethod
    def check_nonnegative_int(cls, field: str, value: Any) -> None:
        """Checks that ``value`` is an int >= 0 (bools are rejected)."""
        validation.check_int(f"{cls.__name__}.{field}", value, 0)

    @classmethod
    def check_positive(cls, field: str, value: Any) -> None:
        """Checks that ``value`` is a finite real number > 0."""
        cls.check_range(field, value, 0, None, lo_open=True)

    @classmethod
    def check_nonnegative(cls, field: str, value: Any) -> None:
        """Checks that ``value`` is a finite real number >= 0."""
        cls.check_range(field, value, 0, None)

    @classmethod
    def check_probability(cls, field: str, value: Any) -> None:
        """Checks that ``value`` is a real number in [0, 1]."""
        cls.check_range(field, value, 0, 1)

    # --------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-compatible dict of the init fields (nested configs as dicts, tuples as lists)."""
        return to_jsonable(self)

    def to_json(self, path: str | Path | None = None, *, indent: int | None = 2) -> str:
        """Serialises to JSON text (sorted keys); also writes it to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=indent, sort_keys=True, allow_nan=False)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Builds (and validates) a config from a dict such as :meth:`to_dict` returns (lists to tuples, dicts to configs).

        Raises ValueError on unknown keys (listing the valid ones), missing required keys, wrong shapes, or from :meth:`validate`.
        """
        return _dataclass_from_dict(cls, data, cls.__name__)

    @classmethod
    def from_json(cls: type[C], text_or_path: str | Path) -> C:
        """Builds a config from JSON text, or from a file if given a ``Path`` or an existing path string."""
        if isinstance(text_or_path, Path) or not str(text_or_path).lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        else:
            text = str(text_or_path)
        return cls.from_dict(json.loads(text))

    def replace(self: C, **changes: Any) -> C:
        """A validated copy with ``changes`` applied; ValueError on an unknown field or from :meth:`validate`."""
        valid = [f.name for f in dataclasses.fields(self) if f.init]
        unknown = sorted(set(changes) - set(valid))
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: unknown field(s) {unknown}; valid fields: {sorted(valid)}"
            )
        return dataclasses.replace(self, **changes)

    def config_hash(self) -> str:
        """Short sha256 (first 12 hex chars) of the canonical JSON of :meth:`to_dict` (the class name is not hashed)."""
        return hash_jsonable(self.to_dict())


# ---------------------------------------------------------------- helpers
def to_jsonable(value: Any) -> Any:
    """A config value as JSON-compatible Python objects (dataclasses to dicts less :data:`OMIT_IF_DEFAULT` defaults).

    Raises TypeError for values with no JSON form.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            item = to_jsonable(getattr(value, f.name))
            if f.metadata.get(OMIT_IF_DEFAULT) and _is_default(f, item):
                continue
            out[f.name] = item
        return out
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_jsonable(v) for v in value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__} value {value!r} to JSON")


def _is_default(f: dataclasses.Field, jsonable: Any) -> bool:
    """Whether ``jsonable`` (a field value's JSON form) equals the JSON form of the field's default."""
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        default = f.default_factory()  # type: ignore[misc]
    else:
        return False
    return to_jsonable(default) == jsonable


def canonical_json(obj: Any) -> str:
    """Canonical JSON text: sorted keys, no whitespace, no NaN/inf."""
    return json.dumps(to_jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def hash_jsonable(obj: Any, length: int = HASH_LENGTH) -> str:
    """Short sha256 hex digest of :func:`canonical_json` ``(obj)``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:length]


_UNION_TYPES: tuple[Any, ...] = (Union,) + ((types.UnionType,) if hasattr(types, "UnionType") else ())


def _dataclass_from_dict(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping for {cls.__name__}, got {type(data).__name__} {data!r}")
    init_fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(init_fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(init_fields)}")
    missing = sorted(
        name
        for name, f in init_fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    )
    if missing:
        raise ValueError(f"{where}: missing required key(s) {missing}")
    hints = typing.get_type_hints(cls)
    kwargs = {k: _from_jsonable(hints.get(k, Any), v, f"{cls.__name__}.{k}") for k, v in data.items()}
    return cls(**kwargs)


def _from_jsonable(tp: Any, value: Any, where: str) -> Any:
    """Converts JSON-decoded ``value`` back to type hint ``tp`` (best effort, recursive)."""
    if tp is Any or tp is None:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in _UNION_TYPES:
        if value is None and type(None) in args:
            return None
        candidates = [a for a in args if a is not type(None)]
        errors = []
        for a in candidates:
            try:
                return _from_jsonable(a, value, where)
            except (ValueError, TypeError) as e:  # try the next member of the union
                errors.append(str(e))
        raise ValueError(f"{where}: {value!r} matches none of {candidates}: {errors}")
    if origin is typing.Literal:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return _dataclass_from_dict(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value if isinstance(value, tp) else tp(value)
    if origin is tuple or tp is tuple:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list for a tuple field, got {value!r}")
        if not args:
            return tuple(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_jsonable(args[0], v, where) for v in value)
        if len(args) != len(value):
            raise ValueError(f"{where}: expected {len(args)} items, got {len(value)}: {value!r}")
        return tuple(_from_jsonable(a, v, where) for a, v in zip(args, value))
    if origin in (list, set, frozenset) or tp in (list, set, frozenset):
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        items = [_from_jsonable(args[0], v, where) if args else v for v in value]
        container = origin or tp
        return container(items)
    if origin is dict or tp is dict or origin is Mapping:
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _from_jsonable(vt, v, where) for k, v in value.items()}
    if tp is float and _is_int(value):
        return float(value)
    if tp is Path and isinstance(value, str):
        return Path(value)
    if isinstance(tp, type) and tp in (int, float, str, bool) and not isinstance(value, tp):
        raise ValueError(f"{where}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value
