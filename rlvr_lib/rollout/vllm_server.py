"""A rollout engine whose completions come from a vLLM server in another process or on another machine.

:class:`VLLMServerEngine` (engine name ``"vllm-server"``) is a :class:`~rlvr_lib.rollout.batched.BatchedEngine`
whose decoding step is an HTTP request per row to vLLM's OpenAI-compatible server (``vllm serve`` or
``python -m vllm.entrypoints.openai.api_server``): ``POST /v1/completions`` with the prompt as token ids, the
sampled token's log-prob (``logprobs=0``) and the completion's token ids (``return_token_ids``). The results go
through the shared code, so the :class:`~rlvr_lib.rollout.base.Rollouts` follow :mod:`rlvr_lib.rollout.base`
exactly as the colocated :class:`~rlvr_lib.rollout.vllm_engine.VLLMEngine`'s do (same per-row seeds, same
log-prob convention), and the trainer's importance ratios and recomputation checks work unchanged.

Weight sync (before every ``generate`` whose weights the server does not hold yet):

1. the trainer's ``state_dict`` is fingerprinted (sha256 of names, dtypes, shapes and bytes);
2. if the server's weight version (``GET /weight_info``) is that fingerprint, nothing is sent;
3. else the weights are written as ``<sync_dir>/<fingerprint>/model.safetensors``, the server reloads them in
   place with ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": ...}}`` (vLLM's own
   worker method: no code of this package runs in the server), then ``POST /reset_prefix_cache`` (cached keys and
   values of the old weights are stale) and ``POST /update_weight_version`` with the fingerprint.

Why a file and not NCCL (which needs CUDA on both sides): docs/scaling-out.md, "Rollouts from a server".

Several training processes (DDP or FSDP): every process fingerprints the same weights; rank 0 syncs, the others
wait until the server reports that version (no collective, so processes whose share of prompts is empty need not
call ``generate``).

The server must run with the dev endpoints (``VLLM_SERVER_DEV_MODE=1``) and vLLM's log-prob convention
(``--logprobs-mode processed_logprobs``); both are checked when the engine is built (``GET /server_info``), with
the model's vocabulary, ``max_model_len`` and dtype. How to start it: :func:`server_command` and
docs/scaling-out.md ("Rollouts from a server")."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import torch

from rlvr_lib.seeding import seed_from
from rlvr_lib.validation import check, check_choice, check_int, check_range, invalid

from .base import SamplingParams
from .logprobs import sequence_logprobs
from .vllm_engine import PROCESSED_LOGPROBS, SyncedVLLMBase, _pad_rows, _unpad

__all__ = ["LOGPROB_SOURCES", "SERVER_URL_ENV", "SYNC_DIR_ENV", "ServerError", "VLLMServerEngine", "fingerprint",
           "model_weights", "server_command", "server_url"]

LOGPROB_SOURCES = ("auto", "server", "recompute")
"""Where :class:`VLLMServerEngine` takes the reported log-probs from: ``"auto"`` (the server's when they follow the
rollout convention, i.e. at ``top_p == 1``; else recomputed teacher-forced by the trainer's model), ``"server"``
(refuses ``top_p < 1``), ``"recompute"``."""

SERVER_URL_ENV = "RLVR_VLLM_SERVER_URL"
"""Environment variable holding the server's URL when none is given (``python -m rlvr_lib train --server-url``
sets it; a `Trainer` builds its engine from ``config.engine`` alone)."""

SYNC_DIR_ENV = "RLVR_VLLM_SYNC_DIR"
"""Environment variable: the folder the weights are written to for the server (default: a temporary folder)."""

SERVER_SYNC_DIR_ENV = "RLVR_VLLM_SERVER_SYNC_DIR"
"""Environment variable: that folder as the server sees it, when its mount point differs (default: the same)."""

DEFAULT_PORT = 8000


class ServerError(RuntimeError):
    """The vLLM server cannot be reached, refused a request or answered outside the rollout conventions."""


def server_url(server_url: str | None = None, host: str | None = None, port: int | None = None) -> str:
    """The server's base URL (no trailing slash) from ``server_url``, else ``host``/``port``, else
    :data:`SERVER_URL_ENV`; ValueError when none is given, both forms are, or the URL is not ``http(s)://host[:port]``."""
    if server_url is not None and (host is not None or port is not None):
        raise invalid("VLLMServerEngine.server_url", server_url, "given without host/port (they say the same)")
    if server_url is None and (host is not None or port is not None):
        check(host is not None, "VLLMServerEngine.host", host, "a host name or address when port is given")
        port = DEFAULT_PORT if port is None else check_int("VLLMServerEngine.port", port, 1)
        check(port <= 65535, "VLLMServerEngine.port", port, "at most 65535")
        server_url = f"http://{host}:{port}"
    if server_url is None:
        server_url = os.environ.get(SERVER_URL_ENV) or None
    if server_url is None:
        raise ValueError(f"VLLMServerEngine: no server given: pass server_url (or host and port), or set "
                         f"{SERVER_URL_ENV} (python -m rlvr_lib train --engine vllm-server --server-url URL)")
    parts = urlsplit(str(server_url))
    check(parts.scheme in ("http", "https") and bool(parts.hostname) and parts.path in ("", "/")
          and not parts.query, "VLLMServerEngine.server_url", server_url,
          "http(s)://HOST[:PORT] without a path (e.g. http://127.0.0.1:8000)")
    return str(server_url).rstrip("/")


