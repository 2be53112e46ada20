"""Temperature vs weight noise at the strategy branch (3PO Fig 1, arXiv 2608.09805).

3PO's argument for exploring in weight space: a sampling temperature ``T``
rescales the logits, ``p_T = softmax(z / T)``, a strictly increasing map of
each logit, so the *order* of the next-token candidates never changes with
``T`` (only how peaked they are); a posterior weight sample
``theta_hat = m + sigma * z`` (IVON's, ``z ~ N(0, I)``) changes the logits
themselves and can reorder them. On the testbed the decision that matters is
the strategy branch, the first completion token (``d`` / ``s`` / ``r`` of
``direct`` / ``split`` / ``round``).

:func:`branch_reorder` measures, per prompt, whether the order of the top-k
candidate tokens at the branch differs from the mean policy's at ``T = 1``:

* under each temperature ``T`` (``log_softmax(z / T)``, mean weights): the
  share is 0 by construction, which the measurement checks;
* under each of ``N`` weight samples ``m + sigma * z_n`` (every trainable
  parameter, as IVON perturbs them; ``z_n`` from a seeded generator, the
  global RNG untouched; the weights are restored bit for bit).

The pieces are public: :func:`branch_logits` (the ``(P, V)`` logits of the
first completion token, prompts encoded exactly as the rollout engine
encodes them), :func:`weight_sample` (a context manager that sets
``m + sigma * z``), :func:`order_changed` (the comparison), and
:func:`strategy_tokens` (the first token of each strategy label).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rlvr_lib.validation import check_int, check_range, invalid

__all__ = ["BranchReorder", "branch_logits", "branch_reorder", "order_changed", "strategy_tokens", "weight_sample"]


def strategy_tokens(tokenizer, strategies: Sequence[str]) -> list[int]:
    """The first token id of each strategy label (``tokenizer.encode(s)[0]``), the branch candidates.

    Raises:
        ValueError: on no strategies, a label that encodes to nothing, or two
            labels that share their first token (the branch could not tell them apart).
    """
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
    """Logits of the first completion token of each prompt: ``(P, V)`` float64 on CPU.

    Prompts are left-padded as the rollout engine encodes them
    (`KVCacheEngine.encode_prompts`); one forward of the prompt alone
    (`completion_forward` with a one-token completion, which is not attended)
    gives the logits ``z_p`` at the position that predicts the first
    completion token. The model is put in ``eval()`` mode for the forward and
    its mode restored.

    Raises:
        ValueError: on no prompts or a bad ``batch_size``.
    """
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
    """Inside: every trainable parameter set to ``m + sigma * z`` (``z ~ N(0, I)`` from ``generator``).

    ``m`` is the parameter on entry; on exit it is restored exactly (a copy,
    not a subtraction). ``z`` is drawn parameter by parameter in
    ``model.parameters()`` order, in float32 on CPU, then moved to the
    parameter's device and dtype, so a generator state gives the same sample
    on any device. ``sigma = 0`` leaves the weights unchanged.

    Raises:
        ValueError: on a negative or non-finite ``sigma``.
    """
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
    """Whether the top-k order of the candidate tokens differs between two score tensors, per row.

    With ``c`` the candidate ids (``tokens``, or the whole vocabulary) and
    ``order(x) = argsort(x[:, c], descending, stable)``, row ``p`` changed iff
    ``order(reference)[p, :k] != order(other)[p, :k]`` anywhere: ``k = 1``
    compares the top candidate, ``k = len(c)`` the full ranking.

    Args:
        reference: ``(P, V)`` scores (logits or log-probs) of the reference.
        other: ``(P, V)`` scores to compare.
        tokens: Candidate token ids (distinct), or ``None`` for all ``V``.
        k: How many leading ranks must agree, ``1 <= k <= len(c)``.

    Returns:
        ``(P,)`` bool tensor.

    Raises:
        ValueError: on shapes that differ or are not 2-D, repeated or
            out-of-range tokens, or a bad ``k``.
    """
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
    """What :func:`branch_reorder` measured (numpy arrays; ``P`` prompts, ``C`` candidates).

    Attributes:
        weight: ``(N, P)`` bool, order changed under weight sample ``n``.
        temperature: ``(len(temperatures), P)`` bool, order changed at temperature ``T``.
        probs: ``(P, C)`` candidate probabilities of the mean policy at ``T = 1``.
        weight_probs: ``(N, P, C)`` the same under each weight sample.
        temperature_probs: ``(len(temperatures), P, C)`` the same at each temperature.
        temperatures, sigma, k, tokens: The settings measured.
    """

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
        """Index of the prompt whose mean-policy branch is closest to a tie: ``argmin_p log(q_p1 / q_p2)``.

        ``q_p1 >= q_p2`` are prompt ``p``'s two largest candidate probabilities
        (``probs``); ties go to the first prompt. Needs two or more candidates.
        """
        if self.probs.shape[1] < 2:
            raise invalid("tokens", list(self.tokens), "two or more candidates to compare the top two")
        top2 = np.sort(self.probs, axis=1)[:, -2:]
        return int(np.argmin(np.log(top2[:, 1]) - np.log(top2[:, 0])))

    def candidate_mass(self) -> dict[str, float]:
        """Mean probability mass of the candidates: ``{"mean", "weight", "T=<t>": mean of sum_c probs}``.

        ``"mean"`` at the mean weights, ``"weight"`` over weight samples and
        prompts, ``"T=<t>"`` at each temperature.

        A weight sample that "reorders" the branch by breaking the policy
        (the candidates lose their mass to other tokens) shows here.
        """
        out = {"mean": float(self.probs.sum(-1).mean()), "weight": float(self.weight_probs.sum(-1).mean())}
        out.update({f"T={t:g}": float(p.sum(-1).mean()) for t, p in zip(self.temperatures, self.temperature_probs)})
        return out


def branch_reorder(model, tokenizer, prompts: Sequence[str], *, sigma: float, samples: int = 8,
                   temperatures: Sequence[float] = (0.6, 1.0, 1.4), tokens: Sequence[int] | None = None,
                   k: int = 1, seed: int = 0, batch_size: int = 256) -> BranchReorder:
    """Does the branch decision's ranking change under temperatures, and under weight samples? (3PO Fig 1)

    Reference: the mean weights' log-probs at ``T = 1``,
    ``r_p = log_softmax(z_p)``. At temperature ``T``:
    ``log_softmax(z_p / T)``; under weight sample ``n``: ``log_softmax(z_p^(n))``
    with ``z^(n)`` the logits at ``m + sigma * eps_n``, ``eps_n ~ N(0, I)``
    drawn from ``torch.Generator().manual_seed(seed)`` (samples in order).
    Each is compared with the reference by :func:`order_changed` over the
    candidate ``tokens`` (e.g. :func:`strategy_tokens`) and top ``k``.

    Args:
        model, tokenizer: The policy (left unchanged).
        prompts: ``P`` prompt strings (e.g. ``problem.prompt``).
        sigma: Per-weight noise std (e.g. IVON's initial ``1 / sqrt(ess * (h0 + wd))``), >= 0.
        samples: ``N`` weight samples, >= 1.
        temperatures: Temperatures to compare, each > 0.
        tokens: Candidate ids (``None``: the whole vocabulary).
        k: Leading ranks compared (1: the top candidate).
        seed: Seed of the noise generator, >= 0.
        batch_size: Prompts per forward.

    Returns:
        :class:`BranchReorder`; ``.shares()`` gives the shares of prompts.

    Raises:
        ValueError: on a bad argument (see :func:`order_changed` for ``tokens`` and ``k``).
    """
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
