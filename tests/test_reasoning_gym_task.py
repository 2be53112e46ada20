"""ReasoningGymTask: reasoning-gym's own scorer, answer extraction, families, errors, training."""

import math
import re
import threading
import time

import pytest

from rlvr_lib.tasks import CORRECT, MALFORMED, TIMEOUT, WRONG, ReasoningGymTask, Task, get_task, rg_grading, worker_pool
from rlvr_lib.tasks.base import STATUSES
from rlvr_lib.tasks.worker_pool import HARD_MARGIN_S
from rlvr_lib.tasks.reasoning_gym_task import KNIGHTS_KNAVES_FAMILIES, extract_final_answer, knights_knaves_task
from rlvr_lib.trainer import Trainer, TrainerConfig

ADDITION = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ("+",),
            "allow_parentheses": False, "allow_negation": False}  # operands 0-10: at most 121 distinct questions


@pytest.fixture(scope="module")
def kk():
    return knights_knaves_task(name="kk_test")


def _roles(problem):
    """The two role words of a Knights-and-Knaves puzzle, read from its format line."""
    return re.search(r"is a (\w+)/(\w+)", problem.question).groups()


def _swap_roles(answer, roles, count=None):
    """``answer`` with the first ``count`` role words (all when ``None``) swapped."""
    a, b = roles
    swapped = 0

    def swap(match):
        nonlocal swapped
        if count is not None and swapped >= count:
            return match.group(0)
        swapped += 1
        return b if match.group(0) == a else a

    return re.sub(rf"\b({a}|{b})\b", swap, answer)


# --------------------------------------------------------------------------- grading


def test_oracle_answers_score_one_and_wrong_ones_zero(kk):
    for problem in kk.family_problems("ppl2", 4) + kk.family_problems("ppl5", 2):
        roles = _roles(problem)
        for completion in (problem.oracle_trace, f"Reasoning...\nAnswer: {problem.answer}",
                           f"<answer>{problem.answer.upper()}</answer>"):
            verdict = kk.verify(problem, completion)
            assert (verdict.status, verdict.reward) == (CORRECT, 1.0), (completion, verdict)
        everyone_flipped = kk.verify(problem, f"<answer>{_swap_roles(problem.answer, roles)}</answer>")
        assert (everyone_flipped.status, everyone_flipped.reward) == (WRONG, 0.0), everyone_flipped
        assert everyone_flipped.reason == "score_answer gave 0"


def test_partial_credit_is_not_a_reward(kk):
    problem = kk.family_problems("ppl2", 1)[0]
    one_flipped = _swap_roles(problem.answer, _roles(problem), count=1)
    verdict = kk.verify(problem, f"<answer>{one_flipped}</answer>")
    assert (verdict.status, verdict.reward) == (WRONG, 0.0)
    assert verdict.reason == "score_answer gave 0.65"  # reasoning-gym's 0.3 + 0.7 * 1/2


def test_any_dataset_by_name_is_graded_by_its_own_scorer():
    task = ReasoningGymTask("rg_add", "basic_arithmetic", {"add": ADDITION})
    for problem in task.family_problems("add", 5, seed=2):
        a, b = map(int, re.findall(r"\d+", problem.question)[:2])
        assert problem.answer == str(a + b)
        assert task.verify(problem, f"<answer>{a + b}</answer>").status == CORRECT
        assert task.verify(problem, f"<answer>{a + b + 1}</answer>").status == WRONG


@pytest.mark.parametrize("completion, expected", [
    ("<answer>first</answer> then <answer> last </answer>", "last"),
    ("<answer>a <answer>b</answer>", "b"),
    ("Answer: Zoey is a knight\nand more text", "Zoey is a knight"),
    ("answer: one\nANSWER: two", "two"),
    ("<answer>tagged</answer>\nanswer: line", "tagged"),
    ("<answer></answer>", None),
    ("answer:   \n", None),
    ("<answer>never closed", None),
    ("no final answer", None),
])
def test_final_answer_extraction(completion, expected):
    assert extract_final_answer(completion) == expected


