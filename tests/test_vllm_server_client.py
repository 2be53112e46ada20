"""`VLLMServerEngine`'s client side without vLLM: requests, answers, weight sync and its errors.

The server here is a real HTTP server (the standard library's ``ThreadingHTTPServer`` on 127.0.0.1, a free
port) answering the endpoints of vLLM's OpenAI-compatible server that the engine calls, with the JSON shapes
vLLM 0.32 sends (``/server_info``, ``/v1/completions``, ``/collective_rpc``, ``/reset_prefix_cache``,
``/weight_info``, ``/update_weight_version``); it records every request. Its completions are fixed token rows, so
what the engine builds from them is checked exactly. The real server runs in ``.venv-vllm``
(tests/test_vllm_server.py)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import torch

from rlvr_lib.rollout import SamplingParams, build_engine
from rlvr_lib.rollout.vllm_server import (SERVER_URL_ENV, ServerError, VLLMServerEngine, fingerprint,
                                          parse_completion, server_url)
from rlvr_lib.seeding import seed_from


class FakeVLLM:
    """State of the test server: what it answers and what it was asked."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict]] = []
        self.version = "default"
        self.logprobs_mode = "processed_logprobs"
        self.dtype = "torch.float32"
        self.dev_mode = True
        self.completion = [7, 8, 1]  # token ids of every completion (1: the tokenizer's EOS)
        self.with_logprobs = True
        self.reload_error = None
        self.loaded: dict[str, torch.Tensor] | None = None
        self.loads: list[dict[str, torch.Tensor]] = []

    def answer(self, method: str, path: str, body: dict, query: dict) -> tuple[int, object]:
        self.requests.append((method, path, body))
        if not self.dev_mode and path in ("/server_info", "/collective_rpc", "/weight_info"):
            return 404, {"detail": "Not Found"}
        if path == "/server_info":
            return 200, {"vllm_config": {"model_config": {
                "model": "/models/policy", "served_model_name": "/models/policy", "dtype": self.dtype,
                "logprobs_mode": self.logprobs_mode, "max_model_len": 256}}}
        if path == "/weight_info":
            return 200, {"weight_version": self.version}
        if path == "/update_weight_version":
            self.version = body["new_version"]
            return 200, {"success": True, "new_version": self.version}
        if path == "/reset_prefix_cache":
            return 200, None
        if path == "/collective_rpc":
            if self.reload_error:
                return 500, {"error": {"message": self.reload_error}}
            from safetensors.torch import load_file

            file = Path(body["kwargs"]["weights_path"]) / "model.safetensors"
            if not file.is_file():  # as vLLM: the folder must exist where the server looks
                return 500, {"error": {"message": f"No safetensors found in {file.parent}"}}
            self.loaded = load_file(str(file))
            self.loads.append(self.loaded)
            return 200, None
        if path == "/v1/completions":
            ids = self.completion[: body["max_tokens"]]
            logprobs = {"token_logprobs": [-0.5 - 0.25 * i for i in range(len(ids))], "tokens": [],
                        "top_logprobs": [], "text_offset": []}
            return 200, {"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [{
                "index": 0, "text": "", "token_ids": ids, "logprobs": logprobs if self.with_logprobs else None,
                "finish_reason": "stop" if ids[-1] == 1 else "length", "stop_reason": None}]}
        return 404, {"detail": "Not Found"}


@pytest.fixture
def fake():
    state = FakeVLLM()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method):
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            status, payload = state.answer(method, parts.path, body, parse_qs(parts.query))
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply("GET")

        def do_POST(self):
            self._reply("POST")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paths(fake, name):
    return [body for _, path, body in fake.requests if path == name]


# ------------------------------------------------------------------------------------------ server URL
def test_server_url_forms_and_errors(monkeypatch):
    monkeypatch.delenv(SERVER_URL_ENV, raising=False)
    assert server_url("http://10.0.0.2:8000/") == "http://10.0.0.2:8000"
    assert server_url(host="node7", port=8001) == "http://node7:8001"
    assert server_url(host="node7") == "http://node7:8000"
    monkeypatch.setenv(SERVER_URL_ENV, "http://127.0.0.1:9")
    assert server_url() == "http://127.0.0.1:9"
    monkeypatch.delenv(SERVER_URL_ENV)
    with pytest.raises(ValueError, match=f"no server given: pass server_url .*set {SERVER_URL_ENV}"):
        server_url()
    with pytest.raises(ValueError, match=r"VLLMServerEngine.server_url='127.0.0.1:8000' is invalid: must be http"):
        server_url("127.0.0.1:8000")
    with pytest.raises(ValueError, match=r"server_url='http://h:1/v1' is invalid"):
        server_url("http://h:1/v1")
    with pytest.raises(ValueError, match=r"VLLMServerEngine.port=70000 is invalid: must be at most 65535"):
        server_url(host="h", port=70000)
    with pytest.raises(ValueError, match=r"given without host/port"):
        server_url("http://h:1", host="h")


