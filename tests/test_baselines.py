"""The registered GRPO-family baselines: smoke training, dynamic sampling, the Polaris latch,
option validation, and hand-worked checks of the small new math (`rlvr_lib.methods.baselines`)."""

import copy
import io
import logging
import math
from types import SimpleNamespace

import pytest
import torch

from rlvr_lib.methods import METHODS, build_method, method_config
from rlvr_lib.methods.base import Method, StepBatch
from rlvr_lib.methods.baselines import completion_logits, oracle_prefix
from rlvr_lib.rollout import sequence_logprobs
from rlvr_lib.tasks import CORRECT, WRONG, Verdict
from rlvr_lib.tasks.arithmetic import make_problem
from rlvr_lib.trainer import Trainer, untimed

SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3)
BASELINES = ("grpo_no_kl", "grpo_forward_kl", "grpo_k1", "grpo_k2", "dapo", "dr_grpo", "bnpo_loss", "bnpo_beta",
             "entropy_reg", "polaris", "polaris_fixed", "kl_cov", "clip_cov", "pope", "intuitor")


def _trainer(policy, name, **kw):
    model, tokenizer = policy
    return Trainer(method_config(name, **{**SMALL, **kw}), copy.deepcopy(model), tokenizer)


def test_every_baseline_is_registered_with_a_description():
    assert set(BASELINES) <= set(METHODS)
    for name in BASELINES:
        spec = METHODS[name]
        assert spec.description and "arXiv" in spec.doc, name


def test_pope_and_intuitor_run_at_their_comparisons_settings():
    """Issue 56, item 4: POPE at NudgeRL's configuration, INTUITOR at VIGOR's; each differs from the method it is
    compared with only by the method (its hooks and advantage estimator), the lr included."""
    from rlvr_lib.methods.nudgerl import NUDGERL_SETTINGS
    from rlvr_lib.methods.vigor import VIGOR_SETTINGS
    from rlvr_lib.study.comparisons import config_differences

    assert METHODS["pope"].preset == {**NUDGERL_SETTINGS, "lr": METHODS["nudgerl"].preset["lr"]}
    assert METHODS["intuitor"].preset == {**VIGOR_SETTINGS, "lr": METHODS["vigor"].preset["lr"]}
    pope = method_config("pope")
    assert (pope.top_p, pope.minibatches, pope.lr_schedule, pope.lr_warmup_ratio) == (0.95, 2, "cosine", 0.05)
    intuitor = method_config("intuitor")
    assert (intuitor.kl_coef, intuitor.kl_estimator, intuitor.lr_schedule, intuitor.lr_warmup_ratio) == (
        0.01, "k3", "cosine", 0.1)
    assert set(config_differences(method_config("nudgerl"), pope)) == {"method", "advantage"}
    assert set(config_differences(method_config("vigor"), intuitor)) == {"method", "advantage"}


def test_every_method_states_its_paper_and_a_hook_object_knows_its_registered_name():
    from rlvr_lib.methods import build_method, method_config
    from rlvr_lib.methods.registry import shipped_methods

    # the shipped methods: composites other tests compose (docs naming their parts) and users' methods need no paper
    for name in shipped_methods():
        assert "arXiv" in METHODS[name].doc, name
    # grpo_no_kl and dr_grpo are presets of GRPO's hook class: one class, its own doc and name each
    assert METHODS["grpo_no_kl"].cls is METHODS["dr_grpo"].cls is METHODS["grpo"].cls
    assert len({METHODS[n].doc for n in ("grpo", "grpo_no_kl", "dr_grpo")}) == 3
    assert [build_method(method_config(n, steps=1)).name for n in ("grpo", "grpo_no_kl", "dr_grpo")] == [
        "grpo", "grpo_no_kl", "dr_grpo"]


