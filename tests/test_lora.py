"""LoRA in the native loop (``TrainerConfig.lora``): only adapters train, the reference is the adapter-free base."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr_lib.lora import LoraSettings, merged
from rlvr_lib.methods import method_config
from rlvr_lib.rewards.callables import REWARD_FUNCS, register_reward_func
from rlvr_lib.rollout import sequence_logprobs
from rlvr_lib.trainer import Trainer
from rlvr_lib.trainer_config import TrainerConfig

SMALL = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=8)


def _length(prompts, completions, **kw):
    """A reward with variance inside every group (the tiny random model is never correct): a training signal."""
    return [len(c) / 8 for c in completions]


if "test_lora_length" not in REWARD_FUNCS:
    register_reward_func("test_lora_length", _length)


@pytest.mark.parametrize("method", ["grpo", "sage", "b3po", "vigor"])
def test_lora_trains_only_adapters_and_the_reference_is_the_base(method, tiny_model_and_tokenizer):
    base, tok = tiny_model_and_tokenizer
    # VIGOR's own reward (the gradient norm) varies; the others get a callable one beside the verifier's
    rewards = {} if method == "vigor" else {"reward_funcs": ("test_lora_length",)}
    config = method_config(method, **{**SMALL, "steps": 3}, kl_coef=0.05, lr=1e-2, lora={"r": 4, "alpha": 8}, **rewards)
    model = copy.deepcopy(base)
    before = {name: p.detach().clone() for name, p in base.named_parameters()}
    trainer = Trainer(config, model, tok)
    assert trainer.reference is None  # no second copy of the weights
    trainable = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train(progress=False)
    assert len(history) == 3 and "kl" in history[-1]

    # base weights bit-identical; every adapter weight trained (B starts at zero and moves first, A after it)
    for name, p in trainer.model.get_base_model().named_parameters():
        if ".lora_" not in name:
            assert torch.equal(p, before[name.replace(".base_layer", "")]), name
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(p, lora_before[n])]
    assert unchanged == [], [n.split("layers.")[-1] for n in unchanged]

    # the reference log-probs are the base model's, bit for bit, while the adapted policy differs from it
    batch, _ = trainer._sample(trainer.train_problems[:2], 0, 0)
    ro = batch.rollouts
    ref = trainer._reference_logprobs(ro, 1.0)
    with torch.no_grad():
        expected, _ = sequence_logprobs(base, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        policy, _ = sequence_logprobs(trainer.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                      ro.completion_mask)
    assert torch.equal(ref, expected)
    assert not torch.equal(policy, expected)
    # the rollout engine samples from the adapted policy (its sampling log-probs are the policy's)
    mask = ro.completion_mask.float()
    if method != "b3po":  # 3PO samples from IVON's perturbed weights
        torch.testing.assert_close(ro.logprobs * mask, policy * mask, rtol=1e-4, atol=1e-4)


def test_merged_model_computes_as_the_adapted_one(tiny_model_and_tokenizer):
    base, tok = tiny_model_and_tokenizer
    trainer = Trainer(TrainerConfig(**SMALL, lr=1e-2, lora={"r": 4}), copy.deepcopy(base), tok)
    trainer.train(progress=False)
    plain = merged(trainer.model)
    assert not any("lora" in n for n, _ in plain.named_parameters())
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, trainer.model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_lora_settings_are_checked_and_off_by_default():
    assert "lora" not in TrainerConfig().to_dict()
    config = TrainerConfig(lora={"r": 8, "target_modules": ["q_proj", "v_proj"], "dropout": 0.05})
    assert config.lora == LoraSettings(r=8, target_modules=("q_proj", "v_proj"), dropout=0.05)
    assert TrainerConfig.from_dict(config.to_dict()) == config
    assert LoraSettings(alpha=16).to_dict() == LoraSettings(alpha=16.0).to_dict()  # one key for one setting
    with pytest.raises(ValueError, match="LoraSettings.r=0 is invalid"):
        LoraSettings(r=0)
    with pytest.raises(ValueError, match="target_modules"):
        LoraSettings(target_modules=())
    with pytest.raises(ValueError, match="engine='vllm' is invalid: must be an in-process engine"):
        TrainerConfig(engine="vllm", lora={"r": 8})


def test_unknown_target_module_is_named(tiny_model_and_tokenizer):
    base, tok = tiny_model_and_tokenizer
    with pytest.raises(ValueError, match=r"LoraSettings.target_modules=\('nope_proj',\)"):
        Trainer(TrainerConfig(**SMALL, lora={"target_modules": ["nope_proj"]}), copy.deepcopy(base), tok)


def test_vigor_gradient_norm_is_over_the_adapters(tiny_model_and_tokenizer):
    """With LoRA, VIGOR's per-completion gradient norm is over the trainable parameters (the adapters): its fast
    ghost norms equal the per-sample backward loop's, which differentiates only what requires a gradient."""
    from rlvr_lib.lora import apply_lora
    from rlvr_lib.rewards.grad_norm import grad_norm_scores

    base, tok = tiny_model_and_tokenizer
    model = apply_lora(copy.deepcopy(base), LoraSettings(r=4), seed=1)
    with torch.no_grad():  # non-zero B, so the adapters' gradients are not those of a zero update
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
    ids = torch.tensor([[3, 4, 5], [5, 6, 7]])
    done = torch.tensor([[6, 7, 8, 9], [9, 8, 7, 0]])
    args = (ids, torch.ones_like(ids), done, (done > 0).long())
    ghost = grad_norm_scores(model, *args, impl="ghost")
    naive = grad_norm_scores(model, *args, impl="naive")
    torch.testing.assert_close(ghost, naive, rtol=1e-4, atol=1e-6)
    full = grad_norm_scores(copy.deepcopy(base), *args, impl="naive")  # the whole model's: a different norm
    assert not torch.allclose(naive, full)


def test_lora_run_resumes_from_its_checkpoint_and_saves_a_merged_model(tmp_path):
    """A LoRA run killed after a step resumes to the uninterrupted run's history; `rlvr_lib.run.train` saves the
    adapters merged into a plain model."""
    from transformers import AutoModelForCausalLM

    from rlvr_lib.run import train
    from rlvr_lib.trainer import untimed

    config = TrainerConfig(**SMALL, lr=1e-2, kl_coef=0.05, checkpoint_every=1, lora={"r": 4},
                           reward_funcs=("test_lora_length",))
    whole = train(config, tmp_path / "whole", progress=False)
    first = Trainer(config, checkpoint_dir=tmp_path / "cut")
    first.step()  # writes checkpoint.pt after step 1
    resumed = train(config, tmp_path / "cut", progress=False)
    assert untimed(resumed.history) == untimed(whole.history)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "whole" / "model")
    assert not any("lora" in n for n, _ in saved.named_parameters())


@pytest.mark.parametrize("field, value", [("lora", {"r": 4}), ("report_to", ("tensorboard",))])
def test_trl_backend_refuses_the_native_loops_options(field, value, tmp_path):
    from rlvr_lib.backends.trl import check_hostable, grpo_args
    from rlvr_lib.methods import build_method

    config = TrainerConfig(**SMALL, **{field: value})
    with pytest.raises(ValueError, match=f"TRL backend: TrainerConfig.{field}=.* is the native loop's"):
        check_hostable(build_method(config), config, grpo_args(config, str(tmp_path), processes=1), 1)
