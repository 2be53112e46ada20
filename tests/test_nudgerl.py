"""NudgeRL (`rlvr_lib.methods.nudgerl`): hint plans and hint dropout, inter/intra credit worked by hand,
the hint-free distillation term against a hand-built loss, minibatch rows, diagnostics, training and resume."""

import copy
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from rlvr_lib.methods import METHODS, build_method, method_config, register_method
from rlvr_lib.methods.base import StepBatch
from rlvr_lib.methods.nudgerl import NudgeRL
from rlvr_lib.rollout import sequence_logprobs
from rlvr_lib.tasks import CORRECT, TASKS, WRONG, ArithmeticTask, Verdict, get_task, register_task
from rlvr_lib.trainer import Trainer, untimed

SMALL = dict(steps=2, prompts_per_step=4, group_size=8, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3)


@pytest.fixture
def registry():
    """Registers test methods/tasks for one test and removes them afterwards."""
    methods, tasks = dict(METHODS), dict(TASKS)
    yield
    METHODS.clear(), METHODS.update(methods)
    TASKS.clear(), TASKS.update(tasks)


def _trainer(policy, name="nudgerl", checkpoint_dir=None, **kw):
    model, tokenizer = policy
    return Trainer(method_config(name, **{**SMALL, **kw}), copy.deepcopy(model), tokenizer,
                   checkpoint_dir=checkpoint_dir)


def _method(**options):
    return build_method(method_config("nudgerl", method_options=options or None))


def _problems(n, family="train"):
    return get_task("arith").family_problems(family, n)


# ----------------------------------------------------------------------------- registration and options
def test_nudgerl_is_registered_with_the_papers_preset():
    spec = METHODS["nudgerl"]
    assert spec.cls is NudgeRL and spec.description and "arXiv 2605.15726" in spec.doc
    assert "arXiv 2605.15726" in NudgeRL.__doc__
    cfg = method_config("nudgerl")
    assert (cfg.kl_coef, cfg.eps_low, cfg.eps_high, cfg.temperature, cfg.top_p) == (0.0, 0.2, 0.2, 1.0, 0.95)
    assert (cfg.advantage, cfg.group_size, cfg.loss_agg) == ("hint", 8, "seq_mean_token_mean")
    method = build_method(cfg)
    opts = method.options
    assert (opts.hints_per_problem, opts.rollouts_per_hint, opts.hint_selection, opts.p_drop) == (2, None, "first", .5)
    assert (opts.lam, opts.adv_eps, opts.lambda_distill, opts.distill_rows) == (1.1, 1e-5, 0.1, "all")
    assert method.rollouts_per_hint(8) == 4 and method.advantage_options() == {"lam": 1.1, "eps": 1e-5}


@pytest.mark.parametrize("options, message", [
    ({"p_drop": 1.5}, r"NudgeRLOptions.p_drop=1.5 is invalid: must be a number in \[0, 1\]"),
    ({"p_drop": -0.1}, r"NudgeRLOptions.p_drop=-0.1 is invalid: must be a number in \[0, 1\]"),
    ({"hint_selection": "best"}, r"NudgeRLOptions.hint_selection='best' is invalid: must be one of "
                                 r"\['first', 'random'\]"),
    ({"hints_per_problem": 0}, r"NudgeRLOptions.hints_per_problem=0 is invalid: must be an integer >= 1"),
    ({"hints_per_problem": 3}, r"NudgeRLOptions.hints_per_problem=3 is invalid: must be a divisor of group_size=8"),
    ({"rollouts_per_hint": 3}, r"NudgeRLOptions.rollouts_per_hint=3 is invalid: must be group_size / "
                               r"hints_per_problem = 8 / 2"),
    ({"rollouts_per_hint": 0}, r"NudgeRLOptions.rollouts_per_hint=0 is invalid: must be an integer >= 1"),
    ({"dropout_unit": "token"}, r"NudgeRLOptions.dropout_unit='token' is invalid: must be one of "
                                r"\['hint', 'rollout'\]"),
    ({"lam": -1.0}, r"NudgeRLOptions.lam=-1.0 is invalid: must be a number in \[0, inf\)"),
    ({"adv_eps": -1e-5}, r"NudgeRLOptions.adv_eps=-1e-05 is invalid: must be a number in \[0, inf\)"),
    ({"lambda_distill": -0.1}, r"NudgeRLOptions.lambda_distill=-0.1 is invalid: must be a number in \[0, inf\)"),
    ({"distill_rows": "dropped"}, r"NudgeRLOptions.distill_rows='dropped' is invalid: must be one of "
                                  r"\['all', 'hinted'\]"),
    ({"p_dropout": 0.5}, r"unknown key\(s\) \['p_dropout'\]; valid keys: \['adv_eps', 'distill_rows'"),
])
def test_option_errors_name_the_option_the_value_and_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=r"^nudgerl: method_options: .*" + message):
        _method(**options)