_resolve_url = server_url  # VLLMServerEngine's argument of that name hides the function


def server_command(model_path: str, *, host: str = "0.0.0.0", port: int = DEFAULT_PORT, dtype: str = "float32",
                   extra: tuple[str, ...] = ()) -> str:
    """The shell command that starts a vLLM server this engine can use, serving the checkpoint ``model_path``."""
    return (f"VLLM_SERVER_DEV_MODE=1 vllm serve {model_path} --host {host} --port {port} --dtype {dtype} "
            "--logprobs-mode processed_logprobs --generation-config vllm --skip-tokenizer-init"
            + "".join(f" {e}" for e in extra))


def _requests():
    try:
        import requests
    except ImportError as err:  # pragma: no cover - requests comes with datasets and transformers
        raise ImportError("VLLMServerEngine needs the requests package (pip install requests)") from err
    return requests


def fingerprint(state: dict[str, torch.Tensor]) -> str:
    """sha256 (hex, 32 characters) of a state dict's names, dtypes, shapes and bytes: the weight version."""
    return _digest(_full_tensors(state))


def _digest(copies: dict[str, torch.Tensor]) -> str:
    """`fingerprint` of CPU copies made by `_full_tensors`."""
    digest = hashlib.sha256()
    for name, tensor in copies.items():
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)};".encode())
        if tensor.numel():
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def _full_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies of ``state``'s tensors, each its own storage (safetensors refuses tensors sharing memory,
    as tied embeddings do; and an FSDP2 parameter's storage must stay resizable, which exporting it to numpy would
    end). A DTensor (an FSDP parameter outside the gathered scope) is refused by a clear ValueError."""
    out = {}
    for name, tensor in state.items():
        if type(tensor).__name__ == "DTensor":
            raise ValueError(f"VLLMServerEngine: weight {name} is a sharded DTensor: the server needs the whole "
                             "weights; generate inside the trainer's gathered scope (World.gathered)")
        t = tensor.detach()
        out[name] = t.to("cpu", copy=True, memory_format=torch.contiguous_format)
    return out


def model_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s parameters and persistent buffers under their ``state_dict`` names, in its order, read off the
    modules: an FSDP2 model inside its gathered scope (`rlvr_lib.distributed.World.gathered`) gives its whole
    tensors here, while its ``state_dict()`` would give shards (and reshard it)."""
    out = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        prefix = f"{prefix}." if prefix else ""
        for name, p in module._parameters.items():
            if p is not None:
                out[prefix + name] = p
        for name, b in module._buffers.items():
            if b is not None and name not in module._non_persistent_buffers_set:
                out[prefix + name] = b
    return out


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class VLLMServerEngine(SyncedVLLMBase):
    """Rollout engine on a vLLM server, weights synced from ``model`` before each ``generate`` (module docstring).

    Args:
        model, tokenizer: The trainer's policy (the server must serve a checkpoint of the same architecture).
        server_url: ``http://HOST:PORT`` of the server; or ``host`` and ``port``; default :data:`SERVER_URL_ENV`.
        timeout: Seconds for one completion request (and for a weight reload).
        connect_timeout: Seconds to wait for the server's first answer when the engine is built.
        sync_dir, server_sync_dir: Where the weights are written (as the trainer / the server sees the folder);
            defaults :data:`SYNC_DIR_ENV`, :data:`SERVER_SYNC_DIR_ENV`, else a temporary folder of this process.
        logprobs: One of :data:`LOGPROB_SOURCES`.
        concurrency: Requests in flight at once (the server batches them).
        **engine_kwargs: To :class:`~rlvr_lib.rollout.batched.BatchedEngine` (``batch_size``, ``eos_token_id``, ...).

    Raises ValueError on a bad argument or a server that does not fit (model, log-prob mode, dev endpoints), and
    :class:`ServerError` when the server cannot be reached (the message names the URL and how to start one)."""

    def __init__(self, model, tokenizer, *, server_url: str | None = None, host: str | None = None,
                 port: int | None = None, timeout: float = 300.0, connect_timeout: float = 10.0,
                 sync_dir: str | os.PathLike | None = None, server_sync_dir: str | os.PathLike | None = None,
                 logprobs: str = "auto", concurrency: int = 64, **engine_kwargs) -> None:
        check_choice("VLLMServerEngine.logprobs", logprobs, LOGPROB_SOURCES)
        self.timeout = check_range("VLLMServerEngine.timeout", timeout, 0, lo_open=True)
        self.connect_timeout = check_range("VLLMServerEngine.connect_timeout", connect_timeout, 0, lo_open=True)
        self.concurrency = check_int("VLLMServerEngine.concurrency", concurrency, 1)
        super().__init__(model, tokenizer, **engine_kwargs)
        self.url = _resolve_url(server_url, host, port)
        self.logprobs = logprobs
        requests = _requests()
        self.session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=self.concurrency)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self._tempdir = None
        sync_dir = sync_dir if sync_dir is not None else os.environ.get(SYNC_DIR_ENV) or None
        if sync_dir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="rlvr_vllm_sync_")
            sync_dir = self._tempdir.name
        self.sync_dir = Path(sync_dir)
        server_sync_dir = server_sync_dir if server_sync_dir is not None else os.environ.get(SERVER_SYNC_DIR_ENV)
        self.server_sync_dir = str(server_sync_dir or self.sync_dir)
        self.version: str | None = None  # the weight version this engine last saw on the server
        self._written: Path | None = None  # the folder of the last weights written (removed at the next sync)
        self._next_row = 0
        self.server_info = self._check_server()

    # ------------------------------------------------------------------ HTTP
    def _how_to_start(self) -> str:
        parts = urlsplit(self.url)
        return server_command("CHECKPOINT", port=parts.port or DEFAULT_PORT)

    def _call(self, method: str, path: str, *, timeout: float | None = None, **kwargs) -> Any:
        """The JSON answer of ``method path`` (None when empty); ServerError naming the URL on any failure."""
        requests = _requests()
        url = f"{self.url}{path}"
        try:
            response = self.session.request(method, url, timeout=timeout or self.timeout, **kwargs)
        except requests.exceptions.ConnectionError as err:
            raise ServerError(f"vLLM server unreachable at {self.url} ({type(err).__name__}); start one with: "
                              f"{self._how_to_start()}") from None
        except requests.exceptions.Timeout:
            raise ServerError(f"vLLM server at {self.url} did not answer {method} {path} within "
                              f"{timeout or self.timeout} s (raise VLLMServerEngine timeout)") from None
        if response.status_code == 404 and path.startswith(("/server_info", "/collective_rpc", "/weight_info",
                                                            "/update_weight_version", "/reset_prefix_cache")):
            raise ServerError(f"vLLM server at {self.url} has no {path} endpoint: start it with "
                              "VLLM_SERVER_DEV_MODE=1 (its weight-sync endpoints); e.g. " + self._how_to_start())
        if response.status_code >= 400:
            raise ServerError(f"vLLM server at {self.url} answered {method} {path} with HTTP {response.status_code}: "
                              f"{response.text[:500]}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ServerError(f"vLLM server at {self.url} answered {method} {path} with non-JSON: "
                              f"{response.text[:200]!r}") from None

    def _check_server(self) -> dict:
        """The served model's settings (``/server_info``); ValueError when they do not fit this engine's model."""
        info = self._call("GET", "/server_info", params={"config_format": "json"}, timeout=self.connect_timeout)
        config = (info or {}).get("vllm_config")
        if not isinstance(config, dict) or not isinstance(config.get("model_config"), dict):
            raise ServerError(f"vLLM server at {self.url}: /server_info has no vllm_config.model_config "
                              f"(a vLLM >= 0.10 server with VLLM_SERVER_DEV_MODE=1 is needed)")
        mc = config["model_config"]
        mode = str(mc.get("logprobs_mode"))
        if self.logprobs != "recompute" and mode != PROCESSED_LOGPROBS:
            raise ValueError(f"VLLMServerEngine: the server at {self.url} reports log-probs in mode {mode!r}; start "
                             f"it with --logprobs-mode {PROCESSED_LOGPROBS} (the rollout convention), or use "
                             "logprobs='recompute'")
        self._check_model(mc)
        return mc

    def _check_model(self, mc: dict) -> None:
        """ValueError when the server runs the model in another dtype than the trainer's (an architecture that
        does not take the trainer's weights is named at the first weight sync, which vLLM refuses)."""
        dtype = str(mc.get("dtype", "")).removeprefix("torch.")
        ours_dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        if dtype and dtype != ours_dtype:
            raise ValueError(f"VLLMServerEngine: the server at {self.url} runs the model in {dtype}, the trainer in "
                             f"{ours_dtype}; start it with --dtype {ours_dtype} (log-probs must match the trainer's)")
        self.max_model_len = mc.get("max_model_len")

    # ------------------------------------------------------------------ weights
    def server_version(self) -> str | None:
        """The weight version the server reports (``GET /weight_info``)."""
        return (self._call("GET", "/weight_info") or {}).get("weight_version")

    def sync_weights(self) -> bool:
        """Make the server hold ``model``'s current weights; True when they were sent (False: it held them)."""
        state = _full_tensors(model_weights(self.model))  # copies: hashed, then written
        version = _digest(state)
        if version == self.version or version == self.server_version():
            self.version = version
            return False
        if _rank() != 0:  # rank 0 sends the same weights; wait until the server holds them
            deadline = time.monotonic() + self.timeout
            while self.server_version() != version:
                if time.monotonic() > deadline:
                    raise ServerError(f"vLLM server at {self.url} did not receive weight version {version} from "
                                      f"rank 0 within {self.timeout} s")
                time.sleep(0.05)
            self.version = version
            return False
        from safetensors.torch import save_file

        folder = self.sync_dir / version
        folder.mkdir(parents=True, exist_ok=True)
        save_file(state, str(folder / "model.safetensors"))
        remote = f"{self.server_sync_dir.rstrip('/')}/{version}"
        try:
            self._call("POST", "/collective_rpc",
                       json={"method": "reload_weights", "kwargs": {"weights_path": remote}, "timeout": self.timeout})
        except ServerError as err:
            raise ServerError(f"{err}\nThe server could not load the trainer's weights from {remote}: it must see "
                              f"that folder (sync_dir / server_sync_dir) and serve the same architecture as "
                              f"the trainer") from None
        self._call("POST", "/reset_prefix_cache")
        self._call("POST", "/update_weight_version", json={"new_version": version})
        if self._written is not None and self._written != folder:
            shutil.rmtree(self._written, ignore_errors=True)
        self._written, self.version = folder, version
        return True

    # ----------------------------------------------------------------- sampling
    def _uses_server_logprobs(self, params: SamplingParams) -> bool:
        self._check_temperature(params)
        if self.logprobs == "recompute":
            return False
        exact = params.greedy or params.top_p >= 1.0
        if self.logprobs == "server" and not exact:
            raise invalid("VLLMServerEngine.logprobs", self.logprobs,
                          f"'auto' or 'recompute' with top_p={params.top_p}: vLLM's log-probs are renormalised "
                          "over the nucleus, the rollout convention's are not")
        return exact

    def request_body(self, prompt: list[int], params: SamplingParams, seed: int) -> dict[str, Any]:
        """The ``/v1/completions`` JSON of one row: its token ids, the sampling settings (neutral where the
        rollout convention has none), the sampled token's log-prob and the token ids back."""
        return {
            "model": self.server_info.get("served_model_name") or self.server_info.get("model"),
            "prompt": [int(t) for t in prompt],
            "n": 1,
            "max_tokens": params.max_new_tokens,
            "temperature": 0.0 if params.greedy else params.temperature,
            "top_p": 1.0 if params.greedy else params.top_p,
            "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "seed": seed,
            "logprobs": 0,
            "stop_token_ids": list(self.eos_token_ids),
            "ignore_eos": False,
            "skip_special_tokens": False,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }

    def _complete(self, row: int, body: dict[str, Any], max_tokens: int) -> tuple[list[int], list[float]]:
        """Token ids and log-probs of one row; ServerError when the answer breaks the conventions."""
        answer = self._call("POST", "/v1/completions", json=body)
        return parse_completion(answer, row, max_tokens, set(self.eos_token_ids), url=self.url)

    def _sample_chunk(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        use_server = self._uses_server_logprobs(params)
        prompts = _unpad(prompt_ids, prompt_mask)
        if self.max_model_len:
            longest = max(len(p) for p in prompts) + params.max_new_tokens
            check(longest <= int(self.max_model_len), "prompt tokens + max_new_tokens", longest,
                  f"at most the server's max_model_len={self.max_model_len} (start it with a larger --max-model-len)")
        first = self._next_row
        self._next_row += len(prompts)
        bodies = [self.request_body(p, params, seed_from(params.seed, first + b)) for b, p in enumerate(prompts)]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(bodies))) as pool:
            results = list(pool.map(lambda b: self._complete(first + b, bodies[b], params.max_new_tokens),
                                    range(len(bodies))))
        rows, values = zip(*results)
        tokens, logprobs = _pad_rows(list(rows), list(values), self.pad_token_id)
        if use_server:
            return tokens, logprobs
        device = prompt_ids.device
        lengths = torch.tensor([len(r) for r in rows])
        mask = (torch.arange(tokens.shape[1]) < lengths[:, None]).long().to(device)
        logp, _ = sequence_logprobs(self.model, prompt_ids, prompt_mask, tokens.to(device), mask,
                                    temperature=params.logprob_temperature)
        return tokens, (logp.float() * mask).cpu()

    def close(self) -> None:
        """Close the HTTP session and remove the weights this engine wrote (a temporary folder entirely)."""
        self.session.close()
        if self._written is not None:
            shutil.rmtree(self._written, ignore_errors=True)
            self._written = None
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None


