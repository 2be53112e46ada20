"""Hint pools: strategy hints per problem (NudgeRL, arXiv 2605.15726).

NudgeRL builds, offline, a pool C(x0) of short keyword hints per problem with a
lightweight LLM ("a specific concept, theorem or technique"), and never checks
them. A pool here is an ordered list of hint strings; the order matters because
NudgeRL's default uses the first two of five.

* `TaskHintPool` is the testbed's hint writer: useful strategy names ranked by
  how well they suit the problem, mixed with unhelpful hints (words that name
  no strategy, or a strategy that fails on the problem) at a set share.
* `LMHintPool` prompts any causal LM through a rollout engine for keyword hints
  (the path a real model takes).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from rlvr_lib.tasks.arithmetic import DISTRACTOR_HINTS, STRATEGIES, USEFUL_STRATEGIES, _stable_unit
from rlvr_lib.tasks.base import Problem
from rlvr_lib.validation import check_range


class HintPool(Protocol):
    """Anything that gives an ordered list of hint strings for a problem."""

    def hints(self, problem: Problem) -> list[str]: ...


class TaskHintPool:
    """The testbed's unverified hint writer.

    Each of ``n_hints`` slots is, with probability ``unhelpful_share``, an
    unhelpful hint (a distractor word, or a strategy not useful at the
    problem's difficulty), else the best useful strategy not used yet. The pool
    is fixed by (seed, problem), distinct within a problem.

    Args:
        n_hints: Hints per problem (NudgeRL writes 5).
        unhelpful_share: Probability that a slot is unhelpful, in [0, 1].
        seed: Fixes every pool.
    """

    def __init__(self, n_hints: int = 5, unhelpful_share: float = 0.4, seed: int = 0):
        if not isinstance(n_hints, int) or n_hints < 1:
            raise ValueError(f"n_hints={n_hints!r} is not valid: must be a positive int")
        check_range("unhelpful_share", unhelpful_share, 0, 1)
        self.n_hints, self.unhelpful_share, self.seed = n_hints, unhelpful_share, seed

    def hints(self, problem: Problem) -> list[str]:
        useful = list(USEFUL_STRATEGIES.get(problem.difficulty, STRATEGIES))
        unhelpful = [s for s in STRATEGIES if s not in useful] + list(DISTRACTOR_HINTS)
        rng = np.random.default_rng([self.seed, int(_stable_unit(problem.uid) * 2**31)])
        unhelpful = [unhelpful[i] for i in rng.permutation(len(unhelpful))]
        pool: list[str] = []
        while len(pool) < self.n_hints and (useful or unhelpful):
            take_unhelpful = (rng.random() < self.unhelpful_share and unhelpful) or not useful
            pool.append((unhelpful if take_unhelpful else useful).pop(0))
        return pool


class _Engine(Protocol):
    def generate(self, prompts: Sequence[str], params): ...


DEFAULT_HINT_TEMPLATE = (
    "Problem: {question}\n"
    "Name one specific concept, theorem or technique that helps solve it, in at most five words.\n"
    "Technique:"
)


class LMHintPool:
    """Keyword hints written by a causal LM (NudgeRL's offline hint writer).

    Samples ``n_hints`` completions of ``template`` per problem, keeps the first
    line of each (cut at a comma or period, at most ``max_chars``), drops empty
    and duplicate hints, and caches the pool per problem uid. Hints are not
    checked, as in the paper. Pools are fixed by the seed and the batch they
    were written in: `prefetch` the whole problem set once (as NudgeRL writes
    its pools offline) to make them independent of the order of use.

    Args:
        engine: A rollout engine (``generate(prompts, SamplingParams) -> Rollouts``).
        n_hints: Hints per problem.
        template: Prompt with a ``{question}`` field.
        temperature, max_new_tokens, seed: Sampling settings.
        max_chars: Longest hint kept.
    """

    def __init__(
        self,
        engine: _Engine,
        n_hints: int = 5,
        template: str = DEFAULT_HINT_TEMPLATE,
        temperature: float = 1.0,
        max_new_tokens: int = 16,
        seed: int = 0,
        max_chars: int = 48,
    ):
        if "{question}" not in template:
            raise ValueError("template is not valid: must contain the field '{question}'")
        if not isinstance(n_hints, int) or n_hints < 1:
            raise ValueError(f"n_hints={n_hints!r} is not valid: must be a positive int")
        self.engine, self.n_hints, self.template = engine, n_hints, template
        self.temperature, self.max_new_tokens, self.seed, self.max_chars = temperature, max_new_tokens, seed, max_chars
        self._cache: dict[str, list[str]] = {}

    @staticmethod
    def clean(text: str, max_chars: int = 48) -> str:
        """First line of a generated hint, cut at ',' or '.', whitespace collapsed."""
        line = text.strip().split("\n", 1)[0]
        for stop in (",", "."):
            line = line.split(stop, 1)[0]
        return " ".join(line.split())[:max_chars].strip()

    def prefetch(self, problems: Sequence[Problem]) -> None:
        """Write the pools of many problems in one batched generation."""
        from rlvr_lib.rollout import SamplingParams

        todo = [p for p in problems if p.uid not in self._cache]
        if not todo:
            return
        params = SamplingParams(
            n=self.n_hints, temperature=self.temperature, max_new_tokens=self.max_new_tokens, seed=self.seed
        )
        rollouts = self.engine.generate([self.template.format(question=p.question) for p in todo], params)
        for i, problem in enumerate(todo):
            texts = rollouts.texts[i * self.n_hints : (i + 1) * self.n_hints]
            hints = [self.clean(t, self.max_chars) for t in texts]
            self._cache[problem.uid] = list(dict.fromkeys(h for h in hints if h))

    def hints(self, problem: Problem) -> list[str]:
        self.prefetch([problem])
        return list(self._cache[problem.uid])
