r"""Math problems from any Hugging Face `datasets` source, graded by math-verify.

`MathTask` reads a set from the Hub or from local JSON, JSONL or Parquet files, with configurable question /
answer / level fields; its families are splits or filters of it (``level == 5``). Completions are graded by
``math_verify`` under `rlvr_lib.tasks.math_grading`'s policy in worker processes, so ``\boxed{\frac12}``,
``0.5`` and ``\frac{1}{2}`` agree while ``0.333333`` is not 1/3.

Registered here: ``"math_sample"`` (`SAMPLE_PATH`, 35 shipped MATH-style problems; families ``train``,
``test``, ``level_5``, ``all``) and ``"math500"`` (MATH-500 from the Hub; ``math500``, ``math500_l5``). The
papers' other sets: `rlvr_lib.tasks.math_datasets`. More: docs/tasks/math_task.md."""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from rlvr_lib.tasks import math_grading
from rlvr_lib.tasks.math_grading import GOLD_UNPARSED
from rlvr_lib.tasks.base import CORRECT, MALFORMED, TIMEOUT, Problem, Verdict
from rlvr_lib.tasks.prompting import MAX_COMPLETION_CHARS, PromptedTask, check_completion
from rlvr_lib.tasks.registry import register_task
from rlvr_lib.tasks.worker_pool import HARD_MARGIN_S, WorkerDied, WorkerPool, WorkerTimeout, shared_pool
from rlvr_lib.validation import check, check_choice, check_int, invalid

logger = logging.getLogger(__name__)


def _grading_pool() -> WorkerPool:
    """The process's grading workers, shared by every `MathTask` (a request carries its gold answer)."""
    return shared_pool(Path(math_grading.__file__), needs="math-verify")


LOG_QUOTE_CHARS = 200
"""math-verify's warnings quote the whole completion; they are cut to this many characters."""


class _ShortWarnings(logging.Filter):
    """Cuts a log record's message to `LOG_QUOTE_CHARS` characters (the rest is replaced by its length)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > LOG_QUOTE_CHARS:
            record.msg, record.args = f"{message[:LOG_QUOTE_CHARS]} ... [{len(message)} characters]", ()
        return True


_SHORT_WARNINGS = _ShortWarnings()


def _shorten_math_verify_logs() -> None:
    """Install `_ShortWarnings` on math-verify's loggers (idempotent; a logger's filters see its own records)."""
    for name in ("math_verify.parser", "math_verify.grader", "math_verify.metric"):
        log = logging.getLogger(name)
        if _SHORT_WARNINGS not in log.filters:
            log.addFilter(_SHORT_WARNINGS)

__all__ = [
    "DEFAULT_MATH_TEMPLATE",
    "MATH500_SOURCE",
    "MATH_SAMPLE_FAMILIES",
    "SAMPLE_PATH",
    "MathFamily",
    "MathTask",
    "dataset_task",
    "math500_task",
    "math_sample_task",
]

DEFAULT_MATH_TEMPLATE = "{question}\nPut your final answer within \\boxed{}."
LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
SAMPLE_PATH = Path(__file__).resolve().parent / "data" / "math_sample.jsonl"
MATH500_SOURCE = "HuggingFaceH4/MATH-500"

Source = Union[str, Path, Mapping[str, Union[str, Path, Sequence[Union[str, Path]]]]]


@dataclass(frozen=True)
class MathFamily:
    """One family of a `MathTask`: the rows of ``split`` whose every ``where`` column equals (or is among) the allowed value(s)."""

    split: str = "train"
    where: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check(isinstance(self.split, str) and self.split != "", "MathFamily.split", self.split, "a non-empty string")
        check(isinstance(self.where, Mapping) and all(isinstance(k, str) for k in self.where),
              "MathFamily.where", self.where, "a mapping of column names to allowed values")
        allowed = {k: tuple(v) if isinstance(v, (list, tuple, set, frozenset)) else (v,) for k, v in self.where.items()}
        object.__setattr__(self, "where", allowed)

    def keeps(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` passes every filter."""
        return all(row[column] in allowed for column, allowed in self.where.items())


QUESTION_KEY, ANSWER_KEY = "__question__", "__answer__"
"""Keys under which `MathTask` stores each loaded row's extracted question and gold answer."""