def test_the_group_must_be_hints_times_rollouts_and_the_estimator_the_hint_one():
    assert _method(hints_per_problem=4, rollouts_per_hint=2).rollouts_per_hint(8) == 2
    assert build_method(method_config("nudgerl", group_size=4)).rollouts_per_hint(4) == 2  # R = G / H
    with pytest.raises(ValueError, match=r"rollouts_per_hint=4 is invalid: must be group_size / hints_per_problem "
                                         r"= 12 / 2"):
        build_method(method_config("nudgerl", group_size=12, method_options={"rollouts_per_hint": 4}))
    with pytest.raises(ValueError, match=r"rollouts_per_hint=4 is invalid: must be group_size / hints_per_problem "
                                         r"= 6 / 2"):  # hints checks the group size it is asked for
        _method(rollouts_per_hint=4).hints(_problems(2), 6, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"nudgerl: TrainerConfig.advantage='grpo' is invalid: must be 'hint'"):
        build_method(method_config("nudgerl", advantage="grpo"))


# ----------------------------------------------------------------------------- hints and hint dropout
def test_first_hints_with_no_dropout_lay_out_the_group_hint_by_hint():
    problems = _problems(5)
    plan = _method(p_drop=0.0).hints(problems, 8, np.random.default_rng(0))
    for problem, row in zip(problems, plan):
        pool = get_task("arith").hints(problem)
        assert len(pool) == 5
        assert row == [(0, pool[0])] * 4 + [(1, pool[1])] * 4
    assert all(row == [(-1, None)] * 8 for row in _method(p_drop=1.0).hints(problems, 8, np.random.default_rng(0)))


def test_random_selection_redraws_distinct_pool_hints_every_step():
    method, problems = _method(hint_selection="random", p_drop=0.0, rollouts_per_hint=2, hints_per_problem=4), \
        _problems(6)
    seen = set()
    for step in range(40):
        plan = method.hints(problems, 8, np.random.default_rng([0, step, 1]))
        for problem, row in zip(problems, plan):
            pool = get_task("arith").hints(problem)
            slots = [row[k * 2:(k + 1) * 2] for k in range(4)]
            assert all(s[0] == s[1] for s in slots)  # both rollouts of a slot share its hint
            idx = [s[0][0] for s in slots]
            assert len(set(idx)) == 4 and all(pool[i] == s[0][1] for i, s in zip(idx, slots))
            seen.update(idx)
    assert seen == {0, 1, 2, 3, 4}  # every pool index is drawn at some step, not only the first four


