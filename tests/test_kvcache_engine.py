"""The fast engine against the default one: same greedy tokens, log-probs equal to a recomputation.

The contract tests shared by every engine are in ``test_rollout.py``; here are the
properties specific to :class:`KVCacheEngine`: its lean decoder on each supported
architecture (Qwen2, Llama with grouped-query attention, Qwen3 with q/k norms),
its fallback on other models (GPT-2), finished rows dropped mid-decode, prompts
shared by a group encoded once, and its sampler.
"""

from __future__ import annotations

import pytest
import torch

from conftest import build_tiny_gpt2, build_tiny_llama, build_tiny_qwen3
from rlvr_lib.rollout import HFEngine, KVCacheEngine, SamplingParams, sequence_logprobs
from rlvr_lib.rollout.kvcache import _sample, top_p_filter

PROMPTS = ["12*34=", "a", "what is 7+8?\n", "xyz", "1+1", "b c"]


def _gpt2(tok):
    model = build_tiny_gpt2(tok)
    with torch.no_grad():
        model.transformer.wpe.weight.mul_(20.0)  # positions matter: a wrong offset would show
    return model


def _with_eos_bias(model, eos: int, bias: float):
    """``model`` (mutated) with an LM-head bias on EOS, so rows stop at different steps."""
    old = model.get_output_embeddings()
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[eos] = bias
    model.set_output_embeddings(head)
    model.config.tie_word_embeddings = False
    return model


# name -> (builder, lean decoder expected, EOS bias under which greedy rows stop at different steps)
ARCHS = {
    "qwen2": (lambda model, tok: model, True, 0.1),
    "llama_gqa": (lambda model, tok: build_tiny_llama(tok), True, 0.1),
    "qwen3": (lambda model, tok: build_tiny_qwen3(tok), True, 0.1),
    "gpt2": (lambda model, tok: _gpt2(tok), False, 0.2),
}
SAMPLING_EOS_BIAS = 1.5  # ~4% EOS per token on these near-uniform random models: some rows stop, some not


@pytest.fixture(params=sorted(ARCHS))
def arch_model(request, tiny_model_and_tokenizer):
    """``(model, tokenizer, lean expected, greedy EOS bias)``; the model is the test's own copy."""
    import copy

    model, tok = tiny_model_and_tokenizer
    build, lean, greedy_bias = ARCHS[request.param]
    return build(copy.deepcopy(model), tok), tok, lean, greedy_bias


def test_lean_decoder_chosen_by_architecture(arch_model):
    model, tok, lean, _ = arch_model
    assert KVCacheEngine(model, tok).uses_lean_decoder is lean
    assert KVCacheEngine(model, tok, fast_path="never").uses_lean_decoder is False
    with pytest.raises(ValueError, match=r"KVCacheEngine.fast_path='always' is invalid: must be one of \['auto', 'never'\]"):
        KVCacheEngine(model, tok, fast_path="always")


@pytest.mark.parametrize("fast_path", ["auto", "never"])
def test_greedy_tokens_equal_default_engine(arch_model, fast_path):
    model, tok, _, greedy_bias = arch_model
    model = _with_eos_bias(model, tok.eos_token_id, greedy_bias)
    params = SamplingParams(greedy=True, n=2, max_new_tokens=16)
    ref = HFEngine(model, tok).generate(PROMPTS, params)
    got = KVCacheEngine(model, tok, fast_path=fast_path, batch_size=5).generate(PROMPTS, params)
    assert len(set(ref.completion_lengths.tolist())) >= 3  # rows end at different steps
    assert torch.equal(got.completion_ids, ref.completion_ids)
    assert torch.equal(got.completion_mask, ref.completion_mask)
    assert got.texts == ref.texts and got.finish_reasons == ref.finish_reasons
    assert (got.logprobs - ref.logprobs).abs().max().item() <= 1e-4


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_logprobs_equal_teacher_forced_recompute(arch_model, temperature, top_p):
    model, tok, _, _ = arch_model
    model = _with_eos_bias(model, tok.eos_token_id, SAMPLING_EOS_BIAS)
    params = SamplingParams(n=6, temperature=temperature, top_p=top_p, max_new_tokens=14, seed=5)
    r = KVCacheEngine(model, tok, batch_size=16).generate(PROMPTS, params)  # 3 micro-batches
    assert set(r.finish_reasons) == {"stop", "length"}
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask,
                                    temperature=temperature)
    assert (logp - r.logprobs).abs().max().item() <= 1e-4
    assert (r.logprobs[r.completion_mask == 0] == 0).all()


