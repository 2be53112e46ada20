"""Issue 61 item 6: a method that needs something the task lacks refuses, in one line naming what is missing,
when it is built (`rlvr_lib.methods.base.Method.check_task`) -- rather than train a degraded method silently:
NudgeRL on a task without hints (it trained with ``nudge_missing_hint_share`` 1.0), POPE on a task without oracle
solutions (its "prefix" was the boxed answer's first characters, or nothing)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rlvr_lib.__main__ import main
from rlvr_lib.config_files import build_config
from rlvr_lib.methods import build_method, method_config
from rlvr_lib.methods.base import sample_problems
from rlvr_lib.tasks import TASKS, get_task, register_task
from rlvr_lib.tasks.hints import TaskHintPool
from rlvr_lib.tasks.math_task import MathFamily, MathTask
from rlvr_lib.tasks.registry import ArithmeticTask


pytestmark = pytest.mark.usefixtures("restore_registries")


class _NoHintArith(ArithmeticTask):
    """The testbed without a ``hint_pool`` attribute, whose ``hints`` are empty."""

    name = "refusal_nohint"

    def __init__(self):
        super().__init__()
        del self.hint_pool

    def hints(self, problem):
        return []


class _HintArith(_NoHintArith):
    """The same task, but its ``hints`` give one (no ``hint_pool`` attribute: the problems are looked at)."""

    name = "refusal_hint"

    def hints(self, problem):
        return ["round"]


class _NoTraceArith(ArithmeticTask):
    """The testbed with empty oracle traces."""

    name = "refusal_notrace"

    def family_problems(self, family, n, seed=0):
        return [dataclasses.replace(p, oracle_trace="") for p in super().family_problems(family, n, seed)]


def _register(name: str, task) -> str:
    if name not in TASKS:
        register_task(name, task)
    return name


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    data = folder / "solved.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{a}?", "answer": str(2 * a), "solution": f"{a}+{a}={2 * a}"})
                            + "\n" for a in range(6)))
    train = {"train": MathFamily("train")}
    return {
        "nohint": _register("refusal_nohint", _NoHintArith),
        "hint": _register("refusal_hint", _HintArith),
        "notrace": _register("refusal_notrace", _NoTraceArith),
        "math_hints": _register("refusal_math_hints", lambda: MathTask("refusal_math_hints", data, train,
                                                                       solution_field="solution", level_field=None,
                                                                       hint_pool=TaskHintPool())),
        "math_plain": _register("refusal_math_plain", lambda: MathTask("refusal_math_plain", data, train,
                                                                       level_field=None)),
    }


def _build(method: str, task: str, **overrides):
    return build_method(method_config(method, task=task, **overrides))


def test_nudgerl_refuses_a_task_without_hints(tasks):
    with pytest.raises(ValueError, match=r"^nudgerl: task 'refusal_math_plain' has no hint pool \(hint_pool=None\): "
                                         r"NudgeRL rolls out from the task's strategy hints and would train with "
                                         r"none"):
        _build("nudgerl", tasks["math_plain"])
    with pytest.raises(ValueError, match=r"^nudgerl: task 'refusal_nohint' gives no hints for its 'train' problems "
                                         r"\(Task.hints returned \[\]\)"):
        _build("nudgerl", tasks["nohint"])
    with pytest.raises(ValueError, match=r"^nudgerl: task 'math_sample' has no hint pool"):
        _build("nudgerl", "math_sample", train_family="train")
    with pytest.raises(ValueError, match=r"nudgerl: task 'refusal_nohint' gives no hints"):  # in a composite too
        _build("nudgerl+sage", tasks["nohint"], kl_coef=0.05, lr=5e-6)
    # a task with hints, by pool or by problem, and the testbed: accepted
    for task in (tasks["hint"], tasks["math_hints"], "arith", "arith_discovery"):
        assert _build("nudgerl", task).name == "nudgerl"


def test_pope_refuses_a_task_without_oracle_solutions(tasks):
    with pytest.raises(ValueError, match=r"^pope: task 'refusal_math_plain' has no solution column "
                                         r"\(solution_field=None: its oracle trace is only the boxed answer\): "
                                         r"POPE's hint is a prefix of the oracle solution"):
        _build("pope", tasks["math_plain"])
    with pytest.raises(ValueError, match=r"^pope: task 'refusal_notrace' has no oracle solution for its 'train' "
                                         r"problems \(empty oracle_trace\)"):
        _build("pope", tasks["notrace"])
    for task in (tasks["math_hints"], "arith"):  # solutions: accepted, and the hint is a prefix of one
        method = _build("pope", task)
        (problem,) = sample_problems(get_task(task), "train", 1)
        assert problem.oracle_trace and problem.oracle_trace.startswith(method.hint(problem))


def test_other_methods_take_any_task(tasks):
    for method in ("grpo", "sage", "dapo"):
        for task in tasks.values():
            assert _build(method, task).name == method


def test_the_command_line_refuses_before_loading_anything(capsys, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--method", "nudgerl", "--task", "math_sample", "--set", "train_family=train", "--out",
              str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nudgerl: task 'math_sample' has no hint pool" in err, err
    assert not out.exists()
    with pytest.raises(ValueError, match="pope: task 'math_sample' has no solution column"):
        build_config("pope", ("flags", {"task": "math_sample", "train_family": "train"}))


def test_refusals_leave_the_studys_arms_buildable():
    """Every registered method builds on the testbed's default task as before (the committed runs' tasks)."""
    from rlvr_lib.methods import METHODS

    for name in sorted(METHODS):
        if "+" in name:
            continue
        config = method_config(name)
        if name == "oracle_explore":
            config = method_config(name, task="arith_discovery")
        assert build_method(config).name == name
