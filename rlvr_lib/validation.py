"""The library's one set of scalar argument checks and their one error format.

Every check raises ``ValueError`` with the message built by :func:`invalid`::

    <name>=<value!r> is invalid: must be <what is allowed>

for example ``top_p=0 is invalid: must be a number in (0, 1]`` or
``SamplingParams.max_new_tokens=0 is invalid: must be an integer >= 1``.
Configs (:class:`rlvr_lib.config.ConfigBase`) pass ``"<Class>.<field>"`` as
the name; functions pass the argument's name.

These are checks of single Python/numpy scalars (and of membership in a set
of choices); checks of tensors and arrays (shapes, dtypes, finiteness, index
ranges) stay with the code that owns them. The module imports neither torch
nor numpy.

Intervals are written with ``None`` bounds as infinities, which are excluded
(``[0, inf)``, ``(-inf, 5]``): an unbounded check accepts every finite number
and rejects ``inf``. To accept infinity pass it as a closed bound,
``hi=math.inf`` (written ``[0, inf]``).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, TypeVar

__all__ = ["check", "check_choice", "check_int", "check_range", "invalid", "is_int", "is_real"]

T = TypeVar("T")


def invalid(name: str, value: Any, must: str) -> ValueError:
    """Builds the library's standard error for a bad argument or field value.

    Args:
        name: What was checked: an argument name (``"top_p"``) or
            ``"<Class>.<field>"``.
        value: The offending value (shown with ``repr``).
        must: What is allowed, phrased to follow "must be", e.g.
            ``"a number in [0, 1]"``.

    Returns:
        A ``ValueError`` (for the caller to raise) with message
        ``"<name>=<value!r> is invalid: must be <must>"``.
    """
    return ValueError(f"{name}={value!r} is invalid: must be {must}")


def check(condition: Any, name: str, value: Any, must: str) -> None:
    """Raises :func:`invalid` ``(name, value, must)`` unless ``condition`` holds."""
    if not condition:
        raise invalid(name, value, must)


def _fmt(x: Any) -> str:
    """Formats a bound compactly: ``1.0 -> '1'``, ``0.5 -> '0.5'``, ``inf -> 'inf'``."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)


def _numpy_kind(value: Any) -> str | None:
    """The numpy dtype kind of a 0-d numpy value (``'i'``, ``'f'``, ...), else ``None``."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(value, "ndim", None) != 0:
        return None
    kind = getattr(dtype, "kind", None)  # torch dtypes have no .kind: not numpy
    return kind if isinstance(kind, str) else None


def is_real(value: Any) -> bool:
    """True for real numbers (ints, floats, numpy scalars of them), false for bools.

    NaN and infinities count as real here; :func:`check_range` rejects them.
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        return True
    return _numpy_kind(value) in ("i", "u", "f")


def is_int(value: Any) -> bool:
    """True for ints (and numpy integer scalars), false for bools and floats."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral):
        return True
    return _numpy_kind(value) in ("i", "u")


def interval_text(lo: float | None, hi: float | None, *, lo_open: bool = False, hi_open: bool = False) -> str:
    """Writes an interval as :func:`check_range` does: ``(0, 1]``, ``[0, inf)``, ``(-inf, 5]``."""
    left = "(" if lo_open or lo is None else "["
    right = ")" if hi_open or hi is None else "]"
    lo_s = "-inf" if lo is None else _fmt(lo)
    hi_s = "inf" if hi is None else _fmt(hi)
    return f"{left}{lo_s}, {hi_s}{right}"


def check_range(
    name: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """Checks that ``value`` is a real number in the interval ``lo``..``hi``.

    Args:
        name: Argument or ``"<Class>.<field>"`` name, for the message.
        value: Value to check: an int, a float or a numpy scalar of one.
            Bools, NaN, strings, tensors and everything else are rejected.
        lo: Lower bound, or ``None`` for unbounded below (``-inf`` itself
            is then rejected).
        hi: Upper bound, or ``None`` for unbounded above (``inf`` itself
            is then rejected).
        lo_open: Exclude ``lo`` itself.
        hi_open: Exclude ``hi`` itself.

    Returns:
        ``float(value)``.

    Raises:
        ValueError: e.g. ``"lr=-1 is invalid: must be a number in (0, 1]"``.
    """
    ok = is_real(value)
    if ok:
        v = float(value)
        ok = not math.isnan(v)
        if ok:
            lo_ok = (v > -math.inf) if lo is None else (v > lo if lo_open else v >= lo)
            hi_ok = (v < math.inf) if hi is None else (v < hi if hi_open else v <= hi)
            ok = lo_ok and hi_ok
    if not ok:
        raise invalid(name, value, f"a number in {interval_text(lo, hi, lo_open=lo_open, hi_open=hi_open)}")
    return v


def _int_text(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"an integer in [{lo}, {hi}]"
    if lo is not None:
        return f"an integer >= {lo}"
    if hi is not None:
        return f"an integer <= {hi}"
    return "an integer"


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """Checks that ``value`` is an integer with ``lo <= value <= hi`` (``None``: unbounded).

    Python ints and numpy integer scalars are accepted; bools and floats
    (even ``2.0``) are rejected.

    Returns:
        ``int(value)``.

    Raises:
        ValueError: e.g. ``"batch_size=0 is invalid: must be an integer >= 1"``
            or ``"... must be an integer in [1, 8]"``.
    """
    ok = is_int(value) and (lo is None or value >= lo) and (hi is None or value <= hi)
    if not ok:
        raise invalid(name, value, _int_text(lo, hi))
    return int(value)


def check_choice(name: str, value: T, choices: Iterable[Any]) -> T:
    """Checks that ``value`` equals one of ``choices``.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: e.g. ``"kernel='fast' is invalid: must be one of ['torch', 'triton']"``.
    """
    choices = list(choices)
    try:
        ok = value in choices
    except (TypeError, ValueError):  # e.g. an array, whose == has no single truth value
        ok = False
    if not ok:
        raise invalid(name, value, f"one of {choices!r}")
    return value
