"""Equal-compute accounting (`rlvr_lib.trainer.compute_spent`, issue 32): on short runs the completions and
optimizer steps it reads from a config and its history equal those counted at the engine and the optimizer."""

import pytest

from rlvr_lib.methods import compose, method_config
from rlvr_lib.methods.registry import METHODS
from rlvr_lib.trainer import compute_spent

from counted_run import SMALL, counted_run as _run


@pytest.mark.parametrize("name, kw", [
    ("grpo", dict(inner_epochs=2, minibatches=2)),
    ("c3po", {}),  # two weight samples: each rolls out half of every group
])
def test_fixed_batches_are_counted_exactly(policy, name, kw):
    config, history, counts = _run(policy, name, **kw)
    assert compute_spent(config, history) == counts
    assert counts["completions"] == 2 * 16 and counts["optimizer_steps"] == 2 * config.inner_epochs * config.minibatches


def test_a_composite_is_counted_exactly(policy):
    before = set(METHODS)
    try:
        config, history, counts = _run(policy, compose("nudgerl", "sage", kl_coef=0.2, lr=1e-4))
    finally:
        for name in set(METHODS) - before:
            del METHODS[name]
    assert compute_spent(config, history) == counts == {"completions": 32, "optimizer_steps": 4}


def test_dynamic_sampling_refills_and_empty_minibatches_are_counted_exactly(policy, monkeypatch):
    # Groups of even first factors alternate correct/wrong (kept); odd ones are all wrong (dropped), so DAPO
    # refills; with 16 minibatches of the kept rows (fewer than 16 when groups were dropped) some are empty.
    config, history, counts = _run(policy, "dapo", monkeypatch, lambda p, k: p.operands[0] % 2 == 0 and k % 2 == 0,
                                   minibatches=16, method_options={"max_refill_rounds": 1})
    assert any(row["dynamic_refill_rounds"] for row in history)
    assert any("optimizer_steps" in row for row in history)
    assert compute_spent(config, history) == counts
    assert counts["completions"] > 2 * 16 and counts["optimizer_steps"] < 2 * 16


def test_a_dynamic_step_without_its_count_is_refused():
    config = method_config("dapo", **SMALL)
    with pytest.raises(ValueError, match="step 0: dynamic sampling without dynamic_completions"):
        compute_spent(config, [{"step": 0, "dynamic_kept_groups": 4}])
