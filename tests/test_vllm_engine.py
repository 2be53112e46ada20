"""`VLLMEngine` (`rlvr_lib.rollout.vllm_engine`): what the real engine cannot show, against a fake ``vllm`` module.

The engine runs against the real vLLM (its CPU build) in ``tests/test_vllm_real.py`` (``make test-vllm``,
in ``.venv-vllm``): greedy tokens equal ``KVCacheEngine``'s, sampled log-probs equal a teacher-forced
recomputation (vLLM's at ``top_p = 1``, recomputed at ``top_p < 1``), weights follow an optimizer step, a
3PO weight sample and the restored mean, and GRPO and the TRL backend train. What stays here is what the
real engine cannot show: the conversion of vLLM's outputs to `Rollouts` and the errors on outputs that
break the conventions (scripted outputs), the log-prob source rules for an LLM in ``raw_logprobs`` mode,
the ``vllm.LLM`` arguments the engine builds from a `TrainerConfig`, the errors without vLLM or without
an in-process engine, and the shared engine contract of ``test_rollout.py`` on its test models (GPT-2
with absolute positions among them), whose head sizes (16) vLLM's CPU attention refuses. The CUDA tests
at the end run only with a GPU.

The fake (:func:`make_fake_vllm`, put in ``sys.modules["vllm"]`` by the
``fake_vllm`` fixture) mimics the parts of vLLM's API the engine uses:

* ``LLM(**engine_args)``: loads the checkpoint directory ``model`` with
  transformers (the one the engine saved) and samples from it, one token per
  full forward; ``llm_engine.model_config.logprobs_mode`` and
  ``llm_engine.model_executor.driver_worker.model_runner.model.load_weights``
  (the in-process V0/V1 layout), which records every tensor it receives;
* ``LLM.generate(prompts, sampling_params=[...], use_tqdm=...)`` with
  ``{"prompt_token_ids": ids}`` prompts, returning ``RequestOutput``-like
  objects: ``outputs[0].token_ids``, ``.logprobs`` (a list of ``{token:
  Logprob(logprob=...)}``) and ``.finish_reason``, the length check before the
  stop check as in vLLM V1's scheduler; log-probs as ``logprobs_mode`` says
  (``processed_logprobs``: after temperature and top-p, so renormalised over
  the nucleus; otherwise the raw log-softmax);
* ``SamplingParams(...)``: a record of its keyword arguments.

:class:`ScriptedLLM` (passed as ``llm=``) returns completions written by the
test, for the conversion to :class:`~rlvr_lib.rollout.Rollouts`.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr_lib.rollout import (KVCacheEngine, Rollouts, SamplingParams, VLLMEngine, build_engine,
                              sequence_logprobs)
from rlvr_lib.rollout.kvcache import top_p_filter
from rlvr_lib.seeding import seed_from
from rlvr_lib.trainer import Trainer
from rlvr_lib.trainer_config import TrainerConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["12+3=", "hello", "x"]


# ----------------------------------------------------------------------------------- the fake vllm
class FakeSamplingParams:
    """``vllm.SamplingParams``: keeps its keyword arguments as attributes."""

    def __init__(self, n=1, temperature=1.0, top_p=1.0, max_tokens=16, seed=None, logprobs=None,
                 stop_token_ids=None, detokenize=True):
        self.n, self.temperature, self.top_p, self.max_tokens = n, temperature, top_p, max_tokens
        self.seed, self.logprobs, self.detokenize = seed, logprobs, detokenize
        self.stop_token_ids = list(stop_token_ids or [])


class FakeVllmModel:
    """vLLM's model object: ``load_weights`` records (a copy of) what it gets and loads it."""

    def __init__(self, policy):
        self.policy = policy
        self.loads: list[dict[str, torch.Tensor]] = []

    def load_weights(self, weights):
        weights = dict(weights)
        self.loads.append({name: t.detach().clone() for name, t in weights.items()})
        self.policy.load_state_dict(weights)


def _completion(token_ids, logprobs, finish_reason):
    entries = [{t: SimpleNamespace(logprob=v)} for t, v in zip(token_ids, logprobs)]
    return SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=list(token_ids), logprobs=entries,
                                                    finish_reason=finish_reason)])


