"""Task-agnostic types: a verifiable problem and a verifier's verdict.

Every task (the procedural testbed, a real benchmark) produces `Problem`s and
exposes a `verify(problem, completion) -> Verdict` function that never raises
on model output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CORRECT = "correct"
WRONG = "wrong"
MALFORMED = "malformed"
TIMEOUT = "timeout"
"""Grading ran past the verifier's time limit: no verdict on the answer itself (reward 0)."""
STATUSES = (CORRECT, WRONG, MALFORMED, TIMEOUT)
"""The statuses a verifier returns."""
UNVERIFIED = "unverified"
"""Not a verifier's status: the trainer's record of a completion whose verifier raised, kept only for a
method whose reward does not read the verifier (``Method.uses_verifier_reward = False``: VIGOR, INTUITOR).
Its verdict has reward NaN; accuracy metrics leave it out (NaN when no completion was verified)."""


@dataclass(frozen=True)
class Problem:
    """One verifiable problem.

    Attributes:
        uid: Stable identifier, unique within a task (e.g. ``"mul:47*86"``).
        question: The problem statement without any hint or separator.
        answer: Gold final answer as a string.
        family: Name of the family (evaluation suite) it was drawn for.
        difficulty: Difficulty level name.
        oracle_trace: A correct solution in the policy's output format.
        strategy: Strategy label of ``oracle_trace``.
        operands: Task-specific structured data the verifier needs.
    """

    uid: str
    question: str
    answer: str
    family: str
    difficulty: str
    oracle_trace: str
    strategy: str
    operands: tuple = field(default=())

    @property
    def prompt(self) -> str:
        """The hint-free prompt the policy completes."""
        return self.prompt_with(None)

    def prompt_with(self, hint: str | None) -> str:
        """The prompt with an optional strategy hint (NudgeRL's nudge, POPE's prefix) appended.

        The hint goes between the question and the newline that separates prompt
        from completion, so a hinted and an unhinted prompt share the question
        prefix token for token.
        """
        if hint is None or hint == "":
            return f"{self.question}\n"
        hint = " ".join(str(hint).split())  # one line: a newline would end the prompt
        return f"{self.question} hint: {hint}\n"


@dataclass(frozen=True)
class Verdict:
    """What a verifier says about one completion.

    Attributes:
        reward: 1.0 for a correct completion, 0.0 otherwise (NaN for `UNVERIFIED`).
        status: ``"correct"``, ``"wrong"``, ``"malformed"`` or ``"timeout"`` (`STATUSES`); the trainer
            records ``"unverified"`` (`UNVERIFIED`) when a verifier raised, see there.
        strategy: The strategy the completion used when it could be parsed,
            else ``None``.
        reason: Short human-readable explanation for a non-correct status.
    """

    reward: float
    status: str
    strategy: str | None = None
    reason: str = ""
