"""The testbed: generators, splits, verifier, hint pools."""

import random
import re

import pytest

from rlvr_lib.tasks import (
    CORRECT,
    MALFORMED,
    WRONG,
    TaskHintPool,
)
from rlvr_lib.tasks.arithmetic import (
    DIFFICULTIES,
    DISTRACTOR_HINTS,
    EVAL_FAMILIES,
    FAMILIES,
    OOD_FAMILIES,
    STRATEGIES,
    TRAIN_FAMILY,
    USEFUL_STRATEGIES,
    difficulty_of,
    family_problems,
    make_problem,
    parse_strategy,
    problem_pool,
    solution_trace,
    split_of,
    uses_held_out_fact,
    verify,
)


def test_families_are_deterministic_by_seed():
    assert family_problems("hard_mix", 50, seed=3) == family_problems("hard_mix", 50, seed=3)
    assert family_problems("hard_mix", 50, seed=3) != family_problems("hard_mix", 50, seed=4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_has_its_difficulty_mix_and_no_duplicates(family):
    from rlvr_lib.tasks.arithmetic import family_capacity, family_mix

    n = min(200, family_capacity(family))
    problems = family_problems(family, n)
    assert len({p.uid for p in problems}) == n
    counts = {d: sum(p.difficulty == d for p in problems) for d in DIFFICULTIES}
    mix = family_mix(family)
    assert abs(sum(mix) - 1) < 1e-9
    for d, share in zip(DIFFICULTIES, mix):
        # A fixed mix is met to one problem; a pool's own mix (uniform draws) to sampling noise.
        assert abs(counts[d] - n * share) <= (1 if FAMILIES[family].mix else 4 * (n * share * (1 - share)) ** 0.5 + 1)


def test_pretraining_rl_and_eval_pools_never_overlap():
    from rlvr_lib.tasks.arithmetic import SFT_SHARE

    sizes = dict.fromkeys(("sft", "train", "eval"), 0)
    for d in DIFFICULTIES:
        sft, train, ev = (set(problem_pool(s, d)) for s in ("sft", "train", "eval"))
        assert not sft & train and not sft & ev and not train & ev
        for name, pool in (("sft", sft), ("train", train), ("eval", ev)):
            sizes[name] += len(pool)
    # Half of all problems are evaluation problems. Of the other half, SFT_SHARE is the pretraining pool less
    # the problems with an unseen product and the round-only items it does not show, and the rest the RL pool less
    # the problems the base policy's rare strategy solved (`rlvr_lib.tasks.strategy_profile`).
    from rlvr_lib.tasks.arithmetic import round_only
    from rlvr_lib.tasks.arithmetic import round_only_shown, shows_unseen_fact
    from rlvr_lib.tasks.strategy_profile import rare_never_solves

    rest = [(a, b) for a in range(11, 90) if a % 10 for b in range(2, 100) if b != 9 and split_of(a, b) != "eval"]
    assert sizes["sft"] == sum(split_of(*ab) == "sft" and not shows_unseen_fact(*ab)
                               and (round_only_shown(*ab) or not round_only(*ab)) for ab in rest)
    assert sizes["train"] == sum(split_of(*ab) == "train" and rare_never_solves(*ab) for ab in rest)
    assert abs(sizes["eval"] / (72 * 97) - 0.5) < 0.02  # first factors 11-89 but no multiple of 10, b 2-99 but 9
    assert abs(sum(split_of(*ab) == "sft" for ab in rest) / len(rest) - SFT_SHARE) < 0.02
    from rlvr_lib.tasks.arithmetic import family_capacity

    train = {p.uid for p in family_problems(TRAIN_FAMILY, family_capacity(TRAIN_FAMILY))}
    for family in EVAL_FAMILIES + OOD_FAMILIES:
        assert not train & {p.uid for p in family_problems(family, 200)}


def test_ood_first_factors_never_appear_in_training_pool():
    assert all(a <= 89 for d in DIFFICULTIES for a, _ in problem_pool("train", d))
    assert all(p.operands[0] >= 91 for p in family_problems("ood_shift", 200))


def test_difficulty_definition():
    assert difficulty_of(47, 6) == "easy"
    assert difficulty_of(47, 86) == "medium"
    assert difficulty_of(48, 86) == "hard"
    assert difficulty_of(49, 6) == "hard"  # the first factor's last digit decides, whatever b's length
    assert difficulty_of(38, 2) == "hard"


def test_commuted_problems_share_a_split():
    for a in range(11, 100):
        for b in range(11, 100):
            assert split_of(a, b) == split_of(b, a)


def test_oracle_traces_by_hand():
    assert solution_trace(47, 86, "direct") == "direct: #4042"
    assert solution_trace(47, 86, "split") == "split: 40*86+7*86=3440+602=4042 #4042"
    assert solution_trace(47, 86, "round") == "round: 50*86-3*86=4300-258=4042 #4042"
    assert solution_trace(13, 7, "round") == "round: 20*7-7*7=140-49=91 #91"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_oracle_trace_of_every_strategy_verifies(family):
    from rlvr_lib.tasks.arithmetic import family_capacity

    from rlvr_lib.tasks import subtraction

    for p in family_problems(family, min(200, family_capacity(family))):
        a, b = p.operands
        trace = subtraction.solution_trace if subtraction.is_subtraction(p) else solution_trace
        for s in STRATEGIES:
            verdict = verify(p, trace(a, b, s))
            assert (verdict.reward, verdict.status, verdict.strategy) == (1.0, CORRECT, s), (p, s, verdict)


def _corruptions(trace: str, rng: random.Random):
    """Every single-digit change in the steps or answer of a trace."""
    head, body = trace.split(": ", 1)
    for i, ch in enumerate(body):
        if ch.isdigit():
            for new in "0123456789":
                if new != ch and not (new == "0" and (i == 0 or not body[i - 1].isdigit())):
                    yield f"{head}: {body[:i]}{new}{body[i + 1:]}"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_corrupted_step_or_answer_is_rejected(strategy):
    rng = random.Random(0)
    for p in family_problems("medium_mix", 20):
        for bad in _corruptions(solution_trace(*p.operands, strategy), rng):
            verdict = verify(p, bad)
            assert verdict.reward == 0.0 and verdict.status == WRONG, (bad, verdict)


def test_answer_must_match_gold_and_chain():
    p = make_problem(47, 86)
    assert verify(p, "direct: #4043").status == WRONG
    # Chain correct but the stated answer differs from the chain's end.
    assert verify(p, "split: 40*86+7*86=3440+602=4042 #4043").status == WRONG
    # Right answer through another strategy's decomposition under this tag.
    assert verify(p, "split: 50*86-3*86=4300-258=4042 #4042").status == WRONG
    # A skipped step that keeps the value is still a correct chain.
    assert verify(p, "split: 40*86+7*86=4042 #4042").status == CORRECT


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "   ",
        "garbage",
        "éèàü 日本語 🙂",
        "direct 4042",
        "direct: 4042",  # direct takes no steps before '#'
        "split: #4042",  # split needs steps
        "round: 50*86-3*86=4300-258=4042",  # missing answer
        "direct: #4042 and more",
        "direct: #" + "9" * 5000,
        "split: " + "1+" * 3000 + "1 #1",
        "split: 40*86+7*86==4042 #4042",
        "split: 40**86 #4042",
        None,
        12,
        b"direct: #4042",
    ],
)
def test_malformed_output_gets_zero_and_never_raises(completion):
    verdict = verify(make_problem(47, 86), completion)
    assert verdict.reward == 0.0
    assert verdict.status == MALFORMED


