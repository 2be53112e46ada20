"""Composing methods (`rlvr_lib.methods.compose`, issue 32 item 1): hook order and ownership, refused pairs,
GRPO as the identity (bit-identical short runs), a real composite training, options per component, the
checkpoint round trip, and the pair table of docs/real-models.md (regenerated here, so it cannot drift).

Every composite a test registers is removed from the registry afterwards (fixture ``registry``), so other
test files that iterate over ``METHODS`` see only the shipped methods.
"""

import copy
import math
import re
from pathlib import Path

import pytest
import torch

from rlvr_lib.methods import METHODS, Method, build_method, compose, method_config, register_method
from rlvr_lib.methods.compose import COMBINED, DERIVED, EXCLUSIVE, UNITED, component_config, overrides, pair_table
from rlvr_lib.methods.registry import resolved_method_options
from rlvr_lib.trainer import Trainer, untimed
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=40, train_family="easy_mix",
             train_pool_size=32, lr=1e-3)
PAIR_PAGE = Path(__file__).resolve().parent.parent / "docs" / "real-models.md"  # "Writing a method or a task"


@pytest.fixture(autouse=True)
def registry():
    """Remove every method a test registers (composites and the test-only classes)."""
    before = set(METHODS)
    yield
    for name in set(METHODS) - before:
        del METHODS[name]


def _trainer(policy, name, checkpoint_dir=None, **kw):
    model, tokenizer = policy
    return Trainer(method_config(name, **{**SMALL, **kw}), copy.deepcopy(model), tokenizer,
                   checkpoint_dir=checkpoint_dir)


# ----------------------------------------------------------------------------- test-only methods
CALLS: list[tuple] = []


class _Recorder(Method):
    """Records its combined hooks; ``TAG`` names it in :data:`CALLS`."""

    TAG = ""

    def on_step_start(self, step):
        super().on_step_start(step)
        CALLS.append((self.TAG, "on_step_start", step))

    def before_update(self, batch, model):
        CALLS.append((self.TAG, "before_update"))
        batch.extras[f"{self.TAG}_extra"] = torch.zeros(len(batch))

    def extra_loss(self, batch, model, logp, entropy, mask):
        CALLS.append((self.TAG, "extra_loss", self.sampling_temperature(self.step)))
        term = 1e-3 * (logp * mask).sum() / mask.sum()
        return term, {f"{self.TAG}_term": term.detach()}

    def on_step_end(self, step, metrics):
        CALLS.append((self.TAG, "on_step_end"))
        metrics[f"{self.TAG}_seen"] = float(f"{self.TAG}_term" in metrics)


class _A(_Recorder):
    TAG = "a"

    def anchor(self, batch, logp, entropy, mask):
        CALLS.append(("a", "anchor"))
        return super().anchor(batch, logp, entropy, mask)


class _B(_Recorder):
    TAG = "b"

    def sampling_temperature(self, step):
        return 0.9


class _AnchorToo(Method):
    def anchor(self, batch, logp, entropy, mask):
        return super().anchor(batch, logp, entropy, mask)


@pytest.fixture
def ab():
    register_method("test_compose_a", _A, "test only")
    register_method("test_compose_b", _B, "test only")
    register_method("test_compose_anchor", _AnchorToo, "test only")
    CALLS.clear()
    return compose("test_compose_a", "test_compose_b")


# ----------------------------------------------------------------------------- hook order and ownership
def test_the_tables_cover_every_hook_of_method_once():
    hooks = {n for n in vars(Method) if not n.startswith("_")} - {"Options", "name", "generator"}
    listed = [h for family in EXCLUSIVE.values() for h in family] + list(COMBINED) + list(DERIVED) + list(UNITED)
    assert sorted(listed) == sorted(hooks)


def test_a_composite_reads_parameters_when_a_component_does():
    assert METHODS[compose("b3po", "grpo")].cls.reads_parameters
    assert not METHODS[compose("sage", "grpo")].cls.reads_parameters