def parse_completion(answer: Any, row: int, max_tokens: int, eos: set[int], *, url: str = "the server"
                     ) -> tuple[list[int], list[float]]:
    """``(token ids, log-probs)`` of a ``/v1/completions`` answer for one ``n=1`` row; ServerError when it has no
    token ids, no log-prob per token, or stops other than on EOS or at ``max_tokens``."""
    choices = (answer or {}).get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or len(choices) != 1:
        raise ServerError(f"vLLM server at {url} returned {0 if not isinstance(choices, list) else len(choices)} "
                          f"choices for row {row}; VLLMServerEngine asks for 1")
    c = choices[0]
    ids = c.get("token_ids")
    if not isinstance(ids, list):
        raise ServerError(f"vLLM server at {url} returned no token_ids for row {row}: it needs return_token_ids "
                          "(vLLM >= 0.10.2)")
    ids = [int(t) for t in ids]
    lp = c.get("logprobs")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    if not isinstance(values, list) or len(values) != len(ids) or any(v is None for v in values):
        raise ServerError(f"vLLM server at {url} returned a completion without a log-prob per token for row {row} "
                          f"({0 if not isinstance(values, list) else len(values)} log-probs for {len(ids)} tokens; "
                          "asked with logprobs=0)")
    reason = c.get("finish_reason")
    if reason == "length":
        if len(ids) != max_tokens:
            raise ServerError(f"vLLM server at {url} stopped row {row} for length after {len(ids)} < "
                              f"max_new_tokens={max_tokens} tokens: prompt + max_new_tokens exceeds its max_model_len")
    elif reason == "stop":
        if not ids or ids[-1] not in eos:
            raise ServerError(f"vLLM server at {url} stopped row {row} without ending on an EOS id {sorted(eos)} "
                              f"(last ids {ids[-3:]}); VLLMServerEngine stops only on EOS")
    else:
        raise ServerError(f"vLLM server at {url} finished row {row} with finish_reason={reason!r}; expected 'stop' "
                          "or 'length'")
    return ids, [float(v) for v in values]
