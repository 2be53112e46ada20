"""The testbed's second skill: three-digit subtraction, seen in pretraining and never in RL.

The out-of-task skill of the papers' transfer claims (SAGE's Knights and Knaves, VIGOR's math-to-code): its
family ``sub_ood`` is evaluated, no RL pool holds it. Same three strategies at the same branch token::

    734-258=?
    direct: #476
    split: 734-200-58=534-58=476 #476        (take the hundreds, then the rest)
    round: 734-260+2=474+2=476 #476          (round b up to a multiple of ten, add back)

Difficulty: borrows of the column subtraction (``easy`` 0, ``medium`` 1, ``hard`` 2). Pools: 50/50 ``"sft"`` /
``"eval"`` by a fixed hash (`split_of`). Why: docs/tasks/arithmetic.md."""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from rlvr_lib.tasks.base import Problem, Verdict
from rlvr_lib.tasks.step_format import verify_format

SKILL = "sub"
A_RANGE = (200, 999)
B_RANGE = (100, 989)
# b <= a - 10, so round's b rounded up to a multiple of ten never exceeds a (no negative intermediate).
MIN_DIFFERENCE = 10
_SPLIT_VERSION = "rlvr-testbed-sub-split-v1"
SPLITS = ("sft", "eval")
STRATEGIES = ("direct", "split", "round")
DIFFICULTIES = ("easy", "medium", "hard")


def check_operands(a: object, b: object) -> tuple[int, int]:
    """``(a, b)`` if ``a - b`` is a problem of this skill; else a ValueError naming the rule."""
    if not (isinstance(a, int) and A_RANGE[0] <= a <= A_RANGE[1]):
        raise ValueError(f"a={a!r} is not valid: must be an int in {A_RANGE[0]}..{A_RANGE[1]}")
    if not (isinstance(b, int) and B_RANGE[0] <= b <= a - MIN_DIFFERENCE):
        raise ValueError(f"b={b!r} is not valid: must be an int in {B_RANGE[0]}..a-{MIN_DIFFERENCE} (a={a})")
    return a, b


def borrows(a: int, b: int) -> int:
    """How many borrows the column subtraction ``a - b`` needs (0, 1 or 2 for three-digit ``a > b``)."""
    count, borrow = 0, 0
    while b:
        borrow = int(a % 10 - borrow < b % 10)
        count += borrow
        a, b = a // 10, b // 10
    return count


def difficulty_of(a: int, b: int) -> str:
    """``easy`` / ``medium`` / ``hard``: no, one or two borrows."""
    return DIFFICULTIES[min(borrows(a, b), 2)]


def split_of(a: int, b: int) -> str:
    """Pool of ``a - b``: ``"sft"`` (pretraining) or ``"eval"``, a fixed hash of the problem."""
    # The hash's first 32 bits as a unit in [0, 1) are >= 0.5 exactly when its top bit is set.
    return "eval" if hashlib.sha256(f"{_SPLIT_VERSION}:{a}-{b}".encode()).digest()[0] >= 0x80 else "sft"


def solution_trace(a: int, b: int, strategy: str) -> str:
    """The oracle completion of ``a - b`` with one strategy (module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not valid: must be one of {list(STRATEGIES)}")
    diff = a - b
    if strategy == "direct":
        return f"direct: #{diff}"
    if strategy == "split":
        hundreds, rest = b - b % 100, b % 100
        return f"split: {a}-{hundreds}-{rest}={a - hundreds}-{rest}={diff} #{diff}"
    up = b - b % 10 + 10 if b % 10 else b
    back = up - b
    return f"round: {a}-{up}+{back}={a - up}+{back}={diff} #{diff}"


def expected_first_step(a: int, b: int, strategy: str) -> str:
    """The chain's first expression of ``strategy`` on ``a - b`` (what the verifier checks first)."""
    return solution_trace(a, b, strategy).split(": ", 1)[1].split("=", 1)[0]


def make_problem(a: int, b: int, family: str = "custom", strategy: str = "split") -> Problem:
    """The problem ``a-b=?``; its oracle trace uses ``strategy``."""
    check_operands(a, b)
    return Problem(
        uid=f"{SKILL}:{a}-{b}",
        question=f"{a}-{b}=?",
        answer=str(a - b),
        family=family,
        difficulty=difficulty_of(a, b),
        oracle_trace=solution_trace(a, b, strategy),
        strategy=strategy,
        operands=(a, b),
    )


def is_subtraction(problem: Problem) -> bool:
    """Whether ``problem`` is of this skill (by its uid, ``"sub:<a>-<b>"``)."""
    return isinstance(problem.uid, str) and problem.uid.startswith(f"{SKILL}:")


def problem_pool(split: str, difficulty: str) -> list[tuple[int, int]]:
    """All ``(a, b)`` of one pool and difficulty, in a fixed order."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not valid for subtraction: must be one of {list(SPLITS)}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty={difficulty!r} is not valid: must be one of {list(DIFFICULTIES)}")
    return list(_pools()[split, difficulty])


@functools.lru_cache(maxsize=None)
def _pools() -> dict[tuple[str, str], tuple[tuple[int, int], ...]]:
    """Every ``(split, difficulty)`` pool, each pair in ``(a, b)`` order, classified once per process (every run's
    task draw reads them): the borrows column by column over all pairs at once (`borrows`' arithmetic), `split_of`
    per pair."""
    pairs = [(a, b) for a in range(A_RANGE[0], A_RANGE[1] + 1) for b in range(B_RANGE[0], a - MIN_DIFFERENCE + 1)]
    a, b = np.array(pairs, dtype=np.int64).T
    count, borrow = np.zeros_like(a), np.zeros_like(a)
    while b.any():  # `borrows` column by column; a pair whose b has run out of digits keeps its count
        digits = b > 0
        borrow = np.where(digits, (a % 10 - borrow < b % 10).astype(np.int64), borrow)
        count += borrow * digits
        a, b = a // 10, b // 10
    pools: dict[tuple[str, str], list[tuple[int, int]]] = {(s, d): [] for s in SPLITS for d in DIFFICULTIES}
    for pair, borrows_ in zip(pairs, np.minimum(count, 2).tolist()):
        pools[split_of(*pair), DIFFICULTIES[borrows_]].append(pair)
    return {key: tuple(pool) for key, pool in pools.items()}


def verify(problem: Problem, completion: object) -> Verdict:
    """Check a subtraction completion (the multiplication verifier's grammar and statuses); never raises on model output.

    First steps: ``split`` ``a-H-r`` (``H`` the hundreds of ``b``), ``round`` ``a-U+d`` (``U`` = ``b`` rounded up to ten)."""
    return verify_format(problem, completion, lambda strategy: expected_first_step(*problem.operands, strategy))
