r"""Hedges that no word list catches, and restatements that are no hedge (`MathTask.verify`, issue 60 item 4).

The rule (``rlvr_lib.tasks.math_grading``): after the final answer, and between the boxes it is read from, any value
math-verify can read that is not equivalent to the final answer makes the completion ``wrong``, whatever the words
around it; equivalent restatements, in several boxes too, are one answer. Each hedge below is a correct final answer
followed by a second candidate value, phrased, placed and written in a different way: without the rule each of them
scores 1.0 (the final answer is right).
"""

import re

import pytest

from rlvr_lib.tasks import CORRECT, WRONG, Problem
from rlvr_lib.tasks.math_grading import MAX_HEDGE_CANDIDATES, box_spans
from rlvr_lib.tasks.math_task import math_sample_task

pytestmark = pytest.mark.hostile_class("math hedges", host=False)  # grading only

# (name, gold, completion): a right final answer, then another value -> wrong; ``[[...]]`` marks the hedge (the
# completion is read without the brackets; without what they hold it is correct)
HEDGES = [
    ("but_also_possible", "5", r"\boxed{5}[[, but $6$ is also possible.]]"),
    ("no_words_at_all", "5", r"\boxed{5}[[ $6$]]"),
    ("bare_number_after", "5", r"\boxed{5}.[[ 6 is also possible.]]"),
    ("semicolon_works_too", "5", r"\boxed{5}[[; 6 works too]]"),
    ("next_line", "5", "\\boxed{5}[[\n\n6]]"),
    ("far_below", "5", "\\boxed{5}\n" + "Let me reflect on this.\n" * 20 + "[[Then again $6$.]]"),
    ("parenthesised_question", "45", r"The final answer is $\boxed{45}$[[ ($46$?)]]"),
    ("fraction_after_braces", "5", r"\boxed{5}[[, but $\frac{12}{2}$ works too.]]"),  # was inside \boxed{.+}'s match
    ("inside_the_same_dollars", "5", r"$\boxed{5}[[ \text{ or } 6]]$"),
    ("between_repeated_boxes", "5", r"\boxed{5}[[ or 6]] \boxed{5}"),
    ("between_restating_boxes", r"\frac{1}{2}", r"\boxed{\frac12},[[ 3,]] \boxed{\frac24}"),
    ("inline_parenthesis", "5", r"\boxed{5}[[ \(6\)]]"),
    ("display_bracket", "5", r"\[\boxed{5}\][[ (\(6\) also)]]"),
    ("display_dollars", "5", "$$\\boxed{5}$$[[ and then $$6$$]]"),
    ("equation", "5", r"\boxed{5}[[, unless $x = 7$.]]"),
    ("negated_value", "5", r"\boxed{5}.[[ Not $-5$.]]"),
    ("decimal", "5", r"\boxed{5}[[ (or rather $5.5$)]]"),
    ("rounded_restatement", r"\frac{1}{3}", r"\boxed{\frac{1}{3}}[[ \approx 0.333]]"),
    ("symbolic", "x+1", r"\boxed{x+1}.[[ Perhaps $x+2$ is nicer.]]"),
    ("answer_is_then_number", "45", "The answer is 45[[, though 46 fits too]]."),
    ("answer_is_dollars", "5", r"The answer is $5$.[[ Some say $7$.]]"),
    ("gold_decimal_off_places", "3.14", r"\boxed{3.14}[[, or $3.2$]]"),
    ("set_gold_extra_value", "1, 2", r"\boxed{1}, \boxed{2}.[[ Also $3$.]]"),
    ("after_many_restatements", "5", r"\boxed{5}" + " $5$" * 25 + "[[ $6$]]"),
    ("too_many_distinct_values", "5",
     r"\boxed{5}[[" + "".join(f" $x_{{{i}}} = 5$" for i in range(MAX_HEDGE_CANDIDATES + 1)) + "]]"),
    ("check_after_the_answer", "5", r"\boxed{5}.[[ Check: $5 \cdot 2 = 10$.]]"),
]

