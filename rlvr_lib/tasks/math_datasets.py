r"""The papers' math datasets, registered by name: each Hub schema mapped onto `MathTask`.

Each loads lazily (``datasets.load_dataset``) from its Hub name or local files in the same schema (``source=``):

* ``dapo_math_17k``: ``BytedTsinghua-SIA/DAPO-Math-17k`` ``train``; question ``prompt[0]["content"]`` (or the
  ``\boxed{}`` template with ``prompt_style="boxed"``); gold ``reward_model["ground_truth"]``; deduplicated.
* ``math_train``: ``DigitalLearningGmbH/MATH-lighteval``; ``problem``; gold the last ``\boxed{}`` of
  ``solution``; families ``train``, ``train_l3_5``, ``test``, ``test_l5``.
* ``math500`` (`rlvr_lib.tasks.math_task`): ``HuggingFaceH4/MATH-500``; families ``math500``, ``math500_l5``.
* ``aime24`` (``HuggingFaceH4/aime_2024``), ``aime25`` (``yentinglin/aime_2025``), ``amc23`` (``math-ai/amc23``).
* ``math_eval``: `MathSuite` of the four evaluation sets.
* ``dapo_math_17k_hints``: ``dapo_math_17k`` with NudgeRL's hint pool, an `LMHintPool` of 5 keyword hints per problem
  written by `HINT_WRITER` (loaded when the first hint is drawn); `dapo_math_17k_hints_task`.

Which paper uses which set, row counts, schemas and answer formats: docs/tasks/math_datasets.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from rlvr_lib.tasks.base import Problem, Verdict
from rlvr_lib.tasks.math_task import (
    DEFAULT_MATH_TEMPLATE,
    LOCAL_FORMATS,
    MATH500_SOURCE,
    MathFamily,
    MathTask,
    Source,
)
from rlvr_lib.tasks.registry import register_task
from rlvr_lib.validation import check, check_choice

__all__ = [
    "DAPO_PROMPT_PREFIX",
    "DAPO_PROMPT_SUFFIX",
    "DATASETS",
    "EVAL_DATASETS",
    "MathDatasetSpec",
    "MathSuite",
    "dapo_ground_truth",
    "dapo_problem",
    "dapo_prompt",
    "last_boxed",
    "math_dataset_task",
    "math_eval_task",
]

DAPO_PROMPT_PREFIX = ("Solve the following math problem step by step. The last line of your response should be "
                      "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
"""The instruction before the problem in every DAPO-Math-17k prompt."""
DAPO_PROMPT_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
"""The reminder after the problem in every DAPO-Math-17k prompt."""


# --------------------------------------------------------------------------- extractors


def dapo_prompt(messages: Any) -> str:
    """DAPO-Math-17k's prompt text: the first user message of its ``prompt`` list (or the string); ValueError if none."""
    if isinstance(messages, str):
        return messages
    for message in messages:
        if isinstance(message, Mapping) and message.get("role", "user") == "user" \
                and isinstance(message.get("content"), str):
            return message["content"]
    raise ValueError("no user message with text content in the prompt list")


def dapo_problem(messages: Any) -> str:
    """The bare problem of a DAPO-Math-17k prompt: `dapo_prompt` without DAPO's instruction and reminder."""
    text = dapo_prompt(messages).strip()
    if text.startswith(DAPO_PROMPT_PREFIX.strip()):
        text = text[len(DAPO_PROMPT_PREFIX.strip()):]
    suffix = DAPO_PROMPT_SUFFIX.strip()
    if suffix in text:
        text = text[:text.rindex(suffix)]
    return text.strip()


def dapo_ground_truth(reward_model: Any) -> str:
    """DAPO-Math-17k's gold answer: ``reward_model["ground_truth"]`` (an integer written as text)."""
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise ValueError("reward_model must be a mapping with a 'ground_truth' key")
    return str(reward_model["ground_truth"])


