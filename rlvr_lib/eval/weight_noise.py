"""Temperature vs weight noise at the strategy branch (3PO Fig 1, arXiv 2608.09805).

A temperature rescales the logits, ``p_T = softmax(z / T)``, a strictly increasing map of each logit, so the
order of candidates never changes with ``T``; a weight sample ``theta_hat = m + sigma * z`` (IVON's,
``z ~ N(0, I)``) changes the logits and can reorder them. On the testbed the decision is the strategy branch,
the first completion token.

:func:`branch_reorder` measures, per prompt, whether the top-k order of candidate tokens differs from the mean
policy's at ``T = 1``, under each temperature (0 by construction, which it checks) and under ``N`` weight samples
(every trainable parameter; seeded generator; weights restored bit for bit). Parts: :func:`branch_logits`
``(P, V)``, :func:`weight_sample`, :func:`order_changed`, :func:`strategy_tokens`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rlvr_lib.validation import check_int, check_range, invalid

__all__ = ["BranchReorder", "branch_logits", "branch_reorder", "order_changed", "strategy_tokens", "weight_sample"]


def strategy_tokens(tokenizer, strategies: Sequence[str]) -> list[int]:
    """First token id of each strategy label; ValueError on none, an empty encoding or a shared first token."""
    if isinstance(strategies, str) or not strategies:
        raise invalid("strategies", strategies, "a non-empty sequence of strategy labels")
    ids = []
    for s in strategies:
        enc = tokenizer.encode(s, add_special_tokens=False)
        if not enc:
            raise invalid("strategies", s, "labels that encode to at least one token")
        ids.append(int(enc[0]))
    if len(set(ids)) != len(ids):
        raise invalid("strategies", list(strategies), f"labels with distinct first tokens (got ids {ids})")
    return ids


@torch.no_grad()
def branch_logits(model, tokenizer, prompts: Sequence[str], *, batch_size: int = 256) -> torch.Tensor:
    """Logits ``z_p`` of the first completion token of each prompt: ``(P, V)`` float64 on CPU.

    Prompts are left-padded as ``KVCacheEngine.encode_prompts`` does; the model's train/eval mode is restored."""
    from rlvr_lib.rollout import KVCacheEngine
    from rlvr_lib.rollout.logprobs import completion_forward

    if isinstance(prompts, str) or not prompts:
        raise invalid("prompts", prompts, "a non-empty sequence of prompt strings")
    check_int("batch_size", batch_size, 1)
    ids, mask = KVCacheEngine(model, tokenizer).encode_prompts(list(prompts))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        out = []
        for rows in torch.arange(len(prompts)).split(batch_size):
            p_ids, p_mask = ids[rows].to(device), mask[rows].to(device)
            dummy = torch.zeros((len(rows), 1), dtype=torch.long, device=device)
            logits = completion_forward(model, p_ids, p_mask, dummy, torch.ones_like(dummy))
            out.append(logits[:, 0].double().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out)


@contextlib.contextmanager
def weight_sample(model, sigma: float, generator: torch.Generator) -> Iterator[None]:
    """Context: every trainable parameter set to ``m + sigma * z``, ``z ~ N(0, I)`` from ``generator``.

    ``z`` is drawn per parameter in float32 on CPU (same sample on any device); ``m`` is restored exactly on exit.
    Raises ValueError on a negative or non-finite ``sigma``."""
    sigma = check_range("sigma", sigma, 0.0)
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p in params:
                z = torch.randn(p.shape, generator=generator, dtype=torch.float32)
                p.add_(z.to(device=p.device, dtype=p.dtype), alpha=sigma)
        yield
    finally:
        with torch.no_grad():
            for p, m in zip(params, saved):
                p.copy_(m)


def order_changed(reference: torch.Tensor, other: torch.Tensor, tokens: Sequence[int] | None = None,
                  k: int = 1) -> torch.Tensor:
    """``(P,)`` bool: row ``p`` changed iff ``order(reference)[p, :k] != order(other)[p, :k]``.

    ``order(x) = argsort(x[:, c], descending, stable)`` with ``c`` = ``tokens`` (or all ``V``); ``reference`` and
    ``other`` are ``(P, V)``; ``1 <= k <= len(c)``. Raises ValueError on bad shapes, tokens or ``k``."""
    if reference.ndim != 2 or reference.shape != other.shape:
        raise invalid("other", f"<tensor of shape {tuple(other.shape)}>",
                      f"a 2-D tensor of the reference's shape {tuple(reference.shape)}")
    vocab = reference.shape[1]
    cand = list(range(vocab)) if tokens is None else [int(t) for t in tokens]
    if not cand or len(set(cand)) != len(cand) or min(cand) < 0 or max(cand) >= vocab:
        raise invalid("tokens", tokens, f"distinct token ids in [0, {vocab - 1}]")
    k = check_int("k", k, 1, len(cand))
    idx = torch.tensor(cand, dtype=torch.long)

    def top(x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x[:, idx].cpu(), dim=1, descending=True, stable=True).indices[:, :k]

    return (top(reference) != top(other)).any(dim=1)


