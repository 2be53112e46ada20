"""Tests of ``rlvr_lib.rollout``: SamplingParams, Rollouts, the engines, sequence_logprobs.

Engine tests run on every engine through the ``make_engine`` fixture: ``HFEngine``,
``KVCacheEngine`` (lean decoder where the model allows) and ``KVCacheEngine`` on the
model's own forward (``fast_path="never"``).
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

from conftest import build_tiny_gpt2, build_tiny_llama
from rlvr_lib.rollout import (
    HFEngine,
    KVCacheEngine,
    RolloutEngine,
    Rollouts,
    SamplingParams,
    position_ids_from_mask,
    sequence_logprobs,
)

PROMPTS = ["12*34=", "a", "what is 7+8?\n", "xyz"]  # mixed lengths -> left padding

ENGINES = {
    "hf": HFEngine,
    "kv": KVCacheEngine,
    "kv_model_forward": lambda model, tok, **kw: KVCacheEngine(model, tok, fast_path="never", **kw),
}


@pytest.fixture(params=sorted(ENGINES))
def make_engine(request):
    """Builds the parametrised engine: ``make_engine(model, tokenizer, **kwargs)``."""
    return ENGINES[request.param]


def _with_logit_bias(model, bias: dict[int, float]):
    """Deep copy of ``model`` whose LM head adds ``bias[token]`` to that token's logit."""
    model = copy.deepcopy(model)
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        for tok, b in bias.items():
            head.bias[tok] = b
    model.lm_head = head
    return model


def _recompute(model, r: Rollouts, temperature: float, **kw):
    with torch.no_grad():
        return sequence_logprobs(
            model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask, temperature=temperature, **kw
        )


# --------------------------------------------------------------------- fixture
def test_fixture_tokenizer_roundtrip(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    text = "What is 12 * 34?\nAnswer: 408."
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert model.config.vocab_size == len(tok)
    assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == text


# -------------------------------------------------------------- SamplingParams
@pytest.mark.parametrize(
    "field, value",
    [
        ("n", 0),
        ("n", 1.5),
        ("n", True),
        ("temperature", 0.0),
        ("temperature", -1.0),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("max_new_tokens", 0),
        ("seed", -1),
        ("greedy", 1),
    ],
)
def test_sampling_params_validation_names_field(field, value):
    with pytest.raises(ValueError, match=rf"^SamplingParams\.{field}={re.escape(repr(value))} is invalid: must be "):
        SamplingParams(**{field: value})


@pytest.mark.parametrize(
    "kwargs, must",
    [
        (dict(n=0), "an integer >= 1"),
        (dict(seed=-1), "an integer >= 0"),
        (dict(greedy=1), "a bool"),
        (dict(temperature=0.0), "a number in (0, inf) (use greedy=True for argmax decoding)"),
        (dict(top_p=1.01), "a number in (0, 1]"),
    ],
)
def test_sampling_params_message_says_what_is_allowed(kwargs, must):
    with pytest.raises(ValueError) as exc:
        SamplingParams(**kwargs)
    assert str(exc.value).endswith(f"is invalid: must be {must}")


def test_sampling_params_frozen_and_roundtrip():
    p = SamplingParams(n=4, temperature=0.7, top_p=0.9, max_new_tokens=12, seed=5)
    with pytest.raises(AttributeError):
        p.n = 3  # type: ignore[misc]
    assert SamplingParams.from_dict(p.to_dict()) == p
    t1 = SamplingParams(temperature=1).temperature
    assert t1 == 1.0 and isinstance(t1, float)
    assert SamplingParams(greedy=True, temperature=0.3).logprob_temperature == 1.0
    with pytest.raises(ValueError, match="unknown field"):
        SamplingParams.from_dict({"n": 2, "top_k": 5})


# ------------------------------------------------------------------- HFEngine
def test_engine_protocol_and_seed_determinism(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    engine = make_engine(model, tok)
    assert isinstance(engine, RolloutEngine)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=11)
    a = engine.generate(PROMPTS, params)
    b = engine.generate(PROMPTS, params)
    c = engine.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=12))
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.logprobs, b.logprobs)
    assert a.texts == b.texts and a.finish_reasons == b.finish_reasons
    assert a.completion_ids.shape != c.completion_ids.shape or not torch.equal(a.completion_ids, c.completion_ids)


