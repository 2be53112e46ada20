"""The task registry: errors, the package's exports, the arithmetic task, and a toy task evaluated end to end."""

import subprocess
import sys
import types

import pytest

import rlvr_lib.tasks

from rlvr_lib.config import hash_jsonable
from rlvr_lib.eval import EvalSpec, evaluate_policy
from rlvr_lib.rollout import KVCacheEngine
from rlvr_lib.tasks import (
    CORRECT,
    MALFORMED,
    SHIPPED_TASKS,
    TASKS,
    WRONG,
    ArithmeticTask,
    Problem,
    Task,
    TaskHintPool,
    Verdict,
    get_task,
    register_task,
    task_names,
    unregister_task,
)
from rlvr_lib.tasks import arithmetic
from rlvr_lib.tasks.arithmetic import (
    EVAL_FAMILIES,
    FAMILIES,
    OOD_FAMILIES,
    RARE_FAMILIES,
    STRATEGIES,
    family_capacity,
    family_problems,
    solution_trace,
    verify,
)



@pytest.fixture
def restore_tasks():
    """Restores the registry (entries and built instances) after the test."""
    saved = dict(TASKS)
    yield TASKS
    TASKS.clear()
    TASKS.update(saved)


# --------------------------------------------------------------------------- a toy task


class AddTask:
    """Add two small numbers; the completion is the sum in digits."""

    name = "toy_add"
    families = ("small", "large", "shifted", "practice")
    eval_families = ("small", "large")
    ood_families = ("shifted",)
    default_eval_families = ("small", "large", "shifted")  # what EvalSpec(task="toy_add") evaluates
    strategies = ("digits",)
    _ranges = {"small": (0, 9), "large": (10, 49), "shifted": (50, 99), "practice": (0, 9)}

    def __init__(self):
        self.calls = 0
        self.built = True

    def family_capacity(self, family: str) -> int:
        lo, hi = self._ranges[family]
        return (hi - lo + 1) ** 2

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        if family not in self._ranges:
            raise ValueError(f"family={family!r} is not valid")
        lo, hi = self._ranges[family]
        pairs = [(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1)]
        pairs = pairs[seed:] + pairs[:seed]
        return [
            Problem(uid=f"add:{a}+{b}", question=f"{a}+{b}=?", answer=str(a + b), family=family, difficulty="easy",
                    oracle_trace=str(a + b), strategy="digits", operands=(a, b))
            for a, b in pairs[:n]
        ]

    def verify(self, problem: Problem, completion: object) -> Verdict:
        self.calls += 1
        if not isinstance(completion, str) or not completion.strip():
            return Verdict(0.0, MALFORMED, None, "empty")
        text = completion.strip()
        strategy = "digits" if text.isdigit() else None
        if text == problem.answer:
            return Verdict(1.0, CORRECT, strategy)
        return Verdict(0.0, WRONG, strategy, "not the sum")

    def hints(self, problem: Problem) -> list[str]:
        return []


# --------------------------------------------------------------------------- registry


def test_unknown_task_names_the_value_and_the_registered_names():
    with pytest.raises(ValueError, match=r"task='aime' is not registered: must be one of \[.*'arith'.*\]"):
        get_task("aime")
    with pytest.raises(ValueError, match="not registered"):
        unregister_task("aime")


def test_duplicate_and_bad_registrations_are_refused(restore_tasks):
    with pytest.raises(ValueError, match="task='arith' is already registered"):
        register_task("arith", ArithmeticTask)
    with pytest.raises(ValueError, match="name=''"):
        register_task("", AddTask)
    with pytest.raises(ValueError, match="must be a Task"):
        register_task("junk", 3)


def test_tasks_are_built_lazily_once_and_checked(restore_tasks):
    built = []

    def factory():
        built.append(1)
        return AddTask()

    register_task("toy_add", factory)
    assert built == [] and TASKS["toy_add"] is factory
    task = get_task("toy_add")
    assert isinstance(task, Task) and get_task("toy_add") is task and built == [1]
    unregister_task("toy_add")
    assert "toy_add" not in TASKS

    register_task("other_name", AddTask)  # the built task's name differs from the key
    with pytest.raises(ValueError, match="must be the registered name 'other_name'"):
        get_task("other_name")
    register_task("not_a_task", lambda: object())
    with pytest.raises(ValueError, match="lacks"):
        get_task("not_a_task")

    class Stray(AddTask):
        name = "stray"
        ood_families = ("nowhere",)

    with pytest.raises(ValueError, match=r"ood_families has \['nowhere'\]"):
        register_task("stray", Stray())  # an instance is checked when registered
    assert "stray" not in TASKS

    class StrayDefault(AddTask):
        name = "stray_default"
        default_eval_families = ("small", "nowhere")

    class NoDefault(AddTask):
        name = "no_default"
        default_eval_families = ()

    with pytest.raises(ValueError, match=r"default_eval_families has \['nowhere'\], which are not in families"):
        register_task("stray_default", StrayDefault())
    with pytest.raises(ValueError, match=r"default_eval_families is empty: must name at least one of \['small'"):
        register_task("no_default", NoDefault())

    class Undeclared:  # a task written before the protocol had default_eval_families
        name = "undeclared"
        families, eval_families, ood_families, strategies = ("a",), ("a",), (), ()
        family_problems = family_capacity = verify = hints = AddTask.hints

    register_task("undeclared", Undeclared)
    with pytest.raises(ValueError, match=r"the factory built Undeclared, which lacks \['default_eval_families'\]"):
        get_task("undeclared")
    assert not isinstance(Undeclared(), Task)
    instance = AddTask()
    register_task("toy_add", instance)
    assert get_task("toy_add") is instance


