"""Run-record summaries on hand-made records: every number is checked against a hand computation."""

from types import SimpleNamespace

import numpy as np
import pytest

from rlvr_lib.study.summaries import (
                                      PASSK_INTERVAL,
                                      family_table,
                                      mean_pass_curve,
                                      per_problem_shares,
                                      per_problem_strategy_entropy,
                                      seed_values,
                                      summary_row,
                                      top_strategy,
                                      train_metric,
                                      )


def _family(correct, split, direct, n=4):
    """A family summary of 3 problems with ``n`` samples each; the rest of each problem's samples use round."""
    shares = {"direct": np.mean(direct) / n, "split": np.mean(split) / n}
    shares["round"] = 1 - shares["direct"] - shares["split"]
    shares["none"] = 0.0
    return {
        "correct_counts": correct, "uids": ["p0", "p1", "p2"],
        "strategy_counts": {"direct": direct, "split": split,
                            "round": [n - d - s for d, s in zip(direct, split)], "none": [0, 0, 0]},
        "pass_at_k": {"1": float(np.mean(correct)) / n}, "strategy_freq": shares,
        "strategy_entropy": 0.5, "malformed_rate": 0.1, "mean_length": 20.0, "mean_modes": 2.0,
    }


def _record(correct, split, direct, history=(), entropy=0.5):
    fam = _family(correct, split, direct)
    average = {**fam, "families": ["a"], "strategy_entropy": entropy}
    return SimpleNamespace(final={"families": {"a": fam}, "average": average}, history=list(history),
                           config={"eval": {"samples": 4}}, run_id="r")


def test_seed_values_and_train_metric():
    recs = [_record([4, 0, 2], [0, 0, 0], [4, 4, 4], entropy=e) for e in (0.1, 0.3)]
    assert seed_values(recs, "strategy_entropy") == [0.1, 0.3]
    assert seed_values(recs, "malformed_rate", family="a") == [0.1, 0.1]
    with pytest.raises(ValueError, match="key='nope' is invalid"):
        seed_values(recs, "nope")
    with pytest.raises(ValueError, match="family='b' is invalid"):
        seed_values(recs, "malformed_rate", family="b")
    hist = [{"accuracy": a} for a in (0.0, None, 0.5, float("nan"), 1.0)]
    trained = [_record([1, 1, 1], [0, 0, 0], [4, 4, 4], history=hist)]
    assert train_metric(trained, "accuracy", last=2).tolist() == [0.75]  # None and NaN steps skipped
    assert train_metric(trained, "accuracy", last=10).tolist() == [0.5]
    with pytest.raises(ValueError, match="a trained run that logged 'accuracy'"):
        train_metric(recs, "accuracy")


def test_mean_pass_curve_and_top_strategy():
    recs = [_record([4, 0, 2], [0, 0, 0], [4, 4, 4]), _record([0, 0, 2], [4, 4, 4], [0, 0, 0])]
    assert mean_pass_curve(recs) == {"1": pytest.approx((6 / 12 + 2 / 12) / 2)}
    assert top_strategy(recs, ["direct", "split", "round"]) == "direct"  # tie 0.5/0.5: first listed
    assert top_strategy(recs[1:], ["direct", "split", "round"]) == "split"


def test_per_problem_shares_pair_problems_and_count_shares():
    a = _record([0, 0, 0], [4, 2, 0], [0, 1, 4])
    b = _record([0, 0, 0], [0, 2, 4], [4, 0, 0])
    X = per_problem_shares([a, b], ["a"], "split")
    np.testing.assert_allclose(X, [[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]])
    np.testing.assert_allclose(per_problem_shares([a], ["a"], "round"), [[0.0, 0.25, 0.0]])
    with pytest.raises(ValueError, match="strategy='lemma' is invalid"):
        per_problem_shares([a], ["a"], "lemma")
    old = _record([0, 0, 0], [4, 2, 0], [0, 1, 4])
    del old.final["families"]["a"]["strategy_counts"]
    with pytest.raises(ValueError, match="strategy_counts"):
        per_problem_shares([old], ["a"], "split")
    other = _record([0, 0, 0], [4, 2, 0], [0, 1, 4])
    other.final["families"]["a"]["uids"] = ["p0", "p1", "q"]
    with pytest.raises(ValueError, match="same problems"):
        per_problem_shares([a, other], ["a"], "split")


