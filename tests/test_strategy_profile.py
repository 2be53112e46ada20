"""The strategy profile: which strategy solves which problem for the shipped policy (testbed v7).

It defines the RL pool (problems the rare strategy never solved) and ``rare_mix`` (problems only the rare
strategy solved), so the shipped file must belong to the shipped policy and the pools must follow it exactly.
"""

import json

import pytest
import torch

from rlvr_lib.study.__main__ import main
from rlvr_lib.study.calibration import measure_strategy_profile, profile_operands
from rlvr_lib.policy.load import TINY_POLICY_DIR, policy_fingerprint
from rlvr_lib.rollout.base import Rollouts
from rlvr_lib.tasks.arithmetic import DIFFICULTIES, STRATEGIES, family_capacity, family_problems, problem_pool, split_of
from rlvr_lib.tasks.arithmetic import solution_trace
from rlvr_lib.tasks.strategy_profile import (PROFILE_FILE, PROFILE_SAMPLES, PROFILE_SEED, RARE_MIX_MIN_SUCCESSES,
                                             load_profile, only_rare_solves, problem_key, rare_never_solves,
                                             successes)


class ScriptedEngine:
    """Answers each prompt with the completions scripted for its (question, hint), cycling; others get 'direct: #0'."""

    def __init__(self, script):
        self.script = script

    def generate(self, prompts, params):
        texts = []
        for prompt in prompts:
            question, _, hint = prompt.strip().partition(" hint: ")
            answers = self.script.get((question, hint), ["direct: #0"])
            texts += [answers[j % len(answers)] for j in range(params.n)]
        n = len(texts)
        index = torch.arange(len(prompts)).repeat_interleave(params.n)
        ones = torch.ones(n, 1, dtype=torch.long)
        return Rollouts(prompt_index=index, prompt_ids=ones, prompt_mask=ones, completion_ids=ones,
                        completion_mask=ones, logprobs=torch.zeros(n, 1), texts=texts, finish_reasons=["stop"] * n)


def test_a_sample_counts_when_it_follows_the_hint_and_is_correct():
    split, round_ = solution_trace(47, 86, "split"), solution_trace(47, 86, "round")
    script = {
        # 2 of 4 correct with split; the correct round answer under the split hint does not count for either.
        ("47*86=?", "split"): [split, round_, split, "split: 40*86+7*86=3440+602=4043 #4043"],
        ("47*86=?", "round"): [round_, "round: garbage", "round: garbage", "round: garbage"],
        ("47*86=?", "direct"): ["direct: #4042", "direct: #4042", "direct: #1", split],
        ("13*98=?", "round"): [solution_trace(13, 98, "round")],
    }
    profile = measure_strategy_profile(ScriptedEngine(script), [(47, 86), (13, 98)], samples=4, seed=0,
                                       max_new_tokens=8)
    assert profile["strategies"] == list(STRATEGIES) == ["direct", "split", "round"]
    assert profile["counts"] == {"47*86": [2, 2, 1], "13*98": [0, 0, 4]}
    assert (profile["samples"], profile["seed"], profile["max_new_tokens"]) == (4, 0, 8)
    with pytest.raises(ValueError, match="operands is empty"):
        measure_strategy_profile(ScriptedEngine({}), [], samples=4, seed=0, max_new_tokens=8)


def test_the_shipped_profile_belongs_to_the_shipped_policy_and_covers_every_pool_problem():
    profile = load_profile()
    # Retraining the policy without measuring its profile again fails here: the pools would be another policy's.
    assert profile["policy_sha"] == policy_fingerprint(None)
    assert (profile["samples"], profile["seed"]) == (PROFILE_SAMPLES, PROFILE_SEED)
    assert profile["strategies"] == list(STRATEGIES)
    assert set(profile["counts"]) == {problem_key(*ab) for ab in profile_operands()}
    assert all(len(c) == 3 and all(0 <= n <= PROFILE_SAMPLES for n in c) for c in profile["counts"].values())
    # The profile covers the RL and evaluation splits, in distribution, before any profile-based selection.
    assert all(split_of(*ab) in ("train", "eval") and 11 <= ab[0] <= 89 for ab in profile_operands())


def test_the_rl_pool_is_exactly_the_rl_split_problems_the_rare_strategy_never_solved():
    for d in DIFFICULTIES:
        whole = problem_pool("train", d, profiled=False)
        pool = problem_pool("train", d)
        assert pool == [ab for ab in whole if successes(*ab)["round"] == 0], d
    # Every item of the RL family is one; the rare strategy's reward there can only come from a success the
    # base policy never showed in PROFILE_SAMPLES hinted tries.
    problems = family_problems("train", family_capacity("train"))
    assert all(rare_never_solves(*p.operands) for p in problems)
    assert family_capacity("train") >= 250


