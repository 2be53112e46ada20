"""Exploration diagnostics: dead groups, rescued / lost groups, outcome rates, lengths.

* 3PO (arXiv 2608.09805) Fig. 3: groups a method rescues / loses against GRPO, and the malformed / wrong rates.
* NudgeRL (arXiv 2605.15726): the share of groups with no reward variance (``A_i = 0`` for all ``i``).
* Completion lengths (VIGOR's length hacking; INTUITOR's length drift), and :func:`plateau_step`.

Inputs may be numpy arrays, torch tensors or sequences; none is modified."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rlvr_lib.validation import check_choice, check_range

__all__ = [
    "CRITERIA",
    "STATUSES",
    "RescuedLostGroups",
    "dead_group_mask",
    "length_stats",
    "outcome_rates",
    "plateau_step",
    "rescued_lost_groups",
    "zero_advantage_fraction",
]

STATUSES = ("correct", "wrong", "malformed", "timeout")
"""Verifier statuses, as in ``rlvr_lib.tasks`` (``Verdict.status``; a test holds the two equal)."""

CRITERIA = ("zero_advantage", "all_zero")
"""Definitions of a "dead" group accepted by :func:`rescued_lost_groups`."""


def _to_numpy(name: str, x: Any) -> np.ndarray:
    """Array view of numpy / torch / sequence input (torch: detached, on CPU)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:  # ragged sequences
        raise ValueError(f"{name} cannot be read as an array: {err}") from err
    return arr


def _as_rewards(name: str, x: Any, ndim: tuple[int, ...] = (1,)) -> np.ndarray:
    arr = _to_numpy(name, x)
    if arr.ndim not in ndim:
        raise ValueError(f"{name} has shape {arr.shape}: must be {' or '.join(f'{d}-D' for d in ndim)}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: must hold at least one value")
    if arr.dtype == bool:
        arr = arr.astype(np.float64)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} has dtype {arr.dtype}: values must be numbers")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf: values must be finite")
    return arr


def _group_spread(rewards: np.ndarray, group_index: Any) -> np.ndarray:
    """``max(r) - min(r)`` per group; groups ordered by sorted group id."""
    idx = _to_numpy("group_index", group_index)
    if idx.ndim != 1 or idx.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"group_index has shape {idx.shape}: must be 1-D with one group id per reward ({rewards.shape[0]})"
        )
    _, inverse = np.unique(idx, return_inverse=True)
    n_groups = int(inverse.max()) + 1
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, inverse, rewards)
    np.minimum.at(lo, inverse, rewards)
    return hi - lo


def zero_advantage_fraction(rewards: Any, group_index: Any = None, *, atol: float = 0.0) -> float:
    """Share of groups whose rewards are all equal (so every GRPO advantage is 0).

    Group ``g`` is zero-advantage when ``max_{i in g} r_i - min_{i in g} r_i <= atol``, so
    ``A_i = (r_i - mean(r)) / (std(r) + eps) = 0``. ``rewards``: ``(N,)`` with ``group_index (N,)`` (any ids,
    any sizes), or ``(n_groups, G)`` with ``group_index=None``. Raises ValueError on empty / non-finite rewards,
    a shape mismatch or a bad ``atol``."""
    atol = check_range("atol", atol, 0)
    if group_index is None:
        r = _as_rewards("rewards", rewards, ndim=(2,))
        spread = r.max(axis=1) - r.min(axis=1)
    else:
        r = _as_rewards("rewards", rewards, ndim=(1,))
        spread = _group_spread(r, group_index)
    return float(np.mean(spread <= atol))


def dead_group_mask(
    rewards_by_group: Sequence[Any], *, criterion: str = "zero_advantage", atol: float = 0.0, success_threshold: float = 0.5
) -> np.ndarray:
    """Bool ``(n_groups,)``: whether each group is dead.

    ``"zero_advantage"``: ``max(r) - min(r) <= atol`` (3PO Fig. 3); ``"all_zero"``: ``max(r) <= success_threshold``
    (unsolved only). Raises ValueError on no groups, an empty / non-finite group or a bad option."""
    check_choice("criterion", criterion, CRITERIA)
    atol = check_range("atol", atol, 0)
    check_range("success_threshold", success_threshold)
    if isinstance(rewards_by_group, (str, bytes)) or not hasattr(rewards_by_group, "__len__"):
        raise ValueError(f"rewards_by_group={rewards_by_group!r:.80} is not valid: must be a sequence of reward arrays")
    if len(rewards_by_group) == 0:
        raise ValueError("rewards_by_group is empty: must hold at least one group")
    out = np.empty(len(rewards_by_group), dtype=bool)
    for i, g in enumerate(rewards_by_group):
        r = _as_rewards(f"rewards_by_group[{i}]", g, ndim=(1,))
        out[i] = (r.max() - r.min() <= atol) if criterion == "zero_advantage" else (r.max() <= success_threshold)
    return out


