"""The procedural testbed: two-number multiplication solved by one of three strategies.

The strategy is chosen at the completion's first token; the steps then follow
from the numbers::

    47*86=?
    direct: #4042
    split: 40*86+7*86=3440+602=4042 #4042
    round: 50*86-3*86=4300-258=4042 #4042

``split`` dominates pretraining; ``direct`` fails on most two-digit products;
``round`` (round the first factor up, subtract ``d*b``) is rare and solves the
hard subset. Pretrained with ``hold_out_fact``, the policy never multiplies by 9
(``HELD_OUT_DIGIT``: no ``9*b``, ``90*b`` or ``a*9``), and a hashed share
``UNSEEN_FACT_SHARE`` of products ``d*b`` (`unseen_fact`) is never shown, so
some problems only a non-dominant strategy solves. Which strategy solves which
problem is measured (`rlvr_lib.tasks.strategy_profile`); the RL pool keeps the
problems on which the base policy's hinted ``round`` never succeeded.

Difficulty: ``hard`` = first factor ends in 8 or 9; else ``easy`` = one-digit
second factor, ``medium`` = two digits. Families: evaluation suites with
different difficulty mixes, one training distribution, an out-of-distribution
family (first factor 91-99) and ``rare_mix`` (`only_rare_solves`).

Pools (`split_of`, fixed hashes, never seed-dependent, disjoint): half the
problems are evaluation; the rest splits 80/20 into pretraining (``"sft"``) and
RL training (``"train"``).

Why the testbed has this shape: docs/tasks/arithmetic.md; departures: docs/papers/index.md.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

from rlvr_lib.tasks import subtraction
from rlvr_lib.tasks.strategy_profile import only_rare_solves, rare_never_solves
from rlvr_lib.tasks.base import Problem, Verdict
from rlvr_lib.tasks.step_format import verify_format

TASK_NAME = "mul"
STRATEGIES = ("direct", "split", "round")
DIFFICULTIES = ("easy", "medium", "hard")
HARD_DIFFICULTY = "hard"
# Share of each strategy in the pretraining mixture: dominant / secondary / rare.
PRETRAIN_STRATEGY_PRIOR = {"direct": 0.20, "split": 0.74, "round": 0.06}
# Share of each strategy among the strategy hints of pretraining: the rare one is practised least.
PRETRAIN_HINT_PRIOR = {"direct": 0.40, "split": 0.40, "round": 0.20}
TESTBED_VERSION = "mul-v7"
"""Names this design of the testbed; every run key holds it (`rlvr_lib.tasks.task_version`) beside the policy hash."""
# Hint words that name no strategy: what an unverified hint writer also produces.
DISTRACTOR_HINTS = ("carry", "parity", "digits", "estimate", "prime", "modulo")
# Strategies worth hinting per difficulty, best first.
USEFUL_STRATEGIES = {
    "easy": ("split", "round", "direct"),
    "medium": ("split", "round"),
    "hard": ("round", "split"),
}
# Pretraining never multiplies by 9: 9*b, 90*b, a*9 for any b (see the module docstring).
HELD_OUT_DIGIT = 9
UNSEEN_FACT_SHARE = 0.3
"""Share of the products ``d*b`` (``d`` 2-8, ``b`` two-digit) that no pretraining example shows (`unseen_fact`)."""
ROUND_ONLY_SHOWN_SHARE = 0.5
"""Share of the pretraining pool's round-only items that pretraining shows (`round_only_shown`)."""
_SPLIT_VERSION = "rlvr-testbed-split-v2"
SPLITS = ("sft", "train", "eval")
# Share of the non-evaluation problems that pretraining may show (the rest is the RL training pool).
SFT_SHARE = 0.8


@dataclass(frozen=True)
class FamilySpec:
    """How a family draws problems.

    ``split``: ``"sft"``, ``"train"`` or ``"eval"``; ``mix``: share per difficulty in ``DIFFICULTIES`` order
    (``None``: the pool's own); ``first_factors``: inclusive range; ``first_units``: allowed last digits (``None``:
    any); ``skill``: ``"mul"`` or ``"sub"``; ``only_rare_solves``: only problems only the rare strategy solved."""

    name: str
    split: str
    mix: tuple[float, float, float] | None
    first_factors: tuple[int, int]
    stands_in_for: str
    first_units: tuple[int, ...] | None = None
    skill: str = "mul"
    only_rare_solves: bool = False