def test_per_problem_strategy_entropy_by_hand():
    # Problem 0: 4 split of 4 -> 0 nats. Problem 1: 2 split, 1 direct, 1 round -> -(.5 ln .5 + 2 x .25 ln .25).
    # Problem 2: 4 direct -> 0 nats.
    a = _record([0, 0, 0], [4, 2, 0], [0, 1, 4])
    H = per_problem_strategy_entropy([a], ["a"], ["direct", "split", "round"])
    np.testing.assert_allclose(H, [[0.0, -(0.5 * np.log(0.5) + 0.5 * np.log(0.25)), 0.0]])
    # Renormalised over the strategies asked for: without "round", problem 1 is 2 split vs 1 direct.
    H2 = per_problem_strategy_entropy([a], ["a"], ["direct", "split"])
    np.testing.assert_allclose(H2[0, 1], -(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3)))
    # A problem with no sample naming an asked strategy has entropy 0, not NaN.
    assert per_problem_strategy_entropy([a], ["a"], ["round"]).tolist() == [[0.0, 0.0, 0.0]]


def test_summary_row_and_family_table_intervals_stay_in_range():
    recs = [_record([4, 0, 2], [0, 0, 0], [4, 4, 4], history=[{"accuracy": 0.5}]),
            _record([3, 1, 2], [0, 0, 0], [4, 4, 4], history=[{"accuracy": 0.7}])]
    row = summary_row(recs, ks=[1, 4])
    assert set(row) == {"pass@1", "pass@4", "strategy entropy", "modes/problem", "malformed", "length",
                        "train accuracy (last 10)"}
    assert row["pass@1"]["mean"] == pytest.approx(12 / 24)
    assert row["pass@4"]["mean"] == pytest.approx(5 / 6)  # problems solved at least once: 2/3 and 3/3
    for cell in row.values():
        assert cell["ci_low"] <= cell["mean"] <= cell["ci_high"]
    assert 0 <= row["pass@4"]["ci_low"] and row["pass@4"]["ci_high"] <= 1
    assert "seeds x problems" in row["pass@1"]["method"] and "seeds" in row["malformed"]["method"]
    assert "train accuracy (last 10)" not in summary_row(
        [_record([4, 0, 2], [0, 0, 0], [4, 4, 4])], ks=[1])  # the base policy is not trained
    table = family_table({"m": recs}, ["a"], k=1)
    assert table.loc["m", "a"]["mean"] == pytest.approx(0.5) and table.attrs["interval"] == PASSK_INTERVAL


def test_rescued_lost_pairs_seeds_and_adds_both_yardsticks():
    from rlvr_lib.study.summaries import rescued_lost

    ref = [_record([0, 2, 1], [0, 0, 0], [4, 4, 4]), _record([1, 2, 0], [0, 0, 0], [4, 4, 4])]
    run = [_record([3, 0, 1], [0, 0, 0], [4, 4, 4]), _record([1, 0, 0], [0, 0, 0], [4, 4, 4])]
    null = [_record([0, 2, 1], [0, 0, 0], [4, 4, 4]), _record([0, 1, 0], [0, 0, 0], [4, 4, 4])]
    t = rescued_lost({"m": run}, ref, ["a"], null=null)
    # seed 0: ref solves {p1, p2}, run {p0, p2}: rescued p0, lost p1. Seed 1: ref {p0, p1}, run {p0}: lost p1.
    assert t.loc["m", "rescued"] == 0.5 and t.loc["m", "lost"] == 1.0 and t.loc["m", "net"] == -0.5
    assert t.loc["m", "solved_ref"] == 2.0 and t.loc["m", "solved"] == 1.5 and t.loc["m", "pairs"] == 2
    # ref seed 1 {p0, p1} against ref seed 0 {p1, p2}: one rescued, one lost.
    assert t.loc["reference vs itself (other seed)", ["rescued", "lost"]].tolist() == [1.0, 1.0]
    # null: {p1, p2} then {p1}: p2 lost.
    assert t.loc["sampling null", ["rescued", "lost"]].tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="two or more evaluations"):
        rescued_lost({"m": run}, ref, ["a"], null=null[:1])


def test_case_study_picks_the_largest_mean_gap_with_the_first_on_ties():
    from rlvr_lib.study.summaries import case_study

    ref = [_record([0, 0, 4], [0, 0, 0], [4, 4, 4]), _record([0, 0, 4], [0, 0, 0], [4, 4, 4])]
    # Gaps: p0 (3+1)/2 = 2, p1 (2+2)/2 = 2, p2 -2: p0 and p1 tie, p0 comes first.
    run = [_record([3, 2, 2], [1, 0, 0], [0, 4, 4]), _record([1, 2, 2], [3, 0, 0], [0, 4, 4])]
    out = case_study(ref, run, "a")
    assert out["uid"] == "p0" and out["gap"] == 2.0 and out["samples"] == 1
    assert out["reference"]["correct"] == [0, 0] and out["run"]["correct"] == [3, 1]
    assert out["run"]["strategy_counts"] == {"direct": 0.0, "split": 2.0, "round": 2.0, "none": 0.0}
    assert out["reference"]["strategy_counts"]["direct"] == 4.0
    with pytest.raises(ValueError, match="family='b' is invalid|families"):
        case_study(ref, run, "b")


