"""Policy evaluation and the cached train+evaluate pipeline, on the shipped tiny policy."""

import json
from pathlib import Path

import pytest

from rlvr_lib.config import hash_jsonable
from rlvr_lib.eval import EvalSpec, evaluate_policy, mode_ari, sample_and_score
from rlvr_lib.eval.sampling import sample_with_hints
from rlvr_lib.methods import method_config
from rlvr_lib.study.pipeline import evaluate_base, train_and_evaluate
from rlvr_lib.study.profiles import BASE_SEEDS, full_profile, wide_spec
from rlvr_lib.policy import load_policy
from rlvr_lib.rollout import HFEngine, SamplingParams
from rlvr_lib.tasks import MALFORMED
from rlvr_lib.tasks.arithmetic import family_problems
from rlvr_lib.trainer import untimed

SPEC = EvalSpec(families=("easy_mix", "hard_mix", "ood_shift"), problems_per_family=12, samples=8,
                diversity_problems=12, diversity_samples=8)


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = load_policy(device="cpu")
    return HFEngine(model, tokenizer)


def test_unsupervised_modes_recover_strategies_on_base_policy_samples(engine):
    problems = family_problems("hard_mix", 40)
    scored = sample_and_score(engine, problems, SamplingParams(n=8, seed=0))
    keep = scored.statuses != MALFORMED
    texts = [t for row, k in zip(scored.texts, keep) for t, ok in zip(row, k) if ok]
    labels = list(scored.strategies[keep])
    assert len(set(labels)) >= 2  # the base policy samples more than one strategy
    assert mode_ari(texts, labels) >= 0.8


def test_evaluate_policy_reports_every_family_and_the_in_distribution_average(engine):
    result = evaluate_policy(engine, SPEC)
    assert set(result["families"]) == {"easy_mix", "hard_mix", "ood_shift"}
    avg = result["average"]
    assert avg["families"] == ["easy_mix", "hard_mix"]  # OOD is reported, not averaged
    for k in ("1", "2", "4", "8"):
        expected = (result["families"]["easy_mix"]["pass_at_k"][k] + result["families"]["hard_mix"]["pass_at_k"][k]) / 2
        assert avg["pass_at_k"][k] == pytest.approx(expected)
    curve = [avg["pass_at_k"][k] for k in ("1", "2", "4", "8")]
    assert curve == sorted(curve)
    fam = result["families"]["easy_mix"]
    assert len(fam["correct_counts"]) == 12 and max(fam["correct_counts"]) <= 8
    assert fam["pass_at_k"]["1"] == pytest.approx(sum(fam["correct_counts"]) / (12 * 8))


def test_eval_spec_validation():
    with pytest.raises(ValueError, match="families"):
        EvalSpec(families=("aime",))
    with pytest.raises(ValueError, match="multiple of group_size"):
        EvalSpec(samples=12, group_size=8)


def test_runs_are_cached_and_not_recomputed(tmp_path, monkeypatch):
    spec = EvalSpec(families=("easy_mix",), problems_per_family=4, samples=8, diversity_problems=4, diversity_samples=4)
    cfg = method_config("grpo", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=40, seed=1)
    first = train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path)
    base = evaluate_base("t", spec, root=tmp_path)
    assert len(first.history) == 2 and first.status == "finished"
    assert not (tmp_path / ".checkpoints" / "t").exists() or not any((tmp_path / ".checkpoints" / "t").iterdir())

    import rlvr_lib.study.pipeline as pipeline

    def boom(*a, **k):
        raise AssertionError("a cached run was recomputed")

    monkeypatch.setattr(pipeline, "Trainer", boom)
    monkeypatch.setattr(pipeline, "evaluate_policy", boom)
    again = train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path)
    assert again.to_dict() == first.to_dict()
    assert evaluate_base("t", spec, root=tmp_path).to_dict() == base.to_dict()


