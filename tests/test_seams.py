"""The seams the four methods plug into: row-sliced minibatches, the update scope per
weight sample (IVON), tasks as plug-ins, and the loop's first-minibatch diagnostics."""

import contextlib
import copy
import re
import subprocess
import sys

import ivon
import pytest
import torch

from rlvr_lib.methods import Method, StepBatch
from rlvr_lib.seeding import forked_torch_rng
from rlvr_lib.tasks import CORRECT, MALFORMED, WRONG, Problem, Verdict, register_task
from rlvr_lib.trainer import Trainer
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3)


def _trainer(policy, name, **kw):
    model, tokenizer = policy
    return Trainer(TrainerConfig(method=name, **{**SMALL, **kw}), copy.deepcopy(model), tokenizer)


def _untimed(history):
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]


def test_importing_the_method_registry_does_not_import_the_trainer():
    code = "import sys, rlvr_lib.methods; assert 'rlvr_lib.trainer' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("argv", [["evaluate", "--task", "nope"], ["train", "--method", "grpo", "--task", "nope"]])
def test_a_usage_error_answers_before_the_model_stack_is_imported(argv, tmp_path):
    """A mistyped command line is answered in a second or two: transformers, the policy and the training loop are
    imported only once the input is known good."""
    heavy = ["transformers", "rlvr_lib.policy", "rlvr_lib.run", "rlvr_lib.trainer"]
    code = (f"import sys\nfrom rlvr_lib.__main__ import main\ntry:\n    main({[*argv, '--out', str(tmp_path / 'out')]!r})\n"
            f"except SystemExit as stop:\n    print('EXIT', stop.code)\n"
            f"print('LOADED', [m for m in {heavy!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "EXIT 2" in done.stdout and "'nope' is not registered" in done.stderr, (done.stdout, done.stderr)
    assert "LOADED []" in done.stdout, done.stdout


# ----------------------------------------------------------------------------- row-sliced minibatches
class RowChecking(Method):
    """Checks, in every loss hook, that the minibatch's per-row data are the rows it claims to be.

    ``before_update`` tags each row with its index (``extras``), and keeps the whole batch; each loss
    hook compares every per-row field of its minibatch with the whole batch's rows of those tags.
    Half of the groups get a hint, so the hint-free prompts differ from the rolled-out ones.
    """

    def __init__(self, config):
        super().__init__(config)
        self.calls, self.rows_seen, self.whole = [], [], None

    def hints(self, problems, group_size, rng):
        return [[(0, "split")] * group_size if i % 2 else [(-1, None)] * group_size for i in range(len(problems))]

    def before_update(self, batch, model):
        self.whole = batch
        batch.extras["row"] = torch.arange(len(batch))

    def _check(self, hook, mb: StepBatch, logp):
        whole, rows = self.whole, mb.extras["row"]
        assert logp.shape == mb.rollouts.completion_ids.shape
        for name in ("group_index", "hint_index", "weight_index", "rewards", "advantages", "ref_logprobs",
                     "plain_prompt_ids", "plain_prompt_mask"):
            if getattr(whole, name) is None:
                assert getattr(mb, name) is None, (hook, name)
            else:
                assert torch.equal(getattr(mb, name), getattr(whole, name)[rows]), (hook, name)
        for name in ("prompt_ids", "completion_ids", "completion_mask", "logprobs"):
            assert torch.equal(getattr(mb.rollouts, name), getattr(whole.rollouts, name)[rows]), (hook, name)
        assert mb.verdicts == [whole.verdicts[i] for i in rows.tolist()]
        assert mb.hints == [whole.hints[i] for i in rows.tolist()]
        assert mb.rollouts.texts == [whole.rollouts.texts[i] for i in rows.tolist()]
        self.calls.append(hook)
        if hook == "policy_loss":
            self.rows_seen.append(rows.tolist())

    def policy_loss(self, batch, logp, entropy, mask):
        self._check("policy_loss", batch, logp)
        return super().policy_loss(batch, logp, entropy, mask)

    def anchor(self, batch, logp, entropy, mask):
        self._check("anchor", batch, logp)
        return super().anchor(batch, logp, entropy, mask)

    def extra_loss(self, batch, model, logp, entropy, mask):
        self._check("extra_loss", batch, logp)
        return 0.0, {}


def test_every_loss_hook_sees_its_minibatch_rows_lined_up(policy, registered):
    registered("row_checking", RowChecking)
    trainer = _trainer(policy, "row_checking", kl_coef=0.05, inner_epochs=2, minibatches=4)
    method = trainer.method
    trainer.train(progress=False)
    n_updates = SMALL["steps"] * 2 * 4
    assert method.calls.count("policy_loss") == method.calls.count("anchor") == method.calls.count("extra_loss")
    assert method.calls.count("policy_loss") == n_updates
    n = SMALL["prompts_per_step"] * SMALL["group_size"]
    for epoch in range(SMALL["steps"] * 2):  # each pass covers every row once, shuffled
        seen = sum(method.rows_seen[epoch * 4:(epoch + 1) * 4], [])
        assert sorted(seen) == list(range(n))
    assert any(sum(method.rows_seen[e * 4:(e + 1) * 4], []) != list(range(n)) for e in range(4))


def test_hint_free_prompts_are_the_problems_prompts(policy, registered):
    registered("row_checking", RowChecking)
    trainer = _trainer(policy, "row_checking", steps=1)
    trainer.train(progress=False)
    batch, tokenizer = trainer.method.whole, trainer.tokenizer
    for row in range(len(batch)):
        plain = batch.plain_prompt_ids[row][batch.plain_prompt_mask[row].bool()]
        rolled = batch.rollouts.prompt_ids[row][batch.rollouts.prompt_mask[row].bool()]
        problem = batch.problems[batch.group_index[row]]
        assert tokenizer.decode(plain) == problem.prompt
        assert tokenizer.decode(rolled) == problem.prompt_with(batch.hints[row])
    assert any(c is not None for c in batch.hints) and any(c is None for c in batch.hints)


def test_step_batch_select_and_select_groups_slice_every_row_field():
    n = 6
    batch = StepBatch(problems=["p0", "p1", "p2"], group_index=torch.tensor([0, 0, 1, 1, 2, 2]),
                      hint_index=torch.arange(n), hints=list("abcdef"), rollouts=None,
                      verdicts=list(range(n)), rewards=torch.arange(n).float(), extras={"x": torch.arange(n) * 10})
    mb = batch.select(torch.tensor([5, 0]))
    assert mb.verdicts == [5, 0] and mb.hints == ["f", "a"] and mb.extras["x"].tolist() == [50, 0]
    assert mb.group_index.tolist() == [2, 0] and mb.problems == batch.problems
    assert batch.select(torch.tensor([True, False] * 3)).verdicts == [0, 2, 4]
    groups = batch.select_groups(torch.tensor([2, 0]))
    assert groups.problems == ["p2", "p0"] and groups.group_index.tolist() == [0, 0, 1, 1]
    assert groups.verdicts == [4, 5, 0, 1] and groups.extras["x"].tolist() == [40, 50, 0, 10]
    with pytest.raises(ValueError, match=r"StepBatch.extras\['y'\] has 2 rows; expected 6"):
        StepBatch(problems=[], group_index=torch.zeros(n, dtype=torch.long), hint_index=torch.zeros(n),
                  hints=[None] * n, rollouts=None, verdicts=[None] * n, extras={"y": torch.zeros(2)})


# ----------------------------------------------------------------------------- the update scope: IVON
class IVONWeightSamples(Method):
    """A toy 3PO: rollouts and gradients at two IVON posterior samples per step (``ivon.IVON``).

    Each weight sample's noise comes from the global RNG inside ``forked_torch_rng(seed, step, stream, k)``:
    the run never reads the global RNG, and rollout and gradient of sample k share the same key.
    """

    STREAM = 0x3B0

    def weight_samples(self):
        return 2

    def make_optimizer(self, model):
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = ivon.IVON(params, lr=0.05, ess=1e5, hess_init=0.1, beta2=0.999)
        return self.optimizer

    @contextlib.contextmanager
    def perturbed(self, model, index, train=False):
        with forked_torch_rng(self.config.seed, self.step, self.STREAM, index):
            with self.optimizer.sampled_params(train=train):
                if train:  # IVON averages per-sample gradients itself: each sample starts from zero
                    self.optimizer.zero_grad(set_to_none=True)
                yield

    def state_dict(self):
        return {"ivon_step": self.optimizer.current_step}  # IVON's debiasing count is not in its state_dict

    def load_state_dict(self, state):
        self.optimizer.current_step = state["ivon_step"]


def test_ivon_through_the_update_scope_trains_every_parameter(policy, registered):
    registered("toy_ivon", IVONWeightSamples)
    trainer = _trainer(policy, "toy_ivon", minibatches=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    seen = []
    update = trainer._update
    trainer._update = lambda batch, *a: (seen.append(batch.weight_index.clone()), update(batch, *a))[1]
    history = trainer.train(progress=False)
    for row in history:
        assert all(v == v for v in row.values() if isinstance(v, float)), row
    unchanged = [n for n, p in trainer.model.named_parameters() if torch.equal(p, before[n])]
    assert not unchanged
    assert all(p.isfinite().all() for p in trainer.model.parameters())
    # Slice k of every group came from weight sample k.
    G = SMALL["group_size"]
    assert seen[0].tolist() == [0, 0, 1, 1] * SMALL["prompts_per_step"] and G == 4
    assert trainer.optimizer.current_step == SMALL["steps"] * 2


def test_ivon_runs_are_bit_identical_across_runs_and_resume(policy, registered, tmp_path):
    registered("toy_ivon", IVONWeightSamples)
    torch.manual_seed(7)
    global_state = torch.get_rng_state()
    a = _trainer(policy, "toy_ivon", steps=3, checkpoint_every=1).train(progress=False)
    b = _trainer(policy, "toy_ivon", steps=3, checkpoint_every=1).train(progress=False)
    assert _untimed(a) == _untimed(b)
    assert torch.equal(torch.get_rng_state(), global_state)  # the weight noise never touched the global RNG
    first = Trainer(TrainerConfig(method="toy_ivon", **{**SMALL, "steps": 3, "checkpoint_every": 1}),
                    copy.deepcopy(policy[0]), policy[1], checkpoint_dir=tmp_path)
    first.step()
    resumed = Trainer(first.config, copy.deepcopy(policy[0]), policy[1], checkpoint_dir=tmp_path)
    assert resumed.step_count == 1
    assert _untimed(resumed.train(progress=False)) == _untimed(a)


def test_weight_samples_must_divide_the_group(policy, registered):
    registered("toy_ivon", IVONWeightSamples)
    with pytest.raises(ValueError, match=r"group_size=3 is not divisible by the method's weight samples \(2\)"):
        _trainer(policy, "toy_ivon", group_size=3).step()


# ----------------------------------------------------------------------------- tasks as plug-ins
class LastDigitTask:
    """A second task: the problems are products, but only the last digit of the answer is checked."""

    name = "toy_last_digit"
    families = ("train", "eval")
    eval_families = ("eval",)
    ood_families = ()
    default_eval_families = ("eval",)
    strategies = ()

    def __init__(self):
        self.calls = 0

    def family_capacity(self, family):
        return 64

    def family_problems(self, family, n, seed=0):
        first = 12 if family == "train" else 31
        pairs = [(a, b) for a in range(first, first + 8) for b in range(21, 29)][:n]
        return [Problem(uid=f"ld:{a}*{b}", question=f"{a}*{b}=?", answer=str(a * b % 10), family=family,
                        difficulty="easy", oracle_trace="", strategy="") for a, b in pairs]

    def verify(self, problem, completion):
        self.calls += 1
        found = re.findall(r"#(\d+)", completion if isinstance(completion, str) else "")
        if not found:
            return Verdict(0.0, MALFORMED, None, "no #answer")
        ok = found[-1][-1] == problem.answer
        return Verdict(float(ok), CORRECT if ok else WRONG)

    def hints(self, problem):
        return []


def test_a_task_registered_in_a_test_trains_end_to_end(policy, registered):
    register_task("toy_last_digit", LastDigitTask)
    # 8 groups of 8 per step: the shipped policy answers many problems the same way every time, so smaller
    # groups can all have one reward (no advantage, no update).
    config = TrainerConfig(method="grpo_no_kl", task="toy_last_digit", train_family="train", steps=3,
                           prompts_per_step=8, group_size=8, max_new_tokens=40, lr=1e-3, kl_coef=0.0)
    assert config.to_dict()["task"] == "toy_last_digit"
    trainer = Trainer(config, copy.deepcopy(policy[0]), policy[1])
    task = trainer.task
    assert all(p.uid.startswith("ld:") for p in trainer.train_problems) and len(trainer.train_problems) == 64
    before = [p.detach().clone() for p in trainer.model.parameters()]
    history = trainer.train(progress=False)
    assert task.calls == 3 * 8 * 8  # every rollout was judged by the toy verifier
    assert all(0 <= m["accuracy"] <= 1 for m in history) and any(m["accuracy"] > 0 for m in history)
    assert any(m["zero_adv_frac"] < 1 for m in history)  # some group had mixed rewards: there is a gradient
    assert any(not torch.equal(p, q) for p, q in zip(trainer.model.parameters(), before))
    with pytest.raises(ValueError, match=r"TrainerConfig.train_family='easy_mix' is invalid: must be one of "
                                         r"\['train', 'eval'\]"):
        TrainerConfig(task="toy_last_digit", train_family="easy_mix")


def test_the_default_task_is_left_out_of_the_config_hash():
    assert "task" not in TrainerConfig().to_dict()
    assert TrainerConfig(task="arith").config_hash() == TrainerConfig().config_hash()
    with pytest.raises(ValueError, match=r"TrainerConfig.task='aime' is not registered: must be one of \[.*'arith'"):
        TrainerConfig(task="aime")


# ----------------------------------------------------------------------------- diagnostics
class Recording(Method):
    """Records the PPO and anchor stats of every minibatch."""

    def __init__(self, config):
        super().__init__(config)
        self.records = []

    def policy_loss(self, batch, logp, entropy, mask):
        loss, stats = super().policy_loss(batch, logp, entropy, mask)
        self.records.append({"step": self.step, **{k: float(v) for k, v in stats.items()}})
        return loss, stats

    def anchor(self, batch, logp, entropy, mask):
        kl, stats = super().anchor(batch, logp, entropy, mask)
        self.records[-1]["kl"] = float((kl.detach() * mask).sum() / mask.sum())
        return kl, stats


def test_first_minibatch_is_on_policy_and_the_reference_never_moves(policy, registered):
    registered("recording", Recording, kl_estimator="reverse")
    trainer = _trainer(policy, "recording", steps=2, kl_coef=0.05, inner_epochs=2, minibatches=2)
    reference = {n: p.detach().clone() for n, p in trainer.reference.named_parameters()}
    trainer.train(progress=False)
    records = trainer.method.records
    assert len(records) == 2 * 2 * 2
    for first in (records[0], records[4]):  # the first minibatch of each step: weights as rolled out
        assert abs(first["ratio_mean"] - 1) < 1e-5, first
        assert first["clip_frac_low"] == 0 and first["clip_frac_high"] == 0, first
    assert abs(records[0]["kl"]) < 1e-8  # step 0 starts at the reference
    assert any(r["ratio_mean"] != records[0]["ratio_mean"] for r in records[1:4])  # later minibatches moved
    assert records[4]["kl"] > 0
    assert all(torch.equal(p, reference[n]) for n, p in trainer.reference.named_parameters())
    assert all(not p.requires_grad for p in trainer.reference.parameters())
