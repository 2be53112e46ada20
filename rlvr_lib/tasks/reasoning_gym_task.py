"""Procedural reasoning tasks from the ``reasoning_gym`` package, graded by each data set's own scorer.

`ReasoningGymTask` serves SAGE's out-of-distribution Knights-and-Knaves test, and any other reasoning-gym
generator, as a `Task`: a family is a named generator configuration, a draw a fixed seeded slice of
``reasoning_gym.create_dataset(name, seed=..., size=...)``, and a completion is graded by ``score_answer`` on
its final answer: the last complete ``<answer>...</answer>``, else the text after the last ``answer:`` (any
case) to the end of its line. Scoring runs in worker processes (`rlvr_lib.tasks.rg_grading`), so a verdict
comes within ``timeout_s`` + `HARD_MARGIN_S` on any thread. Registered: ``"rg_knights_knaves"``.
More: docs/tasks/reasoning_gym.md."""

from __future__ import annotations

import ast
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr_lib.tasks import rg_grading
from rlvr_lib.tasks.base import CORRECT, MALFORMED, TIMEOUT, WRONG, Problem, Verdict
from rlvr_lib.tasks.prompting import MAX_COMPLETION_CHARS, PromptedTask, check_completion
from rlvr_lib.tasks.registry import register_task
from rlvr_lib.tasks.worker_pool import HARD_MARGIN_S, WorkerDied, WorkerPool, WorkerTimeout, shared_pool
from rlvr_lib.validation import check, check_choice, check_int, invalid

__all__ = [
    "DEFAULT_RG_TEMPLATE",
    "KNIGHTS_KNAVES_FAMILIES",
    "ReasoningGymTask",
    "extract_final_answer",
    "knights_knaves_task",
]

DEFAULT_RG_TEMPLATE = "{question}\nPut your final answer inside <answer></answer>."
_OPEN, _CLOSE, _LINE_MARKER = "<answer>", "</answer>", "answer:"
_RESERVED = ("seed", "size")  # set by the task, per draw


def _scoring_pool() -> WorkerPool:
    """The process's scoring workers, shared by every `ReasoningGymTask` (a request names its data set)."""
    return shared_pool(Path(rg_grading.__file__), needs="reasoning-gym")


def extract_final_answer(completion: str) -> str | None:
    """The final answer of ``completion`` (module docstring), or ``None``; linear in its length."""
    from reasoning_gym.utils import extract_answer

    end = completion.rfind(_CLOSE)
    start = completion.rfind(_OPEN, 0, end) if end >= 0 else -1
    if start >= 0:
        return extract_answer(completion[start:end + len(_CLOSE)]) or None
    marker = completion.lower().rfind(_LINE_MARKER)
    if marker < 0:
        return None
    answer = completion[marker + len(_LINE_MARKER):].split("\n", 1)[0].strip()
    return answer or None