@pytest.mark.parametrize("unit", ["hint", "rollout"])
@pytest.mark.parametrize("p_drop", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_hint_dropout_frequency_matches_p_drop_over_many_steps(unit, p_drop):
    method, problems = _method(p_drop=p_drop, dropout_unit=unit), _problems(8)
    dropped = draws = 0
    for step in range(250):  # the trainer's stateless hint stream: default_rng([seed, step, 1])
        plan = method.hints(problems, 8, np.random.default_rng([0, step, 1]))
        for row in plan:
            slots = [row[:4], row[4:]]
            for slot in slots:
                is_dropped = [c is None for _, c in slot]
                if unit == "hint":
                    assert len(set(is_dropped)) == 1  # a hint's rollouts share its fate
                    dropped, draws = dropped + is_dropped[0], draws + 1
                else:
                    dropped, draws = dropped + sum(is_dropped), draws + len(slot)
    assert draws == 250 * 8 * (2 if unit == "hint" else 8)
    freq, sd = dropped / draws, math.sqrt(p_drop * (1 - p_drop) / draws)
    assert abs(freq - p_drop) <= 4.5 * sd, (freq, p_drop, sd)  # exact at p_drop in {0, 1}


def test_dropout_draws_are_coupled_across_p_drop_and_independent_of_the_selection():
    problems = _problems(8)

    def dropped(**options):
        plan = _method(**options).hints(problems, 8, np.random.default_rng([3, 7, 1]))
        return np.array([[row[0][1] is None, row[4][1] is None] for row in plan])

    low, high = dropped(p_drop=0.25), dropped(p_drop=0.5)
    assert (high | ~low).all() and high.sum() > low.sum()  # dropped at 0.25 => dropped at 0.5
    assert (dropped(p_drop=0.5, hint_selection="random") == high).all()


def test_fewer_hints_than_needed_give_no_hint_rollouts(registry):
    class FewHints(ArithmeticTask):
        name = "toy_few_hints"

        def hints(self, problem):  # one empty hint (skipped), one usable: 1 of the 2 slots can be filled
            return [" ", "round"] if int(problem.operands[0]) % 2 else []

    register_task("toy_few_hints", FewHints)
    method = build_method(method_config("nudgerl", task="toy_few_hints", method_options={"p_drop": 0.0}))
    problems = get_task("toy_few_hints").family_problems("train", 20)
    odd = [int(p.operands[0]) % 2 == 1 for p in problems]
    assert any(odd) and not all(odd)
    method.on_step_start(0)
    plan = method.hints(problems, 8, np.random.default_rng(0))
    for is_odd, row in zip(odd, plan):
        assert row == ([(1, "round")] * 4 if is_odd else [(-1, None)] * 4) + [(-1, None)] * 4
    batch = _batch([0] * 8, [1.0] * 8, [c for c, _ in plan[0]], problems[:1])
    method.before_update(batch, None)
    assert method._stats["nudge_missing_hint_share"] == (sum(odd) + 2 * (len(odd) - sum(odd))) / (2 * len(odd))
    assert method._stats["nudge_drop_rate"] == 0.0


# ----------------------------------------------------------------------------- inter/intra advantage
def _batch(group_index, rewards, hint_index, problems=None, correct=None):
    correct = correct if correct is not None else [r > 0.5 for r in rewards]
    return StepBatch(
        problems=problems or [f"p{g}" for g in range(max(group_index) + 1)],
        group_index=torch.tensor(group_index), hint_index=torch.tensor(hint_index),
        hints=[None if c < 0 else f"hint{c}" for c in hint_index], rollouts=None,
        verdicts=[Verdict(float(ok), CORRECT if ok else WRONG) for ok in correct],
        rewards=torch.tensor(rewards, dtype=torch.float32),
    )


def test_advantages_worked_by_hand_for_two_hints_and_dropped_rollouts():
    F = Fraction
    # Group 0 (rollout-level dropout, R = 4): hint 0 kept 3 rollouts, hint 1 kept 2, 3 were dropped.
    #   rewards 1 1 0 | 1 0 | 0 0 1; m = 4/8 = 1/2, m_0 = 2/3, m_1 = 1/2; lam = 11/10
    #   hint 0: r - 2/3 + 11/10 (2/3 - 1/2) = r - 29/60;  hint 1: r - 1/2 + 0;  none: r - 1/2
    raw0 = [F(31, 60), F(31, 60), F(-29, 60), F(1, 2), F(-1, 2), F(-1, 2), F(-1, 2), F(1, 2)]
    mean0, var0 = F(1, 160), F(1291, 5120)  # mean(raw0); mean((raw0 - mean0)^2)
    # Group 1 (hint-level dropout): pool hint 3 kept (random selection), hint 0 dropped.
    #   rewards 1 0 0 0 | 1 1 0 0; m = 3/8, m_3 = 1/4
    #   hint 3: r - 1/4 + 11/10 (1/4 - 3/8) = r - 31/80;  none: r - 3/8
    raw1 = [F(49, 80), F(-31, 80), F(-31, 80), F(-31, 80), F(5, 8), F(5, 8), F(-3, 8), F(-3, 8)]
    mean1, var1 = F(-1, 160), F(6041, 25600)
    for raw, mean, var in ((raw0, mean0, var0), (raw1, mean1, var1)):
        assert sum(raw) / 8 == mean and sum((a - mean) ** 2 for a in raw) / 8 == var
    # Group 2: all rewards equal -> 0.
    batch = _batch([0] * 8 + [1] * 8 + [2] * 8,
                   [1, 1, 0, 1, 0, 0, 0, 1] + [1, 0, 0, 0, 1, 1, 0, 0] + [1] * 8,
                   [0, 0, 0, 1, 1, -1, -1, -1] + [3, 3, 3, 3, -1, -1, -1, -1] + [0] * 4 + [-1] * 4)
    expected = [float((a - mean) / (math.sqrt(var) + 1e-5)) for raw, mean, var in ((raw0, mean0, var0),
                                                                                    (raw1, mean1, var1)) for a in raw]
    got = _method().advantages(batch)
    assert got[:8].tolist() == pytest.approx([1.0164548, 1.0164548, -0.9749668, 0.9832644, -1.0081572, -1.0081572,
                                              -1.0081572, 0.9832644], abs=1e-6)
    assert got[:16].tolist() == pytest.approx(expected, abs=1e-6)
    assert got[16:].tolist() == [0.0] * 8
    # lam is the method's option: lam = 1 is GRPO's centring with the population std.
    grpo = _method(lam=1.0).advantages(batch)[:8]
    r = torch.tensor([1, 1, 0, 1, 0, 0, 0, 1.0])
    assert grpo.tolist() == pytest.approx(((r - .5) / (r.std(unbiased=False) + 1e-5)).tolist(), abs=1e-6)


def _monotone_violations(lam, groups):
    """Pairs (i, j) in one group with r_i > r_j but A_i < A_j, over ``groups`` of (rewards, hints)."""
    method = _method(lam=lam)
    bad = 0
    for rewards, hints in groups:
        adv = method.advantages(_batch([0] * len(rewards), rewards, hints)).tolist()
        bad += sum(1 for i, j in itertools.permutations(range(len(rewards)), 2)
                   if rewards[i] > rewards[j] and adv[i] < adv[j] - 1e-6)
    return bad


def test_a_higher_reward_never_gets_a_lower_advantage_for_lam_in_0_2():
    layouts = [[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, -1, -1, -1, -1], [0, 0, 0, 1, 1, -1, -1, -1],
               [0, -1, -1, -1, -1, -1, -1, -1], [0, 0, 0, 1, -1, -1, -1, -1], [2, 2, 4, 4, 1, 1, 3, -1]]
    exhaustive = [(list(map(float, bits)), ctx) for ctx in layouts for bits in itertools.product((0, 1), repeat=8)]
    rng = np.random.default_rng(11)
    drawn = []
    for _ in range(300):  # random group sizes and sub-group layouts
        g = int(rng.integers(2, 17))
        drawn.append((rng.integers(0, 2, g).astype(float).tolist(), rng.integers(-1, 4, g).tolist()))
    for lam in [0.0, 0.5, 1.0, 1.1, 2.0, *rng.uniform(0, 2, 3).tolist()]:
        assert _monotone_violations(lam, exhaustive + drawn) == 0, lam
    assert _monotone_violations(4.0, exhaustive) > 0  # the check has teeth: lam = 4 breaks the order


# ----------------------------------------------------------------------------- distillation
def _distill_batch(tokenizer, advantages):
    """Four rows: two hinted (hint 0, hint 1), two hint-free; left-padded prompts, right-padded completions."""
    plain = ["12*34=?\n", "12*34=?\n", "7*8=?\n", "7*8=?\n"]
    rolled = ["12*34=? hint: split\n", "12*34=? hint: round\n", "7*8=?\n", "7*8=?\n"]
    completions = ["split:12*30+12*4=408#408", "round:12*34=408#408", "56#56", "direct:7*8=56#5"]

    def left(texts):
        rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        width = max(map(len, rows))
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
        return ids, torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])

    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in completions]
    width = max(map(len, rows))
    comp = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    comp_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    prompt_ids, prompt_mask = left(rolled)
    plain_ids, plain_mask = left(plain)

    class Ro:  # the fields of Rollouts the loss reads
        completion_ids, completion_mask = comp, comp_mask

        def __len__(self):
            return 4

    batch = StepBatch(problems=["a", "b"], group_index=torch.tensor([0, 0, 1, 1]),
                      hint_index=torch.tensor([0, 1, -1, -1]), hints=["split", "round", None, None],
                      rollouts=Ro(), verdicts=[None] * 4, plain_prompt_ids=plain_ids, plain_prompt_mask=plain_mask,
                      advantages=torch.tensor(advantages))
    return batch, (prompt_ids, prompt_mask), plain, completions, rows