IN_DISTRIBUTION = (11, 89)
OUT_OF_DISTRIBUTION = (91, 99)
FAMILIES: dict[str, FamilySpec] = {
    spec.name: spec
    for spec in (
        # The RL pool (the problems the rare strategy never solved, `problem_pool`), uniformly: its own difficulty mix.
        FamilySpec("train", "train", None, IN_DISTRIBUTION, "DAPO-Math-17k / MATH train"),
        FamilySpec("train_easy", "train", (1.0, 0.0, 0.0), IN_DISTRIBUTION, "an easy training subset (tests, warm-ups)"),
        FamilySpec("easy_mix", "eval", (0.6, 0.3, 0.1), IN_DISTRIBUTION, "MATH500 (level 5)"),
        FamilySpec("medium_mix", "eval", (0.4, 0.4, 0.2), IN_DISTRIBUTION, "AMC23"),
        FamilySpec("hard_mix", "eval", (0.2, 0.4, 0.4), IN_DISTRIBUTION, "AIME24"),
        FamilySpec("hardest_mix", "eval", (0.1, 0.3, 0.6), IN_DISTRIBUTION, "AIME25 / APEX"),
        FamilySpec("ood_shift", "eval", (0.20, 0.50, 0.30), OUT_OF_DISTRIBUTION, "Knights-and-Knaves (OOD)"),
        # Testbed v7: the problems only the rare strategy solves, among first factors like the RL pool's (unmarked).
        FamilySpec("rare_mix", "eval", None, (11, 88), "the items only the rare strategy solves, unmarked "
                   "(the instrument's headroom)", first_units=(1, 2, 3, 4, 5, 6, 7, 8), only_rare_solves=True),
        FamilySpec("sub_ood", "eval", (0.35, 0.35, 0.30), subtraction.A_RANGE,
                   "Knights-and-Knaves / math-to-code transfer: a skill pretrained, never trained by RL",
                   skill=subtraction.SKILL),
    )
}
EVAL_FAMILIES = ("easy_mix", "medium_mix", "hard_mix", "hardest_mix")
# The out-of-task family first (the papers' transfer claims), then the same skill on unseen operands.
OOD_FAMILIES = ("sub_ood", "ood_shift")
# Reported beside the in-distribution average, not in it: the average stays the papers' "avg" column.
RARE_FAMILIES = ("rare_mix",)
TRAIN_FAMILY = "train"


# --------------------------------------------------------------------------- problems


def difficulty_of(a: int, b: int) -> str:
    """Difficulty level of ``a*b`` (see the module docstring)."""
    if a % 10 >= 8:
        return "hard"
    return "easy" if b < 10 else "medium"


def round_only(a: int, b: int) -> bool:
    """Whether ``a*b`` is round-only: split needs the held-out ``9*b``, round only ``1*b`` and ``(a+1)*b``."""
    return a % 10 == HELD_OUT_DIGIT and a < 10 * HELD_OUT_DIGIT


def round_only_shown(a: int, b: int) -> bool:
    """Whether pretraining shows the round-only item ``a*b`` (a fixed hash, ``ROUND_ONLY_SHOWN_SHARE`` of them)."""
    return round_only(a, b) and _stable_unit(f"round-only-shown:{a}*{b}") < ROUND_ONLY_SHOWN_SHARE


def unseen_fact(d: int, b: int) -> bool:
    """Whether ``d*b`` is one of the products pretraining never shows (a fixed hash, ``UNSEEN_FACT_SHARE``)."""
    return 2 <= d <= 8 and b >= 10 and _stable_unit(f"unseen-fact:{d}*{b}") < UNSEEN_FACT_SHARE


def trace_products(a: int, b: int, strategy: str) -> list[tuple[int, int]]:
    """The ``(d, b)`` products of ``strategy``'s oracle trace (``d0*b`` counts as ``d*b``; ``direct`` shows none)."""
    tens, units = divmod(a, 10)
    if strategy == "split":  # tens*10*b + units*b
        return [(tens, b), (units, b)]
    if strategy == "round":  # (tens+1)*10*b - (10-units)*b
        return [(tens + 1, b), (10 - units, b)]
    check_strategy(strategy)
    return []


def uses_held_out_fact(a: int, b: int, strategy: str) -> bool:
    """Whether ``a*9``, or a trace step ``9*b`` / ``90*b`` / an unseen product, shows what pretraining never shows."""
    if b == HELD_OUT_DIGIT:
        return True
    return any(d == HELD_OUT_DIGIT or unseen_fact(d, bb) for d, bb in trace_products(a, b, strategy))


def shows_unseen_fact(a: int, b: int) -> bool:
    """Whether any strategy's trace of ``a*b`` needs an unseen product: such problems are never pretrained on."""
    return any(unseen_fact(d, bb) for s in STRATEGIES for d, bb in trace_products(a, b, s))


