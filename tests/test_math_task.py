"""MathTask: math-verify grading, adversarial completions, families and filters, sources, errors, training."""

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import build_char_tokenizer
from rlvr_lib.tasks import CORRECT, MALFORMED, TIMEOUT, WRONG, MathFamily, MathTask, Problem, Task, get_task
from rlvr_lib.tasks.math_task import MATH500_SOURCE, MATH_SAMPLE_FAMILIES, SAMPLE_PATH, math_sample_task
from rlvr_lib.trainer import Trainer, TrainerConfig

ROWS = [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines()]


@pytest.fixture(scope="module")
def task():
    """The sample task with a 1 s time limit (the hostile-input tests wait on it)."""
    return math_sample_task(name="math_sample_fast", timeout_s=1)


@pytest.fixture(scope="module")
def by_answer(task):
    """One sample problem per gold answer."""
    return {p.answer: p for p in task.family_problems("all", len(ROWS))}


# --------------------------------------------------------------------------- grading


def test_every_sample_oracle_trace_is_graded_correct(task):
    problems = task.family_problems("all", len(ROWS))
    verdicts = [task.verify(p, p.oracle_trace) for p in problems]
    assert [v.status for v in verdicts] == [CORRECT] * len(ROWS)
    assert all(v.reward == 1.0 for v in verdicts)


@pytest.mark.parametrize("gold, completion", [
    (r"\frac{1}{2}", "0.5"),
    (r"\frac{1}{2}", r"so the answer is \boxed{\frac12}"),
    (r"\frac{1}{2}", r"The probability is $\frac{2}{4}$."),
    (r"\frac{1}{2}", "1/2"),
    (r"\sqrt{2}", r"\boxed{\sqrt 2}"),
    (r"3\sqrt{2}", r"\boxed{\sqrt{18}}"),
    (r"3\pi", r"$3 \pi$"),
    (r"\frac{\pi}{4}", r"\boxed{\pi/4}"),
    ("45", r"\boxed{45.0}"),
    ("-4", "The product is -4."),
])
def test_equivalent_forms_are_correct(by_answer, task, gold, completion):
    verdict = task.verify(by_answer[gold], completion)
    assert (verdict.status, verdict.reward) == (CORRECT, 1.0), verdict


@pytest.mark.parametrize("gold, completion", [
    (r"\frac{1}{2}", r"\boxed{0.51}"),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{3}}"),
    (r"3\sqrt{2}", r"\boxed{2\sqrt{3}}"),
    (r"3\pi", r"\boxed{\pi}"),
    ("-4", r"\boxed{4}"),
])
def test_wrong_answers_are_wrong(by_answer, task, gold, completion):
    verdict = task.verify(by_answer[gold], completion)
    assert (verdict.status, verdict.reward) == (WRONG, 0.0), verdict


@pytest.mark.parametrize("completion", ["", "I do not know.", "no numbers here at all"])
def test_a_completion_without_an_answer_is_malformed(by_answer, task, completion):
    verdict = task.verify(by_answer["45"], completion)
    assert (verdict.status, verdict.reward) == (MALFORMED, 0.0), verdict