def test_an_interrupted_run_resumes_and_its_record_counts_both_processes(tmp_path, monkeypatch):
    import rlvr_lib.study.pipeline as pipeline

    spec = EvalSpec(families=("easy_mix",), problems_per_family=2, samples=8, diversity_problems=2, diversity_samples=4)
    cfg = method_config("grpo", steps=3, prompts_per_step=2, group_size=4, max_new_tokens=24, seed=1)
    real_train = pipeline.Trainer.train

    def killed_after_two_steps(trainer, **kw):
        trainer.step(), trainer.step()
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.Trainer, "train", killed_after_two_steps)
    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, checkpoint_every=1)
    monkeypatch.setattr(pipeline.Trainer, "train", real_train)
    record = train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, checkpoint_every=1)
    resumed = record.extra["resumed"]
    assert resumed["at_step"] == 2 and resumed["earlier_s"] >= sum(m["time_step"] for m in record.history[:2])
    assert record.wall_time_s >= resumed["earlier_s"] + record.history[2]["time_step"]


def test_a_cached_run_trained_under_other_option_defaults_is_refused(tmp_path):
    spec = EvalSpec(families=("easy_mix",), problems_per_family=2, samples=8, diversity_problems=2, diversity_samples=4)
    cfg = method_config("nudgerl", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=24, seed=0)
    record = train_and_evaluate("t", "nudgerl", cfg, spec, root=tmp_path)
    stored = record.extra["method_options"]
    assert stored["dropout_unit"] == "rollout" and stored["p_drop"] == 0.5  # defaults are filled in
    assert train_and_evaluate("t", "nudgerl", cfg, spec, root=tmp_path).to_dict() == record.to_dict()
    # The record as an older default (per-hint dropout) would have written it: the run key is the same.
    path = tmp_path / "t" / f"{record.run_id}.json"
    data = json.loads(path.read_text())
    data.pop("checksum")  # as a record written before checksums (issue 60): an edited sealed one is recomputed
    data["extra"]["method_options"]["dropout_unit"] = "hint"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"trained with other method options .*'dropout_unit': \('hint', 'rollout'\)"):
        train_and_evaluate("t", "nudgerl", cfg, spec, root=tmp_path)


def test_sample_with_hints_interleaves_each_problems_samples_over_its_hints(engine):
    problems = family_problems("hard_mix", 6)
    pools = {"round": ["round", "split", "carry"], "short": ["  ", "split"]}  # blank hints are skipped
    hints = lambda p: pools["short"] if p is problems[0] else pools["round"]  # noqa: E731
    out = sample_with_hints(engine, problems, SamplingParams(n=8, seed=3), hints, 2)
    assert out.rewards.shape == (6, 8) and all(len(row) == 8 for row in out.texts)
    assert out.hints[0] == ("split", None) and out.hints[1] == ("round", "split")
    # The policy follows strategy hints, interleaved: even samples used hint 0, odd ones hint 1, so the first
    # half of a problem's samples (what diversity clusters) holds both hints equally.
    assert (out.strategies[1:, 0::2] == "round").mean() > 0.8
    assert (out.strategies[1:, 1::2] == "split").mean() > 0.8
    assert (out.strategies[0, 0::2] == "split").mean() > 0.5
    assert (out.strategies[1:, :4] == "round").mean() == pytest.approx(0.5, abs=0.2)
    with pytest.raises(ValueError, match="hints_per_problem=3 is not valid: must be a positive int dividing"):
        sample_with_hints(engine, problems, SamplingParams(n=8), hints, 3)


def test_nudged_evaluation_raises_the_rare_strategy_share_and_keeps_plain_specs_hash(engine):
    spec = EvalSpec(families=("hard_mix",), problems_per_family=12, samples=8, diversity_problems=12,
                    diversity_samples=8)
    assert "hints_per_problem" not in spec.to_dict()  # run ids of plain evaluations are unchanged
    nudged = spec.replace(hints_per_problem=2)
    assert nudged.to_dict()["hints_per_problem"] == 2
    plain_freq = evaluate_policy(engine, spec)["families"]["hard_mix"]["strategy_freq"]
    nudged_freq = evaluate_policy(engine, nudged)["families"]["hard_mix"]["strategy_freq"]
    # The testbed's pools put round (best on hard items) first unless a distractor comes first.
    assert nudged_freq["round"] > 2 * plain_freq["round"] + 0.05
    with pytest.raises(ValueError, match="hints_per_problem"):
        EvalSpec(samples=8, hints_per_problem=3)


