"""Verifiable problems, their verifiers and strategy-hint pools."""

from rlvr_lib.tasks.arithmetic import (
    DIFFICULTIES,
    DISTRACTOR_HINTS,
    EVAL_FAMILIES,
    FAMILIES,
    HARD_DIFFICULTY,
    OOD_FAMILIES,
    PRETRAIN_STRATEGY_PRIOR,
    STRATEGIES,
    TRAIN_FAMILY,
    USEFUL_STRATEGIES,
    FamilySpec,
    check_difficulty,
    check_family,
    difficulty_of,
    family_capacity,
    family_problems,
    make_problem,
    parse_strategy,
    problem_pool,
    solution_trace,
    split_of,
    verify,
)
from rlvr_lib.tasks.base import CORRECT, MALFORMED, STATUSES, WRONG, Problem, Verdict
from rlvr_lib.tasks.contexts import ContextPool, LMHintPool, TaskHintPool

__all__ = [name for name in dir() if not name.startswith("_")]