def test_every_preset_builds_a_config_and_a_bad_preset_is_named(registered):
    from rlvr_lib.methods import method_config
    from rlvr_lib.trainer_config import TrainerConfig

    for name in METHODS:  # every key of every registered preset is a TrainerConfig field
        assert set(METHODS[name].preset) <= set(TrainerConfig.__dataclass_fields__), name
        assert method_config(name).method == name
    registered("bad_preset", type("BadPreset", (Method,), {}), kl_coeff=0.1)
    with pytest.raises(ValueError, match=r"method 'bad_preset': preset key\(s\) \['kl_coeff'\] are not TrainerConfig"):
        method_config("bad_preset")
    with pytest.raises(ValueError, match=r"method='nope' is not registered: must be one of \["):
        method_config("nope")
    with pytest.raises(ValueError, match=r"method='nope' is not registered"):
        TrainerConfig(method="nope")  # the config itself checks the name against the registry


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_trains_every_parameter_without_nan(policy, name):
    trainer = _trainer(policy, name)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    assert len(history) == SMALL["steps"]
    for row in history:
        for key, value in row.items():
            assert not (isinstance(value, float) and math.isnan(value)), (name, key)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, (name, unchanged)
    extra = {"dapo": "dynamic_refill_rounds", "entropy_reg": "entropy_bonus", "polaris": "polaris_latched",
             "kl_cov": "kl_cov_frac", "clip_cov": "clip_cov_frac"}
    if name in extra:
        assert extra[name] in history[-1]
    if METHODS[name].preset.get("kl_coef", 0) > 0:
        assert "kl" in history[-1]


@pytest.mark.parametrize("group_size", [8, 16, 32, 64])
def test_grpo_builds_with_any_group_size(policy, group_size):
    cfg = method_config("grpo", group_size=group_size)
    assert cfg.group_size == group_size and cfg.kl_coef == METHODS["grpo"].preset["kl_coef"]
    assert type(build_method(cfg)).__name__ == "Method"
    assert Trainer(cfg, *policy).config.group_size == group_size


# ----------------------------------------------------------------------------- dynamic sampling
def _scripted_verify(correct_if):
    """A verifier stub: the k-th call is correct iff ``correct_if(problem, k)``."""
    calls = iter(range(10**9))

    def verify(problem, text):
        return Verdict(1.0, CORRECT) if correct_if(problem, next(calls)) else Verdict(0.0, WRONG)

    return verify


def _script_verifier(trainer, monkeypatch, correct_if):
    monkeypatch.setattr(trainer.task, "verify", _scripted_verify(correct_if))
    return trainer


def _capture_update(trainer):
    seen = []
    update = trainer._update

    def spy(batch, *args):
        seen.append(batch)
        return update(batch, *args)

    trainer._update = spy
    return seen


def _spread_per_group(batch):
    correct = torch.tensor([v.status == CORRECT for v in batch.verdicts], dtype=torch.float32)
    return [bool(correct[batch.group_index == g].std() > 0) for g in range(len(batch.problems))]


def test_dapo_refills_dropped_groups_from_fresh_prompts(policy, monkeypatch, caplog):
    # Groups of even first factors alternate correct/wrong (kept); odd ones are all wrong (dropped).
    trainer = _script_verifier(_trainer(policy, "dapo", steps=1), monkeypatch,
                               lambda p, k: p.operands[0] % 2 == 0 and k % 2 == 0)
    seen = _capture_update(trainer)
    with caplog.at_level(logging.WARNING, logger="rlvr_lib.trainer"):
        m = trainer.step()
    assert not caplog.records
    batch = seen[0]
    assert m["dynamic_kept_groups"] == 4 and m["dynamic_refill_rounds"] >= 1 and m["dynamic_dropped_groups"] >= 1
    assert len(batch.problems) == 4 and len(batch.rollouts) == 16
    assert batch.group_index.tolist() == [g for g in range(4) for _ in range(4)]
    assert all(_spread_per_group(batch)) and all(p.operands[0] % 2 == 0 for p in batch.problems)
    assert len({p.uid for p in batch.problems}) == 4
    # Main metrics describe everything sampled (the dropped all-wrong groups too); kept_* the trained groups.
    assert m["kept_zero_adv_frac"] == 0.0 and m["kept_accuracy"] == 0.5
    n_sampled = 4 * (1 + m["dynamic_refill_rounds"])  # groups; the spread (even) ones have 2 of 4 correct
    assert m["accuracy"] == (n_sampled - m["dynamic_dropped_groups"]) * 2 / (4 * n_sampled) < 0.5
    assert m["zero_adv_frac"] > 0  # dropped groups are all wrong (overlong shaping may still spread a few)