def test_extra_evaluations_are_stored_cached_and_keyed_only_when_given(tmp_path, monkeypatch):
    from rlvr_lib.config import hash_jsonable
    from rlvr_lib.study.summaries import extra_evaluation, summary_row
    from rlvr_lib.study.runs import jsonable
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.rollout import KVCacheEngine
    from rlvr_lib.trainer import Trainer

    spec = EvalSpec(families=("easy_mix",), problems_per_family=4, samples=8, diversity_problems=4, diversity_samples=4)
    wide = EvalSpec(families=("rare_mix", "hard_mix"), problems_per_family=3, samples=16, diversity_problems=3,
                    diversity_samples=4, seed=5)
    cfg = method_config("grpo", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=40, seed=1)
    plain = train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path)
    # Without extra specs the key is the one runs had before the option existed (with the testbed version, part
    # of every key since testbed v5): cached runs keep hitting.
    from rlvr_lib.tasks import task_version

    old_hash = hash_jsonable({"train": cfg.to_dict(), "policy_sha": policy_fingerprint(cfg.policy),
                              "eval": spec.to_dict(), "task_version": task_version(cfg.task)})
    assert plain.config_hash == old_hash and plain.run_id == f"grpo-{old_hash}-s1"
    assert "evals" not in plain.extra and "extra_evals" not in plain.config
    assert train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, extra_specs={}).run_id == plain.run_id

    record = train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, extra_specs={"wide": wide})
    assert record.run_id != plain.run_id and record.config["extra_evals"] == {"wide": wide.to_dict()}
    assert untimed(record.history) == untimed(plain.history)  # same training (wall times aside)
    assert record.final == plain.final  # and the same main evaluation
    trainer = Trainer(cfg)
    trainer.train(progress=False)
    direct = evaluate_policy(KVCacheEngine(trainer.model, trainer.tokenizer), wide)
    assert record.extra["evals"]["wide"] == jsonable(direct)
    assert set(record.extra["evals"]["wide"]["families"]) == {"rare_mix", "hard_mix"}

    # Read as records by the summaries: 16 samples per problem, 6 problems over both families.
    (ev,) = extra_evaluation([record], "wide")
    assert ev.final is record.extra["evals"]["wide"] and ev.config == {"eval": wide.to_dict()}
    fams = direct["families"]
    correct = sum(sum(fams[f]["correct_counts"]) for f in ("rare_mix", "hard_mix"))
    row = summary_row([ev], [1, 16], families=["rare_mix", "hard_mix"])
    assert row["pass@1"]["mean"] == pytest.approx(correct / (6 * 16))
    solved = sum(c > 0 for f in ("rare_mix", "hard_mix") for c in fams[f]["correct_counts"])
    assert row["pass@16"]["mean"] == pytest.approx(solved / 6)

    import rlvr_lib.study.pipeline as pipeline

    def boom(*a, **k):
        raise AssertionError("a cached run was recomputed")

    monkeypatch.setattr(pipeline, "Trainer", boom)
    monkeypatch.setattr(pipeline, "evaluate_policy", boom)
    again = train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, extra_specs={"wide": wide})
    assert again.to_dict() == record.to_dict()


def test_extra_specs_must_map_labels_to_eval_specs(tmp_path):
    spec = EvalSpec(families=("easy_mix",), problems_per_family=4, samples=8)
    cfg = method_config("grpo", steps=1, prompts_per_step=2, group_size=4, seed=0)
    with pytest.raises(ValueError, match=r"extra_specs\['wide'\]='dict' is invalid: must be an EvalSpec"):
        train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, extra_specs={"wide": spec.to_dict()})
    with pytest.raises(ValueError, match="extra_specs label='' is invalid: must be a non-empty string"):
        train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, extra_specs={"": spec})
    with pytest.raises(ValueError, match=r"extra_specs='list' is invalid: must be None or a \{label: EvalSpec\}"):
        train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path, extra_specs=[spec])