@pytest.mark.parametrize("distill_rows", ["all", "hinted"])
def test_distillation_gradient_equals_a_hand_built_sequence_mean_logprob_loss(fresh_tiny_model, tiny_tokenizer,
                                                                              distill_rows):
    model, tok, temperature, coef = fresh_tiny_model, tiny_tokenizer, 0.7, 0.3
    method = build_method(method_config("nudgerl", temperature=temperature,
                                        method_options={"lambda_distill": coef, "distill_rows": distill_rows}))
    advantages = [1.5, -0.5, 0.75, -1.25]
    batch, (prompt_ids, prompt_mask), plain, completions, comp_rows = _distill_batch(tok, advantages)
    mask = batch.rollouts.completion_mask.float()
    params = [p for p in model.parameters() if p.requires_grad]

    # The method, as the trainer calls it: logp of the rolled-out (hinted) prompts, with gradient.
    logp, entropy = sequence_logprobs(model, prompt_ids, prompt_mask, batch.rollouts.completion_ids,
                                      batch.rollouts.completion_mask, temperature=temperature, with_entropy=True)
    term, stats = method.extra_loss(batch, model, logp, entropy, mask)
    got = torch.autograd.grad(term, params, allow_unused=True)

    # By hand: one unpadded forward per row of x0 + y, log_softmax(logits / T) at the completion positions.
    seq = []
    for text, y in zip(plain, comp_rows):
        x0 = tok(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([x0 + y])
        logits = model(input_ids=ids).logits[0, len(x0) - 1:-1] / temperature
        seq.append(torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(y)[:, None]).mean())
    weights = torch.tensor(advantages) * (torch.tensor([1.0, 1, 0, 0]) if distill_rows == "hinted" else 1)
    hand = -coef * (weights * torch.stack(seq)).sum() / 4
    want = torch.autograd.grad(hand, params, allow_unused=True)

    hand = float(hand.detach())
    assert float(term.detach()) == pytest.approx(hand, abs=1e-6)
    assert float(stats["distill_loss"]) == pytest.approx(hand / coef, abs=1e-6)
    assert float(stats["distill_term"]) == pytest.approx(hand, abs=1e-6)
    n_checked = 0
    for g, w in zip(got, want):
        g = torch.zeros_like(w) if g is None else g
        assert torch.allclose(g, w, atol=1e-6, rtol=1e-4)
        n_checked += int(w.abs().sum() > 0)
    assert n_checked > len(params) // 2
    # Scoring the hinted rows under the hinted prompt instead would be another loss.
    wrong = -coef * (weights * ((logp.detach() * mask).sum(1) / mask.sum(1))).sum() / 4
    assert abs(float(wrong) - hand) > 1e-4