def test_per_problem_modes_and_train_decline():
    from rlvr_lib.study.summaries import per_problem_modes, train_decline

    recs = [_record([1, 1, 1], [0, 0, 0], [4, 4, 4]) for _ in range(2)]
    recs[0].final["families"]["a"]["diversity"] = {"counts": [1, 2, 1]}
    recs[1].final["families"]["a"]["diversity"] = {"counts": [3, 1, 1]}
    assert per_problem_modes(recs, ["a"]).tolist() == [[1, 2, 1], [3, 1, 1]]
    recs[1].final["families"]["a"]["diversity"] = {"counts": [3, 1]}
    with pytest.raises(ValueError, match="clustered the same number of problems"):
        per_problem_modes(recs, ["a"])
    # Windows of 2: [0, .5], [1, 1], [.5, .25, .25] (the last partial window merges): peak 1, last 1/3.
    rise_fall = [{"accuracy": a} for a in (0.0, 0.5, 1.0, 1.0, 0.5, 0.25, 0.25)]
    rising = [{"accuracy": a} for a in (0.0, 0.5, None, 1.0)]  # None skipped: windows .25 and 1.0
    decline = train_decline([_record([1, 1, 1], [0, 0, 0], [4, 4, 4], history=h) for h in (rise_fall, rising)],
                            window=2)
    assert decline.tolist() == pytest.approx([1 - 1 / 3, 0.0])
    with pytest.raises(ValueError, match="at least 4 logged steps"):
        train_decline([_record([1, 1, 1], [0, 0, 0], [4, 4, 4], history=rising[:3])], window=2)


def test_extra_evaluation_reads_a_runs_extra_evaluation_as_a_record():
    from rlvr_lib.study.summaries import extra_evaluation, passk_ci

    main = _record([1, 1, 1], [0, 0, 0], [4, 4, 4], history=[{"accuracy": 0.25}, {"accuracy": 0.75}])
    wide = _record([4, 0, 2], [1, 0, 0], [2, 4, 0])  # 4 samples per problem
    run = SimpleNamespace(name="sage", run_id="sage-abc-s0", seed=0, history=main.history, final=main.final,
                          config={"eval": {"samples": 8}, "extra_evals": {"wide": {"samples": 4}}},
                          extra={"evals": {"wide": wide.final}})
    (ev,) = extra_evaluation([run], "wide")
    assert ev.final is wide.final and ev.config == {"eval": {"samples": 4}} and ev.run_id == "sage-abc-s0:wide"
    assert ev.history == main.history and ev.seed == 0 and ev.name == "sage"
    # pass@1 = (4 + 0 + 2) / 12; pass@4 = 2 of 3 problems solved; train accuracy = mean(0.25, 0.75).
    assert passk_ci([ev], ["a"], 1)["mean"] == pytest.approx(0.5)
    row = summary_row([ev], [1, 4])
    assert row["pass@4"]["mean"] == pytest.approx(2 / 3)
    assert row["train accuracy (last 10)"]["mean"] == pytest.approx(0.5)
    assert family_table({"sage": [ev]}, ["a"], k=1).loc["sage", "a"]["mean"] == pytest.approx(0.5)
    assert per_problem_shares([ev], ["a"], "direct").tolist() == [[0.5, 1.0, 0.0]]
    with pytest.raises(ValueError, match=r"label='narrow' is invalid: must be an extra evaluation of records\[0\] "
                                         r"\(sage-abc-s0\), among \['wide'\]"):
        extra_evaluation([run], "narrow")
    with pytest.raises(ValueError, match=r"among \[\]"):
        extra_evaluation([main], "wide")


def test_per_problem_alive_marks_groups_with_a_non_zero_advantage():
    from rlvr_lib.study.stats import paired_difference_ci
    from rlvr_lib.study.summaries import per_problem_alive

    a, b = _record([4, 0, 2], [0, 0, 0], [4, 4, 4]), _record([1, 0, 4], [0, 0, 0], [4, 4, 4])  # 4 samples each
    assert per_problem_alive([a, b], ["a"]).tolist() == [[0, 0, 1], [1, 0, 0]]  # all-correct and all-wrong are dead
    # b against a: p0 rescued (4/4 -> 1/4), p2 lost (2/4 -> 4/4): net 0 = mean(alive_b) - mean(alive_a)
    diff = paired_difference_ci(per_problem_alive([b], ["a"]), per_problem_alive([a], ["a"]), bounds=(0, 1))
    assert diff["mean"] == 0.0
    other = _record([1, 1, 1], [0, 0, 0], [4, 4, 4])
    other.final["families"]["a"]["uids"] = ["p0", "p1", "q"]
    with pytest.raises(ValueError, match="same problems"):
        per_problem_alive([a, other], ["a"])