def test_dapo_stops_at_the_refill_cap_with_a_clear_log_line(policy, monkeypatch, caplog):
    trainer = _script_verifier(_trainer(policy, "dapo", steps=1), monkeypatch, lambda p, k: False)  # all wrong
    seen = _capture_update(trainer)
    with caplog.at_level(logging.WARNING, logger="rlvr_lib.trainer"):
        m = trainer.step()
    assert (m["dynamic_refill_rounds"], m["dynamic_dropped_groups"], m["dynamic_kept_groups"]) == (3, 16, 0)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "dynamic sampling kept 0 of 4 groups" in record.message and "cap of 3 refill rounds" in record.message
    assert "round 0's groups unfiltered" in record.message
    round0 = [trainer.train_problems[i] for i in trainer._rng(0, 0).choice(32, 4, replace=False)]
    assert seen[0].problems == round0 and m["accuracy"] == 0.0  # round 0's groups (only length shaping differs)


def test_dapo_trains_on_the_kept_groups_when_refills_are_capped(policy, monkeypatch, caplog):
    trainer = _script_verifier(_trainer(policy, "dapo", steps=1, method_options={"max_refill_rounds": 0}),
                               monkeypatch, lambda p, k: p.operands[0] % 2 == 0 and k % 2 == 0)
    problems = [trainer.train_problems[i] for i in trainer._rng(0, 0).choice(32, 4, replace=False)]
    n_even = sum(p.operands[0] % 2 == 0 for p in problems)
    assert 0 < n_even < 4  # this seed's round 0 has both kinds
    seen = _capture_update(trainer)
    with caplog.at_level(logging.WARNING, logger="rlvr_lib.trainer"):
        m = trainer.step()
    assert m["dynamic_kept_groups"] == n_even and m["dynamic_refill_rounds"] == 0
    assert f"training on those {n_even} groups" in caplog.records[0].message
    assert len(seen[0].problems) == n_even and all(_spread_per_group(seen[0]))


def test_dapo_without_dynamic_sampling_logs_no_refilluntimed(policy):
    m = _trainer(policy, "dapo", steps=1, method_options={"dynamic_sampling": False}).step()
    assert not any(k.startswith("dynamic_") for k in m)


def test_dapo_resume_equals_uninterrupted(policy, tmp_path):
    uninterrupted = _trainer(policy, "dapo", seed=1, checkpoint_every=1).train(progress=False)
    first = Trainer(method_config("dapo", **{**SMALL, "seed": 1, "checkpoint_every": 1}),
                    copy.deepcopy(policy[0]), policy[1], checkpoint_dir=tmp_path)
    first.step()
    resumed = Trainer(first.config, copy.deepcopy(policy[0]), policy[1], checkpoint_dir=tmp_path)
    assert resumed.step_count == 1
    assert untimed(resumed.train(progress=False)) == untimed(uninterrupted)


def test_dapo_rewards_and_keep_mask_hand_worked():
    method = build_method(method_config("dapo", max_new_tokens=48))  # cache 8: ramp over tokens 41..48
    mask = torch.zeros(3, 48, dtype=torch.long)
    for row, length in enumerate([10, 41, 48]):
        mask[row, :length] = 1
    verdicts = [Verdict(1.0, CORRECT), Verdict(1.0, CORRECT), Verdict(0.0, WRONG)]
    batch = StepBatch([None], torch.zeros(3, dtype=torch.long), torch.full((3,), -1), [None] * 3,
                      SimpleNamespace(completion_mask=mask), verdicts)
    torch.testing.assert_close(method.rewards(batch, None), torch.tensor([1.0, 1.0 - 1 / 8, -1.0]))

    verdicts = [Verdict(float(c), CORRECT if c else WRONG) for c in [1, 0, 0, 0, 1, 1]]
    batch = StepBatch([None] * 3, torch.tensor([0, 0, 1, 1, 2, 2]), torch.full((6,), -1), [None] * 6, None, verdicts)
    assert method.keep_groups(batch).tolist() == [True, False, False]


