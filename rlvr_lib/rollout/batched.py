"""What every in-process rollout engine shares: encoding, micro-batches, seeding, and the Rollouts.

:class:`BatchedEngine` expands prompts ``n`` times (prompt-major), cuts micro-batches of ``batch_size``,
left-pads them and runs the subclass's ``_sample_chunk`` seeded, gradient-free and in eval mode, then masks
after the first EOS, pads and decodes. Subclasses only decode (HFEngine, KVCacheEngine).
More: docs/rollout/engines.md."""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch

from rlvr_lib.validation import check_int

from .base import Rollouts, SamplingParams

__all__ = ["BatchedEngine"]


def _as_id_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    return [int(v) for v in value]


class BatchedEngine:
    """Base of the in-process engines; the same seed, prompts, model and ``batch_size`` give the same rollouts.

    ``eos_token_id`` defaults to the tokenizer's EOS plus the generation config's. Raises ValueError if
    ``batch_size < 1`` or no EOS id is found."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        batch_size: int = 256,
        eos_token_id: int | Sequence[int] | None = None,
        add_special_tokens: bool = True,
        progress: bool = False,
    ) -> None:
        name = type(self).__name__
        check_int(f"{name}.batch_size", batch_size, 1)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.add_special_tokens = add_special_tokens
        self.progress = progress
        if eos_token_id is None:
            ids = _as_id_list(getattr(tokenizer, "eos_token_id", None))
            gen_cfg = getattr(model, "generation_config", None)
            ids += _as_id_list(getattr(gen_cfg, "eos_token_id", None))
        else:
            ids = _as_id_list(eos_token_id)
        self.eos_token_ids: list[int] = list(dict.fromkeys(ids))
        if not self.eos_token_ids:
            raise ValueError(f"{name}.eos_token_id: none given and neither tokenizer nor model defines one")
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id: int = int(pad) if pad is not None else self.eos_token_ids[0]

    # ------------------------------------------------------------------ subclass API
    def _sample_chunk(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode one micro-batch ``(B, P)``: ``(generated, logprobs)``, each ``(B, L)``, ``L <= params.max_new_tokens``.

        Tokens after a row's first EOS are ignored; a row without EOS must have ``L == max_new_tokens``."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _generation_context(self, seed: int) -> Iterator[None]:
        """Eval mode, no grad, forked seeded RNG; restores the model's mode."""
        model = self.model
        was_training = model.training
        device = self.device
        cuda_devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
        try:
            model.eval()
            with torch.random.fork_rng(devices=cuda_devices), torch.no_grad():
                torch.manual_seed(seed)
                yield
        finally:
            model.train(was_training)

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        """Device of the model (where inputs are sent)."""
        dev = getattr(self.model, "device", None)
        if isinstance(dev, torch.device):
            return dev
        return next(self.model.parameters()).device

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        encoded = self.tokenizer(list(prompts), add_special_tokens=self.add_special_tokens)["input_ids"]
        for i, ids in enumerate(encoded):
            if len(ids) == 0:
                raise ValueError(f"prompt {i} encodes to zero tokens; a completion needs a non-empty context")
        return [list(ids) for ids in encoded]

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, mask)`` of ``prompts``, left-padded exactly as :meth:`generate` encodes them."""
        return self._left_pad(self._encode(prompts))

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        return left_pad(rows, self.pad_token_id)

    def _chunk_rollouts(self, prompt_index: list[int], token_rows: list[list[int]], params: SamplingParams) -> Rollouts:
        prompt_ids, prompt_mask = self._left_pad(token_rows)
        device = self.device
        generated, step_logprobs = self._sample_chunk(prompt_ids.to(device), prompt_mask.to(device), params)
        generated = generated.cpu()
        step_logprobs = step_logprobs.float().cpu()

        length_total = generated.shape[1]
        is_eos = torch.isin(generated, torch.tensor(self.eos_token_ids, dtype=generated.dtype))
        stopped = is_eos.any(dim=1)
        first_eos = is_eos.long().argmax(dim=1)
        lengths = torch.where(stopped, first_eos + 1, torch.full_like(first_eos, length_total))
        if not stopped.all() and length_total != params.max_new_tokens:  # pragma: no cover - defensive
            raise RuntimeError(
                f"{type(self).__name__} stopped after {length_total} tokens with unfinished rows "
                f"(max_new_tokens={params.max_new_tokens}); a stopping criterion other than EOS/length fired"
            )
        mask = (torch.arange(length_total).unsqueeze(0) < lengths.unsqueeze(1)).long()
        completion_ids = torch.where(mask.bool(), generated, torch.full_like(generated, self.pad_token_id))
        lengths_list = lengths.tolist()
        texts = self.tokenizer.batch_decode(
            [row[:n].tolist() for row, n in zip(completion_ids, lengths_list)], skip_special_tokens=True
        )
        return Rollouts(
            prompt_index=torch.tensor(prompt_index, dtype=torch.long),
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            completion_mask=mask,
            logprobs=step_logprobs * mask,
            texts=list(texts),
            finish_reasons=["stop" if s else "length" for s in stopped.tolist()],
            pad_token_id=self.pad_token_id,
        )

    # --------------------------------------------------------------------- API
    def generate(self, prompts: Sequence[str], params: SamplingParams) -> Rollouts:
        """:class:`Rollouts` on CPU with ``N = M * params.n`` rows, prompt-major; ValueError on a bare string or an empty prompt."""
        if isinstance(prompts, str):
            raise ValueError("prompts must be a sequence of strings, got a single str")
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        prompts = list(prompts)
        if not prompts:
            empty = torch.zeros(0, 0, dtype=torch.long)
            return Rollouts(
                prompt_index=torch.zeros(0, dtype=torch.long), prompt_ids=empty, prompt_mask=empty.clone(),
                completion_ids=empty.clone(), completion_mask=empty.clone(),
                logprobs=torch.zeros(0, 0), texts=[], finish_reasons=[], pad_token_id=self.pad_token_id,
            )
        encoded = self._encode(prompts)
        rows = [i for i in range(len(prompts)) for _ in range(params.n)]  # prompt-major
        chunks = [rows[s:s + self.batch_size] for s in range(0, len(rows), self.batch_size)]
        iterator = chunks
        if self.progress:
            from tqdm.auto import tqdm

            iterator = tqdm(chunks, desc="rollout", unit="batch")
        parts = []
        with self._generation_context(params.seed):
            for chunk in iterator:
                parts.append(self._chunk_rollouts(chunk, [encoded[i] for i in chunk], params))
        result = Rollouts.concat(parts)
        # Trim the all-padding tail columns left by re-padding (none in practice).
        t_max = int(result.completion_lengths.max()) if len(result) else 0
        if t_max < result.completion_ids.shape[1]:
            result.completion_ids = result.completion_ids[:, :t_max]
            result.completion_mask = result.completion_mask[:, :t_max]
            result.logprobs = result.logprobs[:, :t_max]
        return result


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows left-padded with ``pad`` into ``(ids, mask)``, both (len(rows), longest row, at least 1)."""
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask
