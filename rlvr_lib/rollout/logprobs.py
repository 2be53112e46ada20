"""Teacher-forced log-probabilities of completions under a causal LM.

The trainer's side of the rollout contract: an engine's sampling log-probs are what :func:`sequence_logprobs`
recomputes from the same ids at the same temperature, up to floating-point noise.
How the forward avoids the full log-softmax: docs/rollout/logprobs.md."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from rlvr_lib.validation import check_choice, check_int, check_range

__all__ = ["LOGPROB_KERNELS", "completion_forward", "plain_lm_head", "position_ids_from_mask", "sequence_logprobs"]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``(N, L)`` long position ids ``clamp(cumsum(mask) - 1, min=0)`` for a left-padded ``(N, L)`` mask (as ``generate``)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def _forward_parameters(model: torch.nn.Module) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return frozenset()


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    return "logits_to_keep" in _forward_parameters(model)


LOGPROB_KERNELS = ("auto", "torch", "triton", "naive", "logits")
"""``kernel`` values of :func:`sequence_logprobs`: the backends of
:func:`rlvr_lib.kernels.logprob_entropy` on the decoder's hidden states, or
``"logits"`` (the model's own logits, then a full log-softmax)."""

_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def plain_lm_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """``(decoder, lm_head)`` when the logits are exactly ``lm_head(decoder(...).last_hidden_state)``, else ``None`` (FSDP too)."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        return None
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, torch.nn.Linear):
        return None
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) not in (None, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    decoder = None
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        decoder = get_decoder()
    if decoder is None or decoder is model:
        decoder = getattr(model, "transformer", None)
    if not isinstance(decoder, torch.nn.Module) or decoder is model:
        return None
    return decoder, head


def completion_forward(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    decoder: torch.nn.Module | None = None,
) -> torch.Tensor:
    """The teacher-forced forward over ``[prompt; completion[:, :-1]]``, mask ``[prompt_mask; completion_mask]``.

    Prompts ``(N, P)`` LEFT-padded, completions ``(N, T)`` RIGHT-padded; positions ``cumsum(mask) - 1``.
    Returns ``(N, T, V)`` logits, or ``(N, T, H)`` hidden states with ``decoder``; position ``t`` predicts token ``t``."""
    t_len = completion_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids[:, :-1]], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1).long()
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask,
                  position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    if decoder is not None:
        return decoder(**kwargs).last_hidden_state[:, -t_len:]
    if _accepts_logits_to_keep(model):
        return model(**kwargs, logits_to_keep=t_len).logits
    return model(**kwargs).logits[:, -t_len:]


def sequence_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    kernel: str = "auto",
    length_buckets: int = 4,
    share_prompts: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of completions, teacher-forced; gradients flow to the parameters.

    For completion token ``y_t`` with logits ``z_t``::

        logp[n, t]    = log softmax(z_t / temperature)[y_t]
        entropy[n, t] = -sum_v p_v log p_v,  p = softmax(z_t / temperature)

    Prompts ``(N, P)`` LEFT-padded (``P >= 1``), completions ``(N, T)`` RIGHT-padded. ``kernel``: one of
    :data:`LOGPROB_KERNELS`. ``length_buckets`` (>= 1) and ``share_prompts`` change cost, not results (up to
    rounding). Returns ``(logp, entropy)``, each ``(N, T)`` float32, 0 on padding (``entropy`` None unless
    ``with_entropy``). Raises ValueError on inconsistent shapes, ``P = 0``, temperature <= 0 or an unknown kernel."""
    check_range("temperature", temperature, 0, lo_open=True)
    check_choice("kernel", kernel, LOGPROB_KERNELS)
    if prompt_ids.dim() != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(
            f"prompt_ids {tuple(prompt_ids.shape)} and prompt_mask {tuple(prompt_mask.shape)} "
            "must be the same (N, P) shape"
        )
    if completion_ids.dim() != 2 or completion_ids.shape != completion_mask.shape:
        raise ValueError(
            f"completion_ids {tuple(completion_ids.shape)} and completion_mask "
            f"{tuple(completion_mask.shape)} must be the same (N, T) shape"
        )
    if completion_ids.shape[0] != prompt_ids.shape[0]:
        raise ValueError(f"prompt rows {prompt_ids.shape[0]} != completion rows {completion_ids.shape[0]}")
    if prompt_ids.shape[1] < 1:
        raise ValueError("prompt width P must be >= 1 (the first completion token needs a context)")

    check_int("length_buckets", length_buckets, 1)

    n_rows, t_len = completion_ids.shape
    device = prompt_ids.device
    if t_len == 0:
        empty = torch.zeros(n_rows, 0, device=device, dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    head = plain_lm_head(model) if kernel != "logits" else None
    shared = _SharedPrompts.build(model, head, prompt_ids, prompt_mask) if share_prompts else None
    buckets = max(1, min(length_buckets, n_rows // _MIN_BUCKET_ROWS))
    if buckets == 1:
        return _trimmed_logprobs(model, head, shared, torch.arange(n_rows, device=device), prompt_ids, prompt_mask,
                                 completion_ids, completion_mask, temperature, with_entropy, kernel)
    order = torch.argsort(completion_mask.sum(1), stable=True)
    parts = [
        _trimmed_logprobs(model, head, shared, rows, prompt_ids[rows], prompt_mask[rows], completion_ids[rows],
                          completion_mask[rows], temperature, with_entropy, kernel)
        for rows in order.chunk(buckets)
    ]
    back = torch.argsort(order).to(device)
    logp = torch.cat([lp for lp, _ in parts]).index_select(0, back)
    entropy = torch.cat([en for _, en in parts]).index_select(0, back) if with_entropy else None
    return logp, entropy


_MIN_BUCKET_ROWS = 8


class _SharedPrompts:
    """Each distinct prompt run once; its rows reuse the prompt's keys, values and last output::

        out[n, 0]  = prompt_pass[u(n), last]            (predicts completion token 0)
        out[n, 1:] = completion_pass(completion[n, :-1] | cache[u(n)])

    ``u(n)`` the distinct prompt of row ``n``; equal to one pass up to float rounding."""

    def __init__(self, outputs: torch.Tensor, layers: list, prompt_mask: torch.Tensor, inverse: torch.Tensor,
                 run: torch.nn.Module, keep_logits: bool, cache_kw: str) -> None:
        self.last = outputs  # (U, 1, H or V): the last prompt position of each distinct prompt
        self.layers = layers  # per layer: (keys, values), (U, heads, P, head_dim)
        self.prompt_mask = prompt_mask  # (U, P), trimmed to the longest real prompt
        self.inverse = inverse  # (N,): row -> distinct prompt
        self.run = run  # the model, or its decoder on the kernel path
        self.keep_logits = keep_logits
        self.cache_kw = cache_kw  # transformers >= 5.24 names it "cache", earlier "past_key_values"

    @classmethod
    def build(cls, model, head, prompt_ids, prompt_mask) -> "_SharedPrompts | None":
        """Run the distinct prompts once; ``None`` when no prompt repeats or the model's cache cannot be shared."""
        distinct, inverse = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0, return_inverse=True)
        if 2 * len(distinct) > len(prompt_ids):  # under two rows per prompt: two passes cost more than they save
            return None
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        width = prompt_ids.shape[1]
        ids, mask = distinct[:, :width], distinct[:, width:]
        keep = max(1, int(mask.sum(1).max()))
        ids, mask = ids[:, -keep:], mask[:, -keep:].long()
        run = head[0] if head is not None else model
        kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=True)
        keep_logits = head is None and _accepts_logits_to_keep(model)
        out = run(**kwargs, logits_to_keep=1) if keep_logits else run(**kwargs)
        cache = out["cache"] if "cache" in out else out.get("past_key_values")  # "cache" from transformers 5.24
        if not isinstance(cache, DynamicCache) or not all(type(layer) is DynamicLayer for layer in cache.layers):
            return None
        last = out.last_hidden_state[:, -1:] if head is not None else out.logits[:, -1:]
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        cache_kw = "cache" if "cache" in _forward_parameters(run) else "past_key_values"
        return cls(last, layers, mask, inverse, run, keep_logits, cache_kw)

    def forward(self, rows: torch.Tensor, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
        """:func:`completion_forward`'s output for batch rows ``rows`` (completions already trimmed)."""
        from transformers import DynamicCache

        index = self.inverse[rows]
        first = self.last.index_select(0, index)
        t_len = completion_ids.shape[1]
        if t_len == 1:
            return first
        cache = DynamicCache([(k.index_select(0, index), v.index_select(0, index)) for k, v in self.layers])
        mask = torch.cat([self.prompt_mask.index_select(0, index), completion_mask[:, :-1].long()], dim=1)
        kwargs = dict(input_ids=completion_ids[:, :-1], attention_mask=mask,
                      position_ids=position_ids_from_mask(mask)[:, -(t_len - 1):], use_cache=True)
        kwargs[self.cache_kw] = cache
        if self.keep_logits:
            rest = self.run(**kwargs, logits_to_keep=t_len - 1).logits
        else:
            out = self.run(**kwargs)
            rest = out.logits if hasattr(out, "logits") else out.last_hidden_state
        return torch.cat([first, rest], dim=1)


def _trimmed_logprobs(model, head, shared, rows, prompt_ids, prompt_mask, completion_ids, completion_mask,
                      temperature, with_entropy, kernel) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`sequence_logprobs` of one bucket (batch rows ``rows``): computed on its longest prompt and
    completion only, returned at the caller's width ``T`` (zeros past every row's end)."""
    n_rows, width = completion_ids.shape
    p_keep = max(1, int(prompt_mask.sum(1).max()))
    t_len = int(completion_mask.sum(1).max())
    prompt_ids, prompt_mask = prompt_ids[:, -p_keep:], prompt_mask[:, -p_keep:]
    completion_ids, completion_mask = completion_ids[:, :t_len], completion_mask[:, :t_len]
    device = prompt_ids.device
    if t_len == 0:
        logp = torch.zeros(n_rows, width, device=device, dtype=torch.float32)
        return logp, (logp.clone() if with_entropy else None)

    def forward(decoder=None):
        if shared is not None:
            return shared.forward(rows, completion_ids, completion_mask)
        return completion_forward(model, prompt_ids, prompt_mask, completion_ids, completion_mask, decoder=decoder)

    if head is None:
        logits = forward().float()
        if temperature != 1.0:
            logits = logits / temperature
        log_probs = torch.log_softmax(logits, dim=-1)
        mask = completion_mask.to(log_probs.dtype)
        logp = log_probs.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1) * mask
        entropy = -(log_probs.exp() * log_probs).sum(-1) * mask if with_entropy else None
    else:
        from rlvr_lib.kernels import logprob_entropy

        decoder, lm_head = head
        hidden = forward(decoder)
        real = completion_mask.bool()
        # LOGPROB_KERNELS other than "logits" are the kernel backends themselves.
        token_logp, token_entropy = logprob_entropy(hidden[real], lm_head.weight, completion_ids[real],
                                                    temperature=temperature, backend=kernel, bias=lm_head.bias)
        zeros = torch.zeros(n_rows, t_len, device=hidden.device, dtype=torch.float32)
        logp = zeros.masked_scatter(real, token_logp.float())
        entropy = zeros.masked_scatter(real, token_entropy.float()) if with_entropy else None
    logp = F.pad(logp, (0, width - t_len))
    return logp, (F.pad(entropy, (0, width - t_len)) if with_entropy else None)