# (name, gold, completion): restatements of the one final answer -> correct
RESTATEMENTS = [
    ("two_boxes_ie", r"\frac{1}{2}", r"\boxed{\frac12}, i.e. \boxed{\frac24}"),
    ("box_equals_box", r"\frac{1}{2}", r"\boxed{\frac{1}{2}} = \boxed{0.5}"),
    ("dollar_boxes", "5", r"$\boxed{5}$, i.e. $\boxed{\frac{10}{2}}$"),
    ("same_box_twice", "5", r"\boxed{5}\boxed{5}"),
    ("same_box_far_apart", "5", r"\boxed{5}. Final: \boxed{5}"),
    ("symbolic_boxes", "x+1", r"\boxed{x+1}, i.e. \boxed{1+x}"),
    ("radical_boxes", r"3\sqrt{2}", r"\boxed{\sqrt{18}} = \boxed{3\sqrt{2}}"),
    ("or_equivalently", "5", r"\boxed{5}, or equivalently $\frac{10}{2}$."),
    ("equation_restating", "5", r"\boxed{5}, i.e. $x = 5$."),
    ("dollar_groups", r"\frac{1}{2}", r"The answer is $\frac12$, or $\frac24$"),
    ("gold_decimal_places", "3.14", r"\boxed{3.14}, about $3.1416$"),
    ("units_after", "12", r"The area is $\boxed{12}$ cm$^2$."),
    ("words_only_after", "5", r"\boxed{5}. I hope this helps!"),
    ("set_gold", "1, 2", r"\boxed{1}, \boxed{2}"),
    ("reasoning_before", "45", r"First $44$, then $46$, so finally \boxed{45}."),
    ("just_under_the_cap", "5",
     r"\boxed{5}" + "".join(f" $x_{{{i}}} = 5$" for i in range(MAX_HEDGE_CANDIDATES - 1))),
]


def problem(answer: str) -> Problem:
    return Problem(uid=f"hedge:{answer}", question="?", answer=answer, family="hostile", difficulty="unknown",
                   oracle_trace=f"\\boxed{{{answer}}}", strategy="")


@pytest.fixture(scope="module")
def task():
    return math_sample_task(name="math_hedges", timeout_s=5)


def test_the_cases_are_many_and_named_once():
    names = [name for name, *_ in HEDGES + RESTATEMENTS]
    assert len(HEDGES) >= 25 and len(RESTATEMENTS) >= 15 and len(set(names)) == len(names)


def with_hedge(text: str) -> str:
    return text.replace("[[", "").replace("]]", "")


def without_hedge(text: str) -> str:
    return re.sub(r"\[\[.*?\]\]", "", text, flags=re.DOTALL)


@pytest.mark.parametrize("name, gold, marked", HEDGES, ids=[case[0] for case in HEDGES])
def test_a_second_value_after_the_final_answer_is_a_hedge(task, name, gold, marked):
    verdict = task.verify(problem(gold), with_hedge(marked))
    assert (verdict.status, verdict.reward) == (WRONG, 0.0), verdict
    assert "hedged" in verdict.reason, verdict


@pytest.mark.parametrize("name, gold, marked", HEDGES, ids=[case[0] for case in HEDGES])
def test_without_the_hedge_the_completion_is_correct(task, name, gold, marked):
    """Each hedge follows a right final answer: what makes the completion wrong is the second value alone."""
    assert "[[" in marked and without_hedge(marked) != with_hedge(marked)
    verdict = task.verify(problem(gold), without_hedge(marked))
    assert (verdict.status, verdict.reward) == (CORRECT, 1.0), verdict


@pytest.mark.parametrize("name, gold, completion", RESTATEMENTS, ids=[case[0] for case in RESTATEMENTS])
def test_an_equivalent_restatement_is_no_hedge(task, name, gold, completion):
    verdict = task.verify(problem(gold), completion)
    assert (verdict.status, verdict.reward) == (CORRECT, 1.0), verdict


@pytest.mark.parametrize("completion", [
    r"\boxed{5}, but $6$", r"\boxed{\frac12}, i.e. \boxed{\frac24}", r"\boxed{5}\boxed{5}", r"\boxed{5}. Final: \boxed{5}",
    r"\boxed{44} then \boxed{45}", r"First \boxed{44}" + ". " * 40 + r"then \boxed{45}", r"\boxed{1} and \boxed{2}",
    r"\boxed{1}" + " " * 30 + r"\boxed{2}", r"\fbox{3}, \boxed{4}", r"\boxed{\boxed{5}}", r"\boxed{5", r"\boxed 5",
    r"\boxed{a}, \boxed{a}, \boxed{b}", r"\boxed{x} or \boxed{y} or \boxed{z}", "no box", r"\boxed{ 7 }, \boxed{7}",
])
@pytest.mark.parametrize("mode", ["last", "all"])
def test_box_spans_read_the_boxes_math_verify_joins(completion, mode):
    from latex2sympy2_extended.math_normalization import extract_boxed_content

    contents = []
    for _, start, end, _ in box_spans(completion, mode):
        closed = end < len(completion)  # an unclosed last box reads the rest of the text, brace included
        content = completion[start:end].strip() if closed else completion[start:end]
        if not contents or contents[-1] != content:
            contents.append(content)
    expected = extract_boxed_content(completion, mode=mode)
    assert (",".join(contents) if contents else completion) == expected