def last_boxed(text: Any) -> str | None:
    r"""The content of the last ``\boxed{...}`` (or ``\fbox{...}``, ``\boxed N``) with brace matching (Hendrycks' MATH rule), or ``None``."""
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start + (6 if text.startswith("\\boxed", start) else 5):]
    if rest.startswith(" "):  # "\boxed 5": up to the next space or "$"
        word = rest[1:].split("$")[0].split()
        return word[0] if word else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i]
    return None


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class MathDatasetSpec:
    """How one dataset's schema maps onto `MathTask`: ``source``, ``families``, ``eval_families``, ``options``, ``hub_config``, ``about``."""

    source: str
    families: Mapping[str, MathFamily]
    eval_families: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    hub_config: str | None = None
    about: str = ""

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names its families read, in order of first use."""
        return tuple(dict.fromkeys(f.split for f in self.families.values()))


LEVELS_3_5 = ("Level 3", "Level 4", "Level 5")

DATASETS: dict[str, MathDatasetSpec] = {
    "dapo_math_17k": MathDatasetSpec(
        "BytedTsinghua-SIA/DAPO-Math-17k", {"train": MathFamily("train")},
        options=dict(question_field="prompt", answer_field="reward_model", level_field=None,
                     question_extractor=dapo_prompt, answer_extractor=dapo_ground_truth, template="{question}",
                     dedupe=True),
        about="DAPO's training set (NudgeRL, SAGE): integer answers, DAPO's 'Answer:' prompt"),
    "math_train": MathDatasetSpec(
        "DigitalLearningGmbH/MATH-lighteval",
        {"train": MathFamily("train"), "train_l3_5": MathFamily("train", {"level": LEVELS_3_5}),
         "test": MathFamily("test"), "test_l5": MathFamily("test", {"level": "Level 5"})},
        eval_families=("test", "test_l5"),
        options=dict(answer_field="solution", answer_extractor=last_boxed, solution_field="solution"),
        about="MATH (Hendrycks et al.) train 7,500 / test 5,000 (VIGOR trains on train)"),
    "math500": MathDatasetSpec(
        MATH500_SOURCE, {"math500": MathFamily("test"), "math500_l5": MathFamily("test", {"level": 5})},
        eval_families=("math500", "math500_l5"), options=dict(solution_field="solution"),
        about="MATH-500 (all papers), level 5 = NudgeRL's MATH500-L5"),
    "aime24": MathDatasetSpec(
        "HuggingFaceH4/aime_2024", {"aime24": MathFamily("train")}, eval_families=("aime24",),
        options=dict(level_field=None, solution_field="solution"), about="AIME 2024 I and II, 30 problems"),
    "aime25": MathDatasetSpec(
        "yentinglin/aime_2025", {"aime25": MathFamily("train")}, eval_families=("aime25",),
        options=dict(level_field=None), about="AIME 2025 I and II, 30 problems"),
    "amc23": MathDatasetSpec(
        "math-ai/amc23", {"amc23": MathFamily("test")}, eval_families=("amc23",),
        options=dict(question_field="question", level_field=None), about="AMC 2023, 40 problems"),
}
"""Every dataset `math_dataset_task` builds, by name."""

EVAL_DATASETS = ("math500", "aime24", "aime25", "amc23")
"""The evaluation sets of the papers' tables, the members of ``math_eval``."""


def _local(source: Any) -> bool:
    return isinstance(source, (str, Path)) and Path(source).suffix.lower() in LOCAL_FORMATS


def math_dataset_task(dataset: str, name: str | None = None, *, source: Source | None = None,
                      hub_config: str | None = None, prompt_style: str = "dataset", **options) -> MathTask:
    r"""A `MathTask` over one of `DATASETS`, from the Hub or from local files in the same schema.

    ``prompt_style``: ``"dataset"`` (the dataset's prompt) or ``"boxed"`` (DAPO's bare problem with the
    ``\boxed{}`` template). Raises ValueError on an unknown dataset, a bad ``prompt_style``, one local file for
    several splits, or a bad `MathTask` argument."""
    check_choice("dataset", dataset, sorted(DATASETS))
    check_choice("prompt_style", prompt_style, ["dataset", "boxed"])
    spec = DATASETS[dataset]
    if source is None:
        source = spec.source
    elif _local(source):
        check(len(spec.splits) == 1, "source", source,
              f"{{split: path(s)}} with the splits of {dataset!r}: {list(spec.splits)} (a single file has one)")
        source = {spec.splits[0]: source}
    settings = dict(spec.options)
    if prompt_style == "boxed" and dataset == "dapo_math_17k":
        settings.update(question_extractor=dapo_problem, template=DEFAULT_MATH_TEMPLATE)
    settings.update(options)
    return MathTask(name or dataset, source, spec.families, eval_families=spec.eval_families,
                    hub_config=hub_config if hub_config is not None else spec.hub_config, **settings)


