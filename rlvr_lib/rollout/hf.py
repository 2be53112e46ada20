"""The default rollout engine: ``transformers`` ``model.generate``.

Works with any ``AutoModelForCausalLM`` on CPU or CUDA. See
:mod:`rlvr_lib.rollout.base` for the conventions of the returned
:class:`~rlvr_lib.rollout.base.Rollouts`.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Literal, Sequence

import torch

from .base import Rollouts, SamplingParams

__all__ = ["HFEngine"]

LogprobMode = Literal["stream", "output_logits"]


class _LogprobRecorder:
    """Logits processor that records sampling log-probs one step at a time.

    ``generate`` calls its logits processors with the raw float32 logits of
    step ``k`` and ``input_ids`` holding the prompt plus the ``k`` tokens
    sampled so far. User processors run before the temperature / top-p
    warpers (``GenerationMixin._get_logits_processor``), and
    :class:`HFEngine` makes sure no other processor runs before them, so the
    ``scores`` seen here are the raw logits. At step ``k + 1`` the token
    sampled at step ``k`` is known and its log-prob is gathered from the kept
    log-softmax of step ``k``. Memory is ``O(B * V)`` instead of the
    ``O(B * T * V)`` of ``output_logits=True``.
    """

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
        """Return ``(B, L)`` log-probs of the ``L`` generated tokens.

        Handles ``generate`` having run (and then undone) extra steps, as its
        deferred stop check does on CUDA.
        """
        length = generated.shape[1]
        steps = self.steps[:length]
        if len(steps) < length:
            assert self.prev is not None and len(steps) == length - 1
            steps.append(self.prev.gather(1, generated[:, -1:]).squeeze(1))
        self.prev = None
        if not steps:
            return generated.new_zeros(generated.shape, dtype=torch.float32)
        return torch.stack(steps, dim=1)


def _as_id_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.flatten().tolist()]
    return [int(v) for v in value]


class HFEngine:
    """Rollout engine built on ``transformers``' ``model.generate``.

    Sampling is fully specified by :class:`SamplingParams`: during each call
    the model's own ``generation_config`` is swapped for a neutral one, so a
    saved ``generation_config.json`` (``top_k=20``, ``repetition_penalty``,
    ``min_p``, ...) cannot silently change the sampling distribution or the
    reported log-probs; ``top_k=0`` disables the library's hidden top-k=50
    default.

    Determinism: sampling runs inside ``torch.random.fork_rng`` seeded with
    ``params.seed``, so the global RNG is untouched and the same seed gives the
    same rollouts (bit for bit on CPU) for the same prompts, model and
    ``batch_size`` (micro-batch composition changes the random stream).

    Args:
        model: A causal LM (``PreTrainedModel`` with ``GenerationMixin``), on
            any device; inputs are moved to ``model.device``.
        tokenizer: Its tokenizer (a ``PreTrainedTokenizerBase``); not mutated.
        batch_size: Maximum number of sequences per ``generate`` call (memory
            bound). Prompts are expanded ``n`` times and cut into micro-batches
            in prompt-major order.
        eos_token_id: Token id(s) that end a completion. Default: the
            tokenizer's EOS plus the model generation config's EOS id(s).
        add_special_tokens: Passed to the tokenizer when encoding prompts
            (e.g. adds BOS for Llama-style tokenizers).
        logprob_mode: ``"stream"`` (default) records log-probs step by step
            with a logits processor, memory ``O(batch * vocab)``;
            ``"output_logits"`` asks ``generate`` for all raw logits
            (``output_logits=True``), memory ``O(batch * T * vocab)``. Both
            give the same numbers.
        progress: Show a tqdm bar over micro-batches.

    Raises:
        ValueError: If ``batch_size < 1``, no EOS id can be found, or
            ``logprob_mode`` is unknown.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        batch_size: int = 256,
        eos_token_id: int | Sequence[int] | None = None,
        add_special_tokens: bool = True,
        logprob_mode: LogprobMode = "stream",
        progress: bool = False,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"HFEngine.batch_size must be an int >= 1, got {batch_size!r}")
        if logprob_mode not in ("stream", "output_logits"):
            raise ValueError(f"HFEngine.logprob_mode must be 'stream' or 'output_logits', got {logprob_mode!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.add_special_tokens = add_special_tokens
        self.logprob_mode = logprob_mode
        self.progress = progress
        if eos_token_id is None:
            ids = _as_id_list(getattr(tokenizer, "eos_token_id", None))
            gen_cfg = getattr(model, "generation_config", None)
            ids += _as_id_list(getattr(gen_cfg, "eos_token_id", None))
        else:
            ids = _as_id_list(eos_token_id)
        self.eos_token_ids: list[int] = list(dict.fromkeys(ids))
        if not self.eos_token_ids:
            raise ValueError("HFEngine.eos_token_id: none given and neither tokenizer nor model defines one")
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id: int = int(pad) if pad is not None else self.eos_token_ids[0]

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        """Device of the model (where inputs are sent)."""
        dev = getattr(self.model, "device", None)
        if isinstance(dev, torch.device):
            return dev
        return next(self.model.parameters()).device

    @contextlib.contextmanager
    def _generation_context(self, seed: int) -> Iterator[None]:
        """Eval mode, no grad, neutral generation config, forked seeded RNG."""
        from transformers import GenerationConfig

        model = self.model
        was_training = model.training
        saved_config = getattr(model, "generation_config", None)
        device = self.device
        cuda_devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
        try:
            model.eval()
            model.generation_config = GenerationConfig()
            with torch.random.fork_rng(devices=cuda_devices), torch.no_grad():
                torch.manual_seed(seed)
                yield
        finally:
            model.generation_config = saved_config
            model.train(was_training)

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        encoded = self.tokenizer(list(prompts), add_special_tokens=self.add_special_tokens)["input_ids"]
        for i, ids in enumerate(encoded):
            if len(ids) == 0:
                raise ValueError(f"prompt {i} encodes to zero tokens; a completion needs a non-empty context")
        return [list(ids) for ids in encoded]

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
                mask[i, width - len(r):] = 1
        return ids, mask

    def _generate_chunk(
        self, prompt_index: list[int], token_rows: list[list[int]], params: SamplingParams
    ) -> Rollouts:
        from transformers import GenerationConfig, LogitsProcessorList

        prompt_ids, prompt_mask = self._left_pad(token_rows)
        width = prompt_ids.shape[1]
        device = self.device
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
        gen_config = GenerationConfig(**config_kwargs)
        recorder = _LogprobRecorder(width, params.logprob_temperature) if self.logprob_mode == "stream" else None
        out = self.model.generate(
            input_ids=prompt_ids.to(device),
            attention_mask=prompt_mask.to(device),
            generation_config=gen_config,
            logits_processor=LogitsProcessorList([recorder]) if recorder is not None else None,
        )
        generated = out.sequences[:, width:]  # (B, L)
        if recorder is not None:
            step_logprobs = recorder.finish(generated)
        else:
            logits = torch.stack(out.logits, dim=1).float()  # (B, L, V)
            if params.logprob_temperature != 1.0:
                logits = logits / params.logprob_temperature
            step_logprobs = torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
            del logits
        generated = generated.cpu()
        step_logprobs = step_logprobs.float().cpu()

        length_total = generated.shape[1]
        is_eos = torch.isin(generated, torch.tensor(self.eos_token_ids, dtype=generated.dtype))
        stopped = is_eos.any(dim=1)
        first_eos = is_eos.long().argmax(dim=1)
        lengths = torch.where(stopped, first_eos + 1, torch.full_like(first_eos, length_total))
        if not stopped.all() and length_total != params.max_new_tokens:  # pragma: no cover - defensive
            raise RuntimeError(
                f"generate stopped after {length_total} tokens with unfinished rows "
                f"(max_new_tokens={params.max_new_tokens}); a stopping criterion other than EOS/length fired"
            )
        mask = (torch.arange(length_total).unsqueeze(0) < lengths.unsqueeze(1)).long()
        completion_ids = torch.where(mask.bool(), generated, torch.full_like(generated, self.pad_token_id))
        logprobs = step_logprobs * mask
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
            logprobs=logprobs,
            texts=list(texts),
            finish_reasons=["stop" if s else "length" for s in stopped.tolist()],
            pad_token_id=self.pad_token_id,
        )

    # --------------------------------------------------------------------- API
    def generate(self, prompts: Sequence[str], params: SamplingParams) -> Rollouts:
        """Sample ``params.n`` completions per prompt.

        Args:
            prompts: ``M`` prompt strings, already formatted (chat template
                applied by the caller). Each must encode to >= 1 token.
            params: Sampling parameters.

        Returns:
            :class:`Rollouts` on CPU with ``N = M * params.n`` rows in
            prompt-major order; ``P`` = longest prompt, ``T`` = longest
            completion (``<= params.max_new_tokens``).

        Raises:
            ValueError: If ``prompts`` is a bare string or a prompt encodes
                to zero tokens.
        """
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
                parts.append(self._generate_chunk(chunk, [encoded[i] for i in chunk], params))
        result = Rollouts.concat(parts)
        # Trim the all-padding tail columns left by re-padding (none in practice).
        t_max = int(result.completion_lengths.max()) if len(result) else 0
        if t_max < result.completion_ids.shape[1]:
            result.completion_ids = result.completion_ids[:, :t_max]
            result.completion_mask = result.completion_mask[:, :t_max]
            result.logprobs = result.logprobs[:, :t_max]
        return result