def test_rows_dropped_mid_decode_match_decoding_alone(tiny_model_and_tokenizer):
    """A row's tokens do not depend on which other rows are still decoding."""
    import copy

    model, tok = tiny_model_and_tokenizer
    model = _with_eos_bias(copy.deepcopy(model), tok.eos_token_id, ARCHS["qwen2"][2])
    params = SamplingParams(greedy=True, max_new_tokens=20)
    engine = KVCacheEngine(model, tok)
    together = engine.generate(PROMPTS, params)
    lengths = together.completion_lengths.tolist()
    assert len(set(lengths)) >= 3  # rows finish at several different steps
    for i, prompt in enumerate(PROMPTS):
        alone = engine.generate([prompt], params)
        assert alone.completion_ids[0, : lengths[i]].tolist() == together.completion_ids[i, : lengths[i]].tolist()


def test_group_shares_prompt_encoding_without_changing_results(tiny_model_and_tokenizer):
    """n samples of a prompt (one prefill) equal the same prompt listed n times, and rows differ."""
    model, tok = tiny_model_and_tokenizer
    engine = KVCacheEngine(model, tok)
    params = SamplingParams(n=4, max_new_tokens=10, seed=3)
    grouped = engine.generate(PROMPTS[:3], params)
    listed = engine.generate([p for p in PROMPTS[:3] for _ in range(4)], SamplingParams(n=1, max_new_tokens=10, seed=3))
    assert torch.equal(grouped.completion_ids, listed.completion_ids)
    assert len({tuple(row) for row in grouped.completion_ids[:4].tolist()}) > 1  # independent samples


def test_trainer_runs_on_the_fast_engine(tiny_model_and_tokenizer):
    """The trainer takes the engine as a plug-in; one step on it updates every trainable parameter."""
    import copy

    from rlvr_lib.policy import load_policy
    from rlvr_lib.trainer import Trainer, TrainerConfig

    model, tok = load_policy(None)
    before = copy.deepcopy(model.state_dict())
    # 8 groups of 8: a group all right or all wrong has no advantage, and 4 groups of 4 can all be such. 48 new
    # tokens (the testbed's): a split or round trace is longer than 24, and the RL pool is mostly medium problems.
    cfg = TrainerConfig(method="grpo_no_kl", steps=1, prompts_per_step=8, group_size=8, max_new_tokens=48, lr=1e-3)
    trainer = Trainer(cfg, model, tok, engine=KVCacheEngine(model, tok))
    metrics = trainer.step()
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["advantage_abs_mean"] > 0
    changed = [not torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad]
    assert all(changed)


# ----------------------------------------------------------------- sampler
def test_top_p_filter_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]))
    kept = torch.isfinite(top_p_filter(logp, 0.8))
    # masses before each token in descending order: 0, .5, .8, .95 -> keep while < 0.8
    assert kept.tolist() == [[True, True, False, False], [False, False, True, True]]
    assert torch.isfinite(top_p_filter(logp, 0.81)).sum(1).tolist() == [3, 3]
    assert torch.isfinite(top_p_filter(logp, 1e-6)).sum(1).tolist() == [1, 1]  # the top token always stays
    assert torch.equal(top_p_filter(logp, 1.0), logp)
    assert torch.equal(top_p_filter(logp, 0.8)[kept], logp[kept])  # not renormalised


def test_exponential_race_samples_the_distribution():
    p = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])
    logp = p.log().expand(200_000, -1).contiguous()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        draws = _sample(logp)
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    assert freq[4] == 0  # a -inf token is never drawn
    assert torch.allclose(freq, p, atol=0.005)  # 4 sigma of a 200k-draw frequency is < 0.005
