"""The `Task` protocol and the task registry.

A task is what the trainer and the evaluation need of a set of verifiable problems: its families, which are
in-distribution and out-of-distribution evaluation suites, which it evaluates by default, its strategy labels,
how to draw problems, the verifier, and NudgeRL-style hints. The arithmetic testbed is ``"arith"``
(`ArithmeticTask`), the default everywhere. To add one: a class with `Task`'s members, then
``register_task("name", MyTask)`` and ``task="name"`` in the configs (docs/tasks/registry.md).
`get_task` builds a task once, caches it in `TASKS` and checks it (`register_task` checks an instance at once)."""

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
    "check_task_name",
    "get_task",
    "register_task",
    "task_names",
    "task_version",
    "unregister_task",
]

DEFAULT_TASK = "arith"


@runtime_checkable
class Task(Protocol):
    """A set of verifiable problems with its verifier (structural protocol; ``isinstance`` checks members only).

    ``eval_families`` are averaged in reports, ``ood_families`` reported only; ``default_eval_families``
    (non-empty) are what `EvalSpec` evaluates without ``families``; ``strategies`` may be empty."""

    name: str
    families: tuple[str, ...]
    eval_families: tuple[str, ...]
    ood_families: tuple[str, ...]
    default_eval_families: tuple[str, ...]
    strategies: tuple[str, ...]

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        """A fixed draw of ``n`` distinct problems of ``family``; ValueError on an unknown family or ``n`` too large."""
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
"""Registered tasks by name: a factory until `get_task` first builds it, the instance after."""


def task_names() -> list[str]:
    """The registered task names, sorted."""
    return sorted(TASKS)


def register_task(name: str, task: Union[Task, TaskFactory, type]) -> Union[Task, TaskFactory, type]:
    """Register ``task`` (an instance, or a class / zero-argument factory built on first use) as ``name``; returns ``task``.

    Raises ValueError on a bad or taken name, a task neither a `Task` nor callable, or an instance failing `get_task`'s checks."""
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
    """Remove ``name`` from the registry; ValueError if it is not registered."""
    _check_registered(name)
    del TASKS[name]


def _check_registered(name: str, label: str = "task") -> None:
    if isinstance(name, str) and name not in TASKS:
        from rlvr_lib.plugins import load_entry_points

        load_entry_points()  # once per process: an installed package's tasks (`rlvr_lib.plugins`)
    if not isinstance(name, str) or name not in TASKS:
        from rlvr_lib.plugins import missing_name

        raise missing_name(label, name, task_names())


def check_task_name(name: object, label: str = "task") -> None:
    """Check that ``name`` is a registered task, loading the ``rlvr_lib.plugins`` entry points first when it is
    not (`rlvr_lib.plugins.load_entry_points`); ValueError ``"<label>='x' is not registered: must be one of [...];
    to use one of your own, ..."`` otherwise."""
    _check_registered(name, label)


def _built(entry: object) -> bool:
    # A class also carries the protocol's attributes, so it counts as a factory.
    return not isinstance(entry, type) and isinstance(entry, Task)


def task_version(name: str) -> str | None:
    """The design version of task ``name`` (its optional ``version``), or ``None``; cache keys hold it."""
    return getattr(get_task(name), "version", None)


def get_task(name: str) -> Task:
    """The task registered as ``name``, built on first use and cached; ValueError (listing names) if unknown or invalid."""
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
    """The multiplication testbed (`rlvr_lib.tasks.arithmetic`) as a `Task`, delegating to its functions; hints from `TaskHintPool`."""

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
