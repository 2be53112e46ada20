"""`make verify` (issue 35): committed runs recomputed at HEAD and compared with their records."""

import json

import pytest

from rlvr_lib.eval.policy_eval import EvalSpec
from rlvr_lib.methods import method_config
from rlvr_lib.study.pipeline import evaluate_base, train_and_evaluate
from rlvr_lib.study.runs import RunRecord, cpu_model, load_runs
from rlvr_lib.study.verify import (TOLERANCE_Z, VERIFICATION_FILE, compare_main, compare_records, compare_roots,
                                   draw_sample, recompute, seed_tolerances, verify)

EXPERIMENT = "baselines_full"  # one that a notebook's tables read (report.SECTIONS)
SPEC = EvalSpec(families=("easy_mix",), problems_per_family=3, samples=8, diversity_problems=3, diversity_samples=4)


def _train(root, seed):
    cfg = method_config("grpo", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=24, seed=seed)
    return train_and_evaluate(EXPERIMENT, "grpo", cfg, SPEC, root=root)


def _edit(root, record, change):
    """Rewrite a committed record by hand."""
    path = root / EXPERIMENT / f"{record.run_id}.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.fixture
def committed(tmp_path):
    root = tmp_path / "results"
    return root, [_train(root, 0), _train(root, 1), evaluate_base(EXPERIMENT, SPEC, root=root)]


def test_a_recomputed_run_is_bit_identical_and_a_hand_edit_is_caught(committed, tmp_path):
    root, (grpo0, grpo1, base) = committed
    before = {p.name: p.read_bytes() for p in (root / EXPERIMENT).glob("*.json")}
    summary = verify(per_notebook=3, seed=0, root=root, scratch=tmp_path / "scratch")
    assert {p.name: p.read_bytes() for p in (root / EXPERIMENT).glob("*.json")} == before  # records untouched
    by_id = {r["run_id"]: r for r in summary["runs"]}
    assert set(by_id) == {grpo0.run_id, grpo1.run_id, base.run_id}
    assert all(r["mode"] == "exact" and r["match"] is True for r in by_id.values()), by_id
    assert summary["matches"] == 3 and summary["mismatches"] == 0
    assert json.loads((root / VERIFICATION_FILE).read_text())["runs"] == summary["runs"]
    assert len(load_runs(EXPERIMENT, tmp_path / "scratch")) == 3  # recomputed in the scratch folder

    _edit(root, grpo1, lambda d: d["final"]["average"]["pass_at_k"].update({"1": d["final"]["average"]["pass_at_k"]["1"] + 0.01}))
    _edit(root, base, lambda d: d["final"]["families"]["easy_mix"]["correct_counts"].__setitem__(0, 7))
    summary = verify(per_notebook=3, seed=0, root=root, scratch=tmp_path / "scratch")
    by_id = {r["run_id"]: r for r in summary["runs"]}
    assert by_id[grpo0.run_id]["match"] is True
    assert by_id[grpo1.run_id]["match"] is False and "final.average.pass_at_k.1" in by_id[grpo1.run_id]["detail"]
    assert by_id[base.run_id]["match"] is False and "correct_counts[0]" in by_id[base.run_id]["detail"]
    assert summary["mismatches"] == 2


def test_a_history_edit_is_caught_but_wall_clock_timings_are_not_compared(committed, tmp_path):
    root, (grpo0, _, _) = committed
    fresh = recompute(grpo0, tmp_path / "scratch")
    timing = next(k for k in grpo0.history[0] if k.startswith("time_"))
    retimed = RunRecord.from_dict({**grpo0.to_dict(), "history": [{**row, timing: 99.0} for row in grpo0.history]})
    assert compare_records(retimed, fresh, same_processor=True)["match"] is True
    edited = RunRecord.from_dict({**grpo0.to_dict(), "history": [{**grpo0.history[0], "loss": 1.5}, *grpo0.history[1:]]})
    result = compare_records(edited, fresh, same_processor=True)
    assert result["match"] is False and result["detail"].startswith("first difference at history[0].loss")


def test_two_results_roots_are_compared_record_by_record_except_their_times(committed, tmp_path, capsys):
    root, (grpo0, grpo1, base) = committed
    scratch = tmp_path / "scratch"
    for record in (grpo0, grpo1, base):  # a second computation of every run, at other times
        recompute(record, scratch)
    keys = sorted(f"{EXPERIMENT}/{r.run_id}" for r in (grpo0, grpo1, base))
    (scratch / ".checkpoints" / EXPERIMENT).mkdir(parents=True, exist_ok=True)  # a root's hidden folders: not records
    assert compare_roots(root, scratch) == {"equal": keys, "different": {}, "only_a": [], "only_b": []}
    assert compare_main([str(root), str(scratch)]) == 0
    assert "3 records equal bit for bit" in capsys.readouterr().out

    _edit(root, grpo1, lambda d: d["history"][1].update({"entropy": d["history"][1]["entropy"] + 1e-9}))
    (scratch / EXPERIMENT / f"{base.run_id}.json").unlink()
    result = compare_roots(root, scratch)
    assert result["different"] == {f"{EXPERIMENT}/{grpo1.run_id}": result["different"][f"{EXPERIMENT}/{grpo1.run_id}"]}
    assert result["different"][f"{EXPERIMENT}/{grpo1.run_id}"].startswith(".history[1].entropy")
    assert result["only_a"] == [f"{EXPERIMENT}/{base.run_id}"] and result["only_b"] == []
    assert result["equal"] == [f"{EXPERIMENT}/{grpo0.run_id}"]
    assert compare_main([str(root), str(scratch)]) == 1
    out = capsys.readouterr().out
    assert f"DIFFERENT {EXPERIMENT}/{grpo1.run_id}: first difference at .history[1].entropy" in out
    assert f"ONLY IN {root}: {EXPERIMENT}/{base.run_id}" in out and "the roots differ" in out
    with pytest.raises(SystemExit) as stop:
        compare_main([str(root), str(tmp_path / "nowhere")])
    assert stop.value.code == 2 and "must be an existing folder" in capsys.readouterr().err