def test_no_distillation_forward_when_lambda_distill_is_zero(fresh_tiny_model, tiny_tokenizer):
    method = build_method(method_config("nudgerl", method_options={"lambda_distill": 0.0}))
    batch, *_ = _distill_batch(tiny_tokenizer, [1.0, -1.0, 1.0, -1.0])

    class Exploding(torch.nn.Module):
        def forward(self, *a, **k):
            raise AssertionError("no forward expected")

    term, stats = method.extra_loss(batch, Exploding(), torch.zeros(4, 3), None, torch.ones(4, 3))
    assert term == 0.0 and stats == {"distill_term": 0.0}


def test_the_distillation_forward_skips_hinted_rows_with_zero_advantage(fresh_tiny_model, tiny_tokenizer,
                                                                         monkeypatch):
    import rlvr_lib.methods.nudgerl as nudgerl_module

    method = build_method(method_config("nudgerl", method_options={"lambda_distill": 0.2}))
    seen = []

    def recording(model, prompt_ids, *args, **kwargs):
        seen.append(len(prompt_ids))
        return sequence_logprobs(model, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(nudgerl_module, "sequence_logprobs", recording)
    terms = {}
    for name, advantages in (("zero", [0.0, -0.5, 0.75, -1.25]), ("both", [1e-3, -0.5, 0.75, -1.25])):
        batch, (prompt_ids, prompt_mask), *_ = _distill_batch(tiny_tokenizer, advantages)
        logp, _ = sequence_logprobs(fresh_tiny_model, prompt_ids, prompt_mask, batch.rollouts.completion_ids,
                                    batch.rollouts.completion_mask)
        terms[name] = float(method.extra_loss(batch, fresh_tiny_model, logp, None,
                                              batch.rollouts.completion_mask.float())[0])
    assert seen == [1, 2]  # hinted rows 0 and 1: row 0 skipped while its advantage is exactly 0
    assert terms["zero"] != pytest.approx(terms["both"], abs=1e-7)  # the skipped row does count when nonzero


def _distill_value(model, batch, rows, prompts="plain"):
    """-mean_i A_i * mean_t log pi(y_it | x_i) over ``rows`` of ``batch`` (x the hint-free prompt, or the
    rolled-out one), without gradient."""
    ro = batch.rollouts
    ids, mask = (batch.plain_prompt_ids, batch.plain_prompt_mask) if prompts == "plain" else \
        (ro.prompt_ids, ro.prompt_mask)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, ids[rows], mask[rows], ro.completion_ids[rows], ro.completion_mask[rows])
    m = ro.completion_mask[rows].float()
    return float(-(batch.advantages[rows] * (lp * m).sum(1) / m.sum(1)).mean())