def _as_text(value: Any) -> str:
    """A column value as answer/question text: an integral float (``27.0``, AMC answers) as ``"27"``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _stable_int(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def _paths(source: Source, value: Any) -> list[Path]:
    """One split's file(s) of a ``{split: path or paths}`` source."""
    items = [value] if isinstance(value, (str, Path)) else value
    check(isinstance(items, (list, tuple)) and items and all(isinstance(i, (str, Path)) for i in items),
          "source", source, "{split: a path or a list of paths}")
    return [Path(i) for i in items]


def _load_arguments(source: Source) -> tuple[str, Any]:
    """``(path, data_files)`` for ``datasets.load_dataset``: a packaged builder for local files, else the Hub name."""
    if isinstance(source, Mapping):
        data_files = {split: [str(p) for p in _paths(source, value)] for split, value in source.items()}
        files = [Path(p) for paths in data_files.values() for p in paths]
    elif isinstance(source, (str, Path)) and Path(source).suffix.lower() in LOCAL_FORMATS:
        files, data_files = [Path(source)], str(source)
    elif isinstance(source, (str, Path)) and str(source):
        return str(source), None  # a Hub name or a local dataset folder: `datasets` resolves it
    else:
        raise invalid("source", source, "a Hub dataset name, a .json/.jsonl/.csv/.parquet path, or {split: path(s)}")
    formats = {LOCAL_FORMATS.get(f.suffix.lower()) for f in files}
    check(len(formats) == 1 and None not in formats, "source", source,
          f"files of one local format: {sorted(LOCAL_FORMATS)}")
    missing = [str(f) for f in files if not f.is_file()]
    check(not missing, "source", source, f"existing files (missing: {missing})")
    return formats.pop(), data_files