# --------------------------------------------------------------------------- the package's exports

EXPORTS = {
    # the protocol and what a verifier returns
    "Task", "TaskFactory", "Problem", "Verdict", "CORRECT", "WRONG", "MALFORMED", "TIMEOUT", "STATUSES", "UNVERIFIED",
    "HintPool", "LMHintPool", "TaskHintPool",
    # the registry
    "TASKS", "DEFAULT_TASK", "get_task", "register_task", "unregister_task", "task_names", "task_version",
    # the shipped tasks: their names and classes
    "SHIPPED_TASKS", "ArithmeticTask", "DiscoveryTask", "MathTask", "MathFamily", "MathSuite", "math_dataset_task",
    "MATH_DATASETS", "ReasoningGymTask", "CodeTask",
}
SHIPPED = ("aime24", "aime25", "amc23", "arith", "arith_discovery", "code_sample", "dapo_math_17k",
           "dapo_math_17k_hints", "humaneval", "math500", "math_eval", "math_sample", "math_train", "rg_knights_knaves")


def test_the_package_exports_the_protocol_the_registry_and_the_shipped_tasks():
    assert set(rlvr_lib.tasks.__all__) == EXPORTS and len(rlvr_lib.tasks.__all__) == len(EXPORTS)
    assert all(hasattr(rlvr_lib.tasks, name) for name in EXPORTS)
    assert rlvr_lib.tasks.SHIPPED_TASKS == SHIPPED


def test_the_arithmetic_testbeds_names_are_imported_from_its_own_module():
    # the module's own public names: its constants, functions and classes, not what it imports
    testbed = {name for name, value in vars(arithmetic).items() if not name.startswith("_")
               and not isinstance(value, types.ModuleType)
               and getattr(value, "__module__", arithmetic.__name__) == arithmetic.__name__}
    assert {"EVAL_FAMILIES", "RARE_FAMILIES", "family_problems", "verify", "make_problem"} <= testbed
    assert not testbed & set(rlvr_lib.tasks.__all__)
    assert not [name for name in testbed if hasattr(rlvr_lib.tasks, name)]
    with pytest.raises(ImportError, match="cannot import name 'EVAL_FAMILIES' from 'rlvr_lib.tasks'"):
        exec("from rlvr_lib.tasks import EVAL_FAMILIES")


