"""The testbed's completion grammar and its step-by-step check, shared by both skills.

A completion is ``<strategy>: [<chain> ]#<answer>`` (``direct`` takes no chain; ``split`` and ``round``
take ``<expr>=<expr>=...=<number>``). :func:`verify_format` checks it against a problem, given the
first step the named strategy must start with; `rlvr_lib.tasks.arithmetic` (multiplication) and
`rlvr_lib.tasks.subtraction` each supply their strategies' first steps.
"""

from __future__ import annotations

import re
from typing import Callable

from rlvr_lib.tasks.base import CORRECT, MALFORMED, WRONG, Problem, Verdict

__all__ = ["MAX_COMPLETION_CHARS", "evaluate_expression", "verify_format"]

MAX_COMPLETION_CHARS = 200
"""Longest completion the testbed's verifiers read; longer ones are malformed."""

_COMPLETION = re.compile(r"(direct|split|round): (?:([0-9*+\-=]{1,120}) )?#(\d{1,12})")
_EXPR = re.compile(r"\d{1,9}(?:\*\d{1,9})?(?:[+-]\d{1,9}(?:\*\d{1,9})?)*")
_TERM = re.compile(r"([+-]?)(\d+)(?:\*(\d+))?")


def evaluate_expression(expr: str) -> int:
    """Value of a sum/difference of products of integers (``_EXPR`` grammar)."""
    total = 0
    for sign, x, y in _TERM.findall(expr):
        value = int(x) * (int(y) if y else 1)
        total += -value if sign == "-" else value
    return total


def verify_format(problem: Problem, completion: object, first_step: Callable[[str], str]) -> Verdict:
    """The step-by-step check shared by the testbed's skills (`verify`).

    ``first_step(strategy)`` is the expression the named strategy's chain must start with.
    """
    if not isinstance(completion, str):
        return Verdict(0.0, MALFORMED, None, f"completion is {type(completion).__name__}, not str")
    text = completion.strip()
    if len(text) > MAX_COMPLETION_CHARS:
        return Verdict(0.0, MALFORMED, None, f"longer than {MAX_COMPLETION_CHARS} characters")
    match = _COMPLETION.fullmatch(text)
    if match is None:
        return Verdict(0.0, MALFORMED, None, "not '<strategy>: [<steps> ]#<answer>'")
    strategy, chain, answer = match.groups()
    if (strategy == "direct") != (chain is None):
        return Verdict(0.0, MALFORMED, strategy, f"{strategy!r} {'takes no' if chain else 'needs'} steps")
    if chain is not None:
        steps = chain.split("=")
        if len(steps) < 2 or not all(_EXPR.fullmatch(s) for s in steps):
            return Verdict(0.0, MALFORMED, strategy, "steps are not '<expr>=<expr>=...=<number>'")
        if steps[0] != first_step(strategy):
            return Verdict(0.0, WRONG, strategy, f"first step is not the {strategy} decomposition")
        values = [evaluate_expression(s) for s in steps]
        if any(v != values[0] for v in values[1:]):
            return Verdict(0.0, WRONG, strategy, "a step changes the value")
        if not steps[-1].isdigit() or steps[-1] != answer:
            return Verdict(0.0, WRONG, strategy, "the steps do not end in the stated answer")
    if answer != problem.answer:
        return Verdict(0.0, WRONG, strategy, "wrong answer")
    return Verdict(1.0, CORRECT, strategy)
