"""Run records on disk; so far the strict-JSON form of their values (moving here from `rlvr_lib.experiments`, issue 30).

Below `rlvr_lib.study.stats`, which reads values in this form, so that neither imports `rlvr_lib.experiments`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr_lib.config import ConfigBase

__all__ = ["jsonable"]


def jsonable(value: Any) -> Any:
    """Converts a result value to strict-JSON Python objects.

    numpy scalars/arrays and torch tensors become numbers/lists, dataclasses
    dicts, tuples/sets lists, paths strings, mapping keys strings; NaN and
    +-inf become ``None``.

    Raises:
        TypeError: for an object with no JSON form.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, ConfigBase):
            return jsonable(value.to_dict())
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, Path):
        return str(value)
    # torch tensors and numpy arrays/scalars, without importing either here
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch (bf16 has no numpy form)
        return jsonable(value.detach().cpu().tolist())
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    raise TypeError(f"cannot serialise {type(value).__name__} value {value!r} to JSON")
