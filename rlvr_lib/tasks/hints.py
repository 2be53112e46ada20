"""Hint pools: ordered strategy hints per problem (NudgeRL, arXiv 2605.15726; its default uses the first two of five).

* `TaskHintPool`: the testbed's writer: useful strategies ranked by fit, mixed with unhelpful hints at a set share.
* `LMHintPool`: keyword hints from any causal LM through a rollout engine, unchecked as in the paper;
  `LMHintPool.from_model` names the writer model, loaded on the first hint asked for (a config or a task that holds
  the pool loads nothing until training draws hints)."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from rlvr_lib.tasks.arithmetic import DISTRACTOR_HINTS, STRATEGIES, USEFUL_STRATEGIES, _stable_unit
from rlvr_lib.tasks.base import Problem
from rlvr_lib.validation import check_range


class HintPool(Protocol):
    """Anything that gives an ordered list of hint strings for a problem."""

    def hints(self, problem: Problem) -> list[str]: ...


class TaskHintPool:
    """The testbed's unverified hint writer: each of ``n_hints`` slots is unhelpful with probability
    ``unhelpful_share``, else the best useful strategy not used yet; fixed by (seed, problem), distinct."""

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
    """Keyword hints written by a causal LM (NudgeRL's offline hint writer), cached per problem uid.

    Each of ``n_hints`` samples of ``template`` keeps its first line (cut at ``,`` or ``.``, at most ``max_chars``);
    empty and duplicate hints are dropped. `prefetch` the whole set once to make pools independent of order."""

    def __init__(
        self,
        engine: _Engine | Callable[[], _Engine],
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
        # an engine, or a callable with no argument that builds one on the first prefetch (`from_model`)
        self._engine, self.n_hints, self.template = engine, n_hints, template
        self.writer: str | None = None  # the writer model's name, when `from_model` built the pool
        self.temperature, self.max_new_tokens, self.seed, self.max_chars = temperature, max_new_tokens, seed, max_chars
        self._cache: dict[str, list[str]] = {}

    @classmethod
    def from_model(cls, model: str, *, engine: str = "kvcache", dtype: str = "bfloat16", batch_size: int = 64,
                   **options) -> "LMHintPool":
        """A pool whose writer is the causal LM ``model`` (a hub name or a local checkpoint; `rlvr_lib.policy.load_policy`,
        on CUDA when available) behind rollout engine ``engine`` (`rlvr_lib.rollout.ENGINES`), loaded only when the
        first hint is written; ``dtype`` its parameters' (a torch dtype name; float32 on a CPU). ``options``: the
        pool's own (``n_hints``, ``template``, ``temperature``, ``max_new_tokens``, ``seed``, ``max_chars``).
        Raises ValueError on an unknown engine or dtype (checked now, before anything is loaded)."""
        from rlvr_lib.rollout.engines import ENGINES
        from rlvr_lib.validation import check, check_choice

        check(isinstance(model, str) and model.strip() != "", "model", model, "a hub model name or a checkpoint folder")
        check_choice("engine", engine, ENGINES)
        check_choice("dtype", dtype, ["bfloat16", "float16", "float32"])

        def build() -> _Engine:
            import torch

            from rlvr_lib.policy import load_policy
            from rlvr_lib.rollout.engines import build_engine

            on_gpu = torch.cuda.is_available()
            writer, tokenizer = load_policy(model, dtype=getattr(torch, dtype) if on_gpu else torch.float32)
            return build_engine(engine, writer.eval(), tokenizer, batch_size=batch_size)

        pool = cls(build, **options)
        pool.writer = model
        return pool

    @property
    def engine(self) -> _Engine:
        """The writer's rollout engine (built now if the pool was given a builder, `from_model`)."""
        if not hasattr(self._engine, "generate"):
            self._engine = self._engine()
        return self._engine

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