def test_an_unreachable_server_is_one_line_naming_the_url_and_how_to_start_one(fresh_tiny_model, tiny_tokenizer):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError) as err:
        VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=url, connect_timeout=5)
    message = str(err.value)
    assert message.startswith(f"vLLM server unreachable at {url} (ConnectionError); start one with: "
                              "VLLM_SERVER_DEV_MODE=1 vllm serve CHECKPOINT")
    assert f"--port {url.rsplit(':', 1)[1]}" in message and "--logprobs-mode processed_logprobs" in message
    assert "\n" not in message


def test_the_registry_builds_it_from_the_environment(fake, fresh_tiny_model, tiny_tokenizer, monkeypatch):
    monkeypatch.setenv(SERVER_URL_ENV, fake.url)
    engine = build_engine("vllm-server", fresh_tiny_model, tiny_tokenizer, batch_size=4)
    assert isinstance(engine, VLLMServerEngine) and engine.url == fake.url and engine.batch_size == 4
    assert paths(fake, "/server_info") == [{}]
    engine.close()


# ---------------------------------------------------------------------------------------- server checks
def test_a_server_without_dev_mode_or_with_the_wrong_settings_is_refused(fake, fresh_tiny_model, tiny_tokenizer):
    fake.dev_mode = False
    with pytest.raises(ServerError, match=r"has no /server_info endpoint: start it with VLLM_SERVER_DEV_MODE=1"):
        VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url)
    fake.dev_mode, fake.logprobs_mode = True, "raw_logprobs"
    with pytest.raises(ValueError, match=r"reports log-probs in mode 'raw_logprobs'; start it with --logprobs-mode "
                                         r"processed_logprobs"):
        VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url)
    VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url, logprobs="recompute").close()
    fake.logprobs_mode, fake.dtype = "processed_logprobs", "torch.bfloat16"
    with pytest.raises(ValueError, match=r"runs the model in bfloat16, the trainer in float32; start it with "
                                         r"--dtype float32"):
        VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url)
    with pytest.raises(ValueError, match=r"VLLMServerEngine.logprobs='vllm' is invalid"):
        VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url, logprobs="vllm")


# ------------------------------------------------------------------------------- requests and answers
def test_requests_carry_token_ids_per_row_seeds_and_the_rollouts_hold_the_answers(fake, fresh_tiny_model,
                                                                                  tiny_tokenizer):
    engine = VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url, batch_size=3)
    prompts = ["12*34=", "5*6="]
    params = SamplingParams(n=2, temperature=0.7, top_p=1.0, max_new_tokens=5, seed=11)
    out = engine.generate(prompts, params)
    bodies = paths(fake, "/v1/completions")
    assert len(bodies) == 4
    ids, mask = engine.encode_prompts(prompts)
    by_seed = {b["seed"]: b for b in bodies}
    assert sorted(by_seed) == sorted(seed_from(11, r) for r in range(4))  # row r of the call: seed_from(seed, r)
    for r in range(4):
        body = by_seed[seed_from(11, r)]
        p = r // 2
        assert body["prompt"] == ids[p][mask[p].bool()].tolist()
        assert body["temperature"] == 0.7 and body["top_p"] == 1.0 and body["max_tokens"] == 5 and body["n"] == 1
        assert body["logprobs"] == 0 and body["return_token_ids"] is True and body["top_k"] == -1
        assert body["stop_token_ids"] == engine.eos_token_ids and body["model"] == "/models/policy"
    assert out.completion_ids.tolist() == [[7, 8, 1]] * 4 and out.finish_reasons == ["stop"] * 4
    torch.testing.assert_close(out.logprobs, torch.tensor([[-0.5, -0.75, -1.0]] * 4))
    greedy = engine.generate(prompts[:1], SamplingParams(greedy=True, max_new_tokens=2))
    body = paths(fake, "/v1/completions")[-1]
    assert body["temperature"] == 0.0 and body["top_p"] == 1.0
    assert greedy.completion_ids.tolist() == [[7, 8]] and greedy.finish_reasons == ["length"]
    with pytest.raises(ValueError, match=r"SamplingParams.temperature=0.001 is invalid: must be >= 0.01"):
        engine.generate(prompts, SamplingParams(temperature=1e-3))
    with pytest.raises(ValueError, match=r"prompt tokens \+ max_new_tokens=30. is invalid: must be at most the "
                                         r"server's max_model_len=256"):
        engine.generate(prompts, SamplingParams(max_new_tokens=300))
    engine.close()