@dataclass(frozen=True)
class RescuedLostGroups:
    """Paired dead-group comparison, method vs baseline (3PO Fig. 3).

    ``net = rescued - lost``; ``rescued_rate = rescued / n_groups``; ``lost_rate = lost / n_groups``;
    ``rescued_of_dead = rescued / dead_base``; ``lost_of_alive = lost / (n_groups - dead_base)`` (NaN on 0)."""

    criterion: str
    n_groups: int
    dead_base: int
    dead_other: int
    rescued: int
    lost: int
    net: int
    rescued_rate: float
    lost_rate: float
    rescued_of_dead: float
    lost_of_alive: float

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready except NaN rates)."""
        return asdict(self)


def _as_groups(name: str, groups: Any) -> dict[Any, Any]:
    if isinstance(groups, Mapping):
        return dict(groups)
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__len__") or not hasattr(groups, "__iter__"):
        raise ValueError(f"{name} is a {type(groups).__name__}: must be a mapping prompt -> rewards or a sequence of groups")
    return dict(enumerate(groups))


def rescued_lost_groups(
    base_rewards_by_prompt: Mapping[Any, Any] | Sequence[Any],
    other_rewards_by_prompt: Mapping[Any, Any] | Sequence[Any],
    *,
    criterion: str = "zero_advantage",
    atol: float = 0.0,
    success_threshold: float = 0.5,
) -> RescuedLostGroups:
    """Groups rescued and lost by a method, paired with a baseline on the same prompts (3PO Fig. 3).

    For each prompt ``x`` in both runs (``dead`` per :func:`dead_group_mask`)::

        rescued(x) = dead_base(x) and not dead_other(x)
        lost(x)    = not dead_base(x) and dead_other(x)

    Inputs: ``{prompt_id: rewards (G,)}`` or groups aligned by position; group sizes may differ.
    Raises ValueError when the runs cover different prompts, or on an empty input or a bad group / option."""
    base = _as_groups("base_rewards_by_prompt", base_rewards_by_prompt)
    other = _as_groups("other_rewards_by_prompt", other_rewards_by_prompt)
    if not base:
        raise ValueError("base_rewards_by_prompt is empty: must hold at least one group")
    if base.keys() != other.keys():
        only_b = [k for k in base if k not in other][:5]
        only_o = [k for k in other if k not in base][:5]
        raise ValueError(
            "base_rewards_by_prompt and other_rewards_by_prompt must cover the same prompts (paired comparison): "
            f"only in base: {only_b}, only in other: {only_o} (first 5 shown)"
        )
    keys = list(base)
    kw = dict(criterion=criterion, atol=atol, success_threshold=success_threshold)
    dead_b = dead_group_mask([base[k] for k in keys], **kw)
    dead_o = dead_group_mask([other[k] for k in keys], **kw)
    n = len(keys)
    rescued = int(np.sum(dead_b & ~dead_o))
    lost = int(np.sum(~dead_b & dead_o))
    n_dead_b = int(dead_b.sum())
    return RescuedLostGroups(
        criterion=criterion,
        n_groups=n,
        dead_base=n_dead_b,
        dead_other=int(dead_o.sum()),
        rescued=rescued,
        lost=lost,
        net=rescued - lost,
        rescued_rate=rescued / n,
        lost_rate=lost / n,
        rescued_of_dead=rescued / n_dead_b if n_dead_b else float("nan"),
        lost_of_alive=lost / (n - n_dead_b) if n > n_dead_b else float("nan"),
    )


def outcome_rates(statuses: Sequence[Any]) -> dict[str, float]:
    """``rate[s] = |{i : status_i = s}| / N`` for correct / wrong / malformed / timeout (3PO Fig. 3); sums to 1."""
    if isinstance(statuses, str) or not hasattr(statuses, "__len__"):
        raise ValueError(f"statuses={statuses!r:.80} is not valid: must be a sequence of statuses")
    if len(statuses) == 0:
        raise ValueError("statuses is empty: must hold at least one status")
    counts = dict.fromkeys(STATUSES, 0)
    for i, s in enumerate(statuses):
        s = getattr(s, "value", s)
        check_choice(f"statuses[{i}]", s, STATUSES)
        counts[s] += 1
    n = len(statuses)
    return {s: c / n for s, c in counts.items()}


def length_stats(lengths: Any) -> dict[str, float]:
    """``{"n", "mean", "median", "p90"}`` of lengths (``p90``: numpy's linear interpolation at ``0.9 (N - 1)``)."""
    arr = _as_rewards("lengths", lengths, ndim=(1,))
    if np.any(arr < 0):
        raise ValueError(f"lengths contains {arr[arr < 0][0]}: lengths must be >= 0")
    return {
        "n": int(arr.size),
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "p90": float(np.percentile(arr, 90)),
    }


def plateau_step(values: Any, *, window: int = 20, rel_drop: float = 0.1) -> int | None:
    """The step by which a falling curve has flattened, or ``None`` (still falling: train longer).

    With ``m_j`` the mean of window ``j`` (steps ``[j w, (j+1) w)``; NaN / None skipped)::

        j* = min{j >= 1 : m_{j-1} - m_j < rel_drop * m_0},   step = (j* + 1) * w

    Raises ValueError on fewer than two full windows or a bad ``window`` / ``rel_drop``."""
    check_range("rel_drop", rel_drop, 0, None, lo_open=True)
    if not isinstance(window, (int, np.integer)) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window={window!r} is invalid: must be an integer >= 1")
    x = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    n = len(x) // window
    if n < 2:
        raise ValueError(f"values has {len(x)} steps: must hold at least two windows of {window}")
    means = np.array([np.nanmean(x[j * window:(j + 1) * window]) for j in range(n)])
    for j in range(1, n):
        if means[j - 1] - means[j] < rel_drop * means[0]:
            return (j + 1) * window
    return None
