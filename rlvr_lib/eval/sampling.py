"""Sample completions for problems and score them with a verifier (into `ScoredSamples`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from rlvr_lib.rollout import SamplingParams
from rlvr_lib.tasks import CORRECT, MALFORMED, Problem, Verdict
from rlvr_lib.tasks.arithmetic import verify

Verifier = Callable[[Problem, object], Verdict]


@dataclass
class ScoredSamples:
    """``n`` scored samples for each of ``P`` problems; arrays are ``(P, n)``.

    ``hints``: per problem the hint appended (or, from `sample_with_hints`, the tuple of hints); ``statuses`` as in
    `rlvr_lib.tasks.STATUSES`; ``lengths`` in tokens (EOS included); ``truncated``: hit ``max_new_tokens``."""

    problems: list[Problem]
    hints: list[str | None | tuple[str | None, ...]]
    texts: list[list[str]]
    rewards: np.ndarray
    statuses: np.ndarray
    strategies: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray

    @property
    def correct(self) -> np.ndarray:
        return self.statuses == CORRECT

    def rate(self, status: str = MALFORMED) -> float:
        return float((self.statuses == status).mean())

    def strategy_freq(self, strategies: Sequence[str]) -> dict[str, float]:
        """Share of samples per strategy label, plus ``"none"`` for unparseable ones."""
        flat = self.strategies.ravel()
        out = {s: float(np.mean(flat == s)) for s in strategies}
        out["none"] = float(np.mean([s is None for s in flat]))
        return out

    def subset(self, mask: Sequence[bool]) -> "ScoredSamples":
        """The problems where ``mask`` is true."""
        idx = np.flatnonzero(np.asarray(mask, dtype=bool))
        return ScoredSamples(
            [self.problems[i] for i in idx],
            [self.hints[i] for i in idx],
            [self.texts[i] for i in idx],
            self.rewards[idx],
            self.statuses[idx],
            self.strategies[idx],
            self.lengths[idx],
            self.truncated[idx],
        )


def sample_and_score(
    engine,
    problems: Sequence[Problem],
    params: SamplingParams,
    *,
    hints: Sequence[str | None] | str | None = None,
    verifier: Verifier = verify,
) -> ScoredSamples:
    """Sample ``params.n`` completions per problem and score each with ``verifier`` (default: the testbed's)."""
    problems = list(problems)
    if not problems:
        raise ValueError("problems is empty: give at least one problem")
    if hints is None or isinstance(hints, str):
        hints = [hints] * len(problems)
    hints = list(hints)
    if len(hints) != len(problems):
        raise ValueError(f"hints has {len(hints)} entries: must be one per problem ({len(problems)})")
    rollouts = engine.generate([p.prompt_with(c) for p, c in zip(problems, hints)], params)
    n = params.n
    verdicts = [verifier(problems[i // n], text) for i, text in enumerate(rollouts.texts)]
    shape = (len(problems), n)
    return ScoredSamples(
        problems=problems,
        hints=hints,
        texts=[rollouts.texts[i * n : (i + 1) * n] for i in range(len(problems))],
        rewards=np.array([v.reward for v in verdicts], dtype=float).reshape(shape),
        statuses=np.array([v.status for v in verdicts], dtype=object).reshape(shape),
        strategies=np.array([v.strategy for v in verdicts], dtype=object).reshape(shape),
        lengths=rollouts.completion_mask.sum(1).numpy().reshape(shape),
        truncated=np.array([r == "length" for r in rollouts.finish_reasons]).reshape(shape),
    )


def sample_with_hints(
    engine,
    problems: Sequence[Problem],
    params: SamplingParams,
    hints: Callable[[Problem], Sequence[str]],
    hints_per_problem: int,
    *,
    verifier: Verifier = verify,
) -> ScoredSamples:
    """Nudged sampling (NudgeRL Fig 1): sample ``j`` of a problem uses hint ``j % H``, H = ``hints_per_problem``.

    Missing hints sample without one; ``hints[p][j % H]`` records it. Raises ValueError unless H is a positive int
    dividing ``params.n``."""
    problems = list(problems)
    if not problems:
        raise ValueError("problems is empty: give at least one problem")
    H = hints_per_problem
    if not isinstance(H, int) or isinstance(H, bool) or H < 1 or params.n % H:
        raise ValueError(f"hints_per_problem={H!r} is not valid: must be a positive int dividing "
                         f"SamplingParams.n={params.n}")
    chosen = []
    for problem in problems:
        usable = [str(h) for h in hints(problem) if " ".join(str(h).split())][:H]
        chosen.append(tuple(usable) + (None,) * (H - len(usable)))
    # One prompt per (problem, hint): the engine returns each prompt's n/H samples contiguously.
    flat = [p for p, hs in zip(problems, chosen) for _ in hs]
    out = sample_and_score(engine, flat, replace(params, n=params.n // H), hints=[h for hs in chosen for h in hs],
                           verifier=verifier)
    shape = (len(problems), params.n)
    per_hint = params.n // H

    def interleaved(a):  # (P*H, n/H) in (problem, hint) order -> (P, n) with sample j from hint j % H
        return a.reshape(len(problems), H, per_hint).swapaxes(1, 2).reshape(shape)

    return ScoredSamples(
        problems=problems,
        hints=chosen,
        texts=[[out.texts[i * H + j % H][j // H] for j in range(params.n)] for i in range(len(problems))],
        rewards=interleaved(out.rewards),
        statuses=interleaved(out.statuses),
        strategies=interleaved(out.strategies),
        lengths=interleaved(out.lengths),
        truncated=interleaved(out.truncated),
    )
