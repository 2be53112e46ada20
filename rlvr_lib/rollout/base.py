"""Rollout data types and the engine protocol.

An engine turns ``M`` prompts into ``N = M * n`` completions with token ids, masks and the log-prob of each
sampled token under the sampling policy. Conventions of every engine:

* **Prompt-major order**: row ``i * n + j`` is sample ``j`` of prompt ``i``.
* **Padding**: prompts LEFT-padded, completions RIGHT-padded; pad positions carry the pad id and mask 0.
* **EOS**: a stopped completion keeps its EOS (mask 1); nothing after the first EOS is kept.
* **Log-probs**: ``log softmax(logits / temperature)[token]`` of the raw logits, no top-p renormalisation (what
  :func:`rlvr_lib.rollout.logprobs.sequence_logprobs` recomputes); greedy reports temperature 1; 0 on padding.
* Tensors are returned on CPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import torch

from rlvr_lib.validation import check, check_int, check_range

__all__ = ["SamplingParams", "Rollouts", "RolloutEngine", "FINISH_REASONS"]

FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions: ``n`` >= 1 (group size G), ``temperature`` > 0, ``top_p`` in ``(0, 1]``,
    ``max_new_tokens`` >= 1, ``seed``, ``greedy`` (argmax; temperature and top_p ignored). ValueError when out of range."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    greedy: bool = False

    def __post_init__(self) -> None:
        check_int("SamplingParams.n", self.n, 1)
        check_int("SamplingParams.max_new_tokens", self.max_new_tokens, 1)
        check_int("SamplingParams.seed", self.seed, 0)
        check(isinstance(self.greedy, bool), "SamplingParams.greedy", self.greedy, "a bool")
        try:
            temperature = check_range("SamplingParams.temperature", self.temperature, 0, lo_open=True)
        except ValueError as err:
            raise ValueError(f"{err} (use greedy=True for argmax decoding)") from None
        top_p = check_range("SamplingParams.top_p", self.top_p, 0, 1, lo_open=True)
        object.__setattr__(self, "temperature", temperature)
        object.__setattr__(self, "top_p", top_p)

    @property
    def logprob_temperature(self) -> float:
        """Temperature at which log-probs are reported (1.0 when greedy)."""
        return 1.0 if self.greedy else self.temperature

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of the fields."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SamplingParams":
        """Build from :meth:`to_dict` output; ValueError on an unknown key."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"SamplingParams got unknown field(s) {unknown}; allowed: {sorted(names)}")
        return cls(**data)


def _pad_to(t: torch.Tensor, width: int, value: int | float, left: bool) -> torch.Tensor:
    """Pad a 2-D tensor along dim 1 to ``width`` on the left or right."""
    extra = width - t.shape[1]
    if extra == 0:
        return t
    pad = t.new_full((t.shape[0], extra), value)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