def _llm_engine(model, logprobs_mode, layout="v0"):
    runner = SimpleNamespace(model=model)
    worker = SimpleNamespace(model_runner=runner) if layout == "v0" else SimpleNamespace(worker=SimpleNamespace(
        model_runner=runner))
    return SimpleNamespace(model_config=SimpleNamespace(logprobs_mode=logprobs_mode),
                           model_executor=SimpleNamespace(driver_worker=worker))


class FakeLLM:
    """``vllm.LLM`` sampling from its own copy of the policy (see the module docstring)."""

    instances: list["FakeLLM"] = []

    def __init__(self, model=None, *, policy=None, **engine_args):
        from transformers import AutoModelForCausalLM

        self.engine_args = dict(model=model, **engine_args)
        policy = policy if policy is not None else AutoModelForCausalLM.from_pretrained(model)
        self.vllm_model = FakeVllmModel(policy.float().eval())
        self.logprobs_mode = engine_args.get("logprobs_mode", "raw_logprobs")
        self.llm_engine = _llm_engine(self.vllm_model, self.logprobs_mode)
        self.requests: list[tuple[list[int], FakeSamplingParams]] = []
        self.generate_calls = 0
        FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.generate_calls += 1
        outputs = []
        for prompt, sp in zip(prompts, sampling_params, strict=True):
            self.requests.append((list(prompt["prompt_token_ids"]), sp))
            outputs.append(self._sample(list(prompt["prompt_token_ids"]), sp))
        return outputs

    @torch.no_grad()
    def _sample(self, ids, sp):
        gen = torch.Generator().manual_seed(sp.seed)
        tokens, values, reason = [], [], None
        while reason is None:
            logits = self.vllm_model.policy(torch.tensor([ids])).logits[0, -1].float()
            raw = torch.log_softmax(logits, -1)
            if sp.temperature == 0:
                token, processed = int(logits.argmax()), raw
            else:
                processed = torch.log_softmax(top_p_filter(torch.log_softmax(logits / sp.temperature, -1)[None],
                                                           sp.top_p)[0], -1)
                token = int(torch.multinomial(processed.exp(), 1, generator=gen))
            value = processed if self.logprobs_mode == "processed_logprobs" else raw
            tokens.append(token), values.append(float(value[token])), ids.append(token)
            if len(tokens) == sp.max_tokens:  # V1 checks the length before the stop tokens
                reason = "length"
            elif token in sp.stop_token_ids:
                reason = "stop"
        return _completion(tokens, values, reason)


def make_fake_vllm() -> types.ModuleType:
    """A module named ``vllm`` with the fake ``LLM`` and ``SamplingParams``."""
    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = FakeSamplingParams
    return fake


@pytest.fixture
def fake_vllm(monkeypatch):
    """The fake module as ``vllm``; the environment variable the engine sets is restored afterwards."""
    monkeypatch.setitem(sys.modules, "vllm", make_fake_vllm())
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    FakeLLM.instances = []
    return sys.modules["vllm"]


class ScriptedLLM:
    """A ready ``vllm.LLM`` whose completions come from ``script(prompt_ids, seed, max_tokens)``."""

    def __init__(self, script, logprobs_mode="processed_logprobs", layout="v0"):
        self.script = script
        self.vllm_model = FakeVllmModel(torch.nn.Module())
        self.vllm_model.load_weights = lambda weights: self.vllm_model.loads.append(dict(weights))
        self.llm_engine = _llm_engine(self.vllm_model, logprobs_mode, layout)
        self.requests = []

    def generate(self, prompts, sampling_params, use_tqdm=True):
        outs = []
        for prompt, sp in zip(prompts, sampling_params, strict=True):
            self.requests.append((list(prompt["prompt_token_ids"]), sp))
            outs.append(_completion(*self.script(list(prompt["prompt_token_ids"]), sp.seed, sp.max_tokens)))
        return outs


# ------------------------------------------------------------------------- conversion to Rollouts
def _row_of_seed(seed: int, rows: int) -> dict[int, int]:
    return {seed_from(seed, r): r for r in range(rows)}