class MathTask(PromptedTask):
    r"""Final-answer math problems from a `datasets` source, graded by math-verify (a `Task`).

    ``Problem.question`` is ``template`` filled with the row's question (see `PromptFormat`); ``Problem.answer`` the
    row's answer; the oracle trace the ``solution_field`` or ``\boxed{<answer>}``. Splits load on first draw.
    Grading (`verify`; docs/tasks/math_grading.md): not a string, longer than ``max_completion_chars`` or no answer
    -> ``malformed``; not equivalent, several values or hedged -> ``wrong``; past ``timeout_s`` -> ``timeout``;
    else ``correct`` (reward 1, else 0). Rows without a gold answer are left out. Raises ValueError on a bad
    argument, and at a family's first draw on a missing column, an unreadable row or an empty family."""

    strategies: tuple[str, ...] = ()

    def __init__(
        self,
        name: str,
        source: Source,
        families: Mapping[str, MathFamily],
        *,
        eval_families: Sequence[str] = (),
        ood_families: Sequence[str] = (),
        hub_config: str | None = None,
        question_field: str = "problem",
        answer_field: str = "answer",
        level_field: str | None = "level",
        solution_field: str | None = None,
        template: str = DEFAULT_MATH_TEMPLATE,
        tokenizer=None,
        use_chat_template: bool = False,
        timeout_s: int = 5,
        max_completion_chars: int = MAX_COMPLETION_CHARS,
        hint_pool=None,
        question_extractor: Callable[[Any], str] | None = None,
        answer_extractor: Callable[[Any], str | None] | None = None,
        dedupe: bool = False,
    ):
        _shorten_math_verify_logs()
        self._load_path, self._data_files = _load_arguments(source)
        check(isinstance(families, Mapping) and len(families) > 0
              and all(isinstance(f, MathFamily) for f in families.values()),
              "families", families, "a non-empty {name: MathFamily} mapping")
        self._init_prompted(name, families, eval_families=eval_families, ood_families=ood_families,
                            template=template, tokenizer=tokenizer, use_chat_template=use_chat_template,
                            timeout_s=timeout_s, max_completion_chars=max_completion_chars, hint_pool=hint_pool)
        for attr, value, optional in (("question_field", question_field, False), ("answer_field", answer_field, False),
                                      ("level_field", level_field, True), ("solution_field", solution_field, True),
                                      ("hub_config", hub_config, True)):
            check((optional and value is None) or (isinstance(value, str) and value != ""), attr, value,
                  "a non-empty string" + (" or None" if optional else ""))
        self.source, self.hub_config = source, hub_config
        self.family_specs = dict(families)
        self.question_field, self.answer_field = question_field, answer_field
        self.level_field, self.solution_field = level_field, solution_field
        for attr, value in (("question_extractor", question_extractor), ("answer_extractor", answer_extractor)):
            check(value is None or callable(value), attr, value, "None or a function of the column's value")
        check(isinstance(dedupe, bool), "dedupe", dedupe, "a bool")
        self.question_extractor, self.answer_extractor, self.dedupe = question_extractor, answer_extractor, dedupe
        self._splits: dict[str, list[dict]] = {}
        self._members: dict[str, list[int]] = {}
        self._gold_warned: set[str] = set()

    # ----------------------------------------------------------------- data
    def _rows(self, split: str) -> list[dict]:
        """The split's rows (the columns the task reads), loaded once."""
        if split not in self._splits:
            import datasets

            data = datasets.load_dataset(self._load_path, name=self.hub_config, data_files=self._data_files,
                                         split=split)
            rows = data.select_columns(self._columns(split, list(data.column_names))).to_list()
            self._splits[split] = self._prepared(split, rows)
        return self._splits[split]

    def _prepared(self, split: str, rows: list[dict]) -> list[dict]:
        """``rows`` with question (`QUESTION_KEY`) and gold answer (`ANSWER_KEY`); no-answer rows (and duplicates with ``dedupe``) left out."""
        kept, seen, unanswered, repeated = [], set(), 0, 0  # unanswered: no gold answer or no question
        for index, row in enumerate(rows):
            question = self._extract("question_extractor", self.question_field, split, index, row)
            answer = self._extract("answer_extractor", self.answer_field, split, index, row)
            if not answer or not question:
                unanswered += 1
                continue
            if self.dedupe:
                if question in seen:
                    repeated += 1
                    continue
                seen.add(question)
            kept.append({**row, QUESTION_KEY: question, ANSWER_KEY: answer})
        if unanswered or repeated:
            logger.info("%s: split %r: %d rows kept, %d without a gold answer and %d repeated questions left out",
                        self.name, split, len(kept), unanswered, repeated)
        return kept

    def _extract(self, attr: str, field_name: str, split: str, index: int, row: Mapping[str, Any]) -> str | None:
        """One row's question or answer text (``attr``: which extractor)."""
        value, extractor = row[field_name], getattr(self, attr)
        if extractor is None:
            return None if value is None else _as_text(value)
        try:
            text = extractor(value)
        except Exception as exc:  # a row of another schema: one line naming the row, column and cause
            raise ValueError(f"{self.name}: row {index} of split {split!r} of {self.source!r}: {attr} "
                             f"{getattr(extractor, '__name__', extractor)} cannot read column {field_name!r} "
                             f"({type(exc).__name__}: {exc}); value: {str(value)[:200]!r}") from None
        check(text is None or isinstance(text, str), attr, text, "a function returning a string or None")
        return None if text is None else text.strip()

    def column_names(self, split: str) -> list[str]:
        """The columns of ``split`` of the source (reads the data, without a progress bar: a check's error stays
        one line; what a bad field name's error lists)."""
        import datasets

        shown = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        try:
            data = datasets.load_dataset(self._load_path, name=self.hub_config, data_files=self._data_files,
                                         split=split)
        finally:
            if shown:
                datasets.enable_progress_bars()
        return list(data.column_names)

    def _columns(self, split: str, columns: list[str]) -> list[str]:
        """The columns of ``split`` the task reads; a configured one that is missing raises ``ValueError``."""
        for attr in ("question_field", "answer_field", "level_field", "solution_field"):
            value = getattr(self, attr)
            check(value is None or value in columns, attr, value, f"a column of split {split!r}: one of {columns}")
        filtered = {c for spec in self.family_specs.values() if spec.split == split for c in spec.where}
        missing = sorted(filtered - set(columns))
        check(not missing, "MathFamily.where", missing, f"columns of split {split!r}: one of {columns}")
        needed = {self.question_field, self.answer_field, self.level_field, self.solution_field} | filtered
        return sorted(c for c in needed if c is not None)

    def _family_members(self, family: str) -> list[int]:
        """Row indices of ``family`` in its split."""
        check_choice("family", family, list(self.families))
        if family not in self._members:
            spec = self.family_specs[family]
            members = [i for i, row in enumerate(self._rows(spec.split)) if spec.keeps(row)]
            if not members:
                raise ValueError(f"family={family!r} is empty: no row of split {spec.split!r} of "
                                 f"{self.source!r} passes where={dict(spec.where)}")
            self._members[family] = members
        return self._members[family]

    def family_capacity(self, family: str) -> int:
        """Rows of the source in ``family`` (loads its split on first use)."""
        return len(self._family_members(family))

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        """``n`` distinct rows of ``family`` in a seeded random order; ValueError on an unknown family, a bad ``n`` or seed."""
        members = self._family_members(family)
        check_int("n", n, 1, len(members))
        check_int("seed", seed, 0)
        rng = np.random.default_rng([seed, _stable_int(f"family:{family}")])
        split = self.family_specs[family].split
        rows = self._rows(split)
        return [self._problem(family, split, members[i], rows[members[i]])
                for i in rng.choice(len(members), size=n, replace=False)]

    def _problem(self, family: str, split: str, index: int, row: Mapping[str, Any]) -> Problem:
        answer = row[ANSWER_KEY]
        level = row[self.level_field] if self.level_field else None
        solution = row[self.solution_field] if self.solution_field else None
        return Problem(
            uid=f"{self.name}:{split}:{index}",
            question=self.prompt_format(row[QUESTION_KEY]),
            answer=answer,
            family=family,
            difficulty="unknown" if level is None else str(level),
            oracle_trace=str(solution) if solution else f"\\boxed{{{answer}}}",
            strategy="",
            operands=(split, index),
        )

    # ----------------------------------------------------------------- grading
    def verify(self, problem: Problem, completion: object) -> Verdict:
        """Grade ``completion`` against ``problem.answer`` within ``timeout_s`` + `HARD_MARGIN_S`; never raises on model output.

        RuntimeError when no grading worker can start (math-verify missing)."""
        if isinstance(completion, str) and type(completion) is not str:
            completion = str.__str__(completion)  # a str subclass is graded by its characters, not its methods
        rejected = check_completion(completion, self.max_completion_chars)
        if rejected is not None:
            return rejected
        request = {"answer": problem.answer, "completion": completion, "budget_s": self.timeout_s}
        limit = self.timeout_s + HARD_MARGIN_S
        try:
            reply = _grading_pool().request(request, limit)
        except WorkerTimeout:
            return Verdict(0.0, TIMEOUT, None, f"grading ran past {limit:g} s: its worker was stopped")
        except WorkerDied as exc:  # e.g. the worker's memory limit on a huge expansion
            return Verdict(0.0, MALFORMED, None, f"the grading worker died on this completion ({exc})")
        status, reason = reply["status"], reply["reason"]
        if reason == GOLD_UNPARSED and problem.answer not in self._gold_warned:
            self._gold_warned.add(problem.answer)
            logger.warning("%s: math-verify cannot parse the gold answer %r", self.name, problem.answer)
        return Verdict(1.0 if status == CORRECT else 0.0, status, None, reason)

    def hints(self, problem: Problem) -> list[str]:
        """The hint pool's hints for ``problem``; ``[]`` without a pool."""
        return [] if self.hint_pool is None else list(self.hint_pool.hints(problem))

    def data_origin(self) -> str:
        """Where the rows come from, for a user's error message: the Hub (network or a cached copy), or local data."""
        if self._data_files is None and not Path(self._load_path).is_dir():
            return (f"Task {self.name!r} reads the Hugging Face Hub data set {self._load_path!r}: it needs the "
                    f"network or a cached copy; for local data use --task math_sample, or a MathTask on local "
                    f"files (docs/tasks/math_task.md)")
        return f"Task {self.name!r} reads local data: {self.source!s}"

    def __repr__(self) -> str:
        return f"MathTask(name={self.name!r}, source={self.source!r}, families={list(self.families)})"


