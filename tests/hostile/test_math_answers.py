"""Hostile answers to `MathTask.verify`: each gets its stated status, never raises, returns within a time bound.

Classes: near misses (rounded or perturbed values), hedges, several final
answers, hangs (grading that runs past the limit, on the main thread, on a
worker thread, in a forked process), garbage, huge inputs and objects that are
not strings. A hang is the ``timeout`` status (reward 0), neither ``wrong`` nor
``malformed``. The grading policy itself is tabled in docs/reliability.md ("MathTask
grading policy") and tested in ``tests/test_math_task.py``.
"""

import multiprocessing
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlvr_lib.tasks import CORRECT, MALFORMED, TIMEOUT, WRONG, Problem
from rlvr_lib.tasks.math_task import math_sample_task
from rlvr_lib.tasks.worker_pool import HARD_MARGIN_S

pytestmark = pytest.mark.hostile_class("math answers", host=False)  # grading only

LIMIT_S = 1
"""The task's time limit in these tests."""
BOUND_S = LIMIT_S + HARD_MARGIN_S + 3.0
"""What any verify call may take: the limit, the kill margin, and slack for a loaded 2-core machine."""

HANG = r"\boxed{(x+1)^{100000}}"  # expanding it takes minutes: only the time limit ends it


def problem(answer: str) -> Problem:
    """A problem with gold ``answer`` (`MathTask.verify` reads only the answer)."""
    return Problem(uid=f"hostile:{answer}", question="?", answer=answer, family="hostile", difficulty="unknown",
                   oracle_trace=f"\\boxed{{{answer}}}", strategy="")


class ClaimsEverything(str):
    """A str whose comparisons and length lie: it must be graded by its characters."""

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__

    def __len__(self):
        raise RuntimeError("no length for you")


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text for you")

    __repr__ = __str__