def test_rollouts_follow_the_conventions(fake_vllm, fresh_tiny_model, tiny_tokenizer):
    """Left-padded prompts, right-padded completions with EOS kept, masks, finish reasons, log-prob
    alignment and prompt-major order, across two micro-batches, from scripted vLLM outputs."""
    eos, pad = tiny_tokenizer.eos_token_id, tiny_tokenizer.pad_token_id
    params = SamplingParams(n=2, temperature=0.7, max_new_tokens=4, seed=5)
    rows = len(PROMPTS) * params.n
    row_of = _row_of_seed(params.seed, rows)
    letters = tiny_tokenizer.convert_tokens_to_ids(list("abcdef"))

    def script(prompt, seed, max_tokens):
        r = row_of[seed]
        body = [prompt[-1]] + letters[: max_tokens - 1]  # echo the prompt's last token: checks the pairing
        kind = r % 3
        if kind == 0:  # EOS after two tokens
            tokens, reason = body[:2] + [eos], "stop"
        elif kind == 1:  # no EOS
            tokens, reason = body[:max_tokens], "length"
        else:  # EOS as the last allowed token: vLLM V1 says "length"
            tokens, reason = body[: max_tokens - 1] + [eos], "length"
        return tokens, [-0.1 * (t + 1) - 0.01 * r for t in range(len(tokens))], reason

    llm = ScriptedLLM(script)
    engine = VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=llm, batch_size=4)
    out = engine.generate(PROMPTS, params)

    assert isinstance(out, Rollouts) and len(out) == rows
    assert out.prompt_index.tolist() == [0, 0, 1, 1, 2, 2]
    ids, mask = engine.encode_prompts([PROMPTS[i] for i in out.prompt_index.tolist()])
    assert torch.equal(out.prompt_ids, ids) and torch.equal(out.prompt_mask, mask)
    assert out.prompt_ids[:, -1].tolist() == [tiny_tokenizer.encode(PROMPTS[i])[-1] for i in out.prompt_index]
    lengths = [3, 4, 4, 3, 4, 4]
    assert out.completion_lengths.tolist() == lengths
    assert out.finish_reasons == ["stop", "length", "stop", "stop", "length", "stop"]
    for r, n in enumerate(lengths):
        tokens, values, _ = script(llm.requests[r][0], seed_from(params.seed, r), 4)
        assert out.completion_ids[r, :n].tolist() == tokens
        assert (out.completion_ids[r, n:] == pad).all() and out.completion_mask[r].tolist() == [1] * n + [0] * (4 - n)
        assert torch.allclose(out.logprobs[r, :n], torch.tensor(values)) and (out.logprobs[r, n:] == 0).all()
        assert out.texts[r] == tiny_tokenizer.decode(tokens, skip_special_tokens=True)
    # The requests: one per row, prompt-major, un-padded prompts, per-row seeds, this engine's EOS.
    assert [p for p, _ in llm.requests] == [tiny_tokenizer.encode(PROMPTS[r // 2]) for r in range(rows)]
    assert [sp.seed for _, sp in llm.requests] == [seed_from(params.seed, r) for r in range(rows)]
    assert len({sp.seed for _, sp in llm.requests}) == rows
    for _, sp in llm.requests:
        assert (sp.n, sp.temperature, sp.top_p, sp.max_tokens, sp.logprobs) == (1, 0.7, 1.0, 4, 0)
        assert sp.stop_token_ids == [eos] and sp.detokenize is False
    assert len(llm.vllm_model.loads) == 1  # one sync per generate call, not per micro-batch


def test_greedy_requests_temperature_zero(fake_vllm, fresh_tiny_model, tiny_tokenizer):
    llm = ScriptedLLM(lambda prompt, seed, m: ([tiny_tokenizer.eos_token_id], [-0.5], "stop"), layout="v1")
    engine = VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=llm)
    out = engine.generate(PROMPTS, SamplingParams(greedy=True, temperature=0.3, top_p=0.5, max_new_tokens=3))
    assert [(sp.temperature, sp.top_p) for _, sp in llm.requests] == [(0.0, 1.0)] * 3
    assert out.completion_ids.tolist() == [[tiny_tokenizer.eos_token_id]] * 3 and out.texts == [""] * 3
    assert out.logprobs.tolist() == [[-0.5]] * 3  # greedy: vLLM's values (temperature-1 log-softmax)


@pytest.mark.parametrize("tokens,values,reason,match", [
    ([5, 6], [-1.0, -1.0], "stop", "without ending on an EOS"),
    ([5], [-1.0], "length", "max_model_len"),
    ([5, 6, 7], [-1.0] * 3, "abort", "finish_reason='abort'"),
])
def test_outputs_breaking_the_conventions_raise(fake_vllm, fresh_tiny_model, tiny_tokenizer, tokens, values,
                                                reason, match):
    engine = VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=ScriptedLLM(lambda p, s, m: (tokens, values, reason)))
    with pytest.raises(RuntimeError, match=match):
        engine.generate(["ab"], SamplingParams(max_new_tokens=3))


def test_missing_logprob_of_the_sampled_token_raises(fake_vllm, fresh_tiny_model, tiny_tokenizer):
    llm = ScriptedLLM(lambda p, s, m: ([5, 6, 7], [-1.0] * 3, "length"))
    engine = VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=llm)
    llm.generate = lambda prompts, sampling_params, use_tqdm: [SimpleNamespace(outputs=[SimpleNamespace(
        token_ids=[5, 6, 7], logprobs=[{5: SimpleNamespace(logprob=-1.0)}, {9: SimpleNamespace(logprob=-1.0)},
                                       {7: SimpleNamespace(logprob=-1.0)}], finish_reason="length")])]
    with pytest.raises(RuntimeError, match="miss the sampled token 6"):
        engine.generate(["ab"], SamplingParams(max_new_tokens=3))


