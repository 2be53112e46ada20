"""A fast in-process rollout engine: batched sampling over a preallocated KV cache.

:class:`KVCacheEngine` does less work per token than ``model.generate``, and fewer tokens:

* static KV cache, per layer ``(B, kv_heads, P + max_new_tokens, head_dim)``, prompts left-padded;
* each distinct prompt prefilled once (a group's G rows share it);
* finished rows dropped (once a quarter have stopped), early exit at all-EOS;
* a lean decoder for the Llama family (q/k/v and gate/up fused); other causal LMs use their own ``forward``.

Positions are ``cumsum(mask) - 1``, so reported log-probs equal a teacher-forced recomputation and greedy
decoding reproduces :class:`~rlvr_lib.rollout.hf.HFEngine`. Sampling at step ``t`` with raw logits ``z_t``::

    logp_t = log_softmax(z_t / T)            (reported, never top-p renormalised)
    y_t ~ softmax(top_p_filter(logp_t))      (argmax of z_t when greedy; T = 1 is reported)

Why each piece saves time: docs/rollout/kvcache.md."""

from __future__ import annotations

import inspect
import torch
import torch.nn.functional as F

from rlvr_lib.validation import check_choice

from .base import SamplingParams
from .batched import BatchedEngine

__all__ = ["KVCacheEngine", "LEAN_MODEL_TYPES", "top_p_filter"]

LEAN_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
"""``config.model_type`` values decoded by the lean path (same block structure)."""

FAST_PATH_MODES = ("auto", "never")


def top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """``(B, V)`` ``logp`` with tokens outside the nucleus set to ``-inf``: token ``v`` is kept iff the mass ranked before it is ``< top_p``."""
    if top_p >= 1.0:
        return logp
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    mass_before = sorted_logp.exp().cumsum(dim=-1) - sorted_logp.exp()
    remove_sorted = mass_before >= top_p
    remove_sorted[..., 0] = False
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
    return logp.masked_fill(remove, float("-inf"))