class RowRecordingNudge(NudgeRL):
    """NudgeRL that records, per minibatch, its distillation value and values recomputed from the whole
    batch at the same weights: on the rows the minibatch claims to hold (tagged in ``before_update``), on
    every row, and on its rows under the rolled-out (hinted) prompts."""

    def before_update(self, batch, model):
        super().before_update(batch, model)
        self.whole, self.records = batch, getattr(self, "records", [])
        batch.extras["row"] = torch.arange(len(batch))

    def extra_loss(self, batch, model, logp, entropy, mask):
        term, stats = super().extra_loss(batch, model, logp, entropy, mask)
        rows, whole = batch.extras["row"], self.whole
        self.records.append(dict(
            rows=rows.tolist(), got=float(stats["distill_loss"]), rows_value=_distill_value(model, whole, rows),
            all_value=_distill_value(model, whole, torch.arange(len(whole))),
            hinted_value=_distill_value(model, whole, rows, prompts="rolled"),
            hinted_weight=float(batch.advantages[batch.hint_index >= 0].abs().sum())))
        return term, stats


def test_with_minibatches_the_distillation_uses_the_rows_of_its_minibatch(policy, registry):
    register_method("nudgerl_rows", RowRecordingNudge, "test", **METHODS["nudgerl"].preset)
    RowRecordingNudge.name = "nudgerl_rows"
    trainer = _trainer(policy, "nudgerl_rows", steps=1, minibatches=4, method_options={"p_drop": 0.25})
    trainer.train(progress=False)
    records = trainer.method.records
    assert len(records) == 4
    assert sorted(sum((r["rows"] for r in records), [])) == list(range(32))
    assert any(r["rows"] != sorted(r["rows"]) for r in records)  # shuffled rows
    for r in records:  # both at the weights of that minibatch
        assert r["got"] == pytest.approx(r["rows_value"], abs=1e-5), r
    # The check has power: the whole batch's value, or the minibatch's under the hinted prompts, is another number.
    assert any(abs(r["got"] - r["all_value"]) > 1e-4 for r in records)
    assert any(r["hinted_weight"] > 0 and abs(r["got"] - r["hinted_value"]) > 1e-4 for r in records)


# ----------------------------------------------------------------------------- diagnostics
def test_diagnostics_count_hinted_and_hint_free_rollouts_by_hand():
    method = _method()
    method.on_step_start(0)
    method._slots.update(hint_slots=6, droppable=6, dropped=2, missing=0)
    # group 0: hinted solves (1 of 4), hint-free none -> solved only with a hint
    # group 1: hint-free solves, hinted none -> solved only without
    # group 2: all hinted (no hint-free rollouts): not a mixed group
    # group 3: both kinds solve: counted in neither
    batch = _batch([0] * 8 + [1] * 8 + [2] * 8 + [3] * 8,
                   [1, 0, 0, 0, 0, 0, 0, 0] + [0, 0, 0, 0, 1, 1, 0, 0] + [1, 1, 1, 1, 0, 0, 0, 0]
                   + [1, 0, 0, 0, 1, 0, 0, 0],
                   [0] * 4 + [-1] * 4 + [1] * 4 + [-1] * 4 + [0] * 4 + [1] * 4 + [0] * 4 + [-1] * 4)
    method.before_update(batch, None)
    metrics = {"loss": -0.3, "distill_term": 0.1}
    method.on_step_end(0, metrics)
    assert metrics == pytest.approx({
        "loss": -0.3, "distill_term": 0.1, "distill_share": 0.1 / (0.4 + 0.1),
        "nudge_share_hinted": 20 / 32, "nudge_share_none": 12 / 32,
        "nudge_acc_hinted": 6 / 20, "nudge_acc_none": 3 / 12,
        "nudge_mixed_groups": 3, "nudge_solved_only_hinted": 1, "nudge_solved_only_none": 1,
        "nudge_drop_rate": 2 / 6, "nudge_missing_hint_share": 0.0})
    method.on_step_start(1)  # per-step: nothing carries over
    metrics = {}
    method.on_step_end(1, metrics)
    assert metrics == {}


