"""Refusals instead of silent zeros (issue 61, item 6): strategy measures on a task without strategy labels, and the
oracle arm on a task without its target family."""

from __future__ import annotations

import copy
import random

import pytest

from rlvr_lib.eval.policy_eval import STRATEGY_MEASURES, EvalSpec, check_strategy_measure, evaluate_policy
from rlvr_lib.methods import build_method, method_config
from rlvr_lib.rollout import KVCacheEngine
from rlvr_lib.tasks import CORRECT, MALFORMED, WRONG, Problem, Verdict, register_task

pytestmark = pytest.mark.usefixtures("restore_registries")

LABEL_FREE = "label_free_times_h61"


class LabelFreeTask:
    """``a*b`` with a one-digit ``b``, graded on the number after the last '#'; no strategy labels."""

    name = LABEL_FREE
    families = ("train", "test")
    eval_families = ("test",)
    ood_families = ()
    default_eval_families = ("test",)
    strategies = ()

    def family_capacity(self, family):
        return 40

    def family_problems(self, family, n, seed=0):
        rng = random.Random(f"{family}-{seed}")
        out = []
        for _ in range(n):
            a, b = rng.randrange(11, 99), rng.randrange(2, 10)
            out.append(Problem(uid=f"{family}:{a}*{b}", question=f"{a}*{b}=?", answer=str(a * b), family=family,
                               difficulty="easy", oracle_trace=f"#{a * b}", strategy="", operands=(a, b)))
        return out

    def verify(self, problem, completion):
        if not isinstance(completion, str) or "#" not in completion:
            return Verdict(0.0, MALFORMED, None)
        right = completion.rsplit("#", 1)[1].strip() == problem.answer
        return Verdict(1.0 if right else 0.0, CORRECT if right else WRONG, None)

    def hints(self, problem):
        return []


SPEC = dict(problems_per_family=3, samples=4, group_size=4, max_new_tokens=8, diversity_problems=2,
            diversity_samples=4)


@pytest.fixture(scope="module")
def label_free_evaluation(tiny_model_and_tokenizer):
    register_task(LABEL_FREE, LabelFreeTask)
    model, tokenizer = tiny_model_and_tokenizer
    return evaluate_policy(KVCacheEngine(copy.deepcopy(model), tokenizer), EvalSpec(task=LABEL_FREE, **SPEC))


def test_a_task_without_labels_gets_no_strategy_measure(label_free_evaluation):
    family = label_free_evaluation["families"]["test"]
    assert not set(STRATEGY_MEASURES) & set(family)  # no zeros that measure nothing
    assert {"pass_at_k", "malformed_rate", "diversity", "correct_counts", "uids"} <= set(family)
    average = label_free_evaluation["average"]
    assert "strategy_entropy" not in average and "strategy_freq" not in average
    assert {"pass_at_k", "mean_modes", "malformed_rate"} <= set(average)  # the label-free measures remain


def test_a_labelled_task_keeps_every_strategy_measure(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    result = evaluate_policy(KVCacheEngine(copy.deepcopy(model), tokenizer), EvalSpec(families=("easy_mix",), **SPEC))
    assert set(STRATEGY_MEASURES) <= set(result["families"]["easy_mix"])
    assert list(result["average"]) == ["pass_at_k", "malformed_rate", "wrong_rate", "mean_length", "zero_adv_frac",
                                       "strategy_entropy", "strategy_freq", "mean_modes", "families"]
    check_strategy_measure(result["average"], "strategy_entropy")  # no refusal


def test_asking_for_a_strategy_measure_without_labels_is_refused_in_one_line(label_free_evaluation):
    from types import SimpleNamespace

    from rlvr_lib.study.dynamics import strategy_entropy_of, strategy_share_of
    from rlvr_lib.study.summaries import per_problem_shares, seed_values, summary_row, top_strategy

    expected = r"cannot be measured: its task has no strategy labels \(Task.strategies is empty"
    with pytest.raises(ValueError, match=rf"^strategy_entropy of the evaluation {expected}") as err:
        check_strategy_measure(label_free_evaluation["average"], "strategy_entropy")
    assert "\n" not in str(err.value)
    record = SimpleNamespace(final=label_free_evaluation, history=[], config={"eval": {"samples": SPEC["samples"]}})
    with pytest.raises(ValueError, match=rf"^strategy_entropy of records\[0\] {expected}"):
        seed_values([record], "strategy_entropy")
    with pytest.raises(ValueError, match=rf"^strategy_counts of evaluations\[0\]\['families'\]\['test'\] {expected}"):
        per_problem_shares([record], ["test"], "direct")
    with pytest.raises(ValueError, match=rf"^strategy_freq of records\[0\] {expected}"):
        top_strategy([record], ["direct"])
    with pytest.raises(ValueError, match=expected):
        strategy_entropy_of(label_free_evaluation)
    with pytest.raises(ValueError, match=expected):
        strategy_share_of(label_free_evaluation, "direct")
    row = summary_row([record, record], [1])  # a table row leaves the cell out rather than show a zero
    assert "strategy entropy" not in row and {"pass@1", "modes/problem", "malformed", "length"} <= set(row)


def test_the_oracle_arm_refuses_a_task_without_its_target_family():
    with pytest.raises(ValueError) as err:
        build_method(method_config("oracle_explore", task="arith"))  # arith has no targets_train
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("oracle_explore: task 'arith' has no family 'targets_train' "
                              "(method_options.target_family): the oracle forces its hint only on that family's "
                              "problems and would train as plain GRPO; use a task with that family")
    assert method_config("oracle_explore").task == "arith_discovery"  # its preset's task has the family
    assert build_method(method_config("oracle_explore")).name == "oracle_explore"
    moved = method_config("oracle_explore", task="arith", method_options={"target_family": "rare_mix"})  # arith's
    assert build_method(moved).options.target_family == "rare_mix"


def test_the_command_line_refuses_the_oracle_arm_before_loading_anything(tmp_path, capsys):
    from rlvr_lib.__main__ import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--method", "oracle_explore", "--task", "arith", "--out", str(out), "--threads", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "oracle_explore: task 'arith' has no family 'targets_train'" in err, err
    assert not out.exists()