HOSTILE = {
    "none": None,
    "int": 45,
    "bytes": b"\\boxed{45}",
    "list": ["\\boxed{45}"],
    "huge": "4" * 1_000_000,
    "open_braces": "{" * 30_000,
    "nested_braces": "\\boxed{" + "{" * 4000 + "45" + "}" * 4000 + "}",  # parsing runs out of time
    "power_tower": "\\boxed{10^{10^{10^{10}}}}",  # comparing runs out of time
    "unclosed_boxes": "\\boxed{" * 4000,
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_completions_get_zero_without_raising_or_hanging(by_answer, task, name):
    start = time.perf_counter()
    verdict = task.verify(by_answer["45"], HOSTILE[name])
    assert time.perf_counter() - start < 10
    assert verdict.reward == 0.0 and verdict.status in (MALFORMED, WRONG, TIMEOUT), verdict


def test_verify_works_off_the_main_thread(by_answer, task):
    # math-verify's signal timeouts raise off the main thread; the task grades in worker processes.
    with ThreadPoolExecutor(1) as pool:
        verdicts = list(pool.map(lambda c: task.verify(by_answer["45"], c), [r"\boxed{45}", r"\boxed{44}"]))
        on_main = pool.submit(threading.current_thread).result() is threading.main_thread()
    assert not on_main
    assert [v.status for v in verdicts] == [CORRECT, WRONG]


# --------------------------------------------------------------------------- grading policy (docs/reliability.md)

POLICY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"


def _policy_rows():
    """``(gold, completion, status)`` of every row of the "MathTask grading policy" table (docs/reliability.md)."""
    text = POLICY_PAGE.read_text(encoding="utf-8")
    section = text[text.index("## MathTask grading policy"):]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 4 and cells[1].startswith("`"):
            rows.append((cells[1].strip("`"), cells[2].strip("`"), cells[3]))
    return rows


POLICY = _policy_rows()


def _problem(answer):
    return Problem(uid=f"policy:{answer}", question="?", answer=answer, family="policy", difficulty="unknown",
                   oracle_trace=f"\\boxed{{{answer}}}", strategy="")


def test_the_policy_table_covers_every_status():
    assert len(POLICY) >= 20
    assert {status for *_, status in POLICY} == {CORRECT, WRONG, MALFORMED, TIMEOUT}


@pytest.mark.parametrize("gold, completion, status", POLICY)
def test_grading_policy_table(task, gold, completion, status):
    verdict = task.verify(_problem(gold), completion)
    assert verdict.status == status, verdict
    assert verdict.reward == (1.0 if status == CORRECT else 0.0)


def test_the_worker_statuses_are_the_verdict_statuses():
    from rlvr_lib.tasks import STATUSES, math_grading

    assert (math_grading.CORRECT, math_grading.WRONG, math_grading.MALFORMED, math_grading.TIMEOUT) == STATUSES


@pytest.mark.parametrize("completion", [
    "The answer is $45$.", r"\boxed{\frac12}", "x = 3.5", r"Therefore $\boxed{3\sqrt{2}}$ is it.", "no answer",
    r"\boxed{44} then \boxed{45}", r"final answer is $7$. I hope", "", r"\boxed{", "1/2 and 3/4",
])
def test_the_final_answer_is_what_math_verify_parses(completion):
    from math_verify import parse

    from rlvr_lib.tasks.math_grading import final_answer

    assert [str(v) for v in final_answer(completion)[0]] == [str(v) for v in parse(completion, parsing_timeout=None)]


def test_an_unparseable_gold_answer_is_wrong_and_warned_once(caplog):
    task = math_sample_task(name="gold_unparsed", timeout_s=1)
    verdicts = [task.verify(_problem(""), r"\boxed{1}") for _ in range(2)]  # "\boxed{}": nothing to parse
    assert [v.status for v in verdicts] == [WRONG, WRONG] and "gold answer cannot be parsed" in verdicts[0].reason
    assert caplog.text.count("cannot parse the gold answer") == 1


# --------------------------------------------------------------------------- families


def test_families_are_filters_of_the_split(task):
    levels = {i: row["level"] for i, row in enumerate(ROWS)}
    expected = {
        "train": {i for i, lv in levels.items() if lv in ("Level 1", "Level 2", "Level 3")},
        "test": {i for i, lv in levels.items() if lv in ("Level 4", "Level 5")},
        "level_5": {i for i, lv in levels.items() if lv == "Level 5"},
        "all": set(levels),
    }
    for family, rows in expected.items():
        assert task.family_capacity(family) == len(rows)
        problems = task.family_problems(family, len(rows), seed=3)
        assert {p.operands for p in problems} == {("train", i) for i in rows}
        assert all(p.family == family and p.difficulty == levels[p.operands[1]] for p in problems)
        assert all(p.answer == ROWS[p.operands[1]]["answer"] for p in problems)
        assert all(p.prompt.startswith(ROWS[p.operands[1]]["problem"]) for p in problems)
    assert expected["train"].isdisjoint(expected["test"])


def test_filters_combine_columns_and_values():
    families = {"geo_hard": MathFamily("train", {"subject": "Geometry", "level": ["Level 4", "Level 5"]}),
                "geo": MathFamily("train", {"subject": "Geometry"})}
    t = MathTask("geo", SAMPLE_PATH, families)
    geo = [r for r in ROWS if r["subject"] == "Geometry"]
    assert t.family_capacity("geo") == len(geo)
    assert t.family_capacity("geo_hard") == sum(r["level"] in ("Level 4", "Level 5") for r in geo) == 2


def test_family_problems_is_fixed_by_its_arguments(task):
    a = task.family_problems("train", 10, seed=7)
    assert a == task.family_problems("train", 10, seed=7)
    again = math_sample_task(name="again").family_problems("train", 10, seed=7)  # a fresh instance draws the same
    assert [(p.operands, p.question, p.answer) for p in again] == [(p.operands, p.question, p.answer) for p in a]
    assert [p.uid for p in a] != [p.uid for p in task.family_problems("train", 10, seed=8)]
    assert len({p.uid for p in a}) == 10
    with pytest.raises(ValueError, match=r"n=25 is invalid: must be an integer in \[1, 24\]"):
        task.family_problems("train", 25)
    with pytest.raises(ValueError, match=r"family='nope' is invalid: must be one of \['train', 'test'"):
        task.family_problems("nope", 1)
    with pytest.raises(ValueError, match="seed=-1 is invalid"):
        task.family_problems("train", 1, seed=-1)


# --------------------------------------------------------------------------- sources and fields


def test_parquet_split_mapping_and_custom_fields(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"q": [r["problem"] for r in ROWS], "final": [r["answer"] for r in ROWS]})
    frame.to_parquet(tmp_path / "rows.parquet")
    t = MathTask("pq", {"test": tmp_path / "rows.parquet"}, {"everything": MathFamily("test")},
                 question_field="q", answer_field="final", level_field=None, template="Q: {question} A:")
    problems = t.family_problems("everything", len(ROWS))
    assert t.family_capacity("everything") == len(ROWS)
    assert {p.question for p in problems} == {f"Q: {r['problem']} A:" for r in ROWS}
    assert {p.difficulty for p in problems} == {"unknown"}
    one = next(p for p in problems if p.answer == r"\frac{7}{2}")
    assert t.verify(one, "x = 3.5").status == CORRECT