# --------------------------------------------------------------------------- presets

MATH_SAMPLE_FAMILIES = {
    "train": MathFamily("train", {"level": ("Level 1", "Level 2", "Level 3")}),
    "test": MathFamily("train", {"level": ("Level 4", "Level 5")}),
    "level_5": MathFamily("train", {"level": "Level 5"}),
    "all": MathFamily("train"),
}


def math_sample_task(name: str = "math_sample", **options) -> MathTask:
    """The shipped sample (`SAMPLE_PATH`) with `MATH_SAMPLE_FAMILIES`; ``options`` go to `MathTask`."""
    return MathTask(name, SAMPLE_PATH, MATH_SAMPLE_FAMILIES, eval_families=("test", "level_5"), **options)


def math500_task(name: str = "math500", **options) -> MathTask:
    """MATH-500 from the Hub: families ``math500`` (all 500) and ``math500_l5``; ``options`` go to `MathTask`."""
    families = {"math500": MathFamily("test"), "math500_l5": MathFamily("test", {"level": 5})}
    return MathTask(name, MATH500_SOURCE, families, eval_families=("math500", "math500_l5"),
                    solution_field="solution", **options)


register_task("math_sample", math_sample_task)
register_task("math500", math500_task)


# --------------------------------------------------------------------------- a user's data, without code