# (name, gold, completion, status)
HOSTILE = [
    # near misses: rounded or perturbed values of an exact gold answer
    ("perturbed_half", r"\frac{1}{2}", "0.5000001", WRONG),
    ("six_digit_third", r"\frac{1}{3}", "0.333333", WRONG),
    ("rounded_third_boxed", r"\frac{1}{3}", r"\boxed{0.3333}", WRONG),
    ("fifteen_digit_third", r"\frac{1}{3}", r"\boxed{0.333333333333333}", WRONG),
    ("six_digit_sqrt2", r"\sqrt{2}", "1.414214", WRONG),
    ("many_digit_sqrt2", r"\sqrt{2}", r"\boxed{1.4142135623731}", WRONG),
    ("rounded_3pi", r"3\pi", r"\boxed{9.424778}", WRONG),
    ("rounded_pi_over_4", r"\frac{\pi}{4}", r"\boxed{0.785398}", WRONG),
    ("below_integer", "45", r"\boxed{44.9999999}", WRONG),
    ("above_integer", "45", r"\boxed{45.000001}", WRONG),
    ("sign_flip", "-4", r"\boxed{4}", WRONG),
    ("shifted_decimal", "45", r"\boxed{4.5}", WRONG),
    ("extra_digit", "45", r"\boxed{450}", WRONG),
    ("close_fraction", r"\frac{7}{2}", r"\boxed{\frac{35}{11}}", WRONG),
    ("rounded_gold_decimal", "3.14", r"\boxed{3.1}", WRONG),
    ("percent_for_fraction", r"\frac{1}{2}", r"\boxed{0.5\%}", WRONG),
    # hedges: another value offered after the final answer
    ("or_maybe", "5", "The answer is $5$. Or maybe $6$.", WRONG),
    ("boxed_then_perhaps", "5", r"\boxed{5}. Perhaps it is $7$ though.", WRONG),
    ("could_also_be", "45", r"The final answer is $\boxed{45}$, but it could also be $54$.", WRONG),
    ("alternatively", "45", r"\boxed{45}. Alternatively, $44$.", WRONG),
    ("answer_or", "45", "The answer is 45 or 46", WRONG),
    ("possibly", "45", "The answer is 45, possibly 46.", WRONG),
    ("not_sure", "3", r"\boxed{3} (not sure, it might be $4$)", WRONG),
    # several final answers where the gold answer is one value
    ("repeated_in_box", "3", r"\boxed{3,3,3}", WRONG),
    ("two_in_box", "45", r"\boxed{45, 46}", WRONG),
    ("or_in_box", "5", r"\boxed{5 \text{ or } 6}", WRONG),
    ("set_of_one", "45", r"\boxed{\{45\}}", WRONG),
    ("tuple", "45", r"\boxed{(45, 45)}", WRONG),
    ("two_boxes", "45", r"\boxed{45} \boxed{46}", WRONG),
    ("wrong_then_right_box", "45", r"First \boxed{44}, then \boxed{45}", WRONG),
    ("interval", "45", r"\boxed{[44, 46]}", WRONG),
    ("matrix", "45", r"\boxed{\begin{pmatrix} 45 & 45 \end{pmatrix}}", WRONG),
    # hangs: grading runs past the limit
    ("huge_expansion", "45", HANG, TIMEOUT),
    ("huge_expansion_unboxed", "45", "The answer is $(x+1)^{100000}$.", TIMEOUT),
    ("two_variable_expansion", "45", r"\boxed{(x+y+1)^{3000}}", TIMEOUT),
    # garbage: nothing to read as an answer
    ("empty", "45", "", MALFORMED),
    ("blank", "45", " \n\t ", MALFORMED),
    ("words", "45", "I do not know.", MALFORMED),
    ("control_characters", "45", "\x00\x01\x02\x1b[2J", MALFORMED),
    ("emoji", "45", "\U0001F642" * 50, MALFORMED),
    ("empty_box", "45", r"\boxed{}", MALFORMED),
    ("unclosed_box", "45", r"\boxed{", MALFORMED),
    ("closing_braces", "45", "}}}}{{{{", MALFORMED),
    ("dollars", "45", "$$$$$$", MALFORMED),
    ("lone_surrogate", "45", "\ud800\udfff?", MALFORMED),
    # huge inputs
    ("million_digits", "45", "4" * 1_000_000, MALFORMED),  # over the length cap: not parsed
    ("open_braces", "45", "{" * 30_000, MALFORMED),
    ("unclosed_boxes", "45", "\\boxed{" * 4000, MALFORMED),
    ("huge_integer", "45", r"\boxed{" + "9" * 20_000 + "}", WRONG),
    ("nested_braces", "45", "\\boxed{" + "{" * 4000 + "45" + "}" * 4000 + "}", TIMEOUT),
    # not a string
    ("none", "45", None, MALFORMED),
    ("int", "45", 45, MALFORMED),
    ("float", "45", 45.0, MALFORMED),
    ("bytes", "45", b"\\boxed{45}", MALFORMED),
    ("list", "45", ["\\boxed{45}"], MALFORMED),
    ("dict", "45", {"answer": 45}, MALFORMED),
    ("unprintable", "45", Unprintable(), MALFORMED),
    ("lying_str", "45", ClaimsEverything(r"\boxed{44}"), WRONG),
]


@pytest.fixture(scope="module")
def task():
    return math_sample_task(name="math_hostile", timeout_s=LIMIT_S)


