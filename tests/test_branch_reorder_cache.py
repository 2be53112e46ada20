"""3PO's Figure 1 measurement through the run cache (rlvr_lib.study.probes.branch_reorder): the cached result equals
the direct computation exactly, a second call reads the record, and the key changes with the weights."""

import numpy as np
import pytest
import torch

from conftest import build_char_tokenizer, build_tiny_qwen2
from rlvr_lib.eval.weight_noise import branch_reorder
from rlvr_lib.study.probes import branch_reorder as probe
from rlvr_lib.study.runs import load_runs

PROMPTS = ["12+7=", "3*4=", "9-5=", "20/4="]
SETTINGS = dict(sigma=0.05, samples=3, k=1, seed=0)


@pytest.fixture
def policy():
    tokenizer = build_char_tokenizer()
    return build_tiny_qwen2(tokenizer), tokenizer


def _tokens(tokenizer):
    return [tokenizer.convert_tokens_to_ids(c) for c in "abc"]


def _equal(a, b):
    for name in ("weight", "temperature", "probs", "weight_probs", "temperature_probs"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert (a.temperatures, a.sigma, a.k, a.tokens) == (b.temperatures, b.sigma, b.k, b.tokens)


def test_the_cached_result_is_the_direct_one_and_is_read_back(policy, tmp_path, monkeypatch):
    model, tokenizer = policy
    tokens = _tokens(tokenizer)
    direct = branch_reorder(model, tokenizer, PROMPTS, tokens=tokens, **SETTINGS)
    first = probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS, tokens=tokens, root=tmp_path, **SETTINGS)
    _equal(first, direct)

    def fail(*args, **kwargs):
        raise AssertionError("recomputed although the record exists")

    monkeypatch.setattr(probe, "branch_reorder", fail)
    again = probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS, tokens=tokens, root=tmp_path, **SETTINGS)
    _equal(again, direct)
    assert len(load_runs("fig1", tmp_path)) == 1


def test_the_key_names_the_weights_the_prompts_and_the_noise(policy, tmp_path):
    model, tokenizer = policy
    tokens = _tokens(tokenizer)
    before = probe.weights_sha256(model)
    probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS, tokens=tokens, root=tmp_path, **SETTINGS)
    probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS[:2], tokens=tokens, root=tmp_path, **SETTINGS)
    probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS, tokens=tokens, root=tmp_path,
                                **{**SETTINGS, "sigma": 0.1})
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)
    assert probe.weights_sha256(model) != before
    changed = probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS, tokens=tokens, root=tmp_path, **SETTINGS)
    assert len({r.run_id for r in load_runs("fig1", tmp_path)}) == 4
    _equal(changed, branch_reorder(model, tokenizer, PROMPTS, tokens=tokens, **SETTINGS))


def test_plan_mode_lists_the_measurement_without_computing_it(policy, tmp_path):
    from rlvr_lib.study.plan import PlannedRecord, planning

    model, tokenizer = policy
    with planning() as planner:
        out = probe.cached_branch_reorder("fig1", model, tokenizer, PROMPTS, tokens=_tokens(tokenizer),
                                          root=tmp_path, **SETTINGS)
    assert isinstance(out, PlannedRecord) and out.name == probe.NAME
    assert [r.name for r in planner.runs.values()] == [probe.NAME]
    assert load_runs("fig1", tmp_path) == []