def test_nucleus_sampling_recomputes_the_logprobs_with_the_trainers_model(fake, fresh_tiny_model, tiny_tokenizer):
    from rlvr_lib.rollout import sequence_logprobs

    engine = VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url)
    out = engine.generate(["12*34="], SamplingParams(temperature=0.9, top_p=0.8, max_new_tokens=5))
    with torch.no_grad():
        want, _ = sequence_logprobs(fresh_tiny_model.eval(), out.prompt_ids, out.prompt_mask, out.completion_ids,
                                    out.completion_mask, temperature=0.9)
    torch.testing.assert_close(out.logprobs, want * out.completion_mask)
    strict = VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url, logprobs="server")
    with pytest.raises(ValueError, match=r"VLLMServerEngine.logprobs='server' is invalid: must be 'auto' or "
                                         r"'recompute' with top_p=0.8"):
        strict.generate(["12*34="], SamplingParams(top_p=0.8))


def test_a_completion_without_logprobs_or_token_ids_is_refused(fake, fresh_tiny_model, tiny_tokenizer):
    engine = VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url)
    fake.with_logprobs = False
    with pytest.raises(ServerError, match=rf"vLLM server at {fake.url} returned a completion without a log-prob per "
                                          r"token for row 0 \(0 log-probs for 3 tokens"):
        engine.generate(["12*34="], SamplingParams(max_new_tokens=5))
    eos = {1}
    with pytest.raises(ServerError, match=r"returned no token_ids for row 2"):
        parse_completion({"choices": [{"text": "x", "logprobs": None, "finish_reason": "stop"}]}, 2, 5, eos)
    with pytest.raises(ServerError, match=r"stopped row 0 for length after 2 < max_new_tokens=5"):
        parse_completion({"choices": [{"token_ids": [3, 4], "logprobs": {"token_logprobs": [-1.0, -1.0]},
                                       "finish_reason": "length"}]}, 0, 5, eos)
    with pytest.raises(ServerError, match=r"finished row 0 with finish_reason='abort'"):
        parse_completion({"choices": [{"token_ids": [3], "logprobs": {"token_logprobs": [-1.0]},
                                       "finish_reason": "abort"}]}, 0, 5, eos)
    with pytest.raises(ServerError, match=r"returned 0 choices for row 0"):
        parse_completion({"error": "x"}, 0, 5, eos)


# ------------------------------------------------------------------------------------------ weight sync
def test_weights_are_written_reloaded_versioned_and_sent_only_when_they_changed(fake, fresh_tiny_model,
                                                                               tiny_tokenizer, tmp_path):
    model = fresh_tiny_model
    # the folder as the server sees it is where it is told to look (here it sees none: the reload fails)
    mounted = VLLMServerEngine(model, tiny_tokenizer, server_url=fake.url, sync_dir=tmp_path / "sync",
                               server_sync_dir="/mnt/shared/sync")
    version = fingerprint(model.state_dict())
    with pytest.raises(ServerError, match=f"could not load the trainer's weights from /mnt/shared/sync/{version}"):
        mounted.sync_weights()
    (rpc,) = paths(fake, "/collective_rpc")
    assert rpc["method"] == "reload_weights" and rpc["kwargs"] == {"weights_path": f"/mnt/shared/sync/{version}"}
    assert fake.version == "default" and not paths(fake, "/reset_prefix_cache")
    engine = VLLMServerEngine(model, tiny_tokenizer, server_url=fake.url, sync_dir=tmp_path / "sync")
    assert engine.sync_weights() is True
    assert fake.version == version and len(paths(fake, "/reset_prefix_cache")) == 1
    state = model.state_dict()
    assert set(fake.loaded) == set(state)
    for name, tensor in state.items():
        assert torch.equal(fake.loaded[name], tensor), name
    # unchanged weights: nothing sent, also by a second engine that finds the version on the server
    rpcs = len(paths(fake, "/collective_rpc"))
    engine.generate(["1*2="], SamplingParams(max_new_tokens=3))
    other = VLLMServerEngine(model, tiny_tokenizer, server_url=fake.url, sync_dir=tmp_path / "other")
    assert other.sync_weights() is False and len(paths(fake, "/collective_rpc")) == rpcs
    # an update is sent before the next rollout, and the previous weights' folder is removed
    first = tmp_path / "sync" / version
    assert first.is_dir()
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    engine.generate(["1*2="], SamplingParams(max_new_tokens=3))
    assert len(paths(fake, "/collective_rpc")) == rpcs + 1 and fake.version == fingerprint(model.state_dict())
    assert not first.exists() and (tmp_path / "sync" / fake.version / "model.safetensors").is_file()
    engine.close()
    assert not (tmp_path / "sync" / fake.version).exists()


