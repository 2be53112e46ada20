"""Task-agnostic types: a verifiable problem and a verifier's verdict (``verify`` never raises on model output)."""

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
"""Not a verifier's status: the trainer's record (reward NaN) of a completion whose verifier raised, kept only
for a method that does not read the verifier's reward (VIGOR, INTUITOR); accuracy metrics leave it out."""


@dataclass(frozen=True)
class Problem:
    """One verifiable problem: ``uid`` (unique in its task, e.g. ``"mul:47*86"``), hint-free ``question``, gold
    ``answer``, ``family``, ``difficulty``, ``oracle_trace`` and its ``strategy``, and the verifier's ``operands``."""

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
        """The prompt with an optional hint between question and newline, so hinted and plain prompts share the question's tokens."""
        if hint is None or hint == "":
            return f"{self.question}\n"
        hint = " ".join(str(hint).split())  # one line: a newline would end the prompt
        return f"{self.question} hint: {hint}\n"


@dataclass(frozen=True)
class Verdict:
    """What a verifier says of one completion: ``reward`` (1.0 correct, else 0.0; NaN for `UNVERIFIED`), ``status``
    (`STATUSES`), the parsed ``strategy`` or ``None``, and a short ``reason``."""

    reward: float
    status: str
    strategy: str | None = None
    reason: str = ""
