"""The papers' math datasets (`rlvr_lib.tasks.math_datasets`) on tiny local fixtures in each Hub schema.

Offline: every loader reads ``tests/data/math_datasets/`` through ``datasets.load_dataset`` (JSONL, and
Parquet for DAPO-Math-17k), maps the schema to `Problem`s with the dataset's gold answer, and grades
through math-verify: the gold answer in the dataset's answer format scores 1, a wrong one 0, malformed
output 0 without raising. Bad input gives one `ValueError` naming what was wrong and what is allowed.
"""

from pathlib import Path

import pytest

from rlvr_lib.tasks import CORRECT, MALFORMED, WRONG, get_task
from rlvr_lib.tasks.math_datasets import (
    DATASETS,
    EVAL_DATASETS,
    dapo_problem,
    last_boxed,
    math_dataset_task,
    math_eval_task,
)

DATA = Path(__file__).resolve().parent / "data" / "math_datasets"
FIXTURES = {
    "dapo_math_17k": DATA / "dapo_math_17k.jsonl",
    "math_train": {"train": DATA / "math_lighteval.jsonl", "test": DATA / "math_lighteval.jsonl"},
    "math500": DATA / "math500.jsonl",
    "aime24": DATA / "aime_2024.jsonl",
    "aime25": DATA / "aime_2025.jsonl",
    "amc23": DATA / "amc23.jsonl",
}
# (dataset, family) -> {gold answer: a correct completion in the dataset's answer format}
EXPECTED = {
    ("dapo_math_17k", "train"): {"100": "The sum is n^2.\nAnswer: 100", "12": "72 = 2^3 3^2.\nAnswer: 12",
                                 "3": "x = -7.\nAnswer: 3"},
    ("math_train", "train"): {r"\frac{1}{2}": r"So \boxed{0.5}.", "1024": r"\boxed{1024}",
                              r"$\sqrt{2}$": r"\boxed{\sqrt 2}"},
    ("math500", "math500"): {"12": r"\boxed{12}", r"5\sqrt{2}": r"\boxed{\sqrt{50}}"},
    ("aime24", "aime24"): {"2": r"\boxed{2}", "19": r"The count is \boxed{19}."},
    ("aime25", "aime25"): {"1001": r"\boxed{1001}", "13": "The answer is 13."},
    ("amc23", "amc23"): {"27": r"\boxed{27}", "36": r"\boxed{36}"},
}


@pytest.fixture(scope="module")
def tasks():
    """One fixture-backed task per dataset, with a 2 s grading limit."""
    return {d: math_dataset_task(d, f"fixture_{d}", source=FIXTURES[d], timeout_s=2) for d in DATASETS}


def _all(task, family):
    return task.family_problems(family, task.family_capacity(family))


def test_every_dataset_has_a_fixture_and_an_expectation():
    assert set(FIXTURES) == set(DATASETS)
    assert {d for d, _ in EXPECTED} == set(DATASETS)


@pytest.mark.parametrize("dataset, family", list(EXPECTED))
def test_loader_maps_the_schema_to_the_gold_answers(tasks, dataset, family):
    problems = _all(tasks[dataset], family)
    assert sorted(p.answer for p in problems) == sorted(EXPECTED[dataset, family])
    assert len({p.uid for p in problems}) == len(problems)
    assert all(p.question.strip() and p.family == family for p in problems)


@pytest.mark.parametrize("dataset, family", list(EXPECTED))
def test_grading_right_wrong_and_malformed(tasks, dataset, family):
    task = tasks[dataset]
    for problem in _all(task, family):
        right = task.verify(problem, EXPECTED[dataset, family][problem.answer])
        assert (right.status, right.reward) == (CORRECT, 1.0), (problem.answer, right)
        wrong = task.verify(problem, r"\boxed{987654}")
        assert (wrong.status, wrong.reward) == (WRONG, 0.0), (problem.answer, wrong)
    problem = _all(task, family)[0]
    for bad in (None, 17, "", "no answer here", "\\boxed{" * 50):
        verdict = task.verify(problem, bad)
        assert verdict.reward == 0.0 and verdict.status in (MALFORMED, WRONG), verdict


def test_dapo_keeps_its_prompt_dedupes_and_reads_the_ground_truth(tasks):
    task = tasks["dapo_math_17k"]
    assert task.family_capacity("train") == 3  # 4 rows, one repeated
    problem = _all(task, "train")[0]
    assert problem.question.startswith("Solve the following math problem step by step.")
    assert problem.question.endswith('on its own line after "Answer:".')
    boxed = math_dataset_task("dapo_math_17k", "fixture_dapo_boxed", source=FIXTURES["dapo_math_17k"],
                              prompt_style="boxed")
    questions = sorted(p.question for p in _all(boxed, "train"))
    assert questions[0].startswith("How many positive divisors") and questions[0].endswith("within \\boxed{}.")
    assert all("Answer:" not in q for q in questions)


def test_dapo_reads_parquet_in_the_hub_layout(tmp_path):
    import datasets

    path = tmp_path / "train-00000-of-00001.parquet"
    datasets.load_dataset("json", data_files=str(FIXTURES["dapo_math_17k"]), split="train").to_parquet(str(path))
    task = math_dataset_task("dapo_math_17k", "fixture_dapo_parquet", source=path)
    assert sorted(p.answer for p in _all(task, "train")) == ["100", "12", "3"]