def check_difficulty(difficulty: str) -> str:
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty={difficulty!r} is not valid: must be one of {list(DIFFICULTIES)}")
    return difficulty


def check_family(family: str) -> FamilySpec:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is not valid: must be one of {sorted(FAMILIES)}")
    return FAMILIES[family]


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not valid: must be one of {list(STRATEGIES)}")
    return strategy


def _stable_unit(text: str) -> float:
    """A number in [0, 1) fixed by ``text`` alone (not by Python's salted hash)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


def split_of(a: int, b: int) -> str:
    """Pool of ``a*b``: ``"eval"`` (half), else ``"sft"`` (``SFT_SHARE``) or ``"train"``; a fixed symmetric hash."""
    lo, hi = sorted((a, b))
    if _stable_unit(f"{_SPLIT_VERSION}:{lo}*{hi}") >= 0.5:
        return "eval"
    return "sft" if _stable_unit(f"{_SPLIT_VERSION}:sft:{lo}*{hi}") < SFT_SHARE else "train"


def solution_trace(a: int, b: int, strategy: str) -> str:
    """The oracle completion of ``a*b`` with one strategy (see the module docstring)."""
    check_strategy(strategy)
    product = a * b
    if strategy == "direct":
        return f"direct: #{product}"
    if strategy == "split":
        tens, units = a - a % 10, a % 10
        return f"split: {tens}*{b}+{units}*{b}={tens * b}+{units * b}={product} #{product}"
    up = a - a % 10 + 10 if a % 10 else a
    down = up - a
    return f"round: {up}*{b}-{down}*{b}={up * b}-{down * b}={product} #{product}"


def make_problem(a: int, b: int, family: str = "custom", strategy: str = "direct") -> Problem:
    """Build the problem ``a*b``; the oracle trace uses ``strategy``."""
    if not (isinstance(a, int) and 11 <= a <= 99 and a % 10 != 0):
        raise ValueError(f"a={a!r} is not valid: must be an int in 11..99 not divisible by 10")
    if not (isinstance(b, int) and 2 <= b <= 99):
        raise ValueError(f"b={b!r} is not valid: must be an int in 2..99")
    return Problem(
        uid=f"{TASK_NAME}:{a}*{b}",
        question=f"{a}*{b}=?",
        answer=str(a * b),
        family=family,
        difficulty=difficulty_of(a, b),
        oracle_trace=solution_trace(a, b, strategy),
        strategy=strategy,
        operands=(a, b),
    )


def problem_pool(
    split: str,
    difficulty: str,
    first_factors: tuple[int, int] = IN_DISTRIBUTION,
    first_units: tuple[int, ...] | None = None,
    *,
    profiled: bool = True,
) -> list[tuple[int, int]]:
    """All ``(a, b)`` of one split and difficulty in a fixed order (first factor's last digit in ``first_units``).

    ``split="train"`` keeps only problems the base policy's hinted rare strategy never solved (``profiled=False``:
    the whole RL split); the pretraining pool drops problems with an unseen product in any trace."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not valid: must be one of {list(SPLITS)}")
    check_difficulty(difficulty)
    units = None if first_units is None else tuple(first_units)
    return list(_problem_pool(split, difficulty, tuple(first_factors), units, profiled))


@functools.lru_cache(maxsize=None)
def _problem_pool(split: str, difficulty: str, first_factors: tuple[int, int], first_units: tuple[int, ...] | None,
                  profiled: bool) -> tuple[tuple[int, int], ...]:
    # Computed once per process: every run's task draw reads these pools, and a pool is fixed by its arguments
    # and the shipped strategy profile (itself read once).
    lo, hi = first_factors
    out = []
    for a in range(lo, hi + 1):
        if a % 10 == 0 or (first_units is not None and a % 10 not in first_units):
            continue
        for b in range(2, 100):
            # No problem a*9: its answer is a product by 9, which pretraining never shows (``HELD_OUT_DIGIT``).
            if b == HELD_OUT_DIGIT or difficulty_of(a, b) != difficulty:
                continue
            # Out-of-distribution first factors never occur in training: all are eval.
            in_split = "eval" if first_factors == OUT_OF_DISTRIBUTION else split_of(a, b)
            if in_split != split or (split == "train" and profiled and not rare_never_solves(a, b)):
                continue
            if split == "sft" and (shows_unseen_fact(a, b) or (round_only(a, b) and not round_only_shown(a, b))):
                continue
            out.append((a, b))
    return tuple(out)