def _sample(logp: torch.Tensor) -> torch.Tensor:
    """One draw per row from ``softmax(logp)`` ``(B, V)``: ``argmax_v p_v / E_v``, ``E_v ~ Exp(1)``; ``(B,)`` long."""
    return (logp.exp() / torch.empty_like(logp).exponential_()).argmax(-1)


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Llama RMSNorm ``w * x / sqrt(mean(x^2) + eps)`` fused in float32; other dtypes or layouts call the module."""
    eps = getattr(norm, "variance_epsilon", None)
    weight = getattr(norm, "weight", None)
    if x.dtype != torch.float32 or eps is None or weight is None or weight.dtype != torch.float32:
        return norm(x)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _lean_supported(model) -> bool:
    """Whether ``model`` has the Llama-family layout the lean decoder relies on."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in LEAN_MODEL_TYPES:
        return False
    body = getattr(model, "model", None)
    if body is None or not all(hasattr(body, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    if not isinstance(getattr(model, "lm_head", None), torch.nn.Linear):
        return False
    for layer in body.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or getattr(attn, "sliding_window", None) is not None:
            return False
        if not all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")):
            return False
    return True


class _LeanDecoder:
    """Prefill + one-token steps of a Llama-family model over a static KV cache, q/k/v and gate/up fused per micro-batch."""

    def __init__(self, model, batch: int, width: int, device, dtype) -> None:
        self.model = model
        self.body = model.model
        cfg = model.config
        self.head_dim = self.body.layers[0].self_attn.head_dim
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        shape = (batch, self.n_kv, width, self.head_dim)
        self.keys = [torch.empty(shape, device=device, dtype=dtype) for _ in self.body.layers]
        self.values = [torch.empty(shape, device=device, dtype=dtype) for _ in self.body.layers]
        self.filled = 0  # cache columns written so far
        self.qkv = [self._fuse(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
                    for layer in self.body.layers]
        self.gate_up = [
            self._fuse(layer.mlp.gate_proj, layer.mlp.up_proj)
            if all(hasattr(layer.mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")) else None
            for layer in self.body.layers
        ]

    @staticmethod
    def _fuse(*linears) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        weight = torch.cat([m.weight for m in linears])
        biases = [m.bias for m in linears]
        if all(b is None for b in biases):
            bias = None
        else:
            bias = torch.cat([b if b is not None else m.weight.new_zeros(m.out_features) for m, b in zip(linears, biases)])
        return weight, bias, [m.out_features for m in linears]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only cache rows ``rows`` (indices into the current batch), copying only written columns."""
        def select(cache: torch.Tensor) -> torch.Tensor:
            kept = cache.new_empty((len(rows),) + cache.shape[1:])
            kept[:, :, :self.filled] = cache[:, :, :self.filled].index_select(0, rows)
            return kept

        self.keys = [select(k) for k in self.keys]
        self.values = [select(v) for v in self.values]

    def _attention(self, i: int, attn, x, cos, sin, start: int, mask) -> torch.Tensor:
        b, length, _ = x.shape
        weight, bias, sizes = self.qkv[i]
        q, k, v = F.linear(x, weight, bias).split(sizes, dim=-1)
        shape = (b, length, -1, self.head_dim)
        q, k, v = q.view(shape), k.view(shape), v.view(shape)
        if hasattr(attn, "q_norm"):  # qwen3: RMSNorm over the head dim, before rotary
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        end = start + length
        self.keys[i][:, :, start:end] = k
        self.values[i][:, :, start:end] = v
        keys, values = self.keys[i][:, :, :end], self.values[i][:, :, :end]
        if length == 1:
            # One query per row: two small batched matmuls beat SDPA's CPU dispatch;
            # grouped-query heads share their KV head through the reshape.
            q = q.reshape(b, self.n_kv, -1, self.head_dim)  # (B, kv, group, d)
            scores = torch.matmul(q, keys.transpose(-1, -2)) * attn.scaling  # (B, kv, group, S)
            scores = scores.masked_fill(~mask, float("-inf"))
            out = torch.matmul(torch.softmax(scores, dim=-1), values).reshape(b, self.n_heads, 1, self.head_dim)
        else:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling,
                                                 enable_gqa=self.n_kv != self.n_heads)
        return attn.o_proj(out.transpose(1, 2).reshape(b, length, -1))

    def _mlp(self, i: int, mlp, x) -> torch.Tensor:
        if self.gate_up[i] is None:
            return mlp(x)
        weight, bias, sizes = self.gate_up[i]
        gate, up = F.linear(x, weight, bias).split(sizes, dim=-1)
        return mlp.down_proj(mlp.act_fn(gate) * up)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int, mask: torch.Tensor) -> torch.Tensor:
        """Last-position logits of ``ids`` ``(B, L)`` written at columns ``start..start+L-1``; ``mask`` ``(B, 1, L, start + L)`` bool."""
        x = self.body.embed_tokens(ids)
        cos, sin = self.body.rotary_emb(x, positions)
        for i, layer in enumerate(self.body.layers):
            x = x + self._attention(i, layer.self_attn, _rms_norm(layer.input_layernorm, x), cos, sin, start, mask)
            x = x + self._mlp(i, layer.mlp, _rms_norm(layer.post_attention_layernorm, x))
        self.filled = start + ids.shape[1]
        return self.model.lm_head(_rms_norm(self.body.norm, x[:, -1])).float()


class _ModelStepper:
    """Fallback for any causal LM: its own forward and KV cache, one token per step."""

    def __init__(self, model) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.keep_kw = "logits_to_keep" in params
        self.position_kw = "position_ids" in params
        self.cache = None

    def forward(self, ids, positions, attention_mask) -> torch.Tensor:
        kwargs = dict(input_ids=ids, attention_mask=attention_mask, use_cache=True)
        if self.position_kw:
            kwargs["position_ids"] = positions
        if self.cache is not None:
            kwargs[self.cache_kw] = self.cache
        if self.keep_kw:
            kwargs["logits_to_keep"] = 1
        out = self.model(**kwargs)
        self.cache = getattr(out, "past_key_values", None)
        if self.cache is None:
            self.cache = getattr(out, "cache", None)
        return out.logits[:, -1].float()

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only cache rows ``rows`` (``Cache.reorder_cache`` selects along the batch)."""
        if not hasattr(self.cache, "reorder_cache"):
            raise TypeError(
                f"KVCacheEngine: the model's cache ({type(self.cache).__name__}) cannot select rows; "
                "a transformers Cache object (transformers >= 4.36) is required"
            )
        self.cache.reorder_cache(rows)


class KVCacheEngine(BatchedEngine):
    """Rollout engine with a static KV cache and minimal per-token work; HFEngine's contract and greedy tokens.

    ``fast_path``: ``"auto"`` (lean decoder for :data:`LEAN_MODEL_TYPES`) or ``"never"``. ``**engine_kwargs``: see
    :class:`~rlvr_lib.rollout.batched.BatchedEngine`. Raises ValueError on a bad ``batch_size`` / ``fast_path`` or no EOS id."""

    def __init__(self, model, tokenizer, *, fast_path: str = "auto", **engine_kwargs) -> None:
        check_choice("KVCacheEngine.fast_path", fast_path, FAST_PATH_MODES)
        super().__init__(model, tokenizer, **engine_kwargs)
        self.fast_path = fast_path

    @property
    def uses_lean_decoder(self) -> bool:
        """Whether decoding goes through the lean Llama-family decoder."""
        return self.fast_path == "auto" and _lean_supported(self.model)

    def _sample_chunk(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, width = prompt_ids.shape
        max_new, device = params.max_new_tokens, prompt_ids.device
        total = width + max_new
        # Key validity per cache column: the prompt mask, then every generated column.
        key_valid = torch.ones(batch, total, dtype=torch.bool, device=device)
        key_valid[:, :width] = prompt_mask.bool()
        next_position = prompt_mask.long().sum(-1, keepdim=True)  # (B, 1)
        # Rows of one group share their prompt: encode each distinct prompt once.
        distinct, inverse = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0, return_inverse=True)
        ids, mask = distinct[:, :width], distinct[:, width:]
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)

        lean = self.uses_lean_decoder
        if lean:
            dtype = self.model.model.embed_tokens.weight.dtype
            decoder = _LeanDecoder(self.model, len(distinct), total, device, dtype)
            causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
            # Pad queries see only themselves: a row with no visible key would give NaN.
            prefill_mask = (causal & mask.bool()[:, None, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
            logits = decoder.forward(ids, positions, 0, prefill_mask)
        else:
            decoder = _ModelStepper(self.model)
            logits = decoder.forward(ids, positions, mask.long())
        logits = logits[inverse]  # back to the micro-batch's rows (unique() sorts)
        decoder.keep_rows(inverse)

        eos = torch.tensor(self.eos_token_ids, device=device)
        tokens = torch.full((batch, max_new), self.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros(batch, max_new, dtype=torch.float32, device=device)
        rows = torch.arange(batch, device=device)  # rows still decoding, as indices into the micro-batch
        done = torch.zeros(batch, dtype=torch.bool, device=device)  # of those rows: EOS already produced
        steps = 0
        for t in range(max_new):
            if params.greedy:
                token = logits.argmax(-1)
                logp_all = torch.log_softmax(logits, -1)
            else:
                logp_all = torch.log_softmax(logits / params.temperature, -1)
                token = _sample(top_p_filter(logp_all, params.top_p))
            tokens[rows, t] = token  # tokens after a row's EOS are ignored by the caller
            logprobs[rows, t] = logp_all.gather(1, token[:, None]).squeeze(1)
            done |= torch.isin(token, eos)
            steps = t + 1
            n_live = len(rows) - int(done.sum())
            if t + 1 == max_new or n_live == 0:
                break
            if n_live <= 0.75 * len(rows):
                # Drop finished rows so that later steps compute live ones only; waiting until
                # a quarter has finished bounds the cache copies to a logarithmic number.
                keep = (~done).nonzero().squeeze(1)
                rows, token, done = rows[keep], token[keep], done[keep]
                key_valid, next_position = key_valid[keep], next_position[keep]
                decoder.keep_rows(keep)
            column = width + t
            step_positions = next_position + t
            if lean:
                logits = decoder.forward(token[:, None], step_positions, column, key_valid[:, None, None, : column + 1])
            else:
                logits = decoder.forward(token[:, None], step_positions, key_valid[:, : column + 1].long())
        return tokens[:, :steps], logprobs[:, :steps]