class ReasoningGymTask(PromptedTask):
    """A reasoning-gym generator as a `Task`: families are named generator configurations.

    Family ``f`` drawn with ``seed`` reads ``create_dataset(dataset, seed=s, size=capacity, **families[f])``,
    ``s`` a fixed hash of ``(f, seed)``, from index 0, skipping repeated questions. ``Problem.operands`` is
    ``(family, dataset seed, index)``; the oracle trace ``<answer>{answer}</answer>``. Grading: not a string, too
    long or no final answer -> ``malformed``; ``score_answer`` below 1, raising or killing its worker -> ``wrong``;
    past ``timeout_s`` -> ``timeout``; 1 -> ``correct`` (reward 1, else 0). ValueError on a bad argument."""

    strategies: tuple[str, ...] = ()

    def __init__(
        self,
        name: str,
        dataset: str,
        families: Mapping[str, Mapping[str, Any]],
        *,
        eval_families: Sequence[str] = (),
        ood_families: Sequence[str] = (),
        capacity: int = 100_000,
        template: str = DEFAULT_RG_TEMPLATE,
        tokenizer=None,
        use_chat_template: bool = False,
        timeout_s: int = 5,
        max_completion_chars: int = MAX_COMPLETION_CHARS,
        hint_pool=None,
    ):
        import reasoning_gym

        check_choice("dataset", dataset, sorted(reasoning_gym.factory.DATASETS))
        check(isinstance(families, Mapping) and len(families) > 0
              and all(isinstance(c, Mapping) for c in families.values()),
              "families", families, "a non-empty {name: {config field: value}} mapping")
        self._init_prompted(name, families, eval_families=eval_families, ood_families=ood_families,
                            template=template, tokenizer=tokenizer, use_chat_template=use_chat_template,
                            timeout_s=timeout_s, max_completion_chars=max_completion_chars, hint_pool=hint_pool)
        self.dataset = dataset
        self.capacity = check_int("capacity", capacity, 1)
        self.family_configs = {f: dict(config) for f, config in families.items()}
        for family, config in self.family_configs.items():
            self._check_config(family, config)
        self._datasets: dict[tuple[str, int], Any] = {}
        self._entries: dict[tuple[str, int, int], dict] = {}
        self._packed: dict[tuple[str, int, int], str] = {}

    def _check_config(self, family: str, config: dict) -> None:
        """Builds a one-item data set from ``config``; a bad field or value raises ``ValueError``."""
        import reasoning_gym

        where = f"families[{family!r}]"
        reserved = [k for k in _RESERVED if k in config]
        check(not reserved, where, config, f"a config without {reserved} (the task sets them per draw)")
        try:  # the scoring worker rebuilds the data set from the config's repr
            literal = ast.literal_eval(repr(config)) == config
        except (ValueError, SyntaxError):
            literal = False
        check(literal, where, config, "a config of Python literals (numbers, strings, tuples, lists, dicts)")
        try:
            reasoning_gym.create_dataset(self.dataset, seed=0, size=1, **config)
        except (TypeError, ValueError, AssertionError) as exc:
            config_cls = reasoning_gym.factory.DATASETS[self.dataset][1]
            fields = [f for f in config_cls.__dataclass_fields__ if f not in _RESERVED]
            raise invalid(where, config, f"fields of {config_cls.__name__} {fields} with valid values ({exc})") from exc

    # ----------------------------------------------------------------- data
    def _data(self, family: str, dataset_seed: int):
        key = (family, dataset_seed)
        if key not in self._datasets:
            import reasoning_gym

            self._datasets[key] = reasoning_gym.create_dataset(
                self.dataset, seed=dataset_seed, size=self.capacity, **self.family_configs[family])
        return self._datasets[key]

    def _dataset_seed(self, family: str, seed: int) -> int:
        # Not keyed by the task's name: a variant (another template, a chat template) draws the same puzzles.
        return zlib.crc32(f"{self.dataset}:{family}:{seed}".encode("utf-8"))

    def _entry(self, family: str, dataset_seed: int, index: int) -> dict:
        key = (family, dataset_seed, index)
        if key not in self._entries:
            self._entries[key] = self._data(family, dataset_seed)[index]
        return self._entries[key]

    def _packed_entry(self, family: str, dataset_seed: int, index: int) -> str:
        """The item as a scoring request carries it; packed once per item."""
        key = (family, dataset_seed, index)
        if key not in self._packed:
            self._packed[key] = rg_grading.pack_entry(self._entry(family, dataset_seed, index))
        return self._packed[key]

    def family_capacity(self, family: str) -> int:
        """The virtual size of every family's data set (``capacity``)."""
        check_choice("family", family, list(self.families))
        return self.capacity

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        """The first ``n`` distinct puzzles of ``family`` for ``seed``; ValueError on an unknown family, a bad ``n`` or seed, or too few puzzles."""
        check_choice("family", family, list(self.families))
        check_int("n", n, 1, self.capacity)
        check_int("seed", seed, 0)
        dataset_seed = self._dataset_seed(family, seed)
        problems, seen = [], set()
        for index in range(self.capacity):
            entry = self._entry(family, dataset_seed, index)
            if entry["question"] in seen:
                continue
            seen.add(entry["question"])
            problems.append(self._problem(family, dataset_seed, index, entry))
            if len(problems) == n:
                return problems
        raise ValueError(f"n={n} is invalid: family {family!r} of {self.dataset!r} holds only {len(problems)} "
                         f"distinct puzzles in its {self.capacity} items: must be at most {len(problems)}")

    def _problem(self, family: str, dataset_seed: int, index: int, entry: Mapping[str, Any]) -> Problem:
        config = self.family_configs[family]
        return Problem(
            uid=f"{self.name}:{family}:{dataset_seed}:{index}",
            question=self.prompt_format(str(entry["question"])),
            answer=str(entry["answer"]),
            family=family,
            difficulty=",".join(f"{k}={v}" for k, v in sorted(config.items())) or "default",
            oracle_trace=f"{_OPEN}{entry['answer']}{_CLOSE}",
            strategy="",
            operands=(family, dataset_seed, index),
        )

    # ----------------------------------------------------------------- grading
    def verify(self, problem: Problem, completion: object) -> Verdict:
        """Score the final answer with ``score_answer`` in a worker; never raises on model output.

        RuntimeError when no worker can start or rebuild the scorer (the environment, not the completion)."""
        if isinstance(completion, str) and type(completion) is not str:
            completion = str.__str__(completion)  # a str subclass is graded by its characters, not its methods
        rejected = check_completion(completion, self.max_completion_chars)
        if rejected is not None:
            return rejected
        answer = extract_final_answer(completion)
        if answer is None:
            return Verdict(0.0, MALFORMED, None, f"no {_OPEN}...{_CLOSE} and no '{_LINE_MARKER}' line")
        family, dataset_seed, index = problem.operands
        request = {"dataset": self.dataset, "config": repr(self.family_configs[family]), "seed": dataset_seed,
                   "size": self.capacity, "entry": self._packed_entry(family, dataset_seed, index),
                   "answer": answer, "budget_s": self.timeout_s}
        limit = self.timeout_s + HARD_MARGIN_S
        try:
            reply = _scoring_pool().request(request, limit)
        except WorkerTimeout:
            return Verdict(0.0, TIMEOUT, None, f"score_answer ran past {limit:g} s: its worker was stopped")
        except WorkerDied as exc:  # e.g. the worker's memory limit: a scorer choking on the answer
            return Verdict(0.0, WRONG, None, f"the scoring worker died on this answer ({exc})")
        if reply["status"] == rg_grading.ERROR:
            raise RuntimeError(f"{self.name}: {reply['reason']}")
        return Verdict(1.0 if reply["status"] == CORRECT else 0.0, reply["status"], None, reply["reason"])

    def hints(self, problem: Problem) -> list[str]:
        """The hint pool's hints for ``problem``; ``[]`` without a pool."""
        return [] if self.hint_pool is None else list(self.hint_pool.hints(problem))

    def __repr__(self) -> str:
        return f"ReasoningGymTask(name={self.name!r}, dataset={self.dataset!r}, families={list(self.families)})"


# --------------------------------------------------------------------------- presets

KNIGHTS_KNAVES_FAMILIES = {
    "train": {"n_people": 3},
    "ppl2": {"n_people": 2},
    "ppl3": {"n_people": 3},
    "ppl5": {"n_people": 5},
}
"""Knights-and-Knaves families by number of inhabitants (statement depth and width 2, the generator's default)."""


def knights_knaves_task(name: str = "rg_knights_knaves", **options) -> ReasoningGymTask:
    """Knights and Knaves (SAGE's OOD test): train on 3 people, evaluate on 2 and 3, OOD on 5; ``options`` go to `ReasoningGymTask`."""
    return ReasoningGymTask(name, "knights_knaves", KNIGHTS_KNAVES_FAMILIES, eval_families=("ppl2", "ppl3"),
                            ood_families=("ppl5",), **options)


register_task("rg_knights_knaves", knights_knaves_task)