# ----------------------------------------------------------------------------- Polaris
def test_polaris_latch_fires_once_and_survives_a_checkpoint(caplog):
    method = build_method(method_config("polaris"))
    assert method.sampling_temperature(0) == 1.0
    with caplog.at_level(logging.INFO, logger="rlvr_lib.methods.baselines"):
        for step, entropy in enumerate([0.8, 0.6, 0.41]):  # 0.41 > 0.5 * 0.8: not yet
            metrics = {"entropy": entropy}
            method.on_step_end(step, metrics)
            assert metrics["polaris_latched"] == 0.0 and method.sampling_temperature(step + 1) == 1.0
        method.on_step_end(3, metrics := {"entropy": 0.39})  # fires; step 3 still sampled at 1.0
        assert metrics["polaris_latched"] == 0.0 and method.sampling_temperature(4) == 1.2
        for step, entropy in [(4, 0.9), (5, 0.1), (6, 0.01)]:  # latched for good, never fires again
            method.on_step_end(step, metrics := {"entropy": entropy})
            assert metrics["polaris_latched"] == 1.0 and method.sampling_temperature(step + 1) == 1.2
    fired = [r for r in caplog.records if "polaris" in r.message]
    assert len(fired) == 1 and "step 3" in fired[0].message and "1 -> 1.2" in fired[0].message

    buffer = io.BytesIO()
    torch.save(method.state_dict(), buffer)
    buffer.seek(0)
    restored = build_method(method_config("polaris"))
    restored.load_state_dict(torch.load(buffer, weights_only=False))
    assert restored.latched_at == 3 and restored.initial_entropy == 0.8 and restored.sampling_temperature(7) == 1.2
    with caplog.at_level(logging.INFO, logger="rlvr_lib.methods.baselines"):
        restored.on_step_end(7, {"entropy": 0.0})
    assert len([r for r in caplog.records if "polaris" in r.message]) == 1


def test_polaris_state_travels_in_trainer_checkpoints(policy, tmp_path):
    trainer = _trainer(policy, "polaris", steps=1)
    trainer.method.load_state_dict({"initial_entropy": 0.5, "latched_at": 0})
    trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    resumed = Trainer(trainer.config, copy.deepcopy(policy[0]), policy[1], checkpoint_dir=tmp_path)
    assert resumed.method.state_dict() == {"initial_entropy": 0.5, "latched_at": 0}
    assert resumed.method.sampling_temperature(1) == 1.2


def test_polaris_fixed_and_options():
    assert build_method(method_config("polaris_fixed")).sampling_temperature(0) == 1.2
    assert build_method(method_config("polaris", method_options={"mode": "fixed", "t_high": 1.5})).sampling_temperature(0) == 1.5
    fixed = build_method(method_config("polaris_fixed", method_options={"t_high": 1.3}))  # mode stays "fixed"
    fixed.on_step_end(0, metrics := {"entropy": 1.0})
    assert fixed.sampling_temperature(0) == 1.3 and metrics["polaris_latched"] == 1.0


# ----------------------------------------------------------------------------- Clip-Cov, KL-Cov
def test_clip_cov_generator_is_seeded_from_seed_and_step(policy):
    method = build_method(method_config("clip_cov", seed=3))
    draws = {}
    for step in (5, 6, 5):
        method.on_step_start(step)
        draws.setdefault(step, []).append(torch.randperm(50, generator=method.clip_generator).tolist())
    assert draws[5][0] == draws[5][1] != draws[6][0]
    a = _trainer(policy, "clip_cov", seed=2).train(progress=False)
    b = _trainer(policy, "clip_cov", seed=2).train(progress=False)
    assert untimed(a) == untimed(b)