@dataclass(frozen=True)
class BranchReorder:
    """What :func:`branch_reorder` measured (``P`` prompts, ``C`` candidates, ``N`` samples).

    ``weight (N, P)`` and ``temperature (len(temperatures), P)`` bool (order changed); ``probs (P, C)`` at the mean,
    ``weight_probs (N, P, C)``, ``temperature_probs (len(temperatures), P, C)``."""

    weight: np.ndarray
    temperature: np.ndarray
    probs: np.ndarray
    weight_probs: np.ndarray
    temperature_probs: np.ndarray
    temperatures: tuple[float, ...]
    sigma: float
    k: int
    tokens: tuple[int, ...]

    def shares(self) -> dict[str, float]:
        """``{"weight": mean of weight, "weight_any": share of prompts changed by any sample, "T=<t>": ...}``."""
        out = {"weight": float(self.weight.mean()), "weight_any": float(self.weight.any(axis=0).mean())}
        out.update({f"T={t:g}": float(row.mean()) for t, row in zip(self.temperatures, self.temperature)})
        return out

    def closest_prompt(self) -> int:
        """Prompt closest to a tie: ``argmin_p log(q_p1 / q_p2)`` over the two largest candidate probabilities."""
        if self.probs.shape[1] < 2:
            raise invalid("tokens", list(self.tokens), "two or more candidates to compare the top two")
        top2 = np.sort(self.probs, axis=1)[:, -2:]
        return int(np.argmin(np.log(top2[:, 1]) - np.log(top2[:, 0])))

    def candidate_mass(self) -> dict[str, float]:
        """Mean candidate mass ``sum_c probs``: ``{"mean", "weight", "T=<t>"}`` (a sample that breaks the policy shows here)."""
        out = {"mean": float(self.probs.sum(-1).mean()), "weight": float(self.weight_probs.sum(-1).mean())}
        out.update({f"T={t:g}": float(p.sum(-1).mean()) for t, p in zip(self.temperatures, self.temperature_probs)})
        return out


def branch_reorder(model, tokenizer, prompts: Sequence[str], *, sigma: float, samples: int = 8,
                   temperatures: Sequence[float] = (0.6, 1.0, 1.4), tokens: Sequence[int] | None = None,
                   k: int = 1, seed: int = 0, batch_size: int = 256) -> BranchReorder:
    """Does the branch ranking change under temperatures, and under weight samples? (3PO Fig 1)

    Reference ``r_p = log_softmax(z_p)``; temperature: ``log_softmax(z_p / T)``; sample ``n``:
    ``log_softmax(z_p^(n))`` at ``m + sigma * eps_n``, ``eps_n ~ N(0, I)`` from
    ``torch.Generator().manual_seed(seed)``; each compared by :func:`order_changed`. Returns :class:`BranchReorder`."""
    sigma = check_range("sigma", sigma, 0.0)
    samples = check_int("samples", samples, 1)
    seed = check_int("seed", seed, 0)
    if isinstance(temperatures, (str, bytes)) or not temperatures:
        raise invalid("temperatures", temperatures, "a non-empty sequence of temperatures > 0")
    temperatures = tuple(check_range("temperatures", t, 0.0, None, lo_open=True) for t in temperatures)
    logits = branch_logits(model, tokenizer, prompts, batch_size=batch_size)
    ref = torch.log_softmax(logits, dim=-1)
    cand = list(range(ref.shape[1])) if tokens is None else [int(t) for t in tokens]
    order_changed(ref, ref, cand, k)  # validates tokens and k before the samples run
    at_t = [torch.log_softmax(logits / t, dim=-1) for t in temperatures]
    gen = torch.Generator().manual_seed(seed)
    at_w = []
    for _ in range(samples):
        with weight_sample(model, sigma, gen):
            at_w.append(torch.log_softmax(branch_logits(model, tokenizer, prompts, batch_size=batch_size), dim=-1))
    probs = lambda x: x[:, cand].exp().numpy()  # noqa: E731
    return BranchReorder(
        weight=np.stack([order_changed(ref, w, cand, k).numpy() for w in at_w]),
        temperature=np.stack([order_changed(ref, t, cand, k).numpy() for t in at_t]),
        probs=probs(ref), weight_probs=np.stack([probs(w) for w in at_w]),
        temperature_probs=np.stack([probs(t) for t in at_t]),
        temperatures=temperatures, sigma=float(sigma), k=k, tokens=tuple(cand))
