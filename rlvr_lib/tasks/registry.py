"""The `Task` protocol and the task registry.

A task is everything the trainer and the evaluation need to know about a set
of verifiable problems: its families (named problem draws), which of them are
in-distribution evaluation suites and which are out-of-distribution, which it
evaluates by default, the strategy labels its verifier reports, how to draw problems, the verifier, and
strategy hints for NudgeRL-style nudging. The arithmetic testbed is registered
as ``"arith"`` (`ArithmeticTask`) and is the default everywhere.

How to add a task (a real data set, another procedural testbed):

1. Write a class with the attributes and methods of `Task` (no base class
   needed: `Task` is a structural ``typing.Protocol``); ``verify`` must never
   raise on model output, ``hints`` may return ``[]``.
2. ``register_task("name", MyTask)`` (a class or zero-argument factory, built
   lazily on first use; or an instance), e.g. at import of your module.
3. Pass ``task="name"`` to the configs: ``EvalSpec(task="name")`` evaluates
   the task's ``default_eval_families`` (or give ``families=(...)``), and the
   trainer's config.

`get_task` builds a task once and caches the instance in `TASKS`; it checks
that the built object satisfies `Task`, that its ``name`` is the registered
name, that its evaluation, OOD and default evaluation families are among its
``families`` and that the default evaluation names at least one
(`register_task` makes the same checks at once on an instance).
"""

from __future__ import annotations

from typing import Callable, Protocol, Union, runtime_checkable

from rlvr_lib.tasks import arithmetic
from rlvr_lib.tasks.base import Problem, Verdict
from rlvr_lib.tasks.hints import TaskHintPool

__all__ = [
    "TASKS",
    "ArithmeticTask",
    "Task",
    "TaskFactory",
    "DEFAULT_TASK",
    "get_task",
    "register_task",
    "task_names",
    "task_version",
    "unregister_task",
]

DEFAULT_TASK = "arith"


@runtime_checkable
class Task(Protocol):
    """A set of verifiable problems with its verifier (structural protocol).

    Any object with these attributes and methods is a task; ``isinstance(obj,
    Task)`` checks that they are present (not their types or signatures).

    Attributes:
        name: The name the task is registered under.
        families: Every valid family name, training families included.
        eval_families: In-distribution evaluation families (averaged in reports).
        ood_families: Out-of-distribution evaluation families (reported, not averaged).
        default_eval_families: The families `EvalSpec` evaluates when it is
            given the task and no ``families`` (non-empty).
        strategies: Strategy labels the verifier can report in
            ``Verdict.strategy`` (may be empty).
    """

    name: str
    families: tuple[str, ...]
    eval_families: tuple[str, ...]
    ood_families: tuple[str, ...]
    default_eval_families: tuple[str, ...]
    strategies: tuple[str, ...]

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        """A fixed draw of ``n`` distinct problems of ``family`` (same arguments, same list).

        Raises:
            ValueError: unknown family, or ``n`` above `family_capacity`.
        """
        ...

    def family_capacity(self, family: str) -> int:
        """The largest ``n`` that `family_problems` can draw from ``family``."""
        ...

    def verify(self, problem: Problem, completion: object) -> Verdict:
        """Score one completion. Must never raise on model output."""
        ...

    def hints(self, problem: Problem) -> list[str]:
        """Ordered strategy hints for ``problem`` (NudgeRL hints); may be ``[]``."""
        ...


TaskFactory = Callable[[], Task]

TASKS: dict[str, Union[Task, TaskFactory, type]] = {}
"""Registered tasks by name: a factory (class or zero-argument callable) until
`get_task` first builds it, the built instance after that."""


def task_names() -> list[str]:
    """The registered task names, sorted."""
    return sorted(TASKS)