# ----------------------------------------------------------------------------- POPE
def test_oracle_prefix_hand_worked():
    trace = "split: 40*86+7*86=3440+602=4042 #4042"  # 37 characters
    assert len(trace) == 37 and oracle_prefix(trace, 0.15, 512) == "split:"  # ceil(5.55) = 6
    assert oracle_prefix("x" * 40, 0.15, 512) == "x" * 6  # 0.15 * 40 = 6.000000000000001 in floats: still 6
    assert oracle_prefix("x" * 31, 0.15, 512) == "x" * 5  # ceil(4.65)
    assert oracle_prefix(trace, 0.15, 3) == "spl"  # the cap
    assert oracle_prefix(trace, 1e-6, 512) == "s"  # at least one token
    assert oracle_prefix(trace, 1.0, 512) == trace and oracle_prefix("", 0.15, 512) == ""


def test_pope_prefixes_a_share_of_the_prompts():
    import numpy as np

    problems = [make_problem(47, b, strategy="split") for b in (86, 87, 88, 89)]  # 37-character traces
    method = build_method(method_config("pope"))
    plan = method.hints(problems, 3, np.random.default_rng(0))
    prefixed = [i for i, group in enumerate(plan) if group[0][0] == 0]
    assert len(prefixed) == 2
    for i, group in enumerate(plan):
        assert len(group) == 3 and len(set(group)) == 1  # the whole group sees the same prompt
        if i in prefixed:
            assert group[0] == (0, "split:") and problems[i].prompt_with(group[0][1]) == f"47*{86 + i}=? hint: split:\n"
        else:
            assert group[0] == (-1, None)
    assert sum(g[0][0] == 0 for g in method.hints(problems[:3], 2, np.random.default_rng(0))) == 2  # 1.5 -> 2
    none = build_method(method_config("pope", method_options={"share": 0.0})).hints(problems, 2, np.random.default_rng(0))
    assert all(g[0] == (-1, None) for g in none)
    labelled = build_method(method_config("pope", method_options={"label": "partial solution:"}))
    assert labelled.hint(problems[0]) == "partial solution: split:"