def test_zero_advantage_rescued_lost_counts_dead_groups_per_seed_pair():
    from rlvr_lib.study.summaries import zero_advantage_rescued_lost

    rec = lambda c: _record(c, [0, 0, 0], [4, 4, 4])  # noqa: E731
    reference = [rec([4, 0, 2]), rec([0, 0, 1])]
    run = [rec([1, 0, 4]), rec([3, 1, 1])]
    null = [rec([0, 0, 0]), rec([2, 0, 0])]
    table = zero_advantage_rescued_lost({"x": run}, reference, ["a"], null=null)
    # pair 1: dead ref {p0, p1}, dead run {p1, p2}: rescued p0, lost p2; pair 2: dead ref {p0, p1}, run none:
    # rescued p0 and p1. Means: dead_ref 2, dead 1, rescued 1.5, lost 0.5, net 1.
    assert table.loc["x"].to_dict() == {"pairs": 2, "dead_ref": 2.0, "dead": 1.0, "rescued": 1.5, "lost": 0.5,
                                        "net": 1.0}
    # reference seed 1 against seed 0: both dead on p0 and p1, p2 alive in both
    assert table.loc["reference vs itself (other seed)", ["rescued", "lost", "dead"]].tolist() == [0.0, 0.0, 2.0]
    # sampling null: [0, 0, 0] -> [2, 0, 0] rescues p0
    assert table.loc["sampling null", ["dead_ref", "dead", "rescued", "lost"]].tolist() == [3.0, 2.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="two or more evaluations"):
        zero_advantage_rescued_lost({"x": run}, reference, ["a"], null=null[:1])


def test_train_outcome_rates_split_training_rollouts_into_correct_malformed_and_incorrect():
    from rlvr_lib.study.summaries import train_outcome_rates

    hist = [{"accuracy": 0.5, "malformed_rate": 0.25}, {"accuracy": None, "malformed_rate": 0.5},
            {"accuracy": 0.75, "malformed_rate": 0.0}, {"accuracy": 1.0, "malformed_rate": 0.0}]
    recs = [_record([1, 1, 1], [0, 0, 0], [4, 4, 4], history=hist)]
    rates = train_outcome_rates(recs)  # the step without accuracy is skipped
    assert rates["correct"].tolist() == [0.75]
    assert rates["malformed"].tolist() == pytest.approx([1 / 12])
    assert rates["incorrect"].tolist() == pytest.approx([(0.25 + 0.25 + 0.0) / 3])
    last2 = train_outcome_rates(recs, last=2)
    assert last2["correct"].tolist() == [0.875] and last2["malformed"].tolist() == [0.0]
    assert last2["incorrect"].tolist() == [0.125]
    with pytest.raises(ValueError, match="a trained run that logged 'accuracy' and 'malformed_rate'"):
        train_outcome_rates([_record([1, 1, 1], [0, 0, 0], [4, 4, 4])])
    with pytest.raises(ValueError, match="last=0 is invalid"):
        train_outcome_rates(recs, last=0)


def test_train_change_is_the_last_window_minus_the_first():
    from rlvr_lib.study.summaries import train_change

    hist = [{"response_length": v} for v in (10, 12, None, 14, 20, 30)]  # None skipped: 5 values
    run = SimpleNamespace(history=hist, run_id="r")
    np.testing.assert_allclose(train_change([run], "response_length", window=2), [(20 + 30) / 2 - (10 + 12) / 2])
    with pytest.raises(ValueError, match="at least 6 logged values"):
        train_change([run], "response_length", window=3)


def test_window_metrics_average_each_key_over_the_window():
    from rlvr_lib.study.summaries import window_metrics

    hist = [{"step": s, "a": float(s), "b": None if s == 6 else 10.0 * s} for s in range(10)]
    runs = [SimpleNamespace(history=hist, run_id="r0"), SimpleNamespace(history=hist[:7], run_id="r1")]
    np.testing.assert_allclose(window_metrics(runs, ["a", "b"], range(5, 8)), [[6.0, 60.0], [5.5, 50.0]])
    with pytest.raises(ValueError, match="r1"):
        window_metrics(runs, ["a"], range(8, 10))
