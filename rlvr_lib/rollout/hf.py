"""The reference rollout engine on ``transformers``' ``model.generate`` (the baseline of KVCacheEngine)."""

from __future__ import annotations

import contextlib
from typing import Iterator, Literal

import torch

from rlvr_lib.validation import check_choice

from .base import SamplingParams
from .batched import BatchedEngine

__all__ = ["HFEngine"]

LogprobMode = Literal["stream", "output_logits"]


class _LogprobRecorder:
    """Logits processor recording sampling log-probs step by step from the raw logits: memory ``O(B * V)``."""

    def __init__(self, prompt_width: int, temperature: float) -> None:
        self.prompt_width = prompt_width
        self.temperature = temperature
        self.prev: torch.Tensor | None = None  # (B, V) log-softmax of the last step
        self.steps: list[torch.Tensor] = []  # each (B,)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] > self.prompt_width:
            assert self.prev is not None
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        logits = scores.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        self.prev = torch.log_softmax(logits, dim=-1)
        return scores

    def finish(self, generated: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` log-probs of the ``L`` generated tokens (extra undone steps of ``generate`` dropped)."""
        length = generated.shape[1]
        steps = self.steps[:length]
        if len(steps) < length:
            assert self.prev is not None and len(steps) == length - 1
            steps.append(self.prev.gather(1, generated[:, -1:]).squeeze(1))
        self.prev = None
        if not steps:
            return generated.new_zeros(generated.shape, dtype=torch.float32)
        return torch.stack(steps, dim=1)


class HFEngine(BatchedEngine):
    """Rollout engine on ``model.generate``, under a neutral ``generation_config`` during each call.

    ``logprob_mode``: ``"stream"`` (:class:`_LogprobRecorder`, ``O(batch * vocab)``) or ``"output_logits"``
    (``O(batch * T * vocab)``), same numbers. Raises ValueError on a bad ``batch_size``, no EOS or an unknown mode."""

    def __init__(self, model, tokenizer, *, logprob_mode: LogprobMode = "stream", **engine_kwargs) -> None:
        check_choice("HFEngine.logprob_mode", logprob_mode, ("stream", "output_logits"))
        super().__init__(model, tokenizer, **engine_kwargs)
        self.logprob_mode = logprob_mode

    @contextlib.contextmanager
    def _generation_context(self, seed: int) -> Iterator[None]:
        """The base context plus a neutral ``generation_config`` (restored afterwards)."""
        from transformers import GenerationConfig

        model = self.model
        saved_config = getattr(model, "generation_config", None)
        try:
            model.generation_config = GenerationConfig()
            with super()._generation_context(seed):
                yield
        finally:
            model.generation_config = saved_config

    def _sample_chunk(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers import GenerationConfig, LogitsProcessorList

        width = prompt_ids.shape[1]
        config_kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_ids,
            num_beams=1,
            num_return_sequences=1,
            return_dict_in_generate=True,
            output_logits=self.logprob_mode == "output_logits",
            use_cache=True,
        )
        if params.greedy:
            config_kwargs.update(do_sample=False)
        else:
            config_kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        recorder = _LogprobRecorder(width, params.logprob_temperature) if self.logprob_mode == "stream" else None
        out = self.model.generate(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            generation_config=GenerationConfig(**config_kwargs),
            logits_processor=LogitsProcessorList([recorder]) if recorder is not None else None,
        )
        generated = out.sequences[:, width:]  # (B, L)
        if recorder is not None:
            return generated, recorder.finish(generated)
        logits = torch.stack(out.logits, dim=1).float()  # (B, L, V)
        if params.logprob_temperature != 1.0:
            logits = logits / params.logprob_temperature
        return generated, torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