# ----------------------------------------------------------------------------- INTUITOR
class _TableLM(torch.nn.Module):
    """Next-token logits depend only on the current input token: ``logits = table[input_id]``."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(table))

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        logits = self.table[input_ids]
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class _Rows(SimpleNamespace):
    """Just the rollout fields INTUITOR reads."""

    def __len__(self):
        return self.prompt_ids.shape[0]


def test_intuitor_reward_is_self_certainty_hand_worked():
    # Vocabulary of 2. After token 0 the logits are (0, 0): uniform, KL(U || p) = 0. After token 1 they are
    # (0, ln 3): p = (1/4, 3/4), KL = 1/2 ln(1/2 / 1/4) + 1/2 ln(1/2 / 3/4) = 1/2 ln(4/3).
    model = _TableLM([[0.0, 0.0], [0.0, math.log(3.0)]])
    rollouts = _Rows(
        prompt_ids=torch.tensor([[0], [0]]), prompt_mask=torch.ones(2, 1, dtype=torch.long),
        completion_ids=torch.tensor([[1, 0], [0, 1]]), completion_mask=torch.tensor([[1, 1], [1, 0]]),
    )
    batch = StepBatch([None], torch.zeros(2, dtype=torch.long), torch.full((2,), -1), [None] * 2, rollouts,
                      [Verdict(0.0, WRONG)] * 2)
    method = build_method(method_config("intuitor", method_options={"forward_batch_size": 1}))
    # Row 0 is predicted after tokens 0 then 1: (0 + 1/2 ln 4/3) / 2. Row 1 (one real token) after token 0: 0.
    # The verdicts (both wrong) do not enter the reward.
    torch.testing.assert_close(method.rewards(batch, model), torch.tensor([0.25 * math.log(4 / 3), 0.0]))


def test_completion_logits_match_sequence_logprobs(policy):
    from rlvr_lib.rollout import HFEngine, SamplingParams

    model, tokenizer = policy
    ro = HFEngine(model, tokenizer).generate(["47*86=?\n", "12*3=? hint: split\n"], SamplingParams(n=2, max_new_tokens=20))
    with torch.no_grad():
        logits = completion_logits(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        logp, _ = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    mine = torch.log_softmax(logits, -1).gather(-1, ro.completion_ids.unsqueeze(-1)).squeeze(-1) * ro.completion_mask
    torch.testing.assert_close(mine, logp)


# ----------------------------------------------------------------------------- option validation
@pytest.mark.parametrize(
    "name,options,match",
    [
        ("dapo", {"bogus": 1}, r"dapo: method_options: DAPOOptions: unknown key\(s\) \['bogus'\]; valid keys: "
                               r"\['dynamic_sampling', 'max_refill_rounds', 'overlong_cache'\]"),
        ("dapo", {"max_refill_rounds": -1}, r"dapo: method_options: DAPOOptions.max_refill_rounds=-1 is invalid: "
                                            r"must be an integer >= 0"),
        ("dapo", {"overlong_cache": 41}, r"DAPOOptions.overlong_cache=41 is invalid: must be an integer in "
                                         r"\[0, max_new_tokens=40\]"),
        ("dapo", {"dynamic_sampling": "yes"}, r"DAPOOptions.dynamic_sampling: expected bool, got str 'yes'"),
        ("dr_grpo", {"alpha": 1}, r"dr_grpo: method_options: NoOptions: unknown key\(s\) \['alpha'\]; valid keys: \[\]"),
        ("entropy_reg", {"alpha": -1.0}, r"entropy_reg: method_options: EntropyRegOptions.alpha=-1.0 is invalid: "
                                         r"must be a number in \[0, inf\)"),
        ("polaris", {"mode": "sometimes"}, r"PolarisOptions.mode='sometimes' is invalid: must be one of \['latch', 'fixed'\]"),
        ("polaris", {"entropy_fraction": 1.0}, r"PolarisOptions.entropy_fraction=1.0 is invalid: must be a number in \(0, 1\)"),
        ("polaris", {"t_high": 0}, r"PolarisOptions.t_high=0.0 is invalid"),
        ("kl_cov", {"k_frac": 2.0}, r"kl_cov: method_options: KLCovOptions.k_frac=2.0 is invalid: must be a number in \(0, 1\]"),
        ("kl_cov", {"kl_coef": 1.0}, r"valid keys: \['k_frac', 'kl_cov_coef'\]"),
        ("clip_cov", {"lb": 5.0, "ub": 1.0}, r"clip_cov: method_options: ClipCovOptions.ub=1.0 is invalid: "
                                             r"must be a number in \(5, inf\)"),
        ("pope", {"share": 1.5}, r"pope: method_options: POPEOptions.share=1.5 is invalid: must be a number in \[0, 1\]"),
        ("pope", {"max_prefix_tokens": 0}, r"POPEOptions.max_prefix_tokens=0 is invalid: must be an integer >= 1"),
        ("pope", {"label": 3}, r"POPEOptions.label: expected str, got int 3"),
        ("intuitor", {"forward_batch_size": 0}, r"IntuitorOptions.forward_batch_size=0 is invalid: must be an integer >= 1"),
    ],
)
def test_option_validation_names_option_value_and_allowed(name, options, match):
    with pytest.raises(ValueError, match=match):  # when the config is built, or the method when it reads the config
        build_method(method_config(name, max_new_tokens=40, method_options=options))


@pytest.mark.parametrize("name,options", [("dapo", {"bogus": 1}), ("pope", {"share": 1.5}), ("sage", {"tau": -1.0}),
                                          ("b3po", {"samples": 0}), ("nudgerl", {"lam": -1.0})])
def test_a_bad_option_fails_when_the_config_is_built(name, options):
    from rlvr_lib.trainer_config import TrainerConfig

    config = method_config(name)
    with pytest.raises(ValueError, match=rf"^{name}: method_options: "):
        TrainerConfig.from_dict({**config.to_dict(), "method_options": options})


def test_options_have_defaults_and_are_checked_by_the_trainer(policy):
    for name in BASELINES:
        method = build_method(method_config(name))
        assert method.options == type(method).Options()  # every option at its default
    with pytest.raises(ValueError, match=r"pope: method_options: POPEOptions: unknown key\(s\) \['prefix'\]"):
        Trainer(method_config("pope", method_options={"ratio": 0.15, "prefix": 3}), *policy)


# ------------------------------------------------------------------------------ KL-Cov / Clip-Cov old log-probs
def _recording(monkeypatch, fn_name):
    """Patches ``rlvr_lib.methods.baselines.<fn_name>`` to record each call's (logp, old_logp), then call it."""
    import rlvr_lib.methods.baselines as baselines

    calls, fn = [], getattr(baselines, fn_name)

    def recorded(logp, old_logp, advantages, mask, **kw):
        calls.append((logp, old_logp, advantages, mask, kw))
        return fn(logp, old_logp, advantages, mask, **kw)

    monkeypatch.setattr(baselines, fn_name, recorded)
    return calls


