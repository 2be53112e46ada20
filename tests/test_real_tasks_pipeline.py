"""Every real task trains and evaluates through the unchanged pipeline (trainer + evaluate_policy) on the tiny policy."""

from __future__ import annotations

import math

import pytest

from rlvr_lib.eval import EvalSpec
from rlvr_lib.methods import method_config
from rlvr_lib.study.pipeline import train_and_evaluate
from rlvr_lib.tasks import get_task

# task -> (training family, evaluation family)
TASKS = {"math_sample": ("train", "test"), "rg_knights_knaves": ("train", "ppl2"), "code_sample": ("all", "all")}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_real_task_trains_and_evaluates_through_the_pipeline(task, tmp_path):
    train_family, eval_family = TASKS[task]
    config = method_config("grpo", task=task, train_family=train_family, train_pool_size=4, steps=1,
                           prompts_per_step=2, group_size=2, max_new_tokens=12)
    spec = EvalSpec(task=task, families=(eval_family,), problems_per_family=2, samples=2, group_size=2,
                    max_new_tokens=12, diversity_problems=2, diversity_samples=2)
    record = train_and_evaluate("real_tasks", task, config, spec, root=tmp_path, checkpoint_every=0)
    assert record.config["train"]["task"] == task and len(record.history) == 1
    assert all(math.isfinite(v) for v in record.history[0].values() if isinstance(v, float))
    family = record.final["families"][eval_family]
    problems = get_task(task).family_problems(eval_family, 2, seed=0)
    assert family["uids"] == [p.uid for p in problems]  # evaluated on the task's own problems
    assert 0.0 <= family["pass_at_k"]["1"] <= 1.0 and sum(family["correct_counts"]) <= 2 * 2