DATASET_KEYS = ("source", "prompt_column", "answer_column", "split", "hub_config", "solution_column")
"""The keys of a ``dataset:`` block (``python -m rlvr_lib train --config``) and of `dataset_task`'s arguments."""


def _data_digest(source: str) -> str | None:
    """sha256 (12 hex) of a local file's bytes (``None`` for a Hub name or a folder): the task's ``version``."""
    import hashlib

    path = Path(source)
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:12]


def dataset_task(source: str, *, prompt_column: str = "prompt", answer_column: str = "answer", split: str = "train",
                 hub_config: str | None = None, solution_column: str | None = None) -> MathTask:
    """A `MathTask` over a user's data: a Hub data set name or a local ``.jsonl``/``.json``/``.csv``/``.parquet``
    file (``datasets.load_dataset``), its question in ``prompt_column`` and gold answer in ``answer_column``.

    Its one family is named ``split`` (all its rows; a local file's rows are split ``"train"``), trained on and
    evaluated. The name is ``dataset-<file stem or hub name>-<8 hex of these arguments>`` (the same arguments
    give the same task); ``version`` holds a local file's sha256, so a run's key changes with its data. A local
    file's columns are checked at once: ValueError ``"prompt_column='q' is invalid: must be a column of ...: one
    of [...]"`` (a Hub set's at its first draw)."""
    import hashlib
    import json

    for key, value, optional in (("source", source, False), ("prompt_column", prompt_column, False),
                                 ("answer_column", answer_column, False), ("split", split, False),
                                 ("hub_config", hub_config, True), ("solution_column", solution_column, True)):
        check((optional and value is None) or (isinstance(value, str) and value.strip() != ""), key, value,
              "a non-empty string" + (" or None" if optional else ""))
    local = Path(source).suffix.lower() in LOCAL_FORMATS
    if local:
        check(Path(source).is_file(), "source", source, "an existing file (no such file) or a Hub data set name")
        check(split == "train", "split", split, f"'train' for a local file ({source} is one split, 'train')")
    arguments = {"source": source, "prompt_column": prompt_column, "answer_column": answer_column, "split": split,
                 "hub_config": hub_config, "solution_column": solution_column}
    tag = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:8]
    stem = Path(source).stem if local else source
    slug = "".join(c if c.isalnum() or c in "._" else "-" for c in stem).strip("-._") or "data"
    task = MathTask(f"dataset-{slug}-{tag}", source, {split: MathFamily(split)}, eval_families=(split,),
                    hub_config=hub_config, question_field=prompt_column, answer_field=answer_column, level_field=None,
                    solution_field=solution_column)
    version = _data_digest(source) if local else None
    task.version = f"dataset-{tag}" + (f"-{version}" if version else "")
    if local:
        columns = task.column_names(split)
        where = f"a column of {source}: one of {columns}"
        for key, value in (("prompt_column", prompt_column), ("answer_column", answer_column),
                           ("solution_column", solution_column)):
            check(value is None or value in columns, key, value, where)
    return task