def test_kl_cov_penalty_is_zero_with_zero_gradient_on_the_on_policy_pass(policy, monkeypatch):
    # Issue 29: old log-probs from the training forward (as verl's actor), not the sampler's.
    from rlvr_lib.algos import kl_cov_loss

    calls = _recording(monkeypatch, "kl_cov_loss")
    trainer = _trainer(policy, "kl_cov", steps=1, method_options={"k_frac": 0.5})  # half the tokens penalised
    row = trainer.step()
    (logp, old, adv, mask, kw), = calls  # one on-policy pass: one loss call
    assert torch.equal(old, logp.detach())
    assert row["abs_log_ratio"] == 0.0 and row["kl_cov_frac"] > 0.4
    # The penalty's value and gradient, isolated: the loss with the penalty minus the loss without it.
    leaf = logp.detach().clone().requires_grad_()
    with_penalty, _ = kl_cov_loss(leaf, old, adv, mask, **kw)
    without, _ = kl_cov_loss(leaf, old, adv, mask, **{**kw, "kl_coef": 0.0})
    assert torch.equal(with_penalty, without)
    (grad_with,) = torch.autograd.grad(with_penalty.sum(), leaf)
    (grad_without,) = torch.autograd.grad(without.sum(), leaf)
    assert torch.equal(grad_with, grad_without)


def test_kl_cov_later_minibatches_use_the_pre_update_policy(policy, monkeypatch):
    calls = _recording(monkeypatch, "kl_cov_loss")
    trainer = _trainer(policy, "kl_cov", steps=1, minibatches=2, seed=1)
    pre_update = copy.deepcopy(trainer.model)
    batches = []
    policy_loss = trainer.method.policy_loss
    trainer.method.policy_loss = lambda batch, *args: (batches.append(batch), policy_loss(batch, *args))[1]
    trainer.step()
    (logp0, old0, *_), (logp1, old1, _, mask1, _) = calls
    assert torch.equal(old0, logp0.detach())  # first minibatch: on-policy, the forward itself
    # Second minibatch, after one optimizer step: the pre-update policy's log-probs (a no-grad forward of the
    # whole batch before the update: equal to float rounding), not the moved policy's.
    ro = batches[1].rollouts
    with torch.no_grad():
        expected, _ = sequence_logprobs(pre_update, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                        ro.completion_mask)
    m = mask1.bool()
    assert (old1 - expected)[m].abs().max() < 1e-5
    assert (old1 - logp1.detach())[m].abs().max() > 1e-4


def test_clip_cov_ratio_is_exactly_one_on_the_on_policy_pass(policy, monkeypatch):
    calls = _recording(monkeypatch, "clip_cov_loss")
    row = _trainer(policy, "clip_cov", steps=1).step()
    (logp, old, *_), = calls
    assert torch.equal(old, logp.detach()) and row["ratio_mean"] == 1.0