def test_json_file_with_a_solution_field(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"problem": "What is $2+2$?", "answer": "4", "level": 1,
                                 "solution": "Adding gives $\\boxed{4}$."}]))
    t = MathTask("js", path, {"one": MathFamily("train", {"level": 1})}, solution_field="solution")
    (p,) = t.family_problems("one", 1)
    assert p.oracle_trace == "Adding gives $\\boxed{4}$." and p.difficulty == "1"
    assert t.verify(p, p.oracle_trace).status == CORRECT


def test_chat_template_makes_the_prompt():
    tok = build_char_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    t = math_sample_task(name="chat", tokenizer=tok, use_chat_template=True)
    p = t.family_problems("level_5", 1)[0]
    row = ROWS[p.operands[1]]
    expected = tok.apply_chat_template(
        [{"role": "user", "content": row["problem"] + "\nPut your final answer within \\boxed{}."}],
        tokenize=False, add_generation_prompt=True)
    assert p.prompt == expected and p.prompt.endswith("<|assistant|>\n")


def test_a_tokenizer_without_chat_template_falls_back_to_the_plain_template(caplog):
    t = math_sample_task(name="plain", tokenizer=build_char_tokenizer(), use_chat_template=True)
    assert "has no chat template" in caplog.text
    p = t.family_problems("level_5", 1)[0]
    assert p.question == ROWS[p.operands[1]]["problem"] + "\nPut your final answer within \\boxed{}."


@pytest.mark.parametrize("kwargs, message", [
    (dict(source="missing.jsonl"), r"source='missing.jsonl' is invalid: must be existing files"),
    (dict(source=3), r"source=3 is invalid: must be a Hub dataset name, a .json/.jsonl/.csv/.parquet path"),
    (dict(source={"a": "x.jsonl", "b": "y.csv"}), r"source=.* is invalid: must be files of one local format"),
    (dict(source={"test": 3}), r"source=\{'test': 3\} is invalid: must be \{split: a path or a list of paths\}"),
    (dict(families={}), r"families=\{\} is invalid: must be a non-empty"),
    (dict(families={"x": "train"}), r"families=.* is invalid: must be a non-empty \{name: MathFamily\}"),
    (dict(eval_families=("nope",)), r"eval_families='nope' is invalid: must be one of \['train'"),
    (dict(ood_families=("nope",)), r"ood_families='nope' is invalid"),
    (dict(template="no slot"), r"template='no slot' is invalid: must be a string containing '\{question\}'"),
    (dict(timeout_s=0), r"timeout_s=0 is invalid: must be an integer >= 1"),
    (dict(timeout_s=0.5), r"timeout_s=0.5 is invalid"),
    (dict(max_completion_chars=0), r"max_completion_chars=0 is invalid"),
    (dict(use_chat_template=True), r"tokenizer=None is invalid: must be a tokenizer when use_chat_template=True"),
    (dict(question_field=""), r"question_field='' is invalid: must be a non-empty string"),
])
def test_bad_arguments_name_the_argument_and_what_is_allowed(kwargs, message):
    args = {**dict(name="bad", source=SAMPLE_PATH, families=MATH_SAMPLE_FAMILIES), **kwargs}
    with pytest.raises(ValueError, match=message):
        MathTask(**args)