def test_the_suite_holds_at_least_50_hostile_answers():
    assert len(HOSTILE) >= 50 and len({name for name, *_ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize("name, gold, completion, status", HOSTILE, ids=[case[0] for case in HOSTILE])
def test_hostile_answer_gets_its_status_in_time(task, name, gold, completion, status):
    start = time.monotonic()
    verdict = task.verify(problem(gold), completion)
    elapsed = time.monotonic() - start
    assert verdict.status == status, verdict
    assert verdict.reward == 0.0
    assert elapsed < BOUND_S, f"{name}: {elapsed:.1f} s"


def test_a_timeout_is_its_own_status_and_the_worker_recovers(task):
    verdict = task.verify(problem("45"), HANG)
    assert (verdict.status, verdict.reward) == (TIMEOUT, 0.0)
    assert "budget" in verdict.reason or "stopped" in verdict.reason
    start = time.monotonic()
    assert task.verify(problem("45"), r"\boxed{45}").status == CORRECT
    assert time.monotonic() - start < BOUND_S


@pytest.mark.parametrize("runner", ["thread", "pool"])
def test_a_hang_on_a_worker_thread_times_out_within_the_limit(task, runner):
    """math-verify's alarm works only on the main thread; off it the grading ran for over a minute."""
    out = {}

    def call():
        start = time.monotonic()
        out["verdict"] = task.verify(problem("45"), HANG)
        out["seconds"] = time.monotonic() - start

    if runner == "thread":
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(BOUND_S + 5)
        assert not thread.is_alive(), "verify still running"
    else:
        with ThreadPoolExecutor(2) as pool:
            pool.submit(call).result(timeout=BOUND_S + 5)
    assert out["verdict"].status == TIMEOUT and out["verdict"].reward == 0.0
    assert out["seconds"] < LIMIT_S + HARD_MARGIN_S + 1.0


def test_concurrent_threads_each_get_their_own_verdict(task):
    cases = [("45", r"\boxed{45}", CORRECT), ("45", HANG, TIMEOUT), (r"\frac{1}{3}", "0.333333", WRONG),
             ("45", "", MALFORMED), (r"\frac{1}{2}", r"\boxed{\frac{2}{4}}", CORRECT), ("3", r"\boxed{3,3,3}", WRONG)]
    seconds = []
    for _ in range(2):  # the first round starts a worker per caller (six imports of sympy); the second reuses them
        start = time.monotonic()
        with ThreadPoolExecutor(len(cases)) as pool:
            verdicts = list(pool.map(lambda case: task.verify(problem(case[0]), case[1]), cases))
        seconds.append(time.monotonic() - start)
        assert [v.status for v in verdicts] == [status for *_, status in cases]
    assert seconds[1] < BOUND_S, "the hang held up the other callers"


def _verify_in_child(answer, completion):
    task = math_sample_task(name="math_hostile_child", timeout_s=LIMIT_S)
    start = time.monotonic()
    verdict = task.verify(problem(answer), completion)
    return verdict.status, time.monotonic() - start


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_grades_with_its_own_workers(task):
    assert task.verify(problem("45"), r"\boxed{45}").status == CORRECT  # the parent's pool has workers now
    with multiprocessing.get_context("fork").Pool(1) as pool:
        results = [pool.apply(_verify_in_child, case) for case in (("45", r"\boxed{45}"), ("45", HANG))]
    assert [status for status, _ in results] == [CORRECT, TIMEOUT]
    assert results[1][1] < BOUND_S
    assert task.verify(problem("45"), r"\boxed{44}").status == WRONG  # the parent's workers are untouched



def test_timeouts_reach_training_as_reward_zero_and_a_logged_rate(fresh_tiny_model, tiny_tokenizer, monkeypatch):
    from rlvr_lib.tasks import Verdict, get_task
    from rlvr_lib.trainer import Trainer, TrainerConfig

    task = get_task("math_sample")
    monkeypatch.setattr(task, "verify", lambda p, c: Verdict(0.0, TIMEOUT, None, "grading ran past its 1 s budget"))
    cfg = TrainerConfig(task="math_sample", train_family="train", steps=1, prompts_per_step=2, group_size=2,
                        max_new_tokens=8, seed=0)
    (row,) = Trainer(cfg, fresh_tiny_model, tiny_tokenizer).train(progress=False)
    assert row["timeout_rate"] == 1.0 and row["reward_mean"] == 0.0
    assert row["accuracy"] == 0.0 and row["malformed_rate"] == 0.0  # a time-out is neither correct nor malformed