HOSTILE = {
    "none": None,
    "int": 3,
    "bytes": b"<answer>x</answer>",
    "huge": "<answer>" * 200_000,
    "unclosed_tags": "<answer>" * 3_900,  # quadratic for a plain regex scan
    "many_markers": "answer:" * 4_000,
    "long_answer": "<answer>" + "knight " * 4_000 + "</answer>",
    "control_chars": "<answer>\x00\x1b[2J\ud800</answer>",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_completions_get_zero_without_raising_or_hanging(kk, name):
    problem = kk.family_problems("ppl2", 1)[0]
    start = time.perf_counter()
    verdict = kk.verify(problem, HOSTILE[name])
    assert time.perf_counter() - start < 10
    assert verdict.reward == 0.0 and verdict.status in (MALFORMED, WRONG), verdict


def _in_thread(task, problem, completion):
    """``(verdict, seconds)`` of ``task.verify`` called from a fresh, non-main thread."""
    out = {}

    def run():
        assert threading.current_thread() is not threading.main_thread()
        start = time.perf_counter()
        out["verdict"] = task.verify(problem, completion)
        out["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "verify hung in a thread"
    return out["verdict"], out["seconds"]


@pytest.fixture
def worker_starts(monkeypatch):
    """Counts the scoring/grading worker processes started while the test runs."""
    starts = []
    original = worker_pool._Worker.__init__

    def counting(self, *args, **kwargs):
        starts.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(worker_pool._Worker, "__init__", counting)
    return starts


def test_time_limit_holds_off_the_main_thread_and_the_worker_is_reused(worker_starts):
    # polynomial_multiplication's scorer runs sympy.parse_expr on the answer: 7**7**9 computes for minutes.
    task = ReasoningGymTask("rg_poly", "polynomial_multiplication", {"default": {}}, timeout_s=1)
    problem = task.family_problems("default", 1)[0]
    warm, _ = _in_thread(task, problem, problem.oracle_trace)  # may start a worker: start-up is not the limit's
    assert (warm.status, warm.reward) == (CORRECT, 1.0)
    started = len(worker_starts)

    hung, seconds = _in_thread(task, problem, "<answer>7**7**9</answer>")
    assert (hung.status, hung.reward) == (TIMEOUT, 0.0), hung
    assert seconds < task.timeout_s + HARD_MARGIN_S + 1.0  # one second of slack for a loaded machine
    for completion in (problem.oracle_trace, "<answer>y</answer>"):
        verdict, _ = _in_thread(task, problem, completion)
        assert verdict.status == (CORRECT if completion == problem.oracle_trace else WRONG), verdict
    # the worker's own timer stopped the scorer, so the same worker serves on: no process start per call
    assert len(worker_starts) == started


def test_worker_statuses_are_the_shared_ones():
    assert {rg_grading.CORRECT, rg_grading.WRONG, rg_grading.TIMEOUT} <= set(STATUSES)
    assert rg_grading.ERROR not in STATUSES  # never a verdict: verify raises instead


# --------------------------------------------------------------------------- families


def test_families_are_configurations_and_draws_are_seeded(kk):
    a = kk.family_problems("ppl2", 5, seed=1)
    assert [p.question for p in a] == [p.question for p in kk.family_problems("ppl2", 5, seed=1)]
    fresh = knights_knaves_task(name="another").family_problems("ppl2", 5, seed=1)  # same puzzles under any name
    assert [(p.operands, p.question, p.answer) for p in fresh] == [(p.operands, p.question, p.answer) for p in a]
    assert {p.question for p in a}.isdisjoint(p.question for p in kk.family_problems("ppl2", 5, seed=2))
    assert {p.question for p in kk.family_problems("train", 5)}.isdisjoint(
        p.question for p in kk.family_problems("ppl3", 5))
    assert kk.family_problems("ppl2", 3, seed=1) == a[:3]
    for family, people in (("ppl2", 2), ("ppl5", 5)):
        problem = kk.family_problems(family, 1)[0]
        assert problem.difficulty == f"n_people={people}" and problem.family == family
        assert f"You meet {people} inhabitants" in problem.question
        assert problem.prompt.endswith("Put your final answer inside <answer></answer>.\n")
    assert kk.family_capacity("ppl2") == 100_000


def test_draws_are_distinct_and_bounded():
    task = ReasoningGymTask("rg_add", "basic_arithmetic", {"add": ADDITION}, capacity=300)
    problems = task.family_problems("add", 40)
    assert len({p.question for p in problems}) == 40
    with pytest.raises(ValueError, match=r"n=150 is invalid: family 'add' of 'basic_arithmetic' holds only \d+ "
                                         r"distinct puzzles in its 300 items"):
        task.family_problems("add", 150)
    with pytest.raises(ValueError, match=r"n=301 is invalid: must be an integer in \[1, 300\]"):
        task.family_problems("add", 301)
    with pytest.raises(ValueError, match=r"family='nope' is invalid: must be one of \['add'\]"):
        task.family_capacity("nope")


@pytest.mark.parametrize("kwargs, message", [
    (dict(dataset="knights"), r"dataset='knights' is invalid: must be one of \[.*'knights_knaves'"),
    (dict(families={}), r"families=\{\} is invalid: must be a non-empty"),
    (dict(families={"x": {"bogus": 1}}),
     r"families\['x'\]=\{'bogus': 1\} is invalid: must be fields of KnightsKnavesConfig \['n_people'"),
    (dict(families={"x": {"n_people": 0}}), r"families\['x'\]=\{'n_people': 0\} is invalid: .*at least 1"),
    (dict(families={"x": {"seed": 3}}), r"families\['x'\]=\{'seed': 3\} is invalid: must be a config without"),
    (dict(families={"x": {"n_people": range(2, 3)}}), r"is invalid: must be a config of Python literals"),
    (dict(eval_families=("ppl9",)), r"eval_families='ppl9' is invalid: must be one of \['train', 'ppl2'"),
    (dict(capacity=0), r"capacity=0 is invalid: must be an integer >= 1"),
    (dict(template="{q}"), r"template='\{q\}' is invalid"),
    (dict(timeout_s=None), r"timeout_s=None is invalid"),
])
def test_bad_arguments_name_the_argument_and_what_is_allowed(kwargs, message):
    args = {**dict(name="bad", dataset="knights_knaves", families=KNIGHTS_KNAVES_FAMILIES), **kwargs}
    with pytest.raises(ValueError, match=message):
        ReasoningGymTask(**args)


def test_registered_knights_knaves():
    task = get_task("rg_knights_knaves")
    assert isinstance(task, ReasoningGymTask) and isinstance(task, Task)
    assert task.dataset == "knights_knaves"
    assert task.families == ("train", "ppl2", "ppl3", "ppl5")
    assert task.eval_families == ("ppl2", "ppl3") and task.ood_families == ("ppl5",)


# --------------------------------------------------------------------------- training


def test_trains_through_the_trainer_with_the_dataset_scorer(fresh_tiny_model, tiny_tokenizer, spy_on_verify):
    task = get_task("rg_knights_knaves")
    calls = spy_on_verify(task)
    cfg = TrainerConfig(task="rg_knights_knaves", train_family="ppl2", train_pool_size=8, steps=2,
                        prompts_per_step=2, group_size=2, max_new_tokens=8, seed=0)
    history = Trainer(cfg, fresh_tiny_model, tiny_tokenizer).train(progress=False)

    assert [m["step"] for m in history] == [0, 1]
    assert len(calls) == 8 and all(p.family == "ppl2" for p, _, _ in calls)
    reference = knights_knaves_task(name="reference")
    for step, metrics in enumerate(history):
        step_calls = calls[4 * step: 4 * (step + 1)]
        statuses = [v.status for _, _, v in step_calls]
        assert statuses == [reference.verify(p, c).status for p, c, _ in step_calls]
        assert metrics["accuracy"] == pytest.approx(statuses.count(CORRECT) / 4)
        assert metrics["malformed_rate"] == pytest.approx(statuses.count(MALFORMED) / 4)
        finite = {k: v for k, v in metrics.items() if isinstance(v, float) and k != "reward_acc_corr"}
        assert finite and all(math.isfinite(v) for v in finite.values()), metrics