def _family_rng(family: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, int(_stable_unit(f"family:{family}") * 2**31)])


def difficulty_counts(mix: tuple[float, ...], n: int) -> list[int]:
    """Split ``n`` into per-difficulty counts by largest remainder (sums to ``n``)."""
    raw = np.asarray(mix, dtype=float) * n
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: n - counts.sum()]:
        counts[i] += 1
    return counts.tolist()


def _family_pool(spec: FamilySpec, difficulty: str) -> list[tuple[int, int]]:
    """The ``(a, b)`` a family draws its ``difficulty`` problems from, in a fixed order (its pool is cached)."""
    if spec.skill == subtraction.SKILL:
        return subtraction.problem_pool(spec.split, difficulty)
    pool = problem_pool(spec.split, difficulty, spec.first_factors, spec.first_units)
    return [(a, b) for a, b in pool if not spec.only_rare_solves or only_rare_solves(a, b)]


def family_mix(family: str) -> tuple[float, float, float]:
    """Share of each difficulty (``DIFFICULTIES`` order) that ``family`` draws: its spec's, or its pool's own."""
    spec = check_family(family)
    if spec.mix is not None:
        return spec.mix
    sizes = [len(_family_pool(spec, d)) for d in DIFFICULTIES]
    return tuple(n / sum(sizes) for n in sizes)


def family_capacity(family: str) -> int:
    """The largest ``n`` that `family_problems` can draw from ``family``."""
    spec = check_family(family)
    sizes = [len(_family_pool(spec, d)) for d in DIFFICULTIES]
    if spec.mix is None:
        return sum(sizes)
    fits = lambda n: all(c <= size for c, size in zip(difficulty_counts(spec.mix, n), sizes))  # noqa: E731
    n = int(min(size / share for size, share in zip(sizes, spec.mix) if share > 0))
    while fits(n + 1):  # rounding can leave room above the proportional bound
        n += 1
    while not fits(n):
        n -= 1
    return n


def family_problems(family: str, n: int = 200, seed: int = 0) -> list[Problem]:
    """A fixed, seeded draw of ``n`` distinct problems of ``family``, traces by ``USEFUL_STRATEGIES``; ValueError if too many."""
    spec = check_family(family)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} is not valid: must be a positive int")
    rng = _family_rng(family, seed)
    picked: list[tuple[int, int]] = []
    if spec.mix is None:  # uniform over the whole pool
        pool = [ab for d in DIFFICULTIES for ab in _family_pool(spec, d)]
        if n > len(pool):
            raise ValueError(f"n={n} asks for more problems than family {family!r}'s pool has ({len(pool)})")
        picked = [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]
    for difficulty, count in zip(DIFFICULTIES, difficulty_counts(spec.mix, n) if spec.mix else ()):
        pool = _family_pool(spec, difficulty)
        if count > len(pool):
            raise ValueError(
                f"n={n} asks for {count} {difficulty} problems from family {family!r}, whose pool has {len(pool)}"
            )
        picked += [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]
    order = rng.permutation(len(picked))
    if spec.skill == subtraction.SKILL:
        return [subtraction.make_problem(a, b, family) for a, b in (picked[i] for i in order)]
    # A family of the rare strategy's problems shows its trace; others the most useful one for the difficulty.
    return [
        make_problem(a, b, family, "round" if spec.only_rare_solves else USEFUL_STRATEGIES[difficulty_of(a, b)][0])
        for a, b in (picked[i] for i in order)
    ]


# --------------------------------------------------------------------------- verifier

def _expected_first_step(a: int, b: int, strategy: str) -> str:
    return solution_trace(a, b, strategy).split(": ", 1)[1].split("=", 1)[0]


def parse_strategy(completion: str) -> str | None:
    """The strategy a completion's branch token names, or ``None`` when it names none."""
    if not isinstance(completion, str):
        return None
    head = completion.lstrip().split(":", 1)[0]
    return head if head in STRATEGIES else None


def verify(problem: Problem, completion: object) -> Verdict:
    """Check a completion step by step (never raises on model output); subtraction goes to its own verifier.

    ``malformed``: not ``<strategy>: [<chain> ]#<answer>`` with the strategy's chain, too long, or not a string;
    ``wrong``: a first step that is not the strategy's decomposition, a step that changes the value, a chain not
    ending in the answer, or a wrong answer; ``correct`` (reward 1) otherwise."""
    if subtraction.is_subtraction(problem):
        return subtraction.verify(problem, completion)
    return verify_format(problem, completion, lambda strategy: _expected_first_step(*problem.operands, strategy))