# ------------------------------------------------ the shared engine contract of test_rollout.py, on the fake
# These tests of test_rollout.py run here once more, with ``make_engine`` building VLLMEngine over the fake
# vLLM (which samples from the model the engine saved and keeps in sync): determinism per seed, global RNG
# and model mode untouched, prompt-major order and left padding, absolute positions (GPT-2), greedy = stepwise
# argmax, no hidden top-k, no leak of the model's generation_config, empty and bad inputs. (Those on models
# with an added LM-head bias do not apply: vLLM loads the checkpoint's architecture, which has none.)
from test_rollout import (  # noqa: E402,F401
    test_empty_inputs,
    test_engine_protocol_and_seed_determinism,
    test_global_rng_untouched_and_mode_restored,
    test_greedy_equals_stepwise_argmax,
    test_left_padding_with_absolute_position_model,
    test_model_generation_config_does_not_leak,
    test_no_hidden_top_k,
    test_prompt_major_order_and_left_padding,
)


@pytest.fixture
def make_engine(fake_vllm):
    """``make_engine(model, tokenizer, **kwargs)`` of the imported contract tests: a VLLMEngine on the fake."""
    return VLLMEngine


# ---------------------------------------------------------------------------------- log-prob source
def _recomputed(model, r: Rollouts, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask,
                                    temperature=temperature)
    return logp * r.completion_mask


def test_logprob_source_validation(fake_vllm, fresh_tiny_model, tiny_tokenizer):
    raw = FakeLLM(policy=copy.deepcopy(fresh_tiny_model), logprobs_mode="raw_logprobs")
    with pytest.raises(ValueError, match=r"^VLLMEngine.logprobs='vllm' is invalid: must be 'auto' or 'recompute'"):
        VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=raw, logprobs="vllm")
    with pytest.raises(ValueError, match=r"^VLLMEngine.logprobs='exact' is invalid: must be one of"):
        VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=raw, logprobs="exact")
    with pytest.raises(ValueError, match=r"^VLLMEngine.llm_kwargs=\{'max_model_len': 64\} is invalid"):
        VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=raw, llm_kwargs={"max_model_len": 64})
    # auto with an LLM reporting raw (temperature-1) log-probs: recomputed at the sampling temperature.
    out = VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=raw).generate(
        PROMPTS, SamplingParams(temperature=0.5, max_new_tokens=5, seed=3))
    torch.testing.assert_close(out.logprobs, _recomputed(fresh_tiny_model, out, 0.5), atol=1e-6, rtol=0)

    exact = VLLMEngine(fresh_tiny_model, tiny_tokenizer, logprobs="vllm")
    with pytest.raises(ValueError, match=r"^VLLMEngine.logprobs='vllm' is invalid: .*top_p=0.9"):
        exact.generate(PROMPTS, SamplingParams(top_p=0.9))
    with pytest.raises(ValueError, match=r"^SamplingParams.temperature=0.005 is invalid: must be >= 0.01"):
        exact.generate(PROMPTS, SamplingParams(temperature=0.005))