def test_random_strings_never_raise():
    rng = random.Random(0)
    alphabet = "0123456789*+-=#: directsplitround\n\x00é"
    p = make_problem(47, 86)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        verdict = verify(p, text)
        assert verdict.status in (CORRECT, WRONG, MALFORMED)


def test_parse_strategy():
    assert parse_strategy("round: 1") == "round"
    assert parse_strategy("nonsense") is None
    assert parse_strategy(None) is None


def test_bad_names_raise_with_valid_options():
    with pytest.raises(ValueError, match="family='aime24'.*easy_mix"):
        family_problems("aime24")
    with pytest.raises(ValueError, match="difficulty='extreme'.*easy.*medium.*hard"):
        problem_pool("train", "extreme")
    with pytest.raises(ValueError, match="strategy='guess'.*direct"):
        solution_trace(47, 86, "guess")
    with pytest.raises(ValueError, match="a=40"):
        make_problem(40, 7)
    with pytest.raises(ValueError, match="n=10000 asks for"):
        family_problems("easy_mix", 10000)


def test_prompt_with_hint_shares_the_question_prefix():
    p = make_problem(47, 86)
    assert p.prompt == "47*86=?\n"
    assert p.prompt_with("round") == "47*86=? hint: round\n"
    assert p.prompt_with("two\nlines") == "47*86=? hint: two lines\n"