@dataclass
class Rollouts:
    """A batch of ``N`` sampled completions, prompt-major; ``P`` padded prompt width, ``T`` completion width.

    ``prompt_index (N,)``; ``prompt_ids``, ``prompt_mask`` ``(N, P)`` LEFT-padded; ``completion_ids``,
    ``completion_mask`` ``(N, T)`` RIGHT-padded (EOS included, ones a prefix); ``logprobs (N, T)`` float
    (0 on padding); ``texts``; ``finish_reasons`` (``"stop"`` / ``"length"``); ``pad_token_id``."""

    prompt_index: torch.Tensor
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logprobs: torch.Tensor
    texts: list[str]
    finish_reasons: list[str]
    pad_token_id: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        n = self.prompt_index.shape[0]
        if self.prompt_index.dim() != 1:
            raise ValueError(f"Rollouts.prompt_index must be 1-D, got shape {tuple(self.prompt_index.shape)}")
        for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs"):
            t = getattr(self, name)
            if t.dim() != 2 or t.shape[0] != n:
                raise ValueError(f"Rollouts.{name} must have shape ({n}, L), got {tuple(t.shape)}")
        if self.prompt_ids.shape != self.prompt_mask.shape:
            raise ValueError(
                f"Rollouts.prompt_mask shape {tuple(self.prompt_mask.shape)} != "
                f"prompt_ids shape {tuple(self.prompt_ids.shape)}"
            )
        for name in ("completion_mask", "logprobs"):
            if getattr(self, name).shape != self.completion_ids.shape:
                raise ValueError(
                    f"Rollouts.{name} shape {tuple(getattr(self, name).shape)} != "
                    f"completion_ids shape {tuple(self.completion_ids.shape)}"
                )
        for name in ("texts", "finish_reasons"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Rollouts.{name} must have {n} entries, got {len(getattr(self, name))}")
        bad = sorted(set(self.finish_reasons) - set(FINISH_REASONS))
        if bad:
            raise ValueError(f"Rollouts.finish_reasons must be in {FINISH_REASONS}, got {bad}")

    def __len__(self) -> int:
        return self.prompt_index.shape[0]

    @property
    def completion_lengths(self) -> torch.Tensor:
        """``(N,)`` long -- number of real completion tokens (EOS included)."""
        return self.completion_mask.sum(dim=1)

    @property
    def device(self) -> torch.device:
        """Device of the tensors."""
        return self.completion_ids.device

    def to(self, device: torch.device | str) -> "Rollouts":
        """Return a copy with every tensor on ``device``."""
        return dataclasses.replace(
            self,
            **{name: getattr(self, name).to(device) for name in self._tensor_fields()},
            texts=list(self.texts),
            finish_reasons=list(self.finish_reasons),
        )

    @staticmethod
    def _tensor_fields() -> tuple[str, ...]:
        return ("prompt_index", "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs")

    def select(self, indices: Sequence[int] | torch.Tensor | slice) -> "Rollouts":
        """The rows ``indices`` (list, long tensor, bool mask or slice) in that order; widths kept."""
        if isinstance(indices, slice):
            idx = torch.arange(len(self))[indices]
        else:
            idx = torch.as_tensor(indices)
            if idx.dtype == torch.bool:
                if idx.shape != (len(self),):
                    raise ValueError(f"boolean selection must have shape ({len(self)},), got {tuple(idx.shape)}")
                idx = idx.nonzero().flatten()
            idx = idx.long().reshape(-1)
        rows = idx.tolist()
        tensors = {name: getattr(self, name)[idx.to(self.device)] for name in self._tensor_fields()}
        return Rollouts(
            **tensors,
            texts=[self.texts[i] for i in rows],
            finish_reasons=[self.finish_reasons[i] for i in rows],
            pad_token_id=self.pad_token_id,
        )

    @classmethod
    def concat(cls, parts: Sequence["Rollouts"]) -> "Rollouts":
        """Stack ``parts`` row-wise, re-padding to the widest ``P`` and ``T``; ``prompt_index`` kept as is. ValueError if empty or pad ids differ."""
        parts = list(parts)
        if not parts:
            raise ValueError("Rollouts.concat needs at least one part, got 0")
        pad = parts[0].pad_token_id
        if any(p.pad_token_id != pad for p in parts):
            raise ValueError(f"Rollouts.concat: pad_token_id differs across parts: {[p.pad_token_id for p in parts]}")
        if len(parts) == 1:
            return parts[0].select(slice(None))
        width_p = max(p.prompt_ids.shape[1] for p in parts)
        width_t = max(p.completion_ids.shape[1] for p in parts)
        return cls(
            prompt_index=torch.cat([p.prompt_index for p in parts]),
            prompt_ids=torch.cat([_pad_to(p.prompt_ids, width_p, pad, left=True) for p in parts]),
            prompt_mask=torch.cat([_pad_to(p.prompt_mask, width_p, 0, left=True) for p in parts]),
            completion_ids=torch.cat([_pad_to(p.completion_ids, width_t, pad, left=False) for p in parts]),
            completion_mask=torch.cat([_pad_to(p.completion_mask, width_t, 0, left=False) for p in parts]),
            logprobs=torch.cat([_pad_to(p.logprobs, width_t, 0.0, left=False) for p in parts]),
            texts=[t for p in parts for t in p.texts],
            finish_reasons=[r for p in parts for r in p.finish_reasons],
            pad_token_id=pad,
        )


@runtime_checkable
class RolloutEngine(Protocol):
    """Anything that samples completions for prompts, under this module's conventions (KVCacheEngine, HFEngine, VLLMEngine)."""

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> Rollouts:
        """:class:`Rollouts` with ``N = M * params.n`` rows for ``M`` formatted prompts, prompt-major."""
        ...

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, mask)``, ``(M, P)`` long: the prompts left-padded exactly as :meth:`generate` encodes them."""
        ...