# --------------------------------------------------------------------------- the evaluation suite


class MathSuite:
    """Several `MathTask`s as one task whose families are theirs (the papers' evaluation average).

    Each call goes to the member that owns the family (``verify``: the first member for a foreign family).
    Raises ValueError on no member or a repeated family name."""

    strategies: tuple[str, ...] = ()

    def __init__(self, name: str, members: list[MathTask]):
        check(isinstance(name, str) and name != "", "name", name, "a non-empty string")
        check(len(members) > 0 and all(isinstance(m, MathTask) for m in members), "members", members,
              "a non-empty list of MathTask")
        self.name, self.members = name, list(members)
        self._owner: dict[str, MathTask] = {}
        for member in members:
            for family in member.families:
                check(family not in self._owner, "members", [m.name for m in members],
                      f"tasks with distinct family names ({family!r} is in two)")
                self._owner[family] = member
        self.families = tuple(self._owner)
        self.eval_families = tuple(f for m in members for f in m.eval_families)
        self.ood_families: tuple[str, ...] = ()
        self.default_eval_families = self.eval_families or self.families

    def _member(self, family: str) -> MathTask:
        check_choice("family", family, list(self.families))
        return self._owner[family]

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        """`MathTask.family_problems` of the member that owns ``family``."""
        return self._member(family).family_problems(family, n, seed)

    def family_capacity(self, family: str) -> int:
        """`MathTask.family_capacity` of the member that owns ``family``."""
        return self._member(family).family_capacity(family)

    def verify(self, problem: Problem, completion: object) -> Verdict:
        """`MathTask.verify` of the member that owns ``problem.family``; never raises on model output."""
        family = getattr(problem, "family", None)
        return self._owner.get(family, self.members[0]).verify(problem, completion)

    def hints(self, problem: Problem) -> list[str]:
        """No hints."""
        return []

    def __repr__(self) -> str:
        return f"MathSuite(name={self.name!r}, members={[m.name for m in self.members]})"


def math_eval_task(name: str = "math_eval", sources: Mapping[str, Source] | None = None,
                   **options) -> MathSuite:
    """MATH-500 (and level 5), AIME 2024, AIME 2025 and AMC 2023 as one task; ``sources`` overrides members' sources."""
    sources = dict(sources or {})
    for key in sources:
        check_choice("sources", key, list(EVAL_DATASETS))
    return MathSuite(name, [math_dataset_task(d, f"{name}.{d}", source=sources.get(d), **options)
                            for d in EVAL_DATASETS])


def _factory(dataset: str) -> Callable[[], MathTask]:
    def build() -> MathTask:
        return math_dataset_task(dataset)

    build.__name__ = f"{dataset}_task"
    return build


for _name in DATASETS:
    if _name != "math500":  # registered by rlvr_lib.tasks.math_task
        register_task(_name, _factory(_name))
register_task("math_eval", math_eval_task)


HINT_WRITER = "Qwen/Qwen2.5-1.5B-Instruct"
"""The hint writer of ``dapo_math_17k_hints``. NudgeRL's authors write their pool with gpt-4o-mini through OpenAI's
API (``configs/context_config.yaml`` of their code: 5 hints per problem, temperature 0.7), "a lightweight LLM" in
the paper; an API model cannot run here, so a small open instruct model writes it, with their count and
temperature (a departure, stated in configs/README.md, "Tasks")."""


def dapo_math_17k_hints_task() -> MathTask:
    """``dapo_math_17k`` with NudgeRL's hint pool: `LMHintPool.from_model` over `HINT_WRITER`, 5 hints per problem
    at temperature 0.7 (the authors' code), unchecked as in the paper. Nothing is loaded when the task is built:
    the data on the first draw, the writer on the first hint. ``version`` names the writer and its settings, so a
    run's key changes with them."""
    from rlvr_lib.tasks.hints import LMHintPool

    pool = LMHintPool.from_model(HINT_WRITER, n_hints=5, temperature=0.7, seed=0)
    task = math_dataset_task("dapo_math_17k", "dapo_math_17k_hints", hint_pool=pool)
    task.version = f"lm-hints-{HINT_WRITER}-n{pool.n_hints}-t{pool.temperature}-s{pool.seed}"
    return task


register_task("dapo_math_17k_hints", dapo_math_17k_hints_task)