def test_task_hint_pool_mixes_useful_and_unhelpful_hints():
    problems = family_problems("hard_mix", 200)
    all_useful = TaskHintPool(n_hints=2, unhelpful_share=0.0)
    for p in problems:
        assert all_useful.hints(p) == list(USEFUL_STRATEGIES[p.difficulty][:2])
    none_useful = TaskHintPool(n_hints=3, unhelpful_share=1.0)
    for p in problems:
        hints = none_useful.hints(p)
        assert len(set(hints)) == 3 and not set(hints) & set(USEFUL_STRATEGIES[p.difficulty])
    half = TaskHintPool(n_hints=5, unhelpful_share=0.5, seed=1)
    pools = [half.hints(p) for p in problems]
    assert pools == [half.hints(p) for p in problems]  # fixed by seed
    first = [pool[0] for pool in pools]
    share_unhelpful = sum(h in DISTRACTOR_HINTS or h == "direct" for h in first) / len(first)
    assert 0.35 < share_unhelpful < 0.65


def test_task_hint_pool_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"^unhelpful_share=1.5 is invalid: must be a number in \[0, 1\]$"):
        TaskHintPool(unhelpful_share=1.5)
    with pytest.raises(ValueError, match="n_hints=0"):
        TaskHintPool(n_hints=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_capacity_is_the_largest_drawable_size(family):
    from rlvr_lib.tasks.arithmetic import family_capacity

    n = family_capacity(family)
    assert len(family_problems(family, n)) == n
    with pytest.raises(ValueError, match="asks for"):
        family_problems(family, n + 1)


# --------------------------------------------------------------------------- round-only items


def test_held_out_fact_is_any_product_by_nine():
    from rlvr_lib.tasks.arithmetic import HELD_OUT_DIGIT, uses_held_out_fact

    assert HELD_OUT_DIGIT == 9
    assert uses_held_out_fact(79, 86, "split")  # 70*86+9*86
    assert uses_held_out_fact(71, 86, "round")  # 80*86-9*86
    assert uses_held_out_fact(84, 86, "round")  # 90*86-6*86: 9*86 read off 90*86
    assert uses_held_out_fact(94, 86, "split")  # 90*86+4*86
    assert not uses_held_out_fact(79, 86, "round")  # 80*86-1*86: the correction is a copy of b
    assert not uses_held_out_fact(79, 86, "direct")
    assert uses_held_out_fact(79, 6, "split")  # 70*6+9*6: the one-digit row is held out too
    assert uses_held_out_fact(81, 6, "round")  # 90*6-9*6
    assert not uses_held_out_fact(79, 6, "round")  # 80*6-1*6
    assert uses_held_out_fact(86, 9, "direct") and uses_held_out_fact(86, 9, "split")  # the problem 86*9 itself
    assert not uses_held_out_fact(78, 34, "split")  # 7*34 and 8*34 are seen products (`unseen_fact`)
    # Exhaustive: the predicate is exactly "the problem is a*9 or the trace has a step 9*b or 90*b or a step
    # d*b / d0*b with an unseen product d*b", read off the trace text.
    from rlvr_lib.tasks.arithmetic import unseen_fact

    for a in (a for a in range(11, 100) if a % 10):
        for b in range(2, 100):
            for s in STRATEGIES:
                trace = solution_trace(a, b, s)
                nine = re.search(rf"(?<!\d)90?\*{b}(?!\d)", trace) is not None
                unseen = any(unseen_fact(int(d), b) for d in re.findall(rf"(?<![\d*])(\d)0?\*{b}(?!\d)", trace))
                assert uses_held_out_fact(a, b, s) == (b == 9 or nine or unseen), (a, b, s)


def test_evaluation_families_draw_what_they_drew_before_and_training_families_the_rl_pool():
    # First problems as drawn since testbed v4 (hard = first factor ends in 8-9, whatever b's length): a changed
    # draw means every cached evaluation of these families is of other problems.
    assert [p.uid for p in family_problems("hard_mix", 3)] == ["mul:82*34", "mul:28*54", "mul:25*4"]
    assert [p.uid for p in family_problems("easy_mix", 3)] == ["mul:56*4", "mul:15*12", "mul:61*7"]
    # Training families draw from the RL pool: a fifth of the non-evaluation problems, those the rare strategy
    # never solved (testbed v7).
    assert [p.uid for p in family_problems("train_easy", 3)] == ["mul:71*4", "mul:51*4", "mul:75*8"]


def test_unseen_products_are_a_fixed_scattered_share_and_never_pretrained_on():
    from rlvr_lib.tasks.arithmetic import UNSEEN_FACT_SHARE, shows_unseen_fact, trace_products, unseen_fact

    products = [(d, b) for d in range(2, 9) for b in range(10, 100)]
    share = sum(unseen_fact(d, b) for d, b in products) / len(products)
    assert abs(share - UNSEEN_FACT_SHARE) < 0.05  # 630 products: a hash, not a rule
    assert not unseen_fact(1, 57) and not unseen_fact(9, 57) and not unseen_fact(4, 7)  # copies, the 9 row, 1-digit b
    # Scattered: every first-factor digit has some unseen and some seen products.
    assert all(0 < sum(unseen_fact(d, b) for b in range(10, 100)) < 90 for d in range(2, 9))
    assert trace_products(47, 86, "split") == [(4, 86), (7, 86)]
    assert trace_products(47, 86, "round") == [(5, 86), (3, 86)]
    assert trace_products(47, 86, "direct") == []
    for d in DIFFICULTIES:
        assert not [ab for ab in problem_pool("sft", d) if shows_unseen_fact(*ab)]
    # The evaluation families hold problems only a non-dominant strategy solves for the base policy, unmarked.
    from rlvr_lib.tasks.strategy_profile import only_rare_solves

    evaluated = [p.operands for family in EVAL_FAMILIES for p in family_problems(family, 200)]
    assert sum(only_rare_solves(*ab) and ab[0] % 10 != 9 for ab in evaluated) > 0.03 * len(evaluated)


def test_round_only_items_the_rare_strategy_solves_are_in_no_rl_pool():
    from rlvr_lib.tasks.arithmetic import round_only
    from rlvr_lib.tasks.strategy_profile import successes

    for d in DIFFICULTIES:
        assert not [ab for ab in problem_pool("train", d) if round_only(*ab) and successes(*ab)["round"]], d
    # Pretraining shows a fixed hashed share of them (never with split: `PretrainingMixture`); evaluation keeps them all.
    from rlvr_lib.tasks.arithmetic import ROUND_ONLY_SHOWN_SHARE, round_only_shown

    sft = {ab for d in DIFFICULTIES for ab in problem_pool("sft", d)}
    assert [ab for ab in sft if round_only(*ab)] and all(round_only_shown(*ab) for ab in sft if round_only(*ab))
    hidden = {(a, b) for a in range(19, 80, 10) for b in range(2, 100)
              if b != 9 and split_of(a, b) == "sft" and not round_only_shown(a, b)}
    assert hidden and not hidden & sft
    all_round_only = [(a, b) for a in range(19, 80, 10) for b in range(2, 100)]
    share = sum(round_only_shown(*ab) for ab in all_round_only) / len(all_round_only)
    assert abs(share - ROUND_ONLY_SHOWN_SHARE) < 0.06  # 686 items: a hash, not a rule
    assert not round_only_shown(47, 86) and not round_only_shown(58, 86)  # only round-only items can be shown
    assert any(round_only(*ab) for ab in problem_pool("eval", "hard"))


def test_a_pool_is_computed_once_and_each_caller_gets_its_own_list():
    """Pools are cached per process (every run's draw reads them); a caller that edits its list changes no other's."""
    from rlvr_lib.tasks import arithmetic, subtraction

    for pool in (lambda: arithmetic.problem_pool("eval", "medium"), lambda: subtraction.problem_pool("eval", "hard")):
        first = pool()
        kept = list(first)
        first.clear()
        again = pool()
        assert again == kept and len(kept) > 0 and again is not pool()
    # the cache key is the units' values, however they are passed
    assert arithmetic.problem_pool("train", "easy", first_units=[1, 2]) == arithmetic.problem_pool(
        "train", "easy", first_units=(1, 2)) != []
    assert arithmetic._problem_pool.cache_info().currsize >= 1 and subtraction._pools.cache_info().hits >= 1