def test_shipped_tasks_are_the_packages_registrations_not_a_users(restore_tasks):
    register_task("toy_add", AddTask)
    assert "toy_add" in task_names() and rlvr_lib.tasks.SHIPPED_TASKS == SHIPPED
    assert set(SHIPPED_TASKS) <= set(task_names())
    # a fresh interpreter that registers a task of its own before it reads the list
    code = ("from rlvr_lib.tasks.registry import register_task, ArithmeticTask\n"
            "class Mine(ArithmeticTask):\n    name = 'mine'\n"
            "register_task('mine', Mine)\n"
            "import rlvr_lib.tasks as t\nprint(','.join(t.SHIPPED_TASKS), 'mine' in t.task_names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [",".join(SHIPPED), "True"]


@pytest.mark.parametrize("name, families", [
    ("arith", ("easy_mix", "medium_mix", "hard_mix", "hardest_mix", "rare_mix", "sub_ood", "ood_shift")),
    ("arith_discovery", ("targets_train", "targets_heldout")),
    ("math_sample", ("test", "level_5")),
    ("code_sample", ("all",)),
])
def test_each_shipped_task_declares_its_default_evaluation(name, families):
    task = get_task(name)
    assert task.default_eval_families == families and set(families) <= set(task.families)
    assert EvalSpec(task=name).families == families


# --------------------------------------------------------------------------- arithmetic


def test_arith_task_reproduces_the_module_functions():
    task = get_task("arith")
    assert isinstance(task, ArithmeticTask) and isinstance(task, Task) and task.name == "arith"
    assert task.families == tuple(FAMILIES)
    assert task.eval_families == EVAL_FAMILIES and task.ood_families == OOD_FAMILIES
    assert task.default_eval_families == EVAL_FAMILIES + RARE_FAMILIES + OOD_FAMILIES
    assert task.strategies == STRATEGIES
    for family, n, seed in (("train", 30, 0), ("hard_mix", 20, 3), ("ood_shift", 10, 1)):
        problems = task.family_problems(family, n, seed=seed)
        assert problems == family_problems(family, n, seed=seed)
        assert task.family_capacity(family) == family_capacity(family)
        for p in problems[:5]:
            a, b = p.operands
            for completion in [p.oracle_trace, solution_trace(a, b, "direct"), f"direct: #{p.answer}1", "junk",
                               None, 7, "split: 1=2 #3"]:
                assert task.verify(p, completion) == verify(p, completion)
    with pytest.raises(ValueError, match="family='aime'"):
        task.family_problems("aime", 3)


def test_arith_hints_are_the_default_task_hint_pool():
    pool = TaskHintPool()
    for p in family_problems("hard_mix", 10):
        hints = get_task("arith").hints(p)
        assert hints == pool.hints(p) and len(hints) == 5


# --------------------------------------------------------------------------- EvalSpec


def test_default_eval_spec_leaves_the_task_out_of_its_dict_and_hash():
    spec = EvalSpec()
    assert "task" not in spec.to_dict() and "task" not in EvalSpec(task="arith").to_dict()
    assert EvalSpec(task="arith").config_hash() == spec.config_hash() == hash_jsonable(spec.to_dict())
    assert EvalSpec.from_dict(spec.to_dict()) == spec
    assert spec.families == ("easy_mix", "medium_mix", "hard_mix", "hardest_mix", "rare_mix", "sub_ood", "ood_shift")


def test_eval_spec_validates_task_and_families_against_the_task(restore_tasks):
    with pytest.raises(ValueError, match=r"EvalSpec.task='aime' is not registered: must be one of \[.*'arith'"):
        EvalSpec(task="aime")
    register_task("toy_add", AddTask)
    assert EvalSpec(task="toy_add").families == ("small", "large", "shifted")  # the task's default_eval_families
    with pytest.raises(ValueError, match=r"EvalSpec.families='easy_mix' is invalid: must be one of the families of "
                                         r"task 'toy_add', .*families=None takes the task's default_eval_families, "
                                         r"\['small', 'large', 'shifted'\]"):
        EvalSpec().replace(task="toy_add")  # a copy keeps the arithmetic testbed's families ...
    assert EvalSpec().replace(task="toy_add", families=None) == EvalSpec(task="toy_add")  # ... None takes the task's
    spec = EvalSpec(task="toy_add", families=("small", "shifted"))
    assert spec.to_dict()["task"] == "toy_add"
    assert spec.config_hash() != EvalSpec(families=("easy_mix", "ood_shift")).config_hash()
    assert EvalSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="EvalSpec.families='small' is invalid"):
        EvalSpec(families=("small",))


def test_a_registered_toy_task_is_evaluated_end_to_end(restore_tasks, tiny_model_and_tokenizer):
    register_task("toy_add", AddTask)
    task = get_task("toy_add")
    families = ("small", "large", "shifted", "practice")
    spec = EvalSpec(task="toy_add", families=families, problems_per_family=3, samples=4, group_size=4,
                    max_new_tokens=6, diversity_problems=3, diversity_samples=4)
    model, tokenizer = tiny_model_and_tokenizer
    result = evaluate_policy(KVCacheEngine(model, tokenizer), spec)

    assert task.calls == len(families) * 3 * 4  # every verdict came from the toy verifier
    assert set(result["families"]) == set(families)
    for family in families:
        fam = result["families"][family]
        assert fam["uids"] == [p.uid for p in task.family_problems(family, 3)]
        assert set(fam["strategy_freq"]) == {"digits", "none"}
        assert len(fam["correct_counts"]) == 3 and set(fam["pass_at_k"]) == {"1", "2", "4"}
        assert fam["malformed_rate"] + fam["wrong_rate"] <= 1.0
        assert fam["diversity"]["n_modes"] >= 1  # some samples were well formed by the toy verifier's rules
    avg = result["average"]
    assert avg["families"] == ["small", "large"]  # the toy's eval_families; OOD and practice not averaged
    assert set(avg["strategy_freq"]) == {"digits", "none"}
    expected = (result["families"]["small"]["pass_at_k"]["1"] + result["families"]["large"]["pass_at_k"]["1"]) / 2
    assert avg["pass_at_k"]["1"] == pytest.approx(expected)


def test_a_registered_task_is_evaluated_on_its_own_families_without_naming_them(restore_tasks,
                                                                                  tiny_model_and_tokenizer):
    register_task("toy_add", AddTask)
    spec = EvalSpec(task="toy_add", problems_per_family=2, samples=4, group_size=4, max_new_tokens=4,
                    diversity_problems=2, diversity_samples=4)
    assert spec.to_dict()["families"] == ["small", "large", "shifted"]
    assert EvalSpec.from_dict(spec.to_dict()) == spec
    model, tokenizer = tiny_model_and_tokenizer
    result = evaluate_policy(KVCacheEngine(model, tokenizer), spec)
    assert list(result["families"]) == ["small", "large", "shifted"]  # not "practice", not the testbed's
    assert get_task("toy_add").calls == 3 * 2 * 4
    assert result["average"]["families"] == ["small", "large"]  # OOD reported, not averaged


def test_restore_fixture_left_only_the_builtin_tasks():
    assert "toy_add" not in TASKS and "arith" in TASKS