def test_another_processor_is_compared_within_the_seed_spread_not_bit_for_bit(committed, tmp_path):
    root, (grpo0, grpo1, base) = committed
    fresh = recompute(grpo1, tmp_path / "scratch")
    tolerances = seed_tolerances(grpo1, root)
    # The tolerance is 1.96 sqrt(2) x the sd over the arm's two committed seeds, per metric.
    p1 = [r.final["average"]["pass_at_k"]["1"] for r in (grpo0, grpo1)]
    assert tolerances["final"]["pass@1"] == pytest.approx(TOLERANCE_Z * abs(p1[0] - p1[1]) / 2 ** 0.5)
    shifted = json.loads(json.dumps(grpo1.to_dict()))
    shifted["history"][0]["loss"] += 1.0  # another trajectory: not compared bit for bit
    avg = shifted["final"]["average"]
    inside = RunRecord.from_dict(shifted)
    result = compare_records(inside, fresh, same_processor=False, tolerances=tolerances)
    assert result["mode"] == "tolerance" and result["match"] is True
    assert {m["metric"] for m in result["metrics"]} >= {"pass@1", "strategy_entropy"}
    avg["pass_at_k"]["1"] += tolerances["final"]["pass@1"] + 0.01
    result = compare_records(RunRecord.from_dict(shifted), fresh, same_processor=False, tolerances=tolerances)
    assert result["match"] is False and "final pass@1" in result["detail"]
    # A one-seed arm has no spread: unverifiable on another processor, never a silent match.
    assert seed_tolerances(base, root) is None
    assert compare_records(base, base, same_processor=False, tolerances=None)["match"] is None


def test_verify_picks_the_tolerance_mode_from_the_records_processor(committed, tmp_path):
    root, (grpo0, grpo1, base) = committed
    _edit(root, grpo0, lambda d: d["extra"]["machine"].update({"cpu_model": "Some Other CPU"}))
    summary = verify(per_notebook=3, seed=0, root=root, scratch=tmp_path / "scratch")
    modes = {r["run_id"]: (r["mode"], r["match"], r["record_processor"]) for r in summary["runs"]}
    assert modes[grpo0.run_id] == ("tolerance", True, "Some Other CPU")
    assert modes[grpo1.run_id] == ("exact", True, cpu_model())
    assert summary["processor"] == cpu_model()


def test_the_draw_is_reproducible_from_its_seed_and_independent_of_listing_order():
    def rec(i, exp="e"):
        return RunRecord(experiment=exp, name="grpo", run_id=f"grpo-{i:012x}-s{i}", config={}, config_hash=f"{i:012x}", seed=i,
                         history=[], final={})

    by_nb = {"02": [rec(i) for i in range(20)], "03": [rec(i, "f") for i in range(5)], "04": []}
    first = [r.run_id for r in draw_sample(by_nb, 2, seed=3)]
    shuffled = {k: list(reversed(v)) for k, v in by_nb.items()}
    assert [r.run_id for r in draw_sample(shuffled, 2, seed=3)] == first
    assert len(first) == 4
    draws = {tuple(r.run_id for r in draw_sample(by_nb, 2, seed=s)) for s in range(10)}
    assert len(draws) > 1  # the seed matters
    assert len(draw_sample(by_nb, 9, seed=0)) == 9 + 5  # a notebook with fewer runs gives them all
    with pytest.raises(ValueError, match="sample"):
        draw_sample(by_nb, 0, seed=0)


def test_recomputed_runs_never_go_into_the_results_root(committed):
    root, _ = committed
    for scratch in (root, root / ".verify"):
        with pytest.raises(ValueError, match="outside the results root"):
            verify(root=root, scratch=scratch, write=False)
    assert len(load_runs(EXPERIMENT, root)) == 3


def test_the_command_line_flags_verify_arguments(capsys):
    from rlvr_lib.study.reproduce import main

    with pytest.raises(SystemExit):
        main(["--verify", "--sample", "0"])
    assert "--sample" in capsys.readouterr().err


def test_the_second_model_sizes_runs_are_verifiable_where_it_is_built(tmp_path, monkeypatch):
    from conftest import build_char_tokenizer, build_tiny_qwen2

    from rlvr_lib.policy import load
    from rlvr_lib.study.verify import verifiable_records

    root, small = tmp_path / "results", tmp_path / "small-mul"
    tokenizer = build_char_tokenizer()
    build_tiny_qwen2(tokenizer).save_pretrained(small)
    tokenizer.save_pretrained(small)
    monkeypatch.setitem(load.POLICY_NAMES, "small", small)
    shipped = evaluate_base(EXPERIMENT, SPEC, root=root)
    second = evaluate_base(EXPERIMENT, SPEC, "small", root=root, name="base-small")
    assert second.config["policy_sha"] != shipped.config["policy_sha"]
    ids = lambda: {r.run_id for r in verifiable_records(root)["02_baselines_sage_t1_anchors"]}  # noqa: E731
    assert ids() == {shipped.run_id, second.run_id}
    monkeypatch.setitem(load.POLICY_NAMES, "small", tmp_path / "not-built")  # elsewhere: not recomputable
    assert ids() == {shipped.run_id}