def test_combined_hooks_run_in_the_given_order_and_exclusive_ones_at_their_owner(ab, policy):
    history = _trainer(policy, ab, steps=1, kl_coef=0.1, minibatches=2).train(progress=False)
    # per step: starts, then before_update, then per minibatch the anchor (a's) and both extra terms, then ends
    extra = [("a", "anchor"), ("a", "extra_loss", 0.9), ("b", "extra_loss", 0.9)]
    assert CALLS == [("a", "on_step_start", 0), ("b", "on_step_start", 0), ("a", "before_update"),
                     ("b", "before_update"), *extra, *extra, ("a", "on_step_end"), ("b", "on_step_end")]
    # a's distillation-like call of self.sampling_temperature saw b's (the owner's) temperature, 0.9
    row = history[0]
    assert {"a_term", "b_term"} <= set(row) and row["a_seen"] == row["b_seen"] == 1.0
    method = build_method(method_config(ab, **SMALL))
    assert method.sampling_temperature(0) == 0.9
    assert type(method).OWNERS["anchor"] == "test_compose_a" and type(method).OWNERS["sampling"] == "test_compose_b"
    # a composite overrides exactly what its components do (the TRL backend asks type(method))
    assert overrides(type(method), "anchor") and not overrides(type(method), "policy_loss")
    for name in ("nudgerl+sage", "sage+b3po"):
        first, second = name.split("+")
        composite = METHODS[compose(first, second, kl_coef=0.2, lr=1e-4)].cls
        for family, hooks in EXCLUSIVE.items():
            for hook in hooks:
                expected = overrides(METHODS[first].cls, hook) or overrides(METHODS[second].cls, hook)
                assert overrides(composite, hook) == expected, (name, hook)


def test_extra_loss_is_the_sum_and_a_clashing_stat_is_an_error(ab):
    method = build_method(method_config(ab, **SMALL))
    a, b = method.components.values()
    a.extra_loss = lambda *args: (torch.tensor(0.25), {"x": 1.0})
    b.extra_loss = lambda *args: (torch.tensor(0.5), {"y": 2.0})
    total, stats = method.extra_loss(None, None, None, None, None)
    assert float(total) == 0.75 and stats == {"x": 1.0, "y": 2.0}
    b.extra_loss = lambda *args: (torch.tensor(0.5), {"x": 2.0})
    with pytest.raises(ValueError, match="'test_compose_a' and 'test_compose_b' both write the extra_loss stat 'x'"):
        method.extra_loss(None, None, None, None, None)


# ----------------------------------------------------------------------------- refusals
def test_two_methods_overriding_one_hook_are_refused_naming_it(ab):
    with pytest.raises(ValueError, match=r"'test_compose_a' overrides `anchor` and 'test_compose_anchor' "
                                         r"overrides `anchor`: both override the 'anchor' hooks"):
        compose("test_compose_a", "test_compose_anchor")


def test_a_real_pair_that_conflicts_names_the_hooks():
    with pytest.raises(ValueError, match=r"'nudgerl' overrides `advantage_options` and 'vigor' overrides "
                                         r"`advantages`: both override the 'advantages' hooks"):
        compose("nudgerl", "vigor")
    assert "nudgerl+vigor" not in METHODS


def test_conflicting_presets_are_refused_until_resolved():
    with pytest.raises(ValueError, match=r"different values of \['kl_coef'\] \(kl_coef: 'sage' 0.05, 'b3po' 0.0\); "
                                         r"choose them: compose\('sage', 'b3po', kl_coef=...\)"):
        compose("sage", "b3po")
    name = compose("sage", "b3po", kl_coef=0.2)
    assert method_config(name).kl_coef == 0.2
    assert compose("sage", "b3po") == name == compose("sage", "b3po", kl_coef=0.2)  # idempotent
    with pytest.raises(ValueError, match="'sage\\+b3po' is registered with preset"):
        compose("sage", "b3po", kl_coef=0.1)
    with pytest.raises(ValueError, match=r"resolve key\(s\) \['kl'\] are not TrainerConfig fields"):
        compose("sage", "vigor", kl=0.1)