def test_math_train_levels_and_unboxed_rows(tasks):
    task = tasks["math_train"]
    assert task.family_capacity("train") == 3  # the solution without \boxed is left out
    assert [p.answer for p in _all(task, "train_l3_5")] == ["$\\sqrt{2}$"]
    assert {p.difficulty for p in _all(task, "train")} == {"Level 1", "Level 2", "Level 5"}


@pytest.mark.parametrize("text, boxed", [
    (r"so $\boxed{\frac{1}{2}}$", r"\frac{1}{2}"),
    (r"\boxed{1} then \boxed{2}", "2"),
    (r"\fbox{7}", "7"),
    (r"$\boxed 5$.", "5"),
    (r"\boxed{{a}{b}}", "{a}{b}"),
    (r"\boxed{unclosed", None),
    ("no box", None),
    (None, None),
])
def test_last_boxed(text, boxed):
    assert last_boxed(text) == boxed


def test_dapo_problem_strips_the_instruction():
    prompt = [{"role": "user", "content": "Solve the following math problem step by step. The last line of your "
               "response should be of the form Answer: $Answer (without quotes) where $Answer is the answer to "
               'the problem.\n\nWhat is 1+1?\n\nRemember to put your answer on its own line after "Answer:".'}]
    assert dapo_problem(prompt) == "What is 1+1?"


def test_math_eval_suite_routes_families_and_grading():
    suite = math_eval_task("fixture_math_eval", sources={d: FIXTURES[d] for d in EVAL_DATASETS}, timeout_s=2)
    assert suite.families == ("math500", "math500_l5", "aime24", "aime25", "amc23")
    assert suite.eval_families == suite.families
    assert [suite.family_capacity(f) for f in suite.families] == [2, 1, 2, 2, 2]
    problem = suite.family_problems("math500_l5", 1)[0]
    assert problem.answer == r"5\sqrt{2}"
    assert suite.verify(problem, r"\boxed{5\sqrt{2}}").reward == 1.0
    assert suite.verify(problem, r"\boxed{5}").reward == 0.0
    assert suite.hints(problem) == []


def test_registered_by_name_without_loading():
    for name in ("dapo_math_17k", "math_train", "aime24", "aime25", "amc23", "math500", "math_eval"):
        task = get_task(name)  # builds the task; nothing is downloaded until a family is drawn
        assert task.name == name and task.families
    assert get_task("dapo_math_17k").source == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert get_task("math_train").source == "DigitalLearningGmbH/MATH-lighteval"
    assert get_task("aime24").source == "HuggingFaceH4/aime_2024"
    assert get_task("aime25").source == "yentinglin/aime_2025"
    assert get_task("amc23").source == "math-ai/amc23"


# --------------------------------------------------------------------------- bad input


def test_unknown_dataset_names_the_known_ones():
    with pytest.raises(ValueError, match=r"dataset='gsm8k'.*'aime24'.*'dapo_math_17k'"):
        math_dataset_task("gsm8k")


def test_single_file_for_a_two_split_dataset_is_refused():
    with pytest.raises(ValueError, match=r"source=.*\['train', 'test'\]"):
        math_dataset_task("math_train", source=FIXTURES["math500"])


def test_missing_column_names_it_and_the_columns():
    task = math_dataset_task("amc23", "fixture_amc_wrong_schema", source=FIXTURES["aime24"])  # AIME has no 'question'
    with pytest.raises(ValueError, match=r"question_field='question'.*one of \[.*'problem'"):
        task.family_capacity("amc23")


def test_unreadable_row_names_the_row_and_column(tmp_path):
    path = tmp_path / "dapo.jsonl"
    path.write_text('{"prompt": [{"content": "What is 2+2?", "role": "user"}], "reward_model": {"style": "rule"}}\n')
    task = math_dataset_task("dapo_math_17k", "fixture_dapo_bad_row", source=path)
    with pytest.raises(ValueError, match=r"row 0 of split 'train'.*column 'reward_model'.*ground_truth"):
        task.family_capacity("train")


def test_unknown_eval_member_and_prompt_style():
    with pytest.raises(ValueError, match=r"sources='gsm8k'.*'amc23'"):
        math_eval_task("x", sources={"gsm8k": "a.jsonl"})
    with pytest.raises(ValueError, match=r"prompt_style='chat'.*'boxed'"):
        math_dataset_task("aime24", prompt_style="chat")


def test_the_eval_suite_runs_through_evaluate_policy(tiny_model_and_tokenizer):
    from rlvr_lib.eval import EvalSpec, evaluate_policy
    from rlvr_lib.rollout import KVCacheEngine
    from rlvr_lib.tasks import TASKS, register_task

    saved = dict(TASKS)
    try:
        register_task("fixture_eval_suite", math_eval_task("fixture_eval_suite",
                                                           sources={d: FIXTURES[d] for d in EVAL_DATASETS}))
        spec = EvalSpec(task="fixture_eval_suite", families=("aime24", "amc23"), problems_per_family=2, samples=2,
                        group_size=2, max_new_tokens=8, diversity_problems=2, diversity_samples=2)
        result = evaluate_policy(KVCacheEngine(*tiny_model_and_tokenizer), spec)
    finally:
        TASKS.clear(), TASKS.update(saved)
    assert set(result["families"]) == {"aime24", "amc23"}
    for family in result["families"].values():
        assert 0.0 <= family["pass_at_k"]["1"] <= 1.0