def register_task(name: str, task: Union[Task, TaskFactory, type]) -> Union[Task, TaskFactory, type]:
    """Register a task under ``name``.

    Args:
        name: Registry key; the built task's ``name`` must equal it.
        task: A `Task` instance, or a class / zero-argument callable that
            builds one (called once, on the first `get_task`).

    Returns:
        ``task`` unchanged.

    Raises:
        ValueError: ``name`` is not a non-empty string, is already registered,
            ``task`` is neither a `Task` nor callable, or an instance fails
            the checks `get_task` makes on a built task.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name={name!r} is not valid: must be a non-empty string")
    if name in TASKS:
        raise ValueError(f"task={name!r} is already registered: registered tasks are {task_names()}")
    if not (isinstance(task, type) or isinstance(task, Task) or callable(task)):
        raise ValueError(f"task={task!r} is not valid: must be a Task instance, a Task class or a factory")
    if _built(task):
        _check_task(name, task)
    TASKS[name] = task
    return task


def unregister_task(name: str) -> None:
    """Remove ``name`` from the registry (tests; plugins reloaded under the same name).

    Raises:
        ValueError: ``name`` is not registered.
    """
    _check_registered(name)
    del TASKS[name]


def _check_registered(name: str) -> None:
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"task={name!r} is not registered: must be one of {task_names()}")


def _built(entry: object) -> bool:
    # A class also carries the protocol's attributes, so it counts as a factory.
    return not isinstance(entry, type) and isinstance(entry, Task)


def task_version(name: str) -> str | None:
    """The design version of task ``name`` (its optional ``version`` attribute), or ``None``.

    Cache keys hold it beside the policy hash: a task whose pools change under the same name and
    policy (the testbed's ``TESTBED_VERSION``) never reads back a run of its earlier design.
    """
    return getattr(get_task(name), "version", None)


def get_task(name: str) -> Task:
    """The task registered as ``name``, built on first use and cached.

    Raises:
        ValueError: ``name`` is not registered (the message lists the
            registered names), or the built object is not a valid `Task`.
    """
    _check_registered(name)
    entry = TASKS[name]
    if _built(entry):
        return entry  # type: ignore[return-value]
    task = entry()  # type: ignore[operator]
    _check_task(name, task)
    TASKS[name] = task
    return task


def _check_task(name: str, task: object) -> None:
    where = f"task {name!r}"
    if not _built(task):
        missing = [a for a in ("name", "families", "eval_families", "ood_families", "default_eval_families",
                               "strategies", "family_problems", "family_capacity", "verify", "hints")
                   if not hasattr(task, a)]
        raise ValueError(f"{where}: the factory built {type(task).__name__}, which lacks {missing} of Task")
    if task.name != name:
        raise ValueError(f"{where}: the built task's name is {task.name!r}: must be the registered name {name!r}")
    families = tuple(task.families)
    if not families:
        raise ValueError(f"{where}: families is empty: must name at least one family")
    for attr in ("eval_families", "ood_families", "default_eval_families"):
        stray = [f for f in getattr(task, attr) if f not in families]
        if stray:
            raise ValueError(f"{where}: {attr} has {stray}, which are not in families {list(families)}")
    if not tuple(task.default_eval_families):
        raise ValueError(f"{where}: default_eval_families is empty: must name at least one of {list(families)}")


# --------------------------------------------------------------------------- the arithmetic testbed


class ArithmeticTask:
    """The procedural multiplication testbed (`rlvr_lib.tasks.arithmetic`) as a `Task`.

    Delegates to the module functions, so ``get_task("arith").family_problems(f, n, s)
    == family_problems(f, n, s)`` and likewise for ``verify``. Hints come from
    `TaskHintPool` with its defaults unless another pool is given.

    Args:
        hint_pool: Anything with ``hints(problem) -> list[str]``.
    """

    name = "arith"
    version = arithmetic.TESTBED_VERSION
    regime = "retention"  # the rare strategy earns no reward on its RL pool (`rlvr_lib.tasks.discovery`)
    families: tuple[str, ...] = tuple(arithmetic.FAMILIES)
    eval_families: tuple[str, ...] = arithmetic.EVAL_FAMILIES
    ood_families: tuple[str, ...] = arithmetic.OOD_FAMILIES
    # the testbed's evaluation, rare-strategy and OOD families: the default `EvalSpec`
    default_eval_families: tuple[str, ...] = (*arithmetic.EVAL_FAMILIES, *arithmetic.RARE_FAMILIES,
                                              *arithmetic.OOD_FAMILIES)
    strategies: tuple[str, ...] = arithmetic.STRATEGIES

    def __init__(self, hint_pool=None):
        self.hint_pool = TaskHintPool() if hint_pool is None else hint_pool
        self._capacity: dict[str, int] = {}

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        return arithmetic.family_problems(family, n, seed=seed)

    def family_capacity(self, family: str) -> int:
        if family not in self._capacity:
            self._capacity[family] = arithmetic.family_capacity(family)
        return self._capacity[family]

    def verify(self, problem: Problem, completion: object) -> Verdict:
        return arithmetic.verify(problem, completion)

    def hints(self, problem: Problem) -> list[str]:
        return self.hint_pool.hints(problem)

    def __repr__(self) -> str:
        return "ArithmeticTask()"


register_task(DEFAULT_TASK, ArithmeticTask)
