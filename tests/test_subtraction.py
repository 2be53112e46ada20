"""The testbed's out-of-task skill: three-digit subtraction (generators, pools and verifier)."""

import hashlib

import numpy as np
import pytest

from rlvr_lib.tasks import CORRECT, MALFORMED, WRONG
from rlvr_lib.tasks.arithmetic import family_capacity, family_problems, verify
from rlvr_lib.tasks import subtraction as sub
from rlvr_lib.tasks.arithmetic import OOD_FAMILIES


def _operands(n=300, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        a = int(rng.integers(sub.A_RANGE[0], sub.A_RANGE[1] + 1))
        b = int(rng.integers(sub.B_RANGE[0], a - sub.MIN_DIFFERENCE + 1))
        out.append((a, b))
    return out


@pytest.mark.parametrize("strategy", sub.STRATEGIES)
def test_every_oracle_trace_verifies_and_its_chain_holds(strategy):
    for a, b in _operands():
        problem = sub.make_problem(a, b, strategy=strategy)
        assert verify(problem, problem.oracle_trace).status == CORRECT, problem.oracle_trace
        assert problem.answer == str(a - b) and problem.question == f"{a}-{b}=?"


def test_traces_by_hand():
    assert sub.solution_trace(734, 258, "split") == "split: 734-200-58=534-58=476 #476"
    assert sub.solution_trace(734, 258, "round") == "round: 734-260+2=474+2=476 #476"
    assert sub.solution_trace(734, 250, "round") == "round: 734-250+0=484+0=484 #484"
    assert sub.solution_trace(734, 258, "direct") == "direct: #476"


def test_difficulty_counts_borrows():
    assert sub.borrows(958, 723) == 0 and sub.difficulty_of(958, 723) == "easy"
    assert sub.borrows(734, 258) == 2 and sub.difficulty_of(734, 258) == "hard"
    assert sub.borrows(864, 556) == 1 and sub.difficulty_of(864, 556) == "medium"
    for a, b in _operands(200, seed=1):  # against column subtraction done digit by digit
        digits_a, digits_b = [int(c) for c in f"{a:03d}"][::-1], [int(c) for c in f"{b:03d}"][::-1]
        borrow, count = 0, 0
        for x, y in zip(digits_a, digits_b):
            borrow = int(x - borrow < y)
            count += borrow
        assert sub.borrows(a, b) == count


def test_verifier_statuses_and_never_raises():
    p = sub.make_problem(734, 258)
    assert verify(p, "split: 734-200-58=534-58=476 #476").status == CORRECT
    assert verify(p, "split: 734-250-8=484-8=476 #476").status == WRONG  # not the split decomposition
    assert verify(p, "round: 734-260+2=474+2=477 #477").status == WRONG  # a step changes the value
    assert verify(p, "direct: #475").status == WRONG
    assert verify(p, "split: #476").status == MALFORMED
    for junk in (None, 3, "", "#476", "round: 734-260+2=", "x" * 500, "split: 7**3=1 #1"):
        assert verify(p, junk).status in (WRONG, MALFORMED)


def test_pools_are_disjoint_and_the_family_draws_from_eval_only():
    assert OOD_FAMILIES[0] == "sub_ood"
    problems = family_problems("sub_ood", 200, seed=0)
    assert len({p.uid for p in problems}) == 200 and family_capacity("sub_ood") >= 200
    assert all(sub.split_of(*p.operands) == "eval" and sub.is_subtraction(p) for p in problems)
    counts = {d: sum(p.difficulty == d for p in problems) for d in sub.DIFFICULTIES}
    assert counts == {"easy": 70, "medium": 70, "hard": 60}
    assert family_problems("sub_ood", 200, seed=0) == problems
    sft = set(sub.problem_pool("sft", "medium"))
    assert sft and not sft & set(sub.problem_pool("eval", "medium"))


def test_the_pools_partition_every_pair_by_its_borrows_and_split():
    """The pools are classified all at once (vectorised borrows); each pair lies in exactly one, the one `borrows`
    and the split's hash (its first 32 bits as a unit, >= 0.5: eval) give it, in (a, b) order."""
    pools = {(split, d): sub.problem_pool(split, d) for split in sub.SPLITS for d in sub.DIFFICULTIES}
    every = [(a, b) for a in range(sub.A_RANGE[0], sub.A_RANGE[1] + 1)
             for b in range(sub.B_RANGE[0], a - sub.MIN_DIFFERENCE + 1)]
    assert sorted(pair for pool in pools.values() for pair in pool) == every
    for (split, difficulty), pool in pools.items():
        assert pool == sorted(pool)
        for a, b in pool[::97]:
            assert sub.difficulty_of(a, b) == difficulty and sub.split_of(a, b) == split
            unit = int(hashlib.sha256(f"{sub._SPLIT_VERSION}:{a}-{b}".encode()).hexdigest()[:8], 16) / 16**8
            assert (unit >= 0.5) == (split == "eval")


@pytest.mark.parametrize("a,b,match", [(199, 150, "a=199"), (500, 500, "b=500"), (500, 491, "b=491"), (500, 99, "b=99"),
                                       ("500", 120, "a='500'")])
def test_bad_operands_are_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        sub.make_problem(a, b)
    with pytest.raises(ValueError, match="strategy"):
        sub.solution_trace(500, 120, "guess")