@pytest.mark.parametrize("build, message", [
    (lambda: MathFamily(""), r"MathFamily.split='' is invalid"),
    (lambda: MathTask("b", SAMPLE_PATH, {"f": MathFamily()}, question_field="question").family_capacity("f"),
     r"question_field='question' is invalid: must be a column of split 'train': one of \['problem', 'answer'"),
    (lambda: MathTask("b", SAMPLE_PATH, {"f": MathFamily(where={"year": 2024})}).family_capacity("f"),
     r"MathFamily.where=\['year'\] is invalid: must be columns of split 'train'"),
    (lambda: MathTask("b", SAMPLE_PATH, {"f": MathFamily(where={"level": 5})}).family_capacity("f"),
     r"family='f' is empty: no row of split 'train'"),
])
def test_bad_families_and_fields_fail_clearly_at_first_draw(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_registered_tasks():
    sample = get_task("math_sample")
    assert isinstance(sample, MathTask) and isinstance(sample, Task)
    assert sample.families == ("train", "test", "level_5", "all")
    assert sample.eval_families == ("test", "level_5") and sample.ood_families == ()
    hub = get_task("math500")  # built without the network: splits load on the first draw
    assert hub.source == MATH500_SOURCE and hub.families == ("math500", "math500_l5")
    assert dict(hub.family_specs["math500_l5"].where) == {"level": (5,)}


# --------------------------------------------------------------------------- training


def test_trains_through_the_trainer_with_the_math_verifier(fresh_tiny_model, tiny_tokenizer, spy_on_verify):
    task = get_task("math_sample")
    calls = spy_on_verify(task)
    cfg = TrainerConfig(task="math_sample", train_family="train", steps=2, prompts_per_step=2, group_size=2,
                        max_new_tokens=8, seed=0)
    trainer = Trainer(cfg, fresh_tiny_model, tiny_tokenizer)
    assert len(trainer.train_problems) == task.family_capacity("train")
    history = trainer.train(progress=False)

    assert [m["step"] for m in history] == [0, 1]
    assert len(calls) == 2 * 2 * 2
    assert all(p.family == "train" and p.uid.startswith("math_sample:") for p, _, _ in calls)
    reference = math_sample_task(name="reference")
    for step, metrics in enumerate(history):
        step_calls = calls[4 * step: 4 * (step + 1)]
        statuses = [v.status for _, _, v in step_calls]
        assert statuses == [reference.verify(p, c).status for p, c, _ in step_calls]
        assert metrics["accuracy"] == pytest.approx(statuses.count(CORRECT) / 4)
        assert metrics["malformed_rate"] == pytest.approx(statuses.count(MALFORMED) / 4)
        assert metrics["reward_mean"] == pytest.approx(sum(v.reward for _, _, v in step_calls) / 4)
        finite = {k: v for k, v in metrics.items() if isinstance(v, float) and k != "reward_acc_corr"}
        assert finite and all(math.isfinite(v) for v in finite.values()), metrics


def test_math_verify_warnings_are_cut_to_a_short_quote(caplog):
    import logging

    from rlvr_lib.tasks.math_task import LOG_QUOTE_CHARS

    get_task("math_sample")  # building a MathTask installs the filter
    with caplog.at_level(logging.WARNING, logger="math_verify.parser"):
        logging.getLogger("math_verify.parser").warning("Timeout during parsing: %s", "x" * 30_000)
    (record,) = caplog.records
    assert record.getMessage().startswith("Timeout during parsing: xxx")
    assert len(record.getMessage()) < LOG_QUOTE_CHARS + 40 and record.getMessage().endswith("[30024 characters]")