@pytest.mark.parametrize("names, message", [
    (("grpo",), "give two or more registered methods"),
    (("sage", "sage"), "a method is named twice"),
    (("sage", "nope"), "method='nope' is not registered"),
])
def test_bad_names_are_refused(names, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        compose(*names)


def test_a_composite_cannot_be_a_component():
    compose("sage", "grpo")
    with pytest.raises(ValueError, match=r"'sage\+grpo' is a composite; compose its components directly"):
        compose("sage+grpo", "vigor")


def test_a_config_composes_an_unregistered_name():
    assert "sage+grpo" not in METHODS
    config = TrainerConfig(method="sage+grpo", kl_coef=0.2)
    assert "sage+grpo" in METHODS and config.method == "sage+grpo"
    with pytest.raises(ValueError, match="both override the 'advantages' hooks"):
        TrainerConfig(method="nudgerl+vigor")
    # read back (a run record, a checkpoint) where the composite is not registered: composed again
    config = method_config(compose("nudgerl", "sage", kl_coef=0.2, lr=1e-4), **SMALL)
    del METHODS["nudgerl+sage"]
    assert TrainerConfig.from_dict(config.to_dict()) == config


def test_a_config_of_a_pair_with_conflicting_presets_loads_but_its_preset_waits_for_a_choice():
    # a record or checkpoint read in a fresh process: every field is given, only the hooks are needed
    config = TrainerConfig(method="sage+b3po", kl_coef=0.2)
    assert METHODS["sage+b3po"].cls.PRESET_UNRESOLVED == ("kl_coef",)
    assert build_method(config).components["b3po"].name == "b3po"
    with pytest.raises(ValueError, match=r"choose them: compose\('sage', 'b3po', kl_coef=...\), or give them to "
                                         r"method_config"):
        method_config("sage+b3po")
    assert method_config("sage+b3po", kl_coef=0.1).kl_coef == 0.1  # a config file sets the key: enough
    with pytest.raises(ValueError, match=r"choose them"):
        compose("sage", "b3po")
    assert compose("sage", "b3po", kl_coef=0.2) == "sage+b3po"  # replaces the entry
    assert METHODS["sage+b3po"].cls.PRESET_UNRESOLVED == () and method_config("sage+b3po").kl_coef == 0.2
    with pytest.raises(ValueError, match=r"different values of \['lr_warmup_ratio'\] .*choose them: "
                                         r"compose\('nudgerl', 'b3po', lr_warmup_ratio=...\)"):
        method_config("nudgerl+b3po", lr_schedule="cosine")  # not registered yet: one of two keys given


def test_a_config_file_names_a_composite_and_sets_the_conflicting_keys():
    from rlvr_lib.config_files import build_config

    config = build_config(None, ("configs/x.yaml", {"method": "nudgerl+sage", "kl_coef": 0.2, "lr": 1e-4, "steps": 2}))
    assert config.method == "nudgerl+sage" and config.kl_coef == 0.2 and config.advantage == "hint"
    with pytest.raises(ValueError, match=r"different values of \['kl_coef', 'lr'\]"):
        build_config(None, ("configs/x.yaml", {"method": "sage+nudgerl", "steps": 2}))


# ----------------------------------------------------------------------------- GRPO is the identity
@pytest.mark.parametrize("name", ["sage", "nudgerl"])
def test_composing_with_grpo_is_the_identity(policy, name):
    composite = compose(name, "grpo")
    plain, both = method_config(name, **SMALL), method_config(composite, **SMALL)
    assert both.to_dict() == {**plain.to_dict(), "method": composite}
    runs = []
    for config_name in (name, composite):
        trainer = _trainer(policy, config_name)
        runs.append((untimed(trainer.train(progress=False)), trainer.model.state_dict()))
    (h1, w1), (h2, w2) = runs
    assert h1 == h2  # every logged number, bit for bit
    assert all(torch.equal(w1[k], w2[k]) for k in w1)


# ----------------------------------------------------------------------------- a real composite
def test_nudgerl_and_sage_train_together(policy):
    name = compose("nudgerl", "sage", kl_coef=0.2, lr=1e-4)
    trainer = _trainer(policy, name)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged
    for row in history:
        assert not any(isinstance(v, float) and math.isnan(v) for v in row.values()), row
        assert row["nudge_share_hinted"] > 0  # NudgeRL's hinted rollouts (hint_index >= 0)
        assert {"distill_term", "distill_share", "sage_q_mean", "sage_kl_unshaped", "kl"} <= set(row)  # both
    assert trainer.config.advantage == "hint" and trainer.config.kl_estimator == "k3"


# ----------------------------------------------------------------------------- options
def test_method_options_go_to_each_component_and_resolve_complete():
    name = compose("nudgerl", "sage", kl_coef=0.2, lr=1e-4)
    config = method_config(name, **SMALL, method_options={"nudgerl": {"p_drop": 0.0}, "sage": {"tau": 1.2}})
    method = build_method(config)
    nudge, sage = method.components["nudgerl"], method.components["sage"]
    assert nudge.options.p_drop == 0.0 and sage.options.tau == 1.2 and sage.options.gamma == 0.3
    assert nudge.name == "nudgerl" and component_config(config, "sage").method_options == {"tau": 1.2}
    resolved = resolved_method_options(config)
    assert resolved["nudgerl"]["p_drop"] == 0.0 and resolved["nudgerl"]["lam"] == 1.1
    assert resolved["sage"] == {"q_min": 0.6, "q_max": 1.4, "tau": 1.2, "gamma": 0.3}


@pytest.mark.parametrize("options, message", [
    ({"nudgerl": {"p_drop": 2}}, r"nudgerl\+sage: method_options: component 'nudgerl': NudgeRLOptions.p_drop=2.0 "
                                 r"is invalid: must be a number in \[0, 1\]"),
    ({"sage": {"tua": 1}}, r"component 'sage': BranchOptions: unknown key\(s\) \['tua'\]"),
    ({"sag": {}}, r"unknown component\(s\) \['sag'\]: method_options of a composite is \{component: options\} "
                  r"with components \['nudgerl', 'sage'\]"),
])
def test_bad_options_name_the_component_and_the_option(options, message):
    name = compose("nudgerl", "sage", kl_coef=0.2, lr=1e-4)
    with pytest.raises(ValueError, match=message):
        method_config(name, method_options=options)


def test_the_tuning_lr_is_the_owners():
    name = compose("sage", "b3po", kl_coef=0.2)
    config = method_config(name)
    cls = METHODS[name].cls
    assert cls.tuning_lr(config) == METHODS["b3po"].cls.tuning_lr(method_config("b3po"))
    moved = cls.with_tuning_lr(config, 0.5)
    assert moved.method_options == {"b3po": {"lr": 0.5}} and cls.tuning_lr(moved) == 0.5


# ----------------------------------------------------------------------------- checkpoints
def test_resume_of_a_composite_is_bit_identical(policy, tmp_path):
    name = compose("sage", "b3po", kl_coef=0.2)
    kw = dict(steps=3, checkpoint_every=1, minibatches=2)
    full = _trainer(policy, name, **kw).train(progress=False)
    first = _trainer(policy, name, checkpoint_dir=tmp_path, **kw)
    first.step()
    assert first.method.state_dict() == {"sage": {}, "b3po": {"ivon_step": 2}}
    resumed = _trainer(policy, name, checkpoint_dir=tmp_path, **kw)
    assert resumed.step_count == 1
    assert untimed(resumed.train(progress=False)) == untimed(full)


# ----------------------------------------------------------------------------- the pair table
def test_the_pages_pair_table_is_the_computed_one():
    text = PAIR_PAGE.read_text()
    match = re.search(r"<!-- compose-pairs:start -->\n(.*?)\n<!-- compose-pairs:end -->", text, re.S)
    assert match, f"{PAIR_PAGE} lacks the <!-- compose-pairs:start --> table"
    from rlvr_lib.study.papers import pair_table_names

    assert match.group(1) == pair_table(pair_table_names()), (
        "docs/real-models.md's pair table is stale: paste "
        "rlvr_lib.methods.compose.pair_table(papers.pair_table_names())")


# ----------------------------------------------------------------------------- the TRL backend
def test_a_composite_trains_through_the_trl_backend(policy, tmp_path):
    pytest.importorskip("trl")
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    name = compose("nudgerl", "sage", kl_coef=0.2, lr=1e-4)
    config = method_config(name, steps=2, prompts_per_step=2, group_size=4, max_new_tokens=16, train_pool_size=16)
    model0, tokenizer = policy
    model = copy.deepcopy(model0)
    backend = MethodGRPOTrainer(config, model, tokenizer, output_dir=str(tmp_path), trl_args={"logging_strategy": "no"})
    backend.train()
    assert backend.state.global_step == 2 * config.inner_epochs * config.minibatches
    for row in backend.history:
        assert {"distill_term", "sage_q_mean", "nudge_share_hinted"} <= set(row), sorted(row)
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), model0.parameters()))