def test_rare_mix_is_every_unmarked_evaluation_problem_only_the_rare_strategy_solves():
    expected = sorted(ab for d in DIFFICULTIES for ab in problem_pool("eval", d, (11, 88))
                      if ab[0] % 10 != 9 and only_rare_solves(*ab))
    assert family_capacity("rare_mix") == len(expected) >= 200
    problems = family_problems("rare_mix", len(expected))
    assert sorted(p.operands for p in problems) == expected
    for p in problems:
        counts = successes(*p.operands)
        assert counts["round"] >= RARE_MIX_MIN_SUCCESSES and counts["split"] == counts["direct"] == 0
        assert p.strategy == "round" and p.oracle_trace.startswith("round: ")
    # Unmarked: the first factors' last digits are those of the RL pool's prompts.
    rl_units = {a % 10 for d in DIFFICULTIES for a, _ in problem_pool("train", d)}
    assert {p.operands[0] % 10 for p in problems} <= rl_units


def test_pool_rules_at_their_boundaries(monkeypatch):
    from rlvr_lib.tasks import strategy_profile

    # Hand-made entries in the profile's column order; the rules read columns by strategy name.
    profile = {"strategies": ["direct", "split", "round"],
               "counts": {"12*34": [0, 0, 0], "12*35": [0, 0, RARE_MIX_MIN_SUCCESSES], "12*36": [1, 0, 5],
                          "12*37": [0, 0, RARE_MIX_MIN_SUCCESSES - 1], "12*38": [0, 3, 0]}}
    monkeypatch.setattr(strategy_profile, "load_profile", lambda path=None: profile)
    never = {key: rare_never_solves(*map(int, key.split("*"))) for key in profile["counts"]}
    only = {key: only_rare_solves(*map(int, key.split("*"))) for key in profile["counts"]}
    assert never == {"12*34": True, "12*35": False, "12*36": False, "12*37": False, "12*38": True}
    assert only == {"12*34": False, "12*35": True, "12*36": False, "12*37": False, "12*38": False}
    assert only_rare_solves(12, 38, rare="split") and not rare_never_solves(12, 38, rare="split")
    with pytest.raises(KeyError, match="91\\*12 is not in the strategy profile"):
        successes(91, 12)  # out of distribution: never in the RL pool, never profiled


def test_a_missing_profile_names_the_command_that_writes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="calibrate --profile"):
        load_profile(str(tmp_path / "none.json"))
    assert PROFILE_FILE == TINY_POLICY_DIR / "strategy_profile.json"  # beside the checkpoint it was measured on


def test_profile_cli_refuses_what_would_overwrite_or_mix(tmp_path, capsys):
    model = tmp_path / "other"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    # Another model's profile never goes to the shipped policy's path.
    for argv, flag in ((["--profile", "--model", str(model)], "--out"),
                       (["--profile", "--dynamics", "--out", str(tmp_path / "p.json")], "--profile")):
        with pytest.raises(SystemExit) as exit_:
            main(["calibrate", *argv])
        assert exit_.value.code == 2 and f"error: {flag}:" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_the_pool_sizes_quoted_in_prose_follow_the_shipped_profile():
    """The testbed page (docs/testbed-guide.md) and docstrings quote the pools' sizes; a new policy or profile must
    update them (this fails first)."""
    from pathlib import Path

    from rlvr_lib.study import testbed
    from rlvr_lib.tasks import strategy_profile

    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "testbed-guide.md").read_text().split())
    rl, whole = (sum(len(problem_pool("train", d, profiled=p)) for d in DIFFICULTIES) for p in (True, False))
    eval_unmarked = [ab for d in DIFFICULTIES for ab in problem_pool("eval", d, (11, 88)) if ab[0] % 10 != 9]

    def rare_mix_size(least: int) -> int:
        return sum(successes(*ab)["round"] >= least and successes(*ab)["split"] == successes(*ab)["direct"] == 0
                   for ab in eval_unmarked)

    at_rule, at_four = rare_mix_size(RARE_MIX_MIN_SUCCESSES), rare_mix_size(4)
    mix = [sum(p.difficulty == d for p in family_problems("train", rl)) for d in DIFFICULTIES]
    shares = " / ".join(f"{round(100 * n / rl)}% {d}" for d, n in zip(DIFFICULTIES, mix))
    assert f"({rl} of the RL split's {whole})" in readme
    assert f"holds the {at_rule} evaluation problems" in readme and f"4 left {at_four})" in readme
    assert f"({shares}, {rl} prompts)" in readme
    source = " ".join(Path(strategy_profile.__file__).read_text().split())  # RARE_MIX_MIN_SUCCESSES' docstring
    assert f"4 leaves {at_four} and 2 leaves {rare_mix_size(2)}" in source
    assert f"(all {rl} of v7's pool)" in " ".join(testbed.__doc__.split())
