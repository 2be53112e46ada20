"""Each paper's evaluation protocol (`rlvr_lib.study.protocols`, issue 56 item 6): the specs the notebooks run, greedy
decoding through the rollout engine, and mean@k."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlvr_lib.config import hash_jsonable
from rlvr_lib.eval.policy_eval import EvalSpec, evaluate_policy
from rlvr_lib.eval.sampling import sample_and_score
from rlvr_lib.rollout import KVCacheEngine, SamplingParams
from rlvr_lib.study import protocols as P
from rlvr_lib.study.claims import REGISTRIES, registry
from rlvr_lib.study.summaries import mean_at_k, per_problem_mean_at_k
from rlvr_lib.tasks import get_task

PAPERS_MD = Path(__file__).resolve().parents[2] / "shared" / "PAPERS.md"

# The default EvalSpec's dict before `greedy` existed (the hash every cached record's run id is made of).
DEFAULT_SPEC_DICT = {
    "families": ["easy_mix", "medium_mix", "hard_mix", "hardest_mix", "rare_mix", "sub_ood", "ood_shift"],
    "problems_per_family": 200, "samples": 64, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 48, "seed": 0,
    "group_size": 8, "diversity_problems": 100, "diversity_samples": 16,
}

# The papers' protocols as PAPERS.md states them: (temperature, top_p, paper's samples, greedy, metric).
STATED = {
    "nudgerl": (0.7, 1.0, 128, False, "mean@k"),  # "Eval: 128 samples/problem at temperature 0.7, pass@1 = mean ..."
    "3po": (0.6, 1.0, 8, False, "mean@k"),  # "eval mean@8 at temperature 0.6"
    "vigor": (1.0, 1.0, 1, True, "greedy pass@1"),  # "Eval greedy pass@1."
    "sage": (1.0, 1.0, None, False, "mean@k"),  # not stated: its training temperature 1.0, the main evaluation
}
# What each notebook's claims module must name, and the protocols its rows are then measured under.
NOTEBOOK_PROTOCOLS = {
    "nb01_grpo": ("by source", {"nudgerl", "sage"}),
    "nb02_baselines": ("sage", {"sage"}),
    "nb03_nudgerl": ("nudgerl", {"nudgerl"}),
    "nb04_3po": ("3po", {"3po"}),
    "nb05_sage": ("sage", {"sage"}),
    "nb06_vigor": ("vigor", {"vigor"}),
    "nb07_head_to_head": ("by source", {"nudgerl", "3po", "sage", "vigor"}),
    "nb08_discovery": ("by source", None),  # its sources, whatever rows it has
}
FULL_SPEC = EvalSpec(problems_per_family=200, samples=32)  # the shared full profile's main evaluation
QUICK_SPEC = EvalSpec(problems_per_family=8, samples=16, diversity_problems=8, diversity_samples=8)
# The scaling rule written out by hand: samples per problem at (quick, full) for those two main evaluations.
SCALED_SAMPLES = {"nudgerl": (8, 32), "3po": (8, 8), "vigor": (1, 1), "sage": (16, 32)}


# ----------------------------------------------------------------------------------------------- EvalSpec.greedy
def test_default_spec_dict_and_hash_are_unchanged():
    assert EvalSpec().to_dict() == DEFAULT_SPEC_DICT
    assert EvalSpec(greedy=False).to_dict() == DEFAULT_SPEC_DICT
    assert hash_jsonable(EvalSpec().to_dict()) == hash_jsonable(DEFAULT_SPEC_DICT)
    assert "greedy" not in FULL_SPEC.to_dict()
    greedy = EvalSpec(samples=1, group_size=1, greedy=True)
    assert greedy.to_dict()["greedy"] is True
    assert EvalSpec.from_dict(greedy.to_dict()) == greedy


@pytest.mark.parametrize("fields, named", [
    (dict(samples=8, group_size=8), "samples"),
    (dict(samples=1, group_size=1, temperature=0.7), "temperature"),
    (dict(samples=1, group_size=1, top_p=0.9), "top_p"),
    (dict(samples=1, group_size=1, greedy=1), "greedy"),
])
def test_greedy_spec_refuses_what_greedy_decoding_cannot_mean(fields, named):
    fields = {"greedy": True, **fields}
    with pytest.raises(ValueError, match=f"EvalSpec.{named}"):
        EvalSpec(**fields)


def _argmax_decode(model, engine, prompt: str, max_new_tokens: int) -> str:
    """Plain argmax decoding, one full forward pass per token (no cache, no engine)."""
    ids, mask = engine.encode_prompts([prompt])
    ids = ids[0][mask[0].bool()].tolist()
    out = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            token = int(model(torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(token)
            if token in engine.eos_token_ids:
                break
    return engine.tokenizer.decode(out, skip_special_tokens=True)


def test_greedy_sampling_is_deterministic_and_equals_argmax_decoding(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    engine = KVCacheEngine(model, tokenizer)
    task = get_task("arith")
    problems = task.family_problems("easy_mix", 4, seed=0)
    params = [SamplingParams(n=1, greedy=True, max_new_tokens=12, seed=s) for s in (0, 7)]
    a, b = (sample_and_score(engine, problems, p, verifier=task.verify) for p in params)
    assert a.texts == b.texts  # the seed does not matter: greedy is deterministic
    expected = [_argmax_decode(model, engine, p.prompt_with(None), 12) for p in problems]
    assert [row[0] for row in a.texts] == expected
    assert len(set(expected)) > 1  # the prompts lead to different completions: the comparison is not vacuous


def test_greedy_evaluation_gives_one_sample_per_problem_and_scores_the_argmax_completion(policy):
    model, tokenizer = policy
    engine = KVCacheEngine(model, tokenizer)
    task = get_task("arith")
    spec = EvalSpec(families=("easy_mix", "medium_mix"), problems_per_family=4, samples=1, group_size=1,
                    greedy=True, diversity_problems=1, diversity_samples=1, max_new_tokens=32)
    first, again = evaluate_policy(engine, spec), evaluate_policy(engine, spec.replace(seed=3))
    assert first == again
    for family in spec.families:
        counts = first["families"][family]["correct_counts"]
        expected = [int(task.verify(p, _argmax_decode(model, engine, p.prompt_with(None), 32)).reward == 1.0)
                    for p in task.family_problems(family, 4, seed=0)]
        assert counts == expected
        assert first["families"][family]["pass_at_k"] == {"1": pytest.approx(np.mean(expected))}
    assert sum(sum(first["families"][f]["correct_counts"]) for f in spec.families) > 0  # not all wrong


# ------------------------------------------------------------------------------------------------------ mean@k
def test_mean_at_k_of_a_hand_made_score_matrix():
    correct = np.array([[1, 0, 1, 1],   # 3/4
                        [0, 0, 0, 0],   # 0
                        [1, 1, 1, 1]])  # 1
    assert mean_at_k(correct) == pytest.approx((0.75 + 0 + 1) / 3)
    assert mean_at_k(correct.astype(bool)) == pytest.approx(0.583333333)
    assert mean_at_k([[1], [0], [1], [1]]) == pytest.approx(0.75)  # greedy pass@1: k = 1
    with pytest.raises(ValueError, match="correct"):
        mean_at_k([1, 0, 1])
    with pytest.raises(ValueError, match="0/1"):
        mean_at_k([[0.5, 1.0]])


def _record(counts: dict, samples: int, *, seed: int = 0, evals: dict | None = None, **spec_fields):
    """A run record of correct counts per family (an `evaluate_policy` result, reduced to what the readers read)."""

    def final(per_family):
        return {"families": {f: {"correct_counts": c, "uids": [f"{f}-{i}" for i in range(len(c))]}
                             for f, c in per_family.items()}, "average": {"families": list(per_family)}}

    spec = EvalSpec(samples=samples, **spec_fields).to_dict()
    extra_specs = {label: s.to_dict() for label, (s, _) in (evals or {}).items()}
    return SimpleNamespace(name="arm", run_id=f"arm-s{seed}", seed=seed, history=[], final=final(counts),
                           config={"eval": spec, **({"extra_evals": extra_specs} if evals else {})},
                           extra={"evals": {label: final(c) for label, (_, c) in (evals or {}).items()}})


def test_per_problem_mean_at_k_reads_counts_over_samples():
    recs = [_record({"easy_mix": [8, 4, 0], "hard_mix": [2]}, 8, seed=0),
            _record({"easy_mix": [6, 2, 0], "hard_mix": [8]}, 8, seed=1)]
    got = per_problem_mean_at_k(recs, ["easy_mix", "hard_mix"])
    np.testing.assert_allclose(got, [[1, .5, 0, .25], [.75, .25, 0, 1]])
    with pytest.raises(ValueError, match="sample counts"):
        per_problem_mean_at_k([recs[0], _record({"easy_mix": [1, 1, 1], "hard_mix": [1]}, 16)], ["easy_mix"])


# ---------------------------------------------------------------------------------------------------- protocols
def test_each_protocol_is_the_papers_as_written():
    assert set(P.PROTOCOLS) == set(STATED)
    for name, (temperature, top_p, samples, greedy, metric) in STATED.items():
        p = P.PROTOCOLS[name]
        assert (p.temperature, p.top_p, p.samples, p.greedy, p.metric) == (temperature, top_p, samples, greedy, metric)
        assert P.PAPER_PROTOCOL[p.paper] == name
        if samples is not None and not greedy:
            assert str(samples) in p.source and f"temperature {temperature:g}" in p.source
    assert "greedy pass@1" in P.PROTOCOLS["vigor"].source
    assert "not stated" not in P.PROTOCOLS["sage"].source and "temperature" in P.PROTOCOLS["sage"].not_stated
    if PAPERS_MD.exists():  # the workspace's copy of the papers' page: each source is one of its lines, verbatim
        text = " ".join(PAPERS_MD.read_text().split())  # its lines wrap: compare with whitespace collapsed
        for p in P.PROTOCOLS.values():
            assert p.source in text, p.name


@pytest.mark.parametrize("module", sorted(REGISTRIES.values()))
def test_each_notebooks_evaluation_spec_is_its_papers_protocol(module):
    named, expected = NOTEBOOK_PROTOCOLS[module]
    assert importlib.import_module(f"rlvr_lib.study.claims.{module}").PROTOCOL == named
    reg = registry(module)
    protocols = P.notebook_protocols(module)
    if expected is not None:
        assert set(protocols) == expected
    for claim in reg.claims:  # every row's protocol: the module's, or (by source) its paper's
        got = P.claim_protocol(module, claim.id)
        assert got.name == (P.PAPER_PROTOCOL[claim.source] if named == "by source" else named)
    for name in protocols:
        temperature, top_p, _, greedy, _ = STATED[name]
        for i, (profile, base) in enumerate((("quick", QUICK_SPEC), ("full", FULL_SPEC))):
            spec = P.protocol_spec(name, base, profile)
            assert (spec.temperature, spec.top_p, spec.greedy) == (temperature, top_p, greedy)
            assert spec.samples == SCALED_SAMPLES[name][i]
            assert (spec.families, spec.problems_per_family, spec.max_new_tokens, spec.seed, spec.task) == (
                base.families, base.problems_per_family, base.max_new_tokens, base.seed, base.task)
            assert spec.hints_per_problem == 0 and spec.samples % spec.group_size == 0
            if name == "sage":  # not stated: the main evaluation itself, no extra evaluation
                assert spec == base
                assert P.ProtocolEvaluation.of(name, base, profile).extra_specs() == {}


def test_protocol_spec_refuses_bad_arguments():
    with pytest.raises(ValueError, match="protocol"):
        P.protocol_spec("greedy", FULL_SPEC, "full")
    with pytest.raises(ValueError, match="profile"):
        P.protocol_spec("3po", FULL_SPEC, "medium")
    with pytest.raises(ValueError, match="base_spec"):
        P.protocol_spec("3po", FULL_SPEC.to_dict(), "full")
    with pytest.raises(ValueError, match="claim id"):
        P.claim_protocol("nb03_nudgerl", "no-such-row")


def test_protocol_records_and_paired_reading():
    proto = P.ProtocolEvaluation.of("3po", FULL_SPEC, "full")
    assert proto.label == "protocol-3po" and proto.spec.samples == 8 and proto.spec.temperature == 0.6
    assert proto.extra_specs() == {"protocol-3po": proto.spec}
    fams = ["easy_mix"]
    # trained arms: the protocol's evaluation is an extra evaluation; their main one (32 samples at T 1) is not it
    arm_a = [_record({"easy_mix": [32, 0]}, 32, seed=s, evals={"protocol-3po": (proto.spec, {"easy_mix": c})})
             for s, c in ((0, [8, 4]), (1, [6, 2]))]
    arm_b = [_record({"easy_mix": [32, 0]}, 32, seed=s, evals={"protocol-3po": (proto.spec, {"easy_mix": c})})
             for s, c in ((0, [4, 4]), (1, [2, 2]))]
    np.testing.assert_allclose(proto.scores(arm_a, fams), [[1, .5], [.75, .25]])
    diff = proto.versus(arm_a, arm_b, fams)
    assert diff["mean"] == pytest.approx(((1 + .5 + .75 + .25) - (.5 + .5 + .25 + .25)) / 4)
    # a base policy evaluated under the protocol's spec is read as it is
    base = [_record({"easy_mix": [0, 8]}, 8, temperature=0.6, seed=0)]
    np.testing.assert_allclose(proto.scores(base, fams), [[0, 1]])
    assert proto.base_name == "base-protocol-3po" and proto.base_seeds([0, 1, 2]) == [0, 1, 2]
    # a record with neither is refused, naming the label and the protocol
    with pytest.raises(ValueError, match="protocol-3po.*mean@8 at temperature 0.6"):
        proto.records([_record({"easy_mix": [1, 1]}, 32)])
    vigor = P.ProtocolEvaluation.of("vigor", FULL_SPEC, "full")
    assert vigor.base_seeds([0, 1, 2]) == [0] and vigor.spec.greedy and vigor.spec.group_size == 1
    assert "greedy pass@1" in vigor.describe() and P.SCALING_RULE in vigor.describe()
    assert P.SCALING_RULE not in vigor.describe(rule=False)
    nudge = P.ProtocolEvaluation.of("nudgerl", FULL_SPEC, "full").describe(rule=False)
    assert "mean@32 at temperature 0.7" in nudge and "the paper draws 128" in nudge