# ------------------------------------------------------------------------------------ weight sync
def _state(model) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- selection and training
def test_trainer_config_engine_builds_a_vllm_engine_and_trains(fake_vllm, fresh_tiny_model, tiny_tokenizer):
    cfg = TrainerConfig(engine="vllm", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=6,
                        train_pool_size=8, lr=1e-3)
    trainer = Trainer(cfg, fresh_tiny_model, tiny_tokenizer)
    assert isinstance(trainer.engine, VLLMEngine) and trainer.engine.batch_size == cfg.rollout_batch_size
    (llm,) = FakeLLM.instances
    args = llm.engine_args
    assert Path(args["model"], "config.json").exists() and args["model"] == trainer.engine._checkpoint.name
    assert args["dtype"] == "float32" and args["logprobs_mode"] == "processed_logprobs"
    assert args["skip_tokenizer_init"] is True and args["generation_config"] == "vllm"
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    before = _state(trainer.model)
    history = trainer.train(progress=False)
    assert len(history) == 1 and len(llm.requests) == cfg.prompts_per_step * cfg.group_size
    assert len(llm.vllm_model.loads) == 1 and _equal(llm.vllm_model.loads[0], before)  # synced before sampling
    # llm_kwargs reach the LLM and override the defaults.
    VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm_kwargs={"gpu_memory_utilization": 0.2, "max_model_len": 64})
    assert FakeLLM.instances[-1].engine_args["gpu_memory_utilization"] == 0.2
    assert FakeLLM.instances[-1].engine_args["max_model_len"] == 64


def test_engine_field_and_selection(fresh_tiny_model, tiny_tokenizer):
    assert "engine" not in TrainerConfig().to_dict()
    assert TrainerConfig(engine="kvcache").config_hash() == TrainerConfig().config_hash()
    hf = TrainerConfig(engine="hf")
    assert hf.to_dict()["engine"] == "hf" and hf.config_hash() != TrainerConfig().config_hash()
    assert TrainerConfig.from_dict(hf.to_dict()) == hf
    assert TrainerConfig.from_dict(TrainerConfig().to_dict()).engine == "kvcache"
    with pytest.raises(ValueError, match=r"^TrainerConfig.engine='sglang' is invalid: must be one of "
                                         r"\['kvcache', 'hf', 'vllm', 'vllm-server'\]"):
        TrainerConfig(engine="sglang")
    with pytest.raises(ValueError, match=r"^engine='x' is invalid"):
        build_engine("x", fresh_tiny_model, tiny_tokenizer)
    from rlvr_lib.rollout import HFEngine

    small = dict(prompts_per_step=2, group_size=2, train_pool_size=8)
    assert type(Trainer(TrainerConfig(**small), fresh_tiny_model, tiny_tokenizer).engine) is KVCacheEngine
    assert type(Trainer(TrainerConfig(engine="hf", **small), fresh_tiny_model, tiny_tokenizer).engine) is HFEngine
    mine = KVCacheEngine(fresh_tiny_model, tiny_tokenizer)
    assert Trainer(TrainerConfig(engine="vllm", **small), fresh_tiny_model, tiny_tokenizer, engine=mine).engine is mine


def test_without_vllm_the_engine_says_how_to_install_it(monkeypatch, fresh_tiny_model, tiny_tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"gpu extra"):
        build_engine("vllm", fresh_tiny_model, tiny_tokenizer)
    TrainerConfig(engine="vllm")  # the config itself never needs vllm