def test_global_rng_untouched_and_mode_restored(make_engine, fresh_tiny_model, tiny_tokenizer):
    engine = make_engine(fresh_tiny_model, tiny_tokenizer)
    params = SamplingParams(n=2, max_new_tokens=6, seed=3)
    torch.manual_seed(2024)
    state = torch.get_rng_state()
    fresh_tiny_model.train()
    first = engine.generate(PROMPTS, params)
    assert torch.equal(torch.get_rng_state(), state)
    assert fresh_tiny_model.training
    torch.rand(100)  # consuming the global RNG must not change rollouts
    fresh_tiny_model.eval()
    second = engine.generate(PROMPTS, params)
    assert not fresh_tiny_model.training
    assert torch.equal(first.completion_ids, second.completion_ids)
    assert tiny_tokenizer.padding_side == "right"  # caller's tokenizer not mutated


def test_prompt_major_order_and_left_padding(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    n = 3
    r = make_engine(model, tok, batch_size=5).generate(PROMPTS, SamplingParams(n=n, max_new_tokens=5, seed=0))
    assert len(r) == len(PROMPTS) * n
    assert torch.equal(r.prompt_index, torch.arange(len(PROMPTS)).repeat_interleave(n))
    width = max(len(p) for p in PROMPTS)
    assert r.prompt_ids.shape == (len(r), width)
    for row in range(len(r)):
        prompt = PROMPTS[int(r.prompt_index[row])]
        k = len(prompt)
        assert r.prompt_mask[row].tolist() == [0] * (width - k) + [1] * k
        assert tok.decode(r.prompt_ids[row, width - k:].tolist()) == prompt
        assert (r.prompt_ids[row, : width - k] == tok.pad_token_id).all()


@pytest.mark.parametrize("logprob_mode", ["stream", "output_logits"])
def test_logprobs_match_teacher_forced_recompute(tiny_model_and_tokenizer, logprob_mode):
    model, tok = tiny_model_and_tokenizer
    eos = tok.eos_token_id
    biased = _with_logit_bias(model, {eos: 1.2})  # some rows stop early -> right padding too
    engine = HFEngine(biased, tok, batch_size=7, logprob_mode=logprob_mode)  # 3 micro-batches, re-padded
    params = SamplingParams(n=5, temperature=0.7, max_new_tokens=12, seed=7)
    r = engine.generate(PROMPTS, params)
    assert set(r.finish_reasons) == {"stop", "length"}
    logp, ent = _recompute(biased, r, 0.7, with_entropy=True)
    assert (logp - r.logprobs).abs().max().item() <= 1e-4
    assert (r.logprobs[r.completion_mask == 0] == 0).all()
    assert (r.logprobs[r.completion_mask == 1] < 0).all()
    assert ent is not None and ent.shape == logp.shape
    assert (ent[r.completion_mask == 1] > 0).all() and (ent[r.completion_mask == 0] == 0).all()
    # a row of the left-padded batch scores the same as its sequence alone (no padding)
    for row in (0, 6, len(r) - 1):
        k, t = int(r.prompt_mask[row].sum()), int(r.completion_lengths[row])
        with torch.no_grad():
            alone, _ = sequence_logprobs(
                biased, r.prompt_ids[row : row + 1, -k:], r.prompt_mask[row : row + 1, -k:],
                r.completion_ids[row : row + 1, :t], r.completion_mask[row : row + 1, :t], temperature=0.7,
            )
        assert torch.allclose(alone, r.logprobs[row : row + 1, :t], atol=1e-4)


def test_left_padding_with_absolute_position_model(make_engine, tiny_tokenizer):
    """Qwen2's RoPE is shift-invariant, so a wrong position offset would go unnoticed there;
    GPT-2's learned absolute positions are not: generation and recomputation must agree on them."""
    tok = tiny_tokenizer
    model = build_tiny_gpt2(tok)
    with torch.no_grad():
        model.transformer.wpe.weight.mul_(20.0)  # make positions matter
    r = make_engine(model, tok).generate(PROMPTS, SamplingParams(n=2, temperature=0.7, max_new_tokens=8, seed=3))
    logp, _ = _recompute(model, r, 0.7)
    assert (logp - r.logprobs).abs().max().item() <= 1e-4


def test_finish_reasons_and_masks(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id
    biased = _with_logit_bias(model, {eos: 2.3})
    max_new = 10
    r = make_engine(biased, tok).generate(PROMPTS, SamplingParams(n=8, max_new_tokens=max_new, seed=1))
    assert set(r.finish_reasons) == {"stop", "length"}
    lengths = r.completion_lengths
    assert r.completion_ids.shape[1] == int(lengths.max()) <= max_new
    for row, reason in enumerate(r.finish_reasons):
        n_tok = int(lengths[row])
        mask = r.completion_mask[row].tolist()
        assert mask == [1] * n_tok + [0] * (len(mask) - n_tok)  # prefix mask
        ids = r.completion_ids[row]
        assert (ids[n_tok:] == pad).all()
        if reason == "stop":
            assert ids[n_tok - 1].item() == eos
            assert (ids[: n_tok - 1] != eos).all()
        else:
            assert n_tok == max_new
            assert (ids[:n_tok] != eos).all()
        assert r.texts[row] == tok.decode(ids[:n_tok].tolist(), skip_special_tokens=True)
        assert "<eos>" not in r.texts[row] and "<pad>" not in r.texts[row]


def test_greedy_equals_stepwise_argmax(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    max_new = 8
    params = SamplingParams(greedy=True, temperature=0.3, top_p=0.5, n=2, max_new_tokens=max_new, seed=0)
    r = make_engine(model, tok, batch_size=3).generate(PROMPTS, params)
    # n copies are identical; temperature/top_p are ignored; seed is irrelevant
    assert torch.equal(r.completion_ids[0::2], r.completion_ids[1::2])
    greedy_9 = SamplingParams(greedy=True, max_new_tokens=max_new, seed=9)
    r1 = make_engine(model, tok, batch_size=64).generate(PROMPTS, greedy_9)  # other batching, no padding mix-up
    assert torch.equal(r1.completion_ids, r.completion_ids[0::2])
    with torch.no_grad():
        for row in range(0, len(r), 2):
            ids = tok(PROMPTS[int(r.prompt_index[row])])["input_ids"]  # unpadded
            for t in range(int(r.completion_lengths[row])):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                expected = int(logits.argmax())
                assert r.completion_ids[row, t].item() == expected
                lp = torch.log_softmax(logits, -1)[expected].item()  # temperature 1 for greedy
                assert abs(lp - r.logprobs[row, t].item()) <= 1e-4
                ids.append(expected)


def test_top_p_samples_only_inside_nucleus(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    a, b, c = (tok.convert_tokens_to_ids(x) for x in "ABC")
    # other tokens have bias 0 and near-zero logits: ~probabilities .4/.3/.2 for A/B/C, .1 spread over the rest
    rest = len(tok) - 3
    bias = {a: float(torch.log(torch.tensor(4.0 * rest))), b: float(torch.log(torch.tensor(3.0 * rest))),
            c: float(torch.log(torch.tensor(2.0 * rest)))}
    biased = _with_logit_bias(model, bias)
    engine = make_engine(biased, tok)
    nucleus = {a, b, c}
    r = engine.generate(["q"], SamplingParams(n=64, top_p=0.8, max_new_tokens=4, seed=0))
    sampled = set(r.completion_ids[r.completion_mask.bool()].tolist())
    assert sampled <= nucleus and len(sampled) == 3
    # reported log-probs are those of the full softmax, NOT renormalised over the nucleus
    # (the nucleus holds ~90% of the mass here, so renormalising would shift them by ~0.1)
    logp, _ = _recompute(biased, r, 1.0)
    assert (logp - r.logprobs).abs().max().item() <= 1e-4
    # without top-p, tokens outside the nucleus do appear
    full = engine.generate(["q"], SamplingParams(n=64, top_p=1.0, max_new_tokens=4, seed=0))
    assert set(full.completion_ids[full.completion_mask.bool()].tolist()) - nucleus


def test_no_hidden_top_k(make_engine, tiny_model_and_tokenizer):
    """transformers defaults to top_k=50 unless told otherwise; the engine must sample the full vocabulary."""
    model, tok = tiny_model_and_tokenizer
    r = make_engine(model, tok).generate(["q"], SamplingParams(n=256, max_new_tokens=1, seed=0))
    distinct = set(r.completion_ids[:, 0].tolist())  # one context, 256 draws of the first token
    assert len(distinct) > 60  # near-uniform random model over ~99 tokens; top-50 would give <= 50


def test_model_generation_config_does_not_leak(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    params = SamplingParams(n=4, temperature=0.9, max_new_tokens=8, seed=4)
    base = make_engine(model, tok).generate(PROMPTS, params)
    odd = copy.deepcopy(model)
    odd.generation_config.top_k = 1
    odd.generation_config.repetition_penalty = 5.0
    odd.generation_config.min_new_tokens = 8
    odd.generation_config.temperature = 0.1
    saved = odd.generation_config
    other = make_engine(odd, tok).generate(PROMPTS, params)
    assert odd.generation_config is saved and odd.generation_config.top_k == 1
    assert torch.equal(base.completion_ids, other.completion_ids)
    assert torch.equal(base.logprobs, other.logprobs)


def test_empty_inputs(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    engine = make_engine(model, tok)
    assert len(engine.generate([], SamplingParams())) == 0
    with pytest.raises(ValueError, match="prompt 1"):
        engine.generate(["a", ""], SamplingParams())
    with pytest.raises(ValueError, match="single str"):
        engine.generate("abc", SamplingParams())
    with pytest.raises(ValueError, match=r"\.batch_size=0 is invalid: must be an integer >= 1"):
        make_engine(model, tok, batch_size=0)


# -------------------------------------------------------------------- Rollouts
def test_rollouts_select_and_concat(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    biased = _with_logit_bias(model, {tok.eos_token_id: 2.5})
    engine = make_engine(biased, tok)
    short = engine.generate(["ab"], SamplingParams(n=3, max_new_tokens=4, seed=0))
    long = engine.generate(["a longer prompt"], SamplingParams(n=2, max_new_tokens=9, seed=1))
    both = Rollouts.concat([short, long])
    assert len(both) == 5
    assert both.prompt_ids.shape[1] == long.prompt_ids.shape[1]
    assert both.completion_ids.shape[1] == max(short.completion_ids.shape[1], long.completion_ids.shape[1])
    assert torch.equal(both.completion_lengths, torch.cat([short.completion_lengths, long.completion_lengths]))
    assert both.texts == short.texts + long.texts
    # re-padding keeps prompts right-aligned and completions left-aligned, so scores are unchanged
    logp, _ = _recompute(biased, both, 1.0)
    assert torch.allclose(logp, both.logprobs, atol=1e-4)
    sub = both.select([4, 0])
    assert sub.texts == [both.texts[4], both.texts[0]]
    assert torch.equal(sub.completion_ids, both.completion_ids[[4, 0]])
    assert torch.equal(sub.prompt_index, torch.tensor([0, 0]))
    assert len(both.select(torch.tensor([True, False, True, False, False]))) == 2
    assert len(both.select(slice(1, 3))) == 2
    moved = both.to("cpu")
    assert moved.device.type == "cpu" and torch.equal(moved.logprobs, both.logprobs) and moved.texts == both.texts
    with pytest.raises(ValueError, match="at least one"):
        Rollouts.concat([])
    with pytest.raises(ValueError, match="texts"):
        Rollouts(
            prompt_index=both.prompt_index, prompt_ids=both.prompt_ids, prompt_mask=both.prompt_mask,
            completion_ids=both.completion_ids, completion_mask=both.completion_mask, logprobs=both.logprobs,
            texts=both.texts[:-1], finish_reasons=both.finish_reasons,
        )


# ----------------------------------------------------------- sequence_logprobs
def test_sequence_logprobs_gradient_and_entropy(fresh_tiny_model):
    model = fresh_tiny_model
    prompt_ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    prompt_mask = (prompt_ids != 0).long()
    completion_ids = torch.tensor([[11, 12, 1], [13, 0, 0]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    logp, ent = sequence_logprobs(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature=0.5, with_entropy=True
    )
    assert logp.shape == ent.shape == (2, 3)
    assert logp.requires_grad
    (-(logp.sum()) - ent.sum()).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert logp[1, 1:].eq(0).all() and ent[1, 1:].eq(0).all()
    # manual check of the first row's first token
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, 6]])).logits[0, -1] / 0.5
        expected_lp = torch.log_softmax(logits, -1)[11]
        p = torch.softmax(logits, -1)
        expected_ent = -(p * p.log()).sum()
    assert abs(logp[0, 0].item() - expected_lp.item()) < 1e-5
    assert abs(ent[0, 0].item() - expected_ent.item()) < 1e-5
    assert position_ids_from_mask(torch.tensor([[0, 0, 1, 1, 1]])).tolist() == [[0, 0, 0, 1, 2]]
    with pytest.raises(ValueError, match=r"^temperature=0.0 is invalid: must be a number in \(0, inf\)"):
        sequence_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature=0.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_engine_on_cuda(make_engine, tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    cuda_model = copy.deepcopy(model).cuda()
    params = SamplingParams(n=3, temperature=0.7, max_new_tokens=10, seed=2)
    state = torch.cuda.get_rng_state()
    r = make_engine(cuda_model, tok).generate(PROMPTS, params)
    assert torch.equal(torch.cuda.get_rng_state(), state)
    assert r.completion_ids.device.type == "cpu"
    assert torch.equal(r.completion_ids, make_engine(cuda_model, tok).generate(PROMPTS, params).completion_ids)
    g = r.to("cuda")
    logp, _ = _recompute(cuda_model, g, 0.7)
    assert (logp - g.logprobs).abs().max().item() <= 1e-4


def test_logprob_recorder_handles_undone_steps():
    """generate's deferred stop check (MPS today) runs one extra step and then undoes it."""
    from rlvr_lib.rollout.hf import _LogprobRecorder

    gen = torch.Generator().manual_seed(0)
    prompt = torch.tensor([[3, 4], [5, 6]])
    scores = [torch.randn(2, 7, generator=gen) for _ in range(4)]
    tokens = torch.tensor([[1, 2, 3, 4], [6, 5, 4, 3]])
    expected = torch.stack(
        [torch.log_softmax(scores[k] / 0.5, -1).gather(1, tokens[:, k : k + 1]).squeeze(1) for k in range(4)], dim=1
    )
    for calls, kept in [(3, 3), (4, 3)]:  # normal run of 3 steps; 4 steps with the last one undone
        rec = _LogprobRecorder(prompt_width=2, temperature=0.5)
        for k in range(calls):
            rec(torch.cat([prompt, tokens[:, :k]], dim=1), scores[k])
        got = rec.finish(tokens[:, :kept])
        assert torch.allclose(got, expected[:, :kept])


# ------------------------------------------------- sequence_logprobs: kernel path
@pytest.mark.parametrize("arch", ["qwen2_biased_head", "llama", "gpt2"])
def test_kernel_path_equals_logits_path_values_and_gradients(arch, tiny_model_and_tokenizer):
    """Chunked kernel on hidden states == the model's logits + log-softmax, forward and backward
    (entropy gradient included), and the LM head never runs on the kernel path."""
    from rlvr_lib.rollout.logprobs import plain_lm_head

    model, tok = tiny_model_and_tokenizer
    if arch == "qwen2_biased_head":
        model = _with_logit_bias(model, {tok.eos_token_id: 0.7, 5: -0.3})  # untied head with a bias
    else:
        model = (build_tiny_llama if arch == "llama" else build_tiny_gpt2)(tok)
    model.train()
    assert plain_lm_head(model) is not None
    r = HFEngine(model, tok).generate(PROMPTS, SamplingParams(n=3, temperature=0.8, max_new_tokens=9, seed=2))
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    weights = torch.randn(r.completion_ids.shape, generator=torch.Generator().manual_seed(0))

    def run(kernel):
        model.zero_grad(set_to_none=True)
        calls = []
        hook = model.get_output_embeddings().register_forward_hook(lambda *a: calls.append(1))
        logp, ent = sequence_logprobs(model, *args, temperature=0.8, with_entropy=True, kernel=kernel)
        hook.remove()
        ((logp * weights).sum() + 0.3 * ent.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logp.detach(), ent.detach(), grads, len(calls)

    logp_k, ent_k, grads_k, head_calls_k = run("auto")
    logp_l, ent_l, grads_l, head_calls_l = run("logits")
    assert head_calls_k == 0 and head_calls_l >= 1  # the logits path: once per pass (prompt pass, completions)
    assert torch.allclose(logp_k, logp_l, atol=1e-5, rtol=1e-5)
    assert torch.allclose(ent_k, ent_l, atol=1e-5, rtol=1e-5)
    assert (logp_k[r.completion_mask == 0] == 0).all() and (ent_k[r.completion_mask == 0] == 0).all()
    assert grads_k.keys() == grads_l.keys() and len(grads_k) == sum(1 for _ in model.parameters())
    for name in grads_k:
        assert torch.allclose(grads_k[name], grads_l[name], atol=1e-5, rtol=1e-4), name


def test_heads_with_logit_transforms_use_the_logits_path(tiny_model_and_tokenizer):
    from rlvr_lib.rollout.logprobs import plain_lm_head

    model, tok = tiny_model_and_tokenizer
    capped = copy.deepcopy(model)
    capped.config.final_logit_softcapping = 30.0  # Gemma-2 style: logits = 30 tanh(z / 30)
    assert plain_lm_head(model) is not None and plain_lm_head(capped) is None
    with pytest.raises(ValueError, match=r"^kernel='fast' is invalid: must be one of \["):
        sequence_logprobs(model, torch.ones(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.long),
                          torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long), kernel="fast")


def test_length_buckets_equal_one_pass(tiny_model_and_tokenizer):
    """Rows sorted by length and run in trimmed buckets give one pass's values and gradients."""
    model, tok = tiny_model_and_tokenizer
    model = _with_logit_bias(model, {tok.eos_token_id: 2.0})  # lengths vary a lot
    r = HFEngine(model, tok).generate(PROMPTS, SamplingParams(n=12, max_new_tokens=16, seed=4))
    assert len(set(r.completion_lengths.tolist())) >= 5
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    weights = torch.randn(r.completion_ids.shape, generator=torch.Generator().manual_seed(1))
    results = {}
    for buckets in (1, 4):
        model.zero_grad(set_to_none=True)
        logp, ent = sequence_logprobs(model, *args, temperature=0.9, with_entropy=True, length_buckets=buckets)
        ((logp * weights).sum() + ent.sum()).backward()
        results[buckets] = (logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    (lp1, en1, g1), (lp4, en4, g4) = results[1], results[4]
    assert torch.allclose(lp1, lp4, atol=1e-5) and torch.allclose(en1, en4, atol=1e-5)
    for name in g1:
        assert torch.allclose(g1[name], g4[name], atol=1e-5, rtol=1e-4), name
    with pytest.raises(ValueError, match=r"^length_buckets=0 is invalid: must be an integer >= 1"):
        sequence_logprobs(model, *args, length_buckets=0)


@pytest.mark.parametrize("rows", [3, 40])  # one trimmed pass; several buckets
def test_output_keeps_the_callers_width_when_padding_is_trimmed(tiny_model_and_tokenizer, rows):
    """Columns past every row's end are cut before the forward, never from the returned (N, T)."""
    model, tok = tiny_model_and_tokenizer
    prompt_ids = torch.tensor([[0, 5, 6]] * rows)
    prompt_mask = (prompt_ids != 0).long()
    completion_ids = torch.zeros(rows, 9, dtype=torch.long)
    completion_ids[:, :4] = torch.tensor([11, 12, 13, 1])
    completion_mask = (torch.arange(9) < 4).long().expand(rows, -1).contiguous()
    with torch.no_grad():
        logp, ent = sequence_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                      with_entropy=True)
        short, _ = sequence_logprobs(model, prompt_ids[:, 1:], prompt_mask[:, 1:], completion_ids[:, :4],
                                     completion_mask[:, :4])
    assert logp.shape == ent.shape == (rows, 9)
    assert (logp[:, 4:] == 0).all() and (ent[:, 4:] == 0).all()
    assert torch.allclose(logp[:, :4], short, atol=1e-6)


# --------------------------------------------- sequence_logprobs: shared prompts
def _prompt_sharing_results(model, args, weights, *, share, buckets):
    model.zero_grad(set_to_none=True)
    logp, ent = sequence_logprobs(model, *args, temperature=0.8, with_entropy=True, length_buckets=buckets,
                                  share_prompts=share)
    ((logp * weights).sum() + 0.3 * ent.sum()).backward()
    return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ["qwen2", "qwen2_biased_head", "llama", "gpt2"])
@pytest.mark.parametrize("buckets", [1, 4])
def test_shared_prompts_equal_one_pass_values_and_gradients(arch, buckets, tiny_model_and_tokenizer):
    """Each distinct prompt encoded once (its keys/values reused by its rows) gives the one-pass log-probs,
    entropies and gradients, on the kernel path and the logits path (biased head), with left-padded prompts
    of different lengths, completions of different lengths, and trimmed buckets."""
    from rlvr_lib.rollout.logprobs import _SharedPrompts, plain_lm_head

    model, tok = tiny_model_and_tokenizer
    if arch == "qwen2_biased_head":
        model = _with_logit_bias(model, {tok.eos_token_id: 1.5})  # logits path; EOS likely, so lengths vary
    elif arch != "qwen2":
        model = (build_tiny_llama if arch == "llama" else build_tiny_gpt2)(tok)
    model = copy.deepcopy(model).train()
    r = HFEngine(model, tok).generate(PROMPTS, SamplingParams(n=8, temperature=1.0, max_new_tokens=12, seed=3))
    lengths = r.completion_lengths.clone()
    r.completion_mask[1::3, 5:] = 0  # shorter completions in every group, whatever was sampled
    assert len(set(r.completion_mask.sum(1).tolist())) >= 2 and len(set(r.prompt_mask.sum(1).tolist())) >= 3
    assert bool((lengths >= 6).any())
    args = (r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
    shared = _SharedPrompts.build(model, plain_lm_head(model), r.prompt_ids, r.prompt_mask)
    assert shared is not None and len(shared.last) == len(PROMPTS)  # the path under test is taken
    weights = torch.randn(r.completion_ids.shape, generator=torch.Generator().manual_seed(0))
    lp0, en0, g0 = _prompt_sharing_results(model, args, weights, share=False, buckets=buckets)
    lp1, en1, g1 = _prompt_sharing_results(model, args, weights, share=True, buckets=buckets)
    assert torch.allclose(lp0, lp1, atol=1e-5, rtol=1e-5) and torch.allclose(en0, en1, atol=1e-5, rtol=1e-5)
    assert (lp1[r.completion_mask == 0] == 0).all() and (en1[r.completion_mask == 0] == 0).all()
    assert g0.keys() == g1.keys() and len(g1) == sum(1 for _ in model.parameters())
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=1e-5, rtol=1e-4), name


def test_shared_prompts_only_when_prompts_repeat(tiny_model_and_tokenizer):
    """Distinct prompts (or under two rows per prompt) take the one-pass path; so do caches that cannot be
    shared (a sliding-window layer); the one-token completion uses the prompt pass alone."""
    from transformers import Qwen2ForCausalLM

    from rlvr_lib.rollout.logprobs import _SharedPrompts, plain_lm_head

    model, tok = tiny_model_and_tokenizer
    enc = tok(PROMPTS, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    head = plain_lm_head(model)
    config = copy.deepcopy(model.config)
    config.use_sliding_window, config.sliding_window = True, 4
    config.layer_types = ["sliding_attention"] + config.layer_types[1:]
    sliding = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        assert _SharedPrompts.build(model, head, ids, mask) is None
        assert _SharedPrompts.build(model, head, ids[[0, 0, 1, 2]], mask[[0, 0, 1, 2]]) is None
        assert _SharedPrompts.build(model, head, ids[[0, 0, 1, 1]], mask[[0, 0, 1, 1]]) is not None
        assert _SharedPrompts.build(sliding, plain_lm_head(sliding), ids[[0, 0, 1, 1]], mask[[0, 0, 1, 1]]) is None
        rows = [0, 0, 0, 1, 1, 1]
        one_token = torch.tensor([[7]] * 6)
        a, _ = sequence_logprobs(model, ids[rows], mask[rows], one_token, torch.ones_like(one_token))
        b, _ = sequence_logprobs(model, ids[rows], mask[rows], one_token, torch.ones_like(one_token),
                                 share_prompts=False)
    assert torch.allclose(a, b, atol=1e-6)
