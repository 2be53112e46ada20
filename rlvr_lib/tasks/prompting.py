"""Prompt formatting and completion guards shared by the data-set tasks (`MathTask`, `ReasoningGymTask`).

`PromptFormat` makes ``Problem.question`` once, at draw time, from a plain template or the tokenizer's chat
template; the rollout then uses ``Problem.prompt_with(hint)``."""

from __future__ import annotations

import logging

from rlvr_lib.tasks.base import MALFORMED, Verdict
from rlvr_lib.validation import check, check_choice, check_int

logger = logging.getLogger(__name__)

__all__ = ["MAX_COMPLETION_CHARS", "PromptFormat", "PromptedTask", "check_completion", "check_timeout"]

QUESTION_SLOT = "{question}"
MAX_COMPLETION_CHARS = 32_000
"""Default cap on a completion's length (about 8k tokens of prose); longer ones are ``malformed``."""


class PromptFormat:
    """Builds ``Problem.question``: ``template`` with ``"{question}"`` replaced (plain substitution).

    With ``use_chat_template`` (and a tokenizer that has one) the filled template is the user turn of
    ``apply_chat_template(..., add_generation_prompt=True)`` minus one trailing newline; without a chat template it
    falls back to the plain template, with a warning. Raises ValueError on a template without exactly one
    ``"{question}"``, or ``use_chat_template`` without a tokenizer."""

    def __init__(self, template: str, tokenizer=None, use_chat_template: bool = False):
        check(isinstance(template, str) and template.count(QUESTION_SLOT) == 1, "template", template,
              f"a string containing {QUESTION_SLOT!r} exactly once")
        check(isinstance(use_chat_template, bool), "use_chat_template", use_chat_template, "a bool")
        check(tokenizer is not None or not use_chat_template, "tokenizer", tokenizer,
              "a tokenizer when use_chat_template=True")
        self.template = template
        self.chat_tokenizer = None
        if use_chat_template:
            if getattr(tokenizer, "chat_template", None):
                self.chat_tokenizer = tokenizer
            else:
                logger.warning("use_chat_template=True but %s has no chat template: using the plain template",
                               type(tokenizer).__name__)

    def __call__(self, question: str) -> str:
        """``Problem.question`` for the raw ``question``."""
        text = self.template.replace(QUESTION_SLOT, question)
        if self.chat_tokenizer is None:
            return text
        chat = self.chat_tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return chat[:-1] if chat.endswith("\n") else chat


def check_completion(completion: object, max_chars: int) -> Verdict | None:
    """A ``malformed`` verdict for a completion that is not a string or is too long, else ``None``."""
    if not isinstance(completion, str):
        return Verdict(0.0, MALFORMED, None, f"completion is {type(completion).__name__}, not str")
    if len(completion) > max_chars:
        return Verdict(0.0, MALFORMED, None, f"longer than {max_chars} characters")
    return None


class PromptedTask:
    """What the data-set tasks share: a name, named families with their evaluation and OOD subsets,
    a `PromptFormat`, a grading time limit, a completion-length cap and an optional hint pool."""

    def _init_prompted(self, name: str, families, *, eval_families, ood_families, template: str, tokenizer,
                       use_chat_template: bool, timeout_s: int, max_completion_chars: int, hint_pool) -> None:
        """Checks and sets the shared settings (``families`` already checked to be a non-empty mapping)."""
        check(isinstance(name, str) and name != "", "name", name, "a non-empty string")
        check_family_names(families, eval_families=eval_families, ood_families=ood_families)
        self.name = name
        self.families: tuple[str, ...] = tuple(families)
        self.eval_families, self.ood_families = tuple(eval_families), tuple(ood_families)
        # what `EvalSpec(task=name)` evaluates: the evaluation and OOD families, or every family when none is named
        self.default_eval_families = (*self.eval_families, *self.ood_families) or self.families
        self.prompt_format = PromptFormat(template, tokenizer, use_chat_template)
        self.timeout_s = check_timeout(timeout_s)
        self.max_completion_chars = check_int("max_completion_chars", max_completion_chars, 1)
        self.hint_pool = hint_pool


def check_family_names(families, **chosen) -> None:
    """Every name in each ``chosen`` list (``eval_families=...``, ``ood_families=...``) is one of ``families``."""
    for attr, names in chosen.items():
        for family in names:
            check_choice(attr, family, list(families))


def check_timeout(timeout_s: object) -> int:
    """Validates a grading time limit: whole seconds, at least 1."""
    return check_int("timeout_s", timeout_s, 1)