def test_importing_the_library_does_not_import_vllm():
    code = ("import sys, rlvr_lib, rlvr_lib.rollout, rlvr_lib.trainer, rlvr_lib.methods; "
            "assert 'vllm' not in sys.modules, 'vllm imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


def test_unreachable_model_raises_a_clear_error(fake_vllm, fresh_tiny_model, tiny_tokenizer):
    llm = ScriptedLLM(lambda p, s, m: ([1], [0.0], "stop"))
    llm.llm_engine = SimpleNamespace(model_config=llm.llm_engine.model_config)  # engine core in another process
    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=llm)
    llm.llm_engine.model_executor = SimpleNamespace(driver_worker=SimpleNamespace(model_runner=SimpleNamespace()))
    with pytest.raises(RuntimeError, match="_vllm_model"):
        VLLMEngine(fresh_tiny_model, tiny_tokenizer, llm=llm)


# ------------------------------------------------------------------------------------ real vLLM, CUDA
needs_vllm_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
    reason="needs CUDA and vllm (the gpu extra)",
)


@pytest.fixture(scope="module")
def cuda_engines():
    """The shipped tiny policy on CUDA (float32), a VLLMEngine built from it (saved with save_pretrained
    to a temporary directory) and a KVCacheEngine over the same model; 16 arithmetic prompts."""
    from rlvr_lib.policy import load_policy
    from rlvr_lib.tasks import get_task

    model, tokenizer = load_policy(device="cuda")
    vllm_engine = VLLMEngine(model, tokenizer, llm_kwargs=dict(enforce_eager=True, gpu_memory_utilization=0.25,
                                                               max_model_len=256))
    prompts = [p.prompt for p in get_task("arith").family_problems("train", 16, seed=0)]
    return model, vllm_engine, KVCacheEngine(model, tokenizer), prompts


def _greedy_matches(vllm_engine, kv_engine, prompts) -> Rollouts:
    params = SamplingParams(greedy=True, max_new_tokens=40)
    got, want = vllm_engine.generate(prompts, params), kv_engine.generate(prompts, params)
    assert torch.equal(got.completion_ids, want.completion_ids)
    assert torch.equal(got.completion_mask, want.completion_mask) and got.finish_reasons == want.finish_reasons
    assert got.texts == want.texts
    torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-3, rtol=0)
    return got


@pytest.mark.gpu
@needs_vllm_gpu
def test_vllm_greedy_equals_kvcache_and_follows_weight_updates(cuda_engines):
    model, vllm_engine, kv_engine, prompts = cuda_engines
    before = _greedy_matches(vllm_engine, kv_engine, prompts)
    with torch.no_grad():  # move the weights as an optimizer would; vLLM must follow on the next call
        gen = torch.Generator(device="cuda").manual_seed(0)
        for p in model.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, device=p.device, generator=gen))
    after = _greedy_matches(vllm_engine, kv_engine, prompts)
    assert not torch.equal(before.logprobs, after.logprobs)


@pytest.mark.gpu
@needs_vllm_gpu
def test_vllm_sampled_logprobs_are_log_softmax_at_the_temperature(cuda_engines):
    model, vllm_engine, _, prompts = cuda_engines
    params = SamplingParams(n=4, temperature=0.7, max_new_tokens=40, seed=3)
    out = vllm_engine.generate(prompts, params)  # top_p = 1: vLLM's processed log-probs
    torch.testing.assert_close(out.logprobs, _recomputed(model, out.to("cuda"), 0.7).cpu(), atol=1e-3, rtol=0)
    groups = out.completion_ids.view(len(prompts), params.n, -1)
    assert any(len({tuple(r.tolist()) for r in g}) > 1 for g in groups)  # per-row seeds: a group is not one sample
    assert torch.equal(vllm_engine.generate(prompts, params).completion_ids, out.completion_ids)
    nucleus = vllm_engine.generate(prompts, SamplingParams(n=2, temperature=1.0, top_p=0.9, max_new_tokens=40))
    torch.testing.assert_close(nucleus.logprobs, _recomputed(model, nucleus.to("cuda"), 1.0).cpu(), atol=1e-5, rtol=0)