def test_a_failed_reload_names_the_folder_and_the_cause(fake, fresh_tiny_model, tiny_tokenizer, tmp_path):
    engine = VLLMServerEngine(fresh_tiny_model, tiny_tokenizer, server_url=fake.url, sync_dir=tmp_path)
    fake.reload_error = "size mismatch for model.embed_tokens.weight"
    with pytest.raises(ServerError) as err:
        engine.generate(["1*2="], SamplingParams(max_new_tokens=3))
    message = str(err.value)
    assert "answered POST /collective_rpc with HTTP 500" in message and "size mismatch" in message
    assert f"could not load the trainer's weights from {tmp_path}/" in message
    assert "serve the same architecture as the trainer" in message


# ---------------------------------------------------------------------------------------------- the CLI
def test_the_cli_takes_server_url_only_with_the_server_engine(capsys):
    from rlvr_lib.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--method", "grpo", "--server-url", "http://127.0.0.1:8000", "--out", "unused"])
    assert exit_.value.code == 2
    assert "argument --server-url: only with --engine vllm-server (the engine is 'kvcache')" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--method", "grpo", "--engine", "vllm-server", "--server-url", "127.0.0.1:8000",
              "--out", "unused"])
    assert exit_.value.code == 2
    assert ("argument --server-url: VLLMServerEngine.server_url='127.0.0.1:8000' is invalid"
            in capsys.readouterr().err)


# ----------------------------------------------------------------------------- several processes, FSDP
def _fsdp_worker(rank: int, port: int, url: str) -> None:
    import torch.distributed as dist

    from conftest import build_char_tokenizer, build_tiny_qwen2
    from rlvr_lib.distributed import init_world
    from rlvr_lib.trainer import Trainer
    from rlvr_lib.trainer_config import TrainerConfig

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2", ACCELERATE_USE_FSDP="true", **{SERVER_URL_ENV: url})
    torch.set_num_threads(1)
    assert init_world(backend="gloo").sharded
    try:
        tokenizer = build_char_tokenizer()
        config = TrainerConfig(method="grpo", engine="vllm-server", steps=2, prompts_per_step=2, group_size=2,
                               max_new_tokens=3, train_pool_size=8, lr=1e-2, weight_decay=0.1)
        Trainer(config, build_tiny_qwen2(tokenizer), tokenizer).train(progress=False)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_an_fsdp_run_syncs_the_whole_weights_once_per_update_from_rank_0(fake, tiny_model_and_tokenizer):
    """Two processes, FSDP2 (gloo): each rolls out its share of prompts from the server; rank 0 writes the whole
    (gathered) weights once per step, rank 1 waits until the server reports them; the first weights the server
    loads are the initial model's, bit for bit, the second the updated ones. (The test server's completions all get
    one reward, so the update is AdamW's weight decay alone: enough to change every weight.)"""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    context = mp.start_processes(_fsdp_worker, args=(free_port(), fake.url), nprocs=2, join=False,
                                 start_method="spawn")
    deadline = time.monotonic() + 600
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two-process FSDP run did not finish in 600 s")
    assert len(paths(fake, "/collective_rpc")) == 2 and len(fake.loads) == 2  # one sync per step, by rank 0 only
    assert len(paths(fake, "/v1/completions")) == 2 * 2 * 2  # steps x prompts x group, over both processes
    initial = tiny_model_and_tokenizer[0].state_dict()
    assert set(fake.loads[0]) == set(initial)
    for name, tensor in initial.items():
        assert torch.equal(fake.loads[0][name], tensor), name
    assert any(not torch.equal(fake.loads[1][name], tensor) for name, tensor in initial.items())
    assert fake.version == fingerprint({name: fake.loads[1][name] for name in initial})  # in state_dict order