def test_a_run_is_not_added_beside_records_of_another_processor_model(tmp_path, monkeypatch):
    """Issue 31, item 5: the tables' runs (train_and_evaluate, evaluate_base) refuse to mix processor models
    within an experiment of one policy and testbed, unless asked; cached records still load anywhere."""
    import json

    from rlvr_lib.study.runs import MIXED_PROCESSORS_ENV

    spec = EvalSpec(families=("easy_mix",), problems_per_family=2, samples=8, diversity_problems=2, diversity_samples=4)
    first = evaluate_base("t", spec, root=tmp_path)
    path = tmp_path / "t" / f"{first.run_id}.json"
    data = json.loads(path.read_text())
    data.pop("checksum")  # as a record written before checksums (issue 60): an edited sealed one is recomputed
    data["extra"]["machine"]["cpu_model"] = "Other CPU"
    path.write_text(json.dumps(data))
    monkeypatch.delenv(MIXED_PROCESSORS_ENV, raising=False)
    assert evaluate_base("t", spec, root=tmp_path).extra["machine"]["cpu_model"] == "Other CPU"  # a cache hit
    with pytest.raises(ValueError, match=r"another processor model \(1 on Other CPU\).*RLVR_ALLOW_MIXED_PROCESSORS=1"):
        evaluate_base("t", spec.replace(seed=1), root=tmp_path)
    cfg = method_config("grpo", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=16, seed=0)
    with pytest.raises(ValueError, match="another processor model"):
        train_and_evaluate("t", "grpo", cfg, spec, root=tmp_path)
    assert not list((tmp_path / "t").glob("grpo-*.json"))
    # A record of another policy does not count, and the variable allows mixing.
    data["config"]["policy_sha"] = "0" * 16
    path.write_text(json.dumps(data))
    assert evaluate_base("t", spec.replace(seed=1), root=tmp_path).seed == 1
    data["config"]["policy_sha"] = first.config["policy_sha"]
    path.write_text(json.dumps(data))
    monkeypatch.setenv(MIXED_PROCESSORS_ENV, "1")
    assert evaluate_base("t", spec.replace(seed=2), root=tmp_path).seed == 2


# ----------------------------------------------------------------------------- result-neutral defaults
RESULTS = Path(__file__).resolve().parents[1] / "results"


def _committed_eval_dicts(root=None):
    """``{experiment: [every eval spec dict of its records: config["eval"] and config["extra_evals"]]}``."""
    out = {}
    for path in sorted((root or RESULTS).glob("*_full/*.json")):
        record = json.loads(path.read_text())
        config = record["config"]
        out.setdefault(path.parent.name, []).extend([config["eval"], *config.get("extra_evals", {}).values()])
    return out


def test_the_default_eval_spec_hashes_as_before_the_task_declared_its_families():
    spec = EvalSpec()
    assert spec.families == ("easy_mix", "medium_mix", "hard_mix", "hardest_mix", "rare_mix", "sub_ood", "ood_shift")
    assert spec.to_dict() == {"families": list(spec.families), "problems_per_family": 200, "samples": 64,
                              "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 48, "seed": 0, "group_size": 8,
                              "diversity_problems": 100, "diversity_samples": 16}
    assert spec.config_hash() == "9a5d948ddcb2"  # measured before `families` defaulted to the task's
    assert EvalSpec(task="arith") == spec == EvalSpec(families=spec.families)
    assert EvalSpec.from_dict({"samples": 64}) == spec  # a dict without families takes the task's


def test_every_committed_records_eval_spec_round_trips_and_the_profiles_specs_are_the_records():
    evals = _committed_eval_dicts()
    assert {"baselines_full", "discovery_full", "nudgerl_full", "head_to_head_full"} <= set(evals)
    assert sum(map(len, evals.values())) > 300
    for experiment, dicts in evals.items():
        for d in dicts:
            spec = EvalSpec.from_dict(d)
            assert spec.to_dict() == d, experiment
            assert spec.config_hash() == hash_jsonable(d), experiment
    recorded = {hash_jsonable(d) for dicts in evals.values() for d in dicts}
    profile = full_profile()
    # the main evaluation of a trained arm (seed 0) and of the base policy (seeds 0-2), and the wide evaluation
    # Until the second recompute replaces a notebook's folder (results/recompute-58, docs/budget.md), its records
    # hold the first recompute's wide evaluation, 100 problems; the new one is in the recompute's folder.
    staged = {hash_jsonable(d) for dicts in _committed_eval_dicts(RESULTS / "recompute-58").values()
              for d in dicts}
    for seed in BASE_SEEDS:
        assert profile["spec"].replace(seed=seed).config_hash() in recorded, seed
        assert (wide_spec(seed=seed).config_hash() in recorded | staged
                or wide_spec(problems=100, seed=seed).config_hash() in recorded), seed
    assert profile["wide_spec"] == wide_spec()
    assert {hash_jsonable(d) for d in evals["threepo_full"]} == {profile["spec"].config_hash()}