# ----------------------------------------------------------------------------- training
def test_nudgerl_trains_every_parameter_without_nan(policy):
    trainer = _trainer(policy, minibatches=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    assert len(history) == SMALL["steps"]
    for row in history:
        for key, value in row.items():
            assert not (isinstance(value, float) and math.isnan(value)), key
        for key in ("distill_loss", "distill_term", "distill_share", "nudge_share_hinted", "nudge_share_none",
                    "nudge_mixed_groups", "nudge_solved_only_hinted", "nudge_drop_rate"):
            assert key in row, key
        assert row["nudge_share_hinted"] + row["nudge_share_none"] == pytest.approx(1.0)
    assert any(0 < row["nudge_share_hinted"] < 1 for row in history)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged
    assert all(p.isfinite().all() for p in trainer.model.parameters())


def test_a_task_without_hints_trains_as_plain_sampling(policy, registry):
    class NoHints(ArithmeticTask):
        name = "toy_no_hints"

        def hints(self, problem):
            return []

    register_task("toy_no_hints", NoHints)
    trainer = _trainer(policy, task="toy_no_hints", steps=1)
    row = trainer.train(progress=False)[0]
    assert row["nudge_share_none"] == 1.0 and row["nudge_missing_hint_share"] == 1.0
    assert "nudge_acc_hinted" not in row and "nudge_drop_rate" not in row and math.isfinite(row["distill_loss"])


def test_runs_are_bit_identical_across_runs_and_resume(policy, tmp_path):
    kw = dict(steps=3, checkpoint_every=1, method_options={"hint_selection": "random"})
    torch.manual_seed(5)
    global_state = torch.get_rng_state()
    a = _trainer(policy, **kw).train(progress=False)
    b = _trainer(policy, **kw).train(progress=False)
    assert untimed(a) == untimed(b)
    assert torch.equal(torch.get_rng_state(), global_state)  # the global RNG was never drawn from
    first = _trainer(policy, checkpoint_dir=tmp_path, **kw)
    first.step()
    resumed = _trainer(policy, checkpoint_dir=tmp_path, **kw)
    assert resumed.step_count == 1
    assert untimed(resumed.train(progress=False)) == untimed(a)
    assert any("nudge_acc_hinted" in row for row in a)


def test_nudgerl_and_its_grpo_comparator_take_two_optimizer_steps_per_generation(policy):
    # The authors' TRL run: generation batch 8, train batch 4 -> two optimizer steps per generation batch.
    from rlvr_lib.methods.nudgerl import NUDGERL_SETTINGS

    assert method_config("nudgerl").minibatches == 2
    for name, extra in (("nudgerl", {}), ("grpo", NUDGERL_SETTINGS)):
        trainer = _trainer(policy, name, **{**extra, "steps": 1, "prompts_per_step": 2, "seed": 3})
        assert trainer.config.minibatches == 2, name
        counts = {"generate": 0, "step": 0}
        generate = trainer.engine.generate

        def counted_generate(*args, **kwargs):
            counts["generate"] += 1
            return generate(*args, **kwargs)

        trainer.engine.generate = counted_generate
        trainer.optimizer.register_step_post_hook(lambda *_: counts.__setitem__("step", counts["step"] + 1))
        row = trainer.step()
        assert counts == {"generate": 1, "step": 2}, (name, counts)
        assert "optimizer_steps" not in row  # the trainer took inner_epochs * minibatches = 2 steps
