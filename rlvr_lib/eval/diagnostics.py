"""Exploration diagnostics: dead groups, rescued / lost groups, outcome rates, lengths.

* 3PO (arXiv 2608.09805) Fig. 3: paired against GRPO on the same prompts,
  how many zero-advantage groups a method *rescues* (gives a learning
  signal) versus *loses*; and the rates of degenerate (malformed) and
  incorrect rollouts (Polaris buys malformed ones, entropy regularisation
  incorrect ones).
* NudgeRL (arXiv 2605.15726): the share of groups with no reward variance,
  which GRPO cannot learn from (``A_i = 0`` for all ``i``); DAPO's dynamic
  sampling drops exactly these groups.
* Completion lengths (VIGOR: length hacking without ``sqrt(T)``;
  INTUITOR's length drift).
* Where a training curve flattens (:func:`plateau_step`), which sets how long
  the full profile trains.

All functions take numpy arrays, torch tensors or plain sequences and never
modify their input.
"""

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

    A group ``g`` is zero-advantage when ``max_{i in g} r_i - min_{i in g} r_i <= atol``;
    then ``A_i = (r_i - mean(r)) / (std(r) + eps) = 0`` for all its rollouts
    (NudgeRL, 3PO Fig. 3; DAPO dynamic sampling drops such groups).

    Args:
        rewards: either 1-D ``(N,)`` with ``group_index`` giving each
            rollout's group id (any hashable values, groups may differ in
            size), or 2-D ``(n_groups, G)`` with ``group_index=None``.
            numpy, torch or a sequence.
        group_index: 1-D ``(N,)`` group ids, or ``None`` for 2-D ``rewards``.
        atol: tolerance on the spread, ``>= 0`` (0: exact equality).

    Returns:
        ``(# zero-advantage groups) / (# groups)``.

    Raises:
        ValueError: on empty / non-finite rewards, a shape mismatch or a bad ``atol``.
    """
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
    """Whether each group gives GRPO no learning signal ("dead").

    * ``"zero_advantage"``: ``max(r) - min(r) <= atol`` (all-correct and
      all-wrong groups alike; 3PO Fig. 3).
    * ``"all_zero"``: no rollout succeeds, ``max(r) <= success_threshold``
      (unsolved groups only; an all-correct group is alive).

    Args:
        rewards_by_group: sequence of 1-D reward arrays (groups may differ in size).
        criterion: ``"zero_advantage"`` or ``"all_zero"``.
        atol: tolerance for ``"zero_advantage"``.
        success_threshold: a rollout succeeds iff ``r > success_threshold``
            (``"all_zero"``; 0.5 suits 0/1 and -1/+1 rewards).

    Returns:
        bool array ``(n_groups,)``.

    Raises:
        ValueError: on no groups, an empty / non-finite group or a bad option.
    """
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
    """Paired comparison of dead groups, method vs baseline (3PO Fig. 3).

    Attributes:
        criterion: definition of a dead group (see :func:`dead_group_mask`).
        n_groups: prompts compared (present in both runs).
        dead_base, dead_other: dead groups under the baseline / the method.
        rescued: dead under the baseline, alive under the method.
        lost: alive under the baseline, dead under the method.
        net: ``rescued - lost``.
        rescued_rate, lost_rate: ``rescued / n_groups``, ``lost / n_groups``.
        rescued_of_dead: ``rescued / dead_base`` (NaN if ``dead_base == 0``).
        lost_of_alive: ``lost / (n_groups - dead_base)`` (NaN if no alive group).
    """

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
    """Groups rescued and lost by a method, paired with a baseline on the same prompts.

    Definition used (3PO Fig. 3, default ``criterion="zero_advantage"``): a
    group is the G rollouts of one prompt; it is *dead* when all its rewards
    are equal (``max - min <= atol``), so every GRPO advantage is 0. For each
    prompt ``x`` present in both runs::

        rescued(x) = dead_base(x) and not dead_other(x)
        lost(x)    = not dead_base(x) and dead_other(x)

    i.e. a zero-advantage group under the baseline (GRPO) that has non-zero
    advantage under the method is rescued, and the reverse is lost.
    With ``criterion="all_zero"`` dead means *unsolved*
    (``max r <= success_threshold``): rescued = no success under the
    baseline and at least one under the method, lost = the reverse;
    all-correct groups then count as alive.

    Args:
        base_rewards_by_prompt: ``{prompt_id: rewards (G,)}`` of the baseline
            run, or a sequence of groups aligned by position.
        other_rewards_by_prompt: the same for the method. Both must cover the
            same prompts; group sizes may differ (GRPO@8 vs GRPO@32).
        criterion: ``"zero_advantage"`` or ``"all_zero"``.
        atol: spread tolerance (``"zero_advantage"``).
        success_threshold: success iff ``r > success_threshold`` (``"all_zero"``).

    Returns:
        :class:`RescuedLostGroups`.

    Raises:
        ValueError: when the two runs do not cover the same prompts, on an
            empty input, or on a bad group / option.
    """
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
    """Fractions of ``"correct"``, ``"wrong"``, ``"malformed"`` and ``"timeout"`` rollouts (3PO Fig. 3).

    ``rate[s] = |{i : status_i = s}| / N``; the four rates sum to 1 (3PO's three
    classes, plus the grading time-outs that are none of them).

    Args:
        statuses: N verifier statuses: strings from :data:`STATUSES` (or
            enum members whose ``.value`` is one).

    Returns:
        ``{"correct": ..., "wrong": ..., "malformed": ..., "timeout": ...}``.

    Raises:
        ValueError: on an empty input or an unknown status.
    """
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
    """Mean, median and 90th percentile of completion lengths (tokens or characters).

    ``p90`` uses linear interpolation between order statistics
    (``numpy.percentile`` default): for sorted ``x_(0..N-1)``, position
    ``0.9 (N - 1)``.

    Args:
        lengths: 1-D, N >= 1 non-negative finite numbers (numpy, torch or sequence).

    Returns:
        ``{"n": N, "mean": ..., "median": ..., "p90": ...}``.

    Raises:
        ValueError: on an empty / non-1-D input or a negative / non-finite length.
    """
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
    """The first step by which a falling curve (e.g. training entropy) has flattened.

    With ``m_j`` the mean of window ``j`` (steps ``[j w, (j+1) w)``), the
    curve has flattened at the end of the first window whose mean falls by
    less than ``rel_drop`` of the first window's mean::

        j* = min{j >= 1 : m_{j-1} - m_j < rel_drop * m_0},   step = (j* + 1) * w

    NaN / None values (steps where the metric was not logged) are skipped
    within their window.

    Args:
        values: One value per step, in step order.
        window: ``w``, steps per window (``>= 1``).
        rel_drop: Threshold as a share of the first window's mean (``> 0``).

    Returns:
        The step count after which the curve is flat, or ``None`` when no
        window qualifies (still falling at the end: train longer).

    Raises:
        ValueError: on fewer than two full windows, or bad ``window``/``rel_drop``.
    """
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
