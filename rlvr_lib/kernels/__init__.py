"""Kernels: fused log-prob + entropy of an LM head over a large vocabulary.

* :func:`chunked_logprob_entropy` -- torch reference (CPU and GPU): online
  logsumexp over vocabulary chunks, custom autograd (recompute in backward),
  O(N * chunk_size) extra memory instead of the (N, V) log-softmax.
* :func:`naive_logprob_entropy` -- full materialisation (test reference).
* :func:`triton_logprob_entropy` -- fused Triton forward (logits never leave
  registers) + chunked backward with a fused Triton elementwise kernel; CUDA,
  or CPU under ``TRITON_INTERPRET=1``. ``HAS_TRITON`` says whether Triton imported.
* :func:`logprob_entropy` -- dispatcher (``backend="auto"``: Triton on CUDA
  when available, else the torch chunked path).
"""

from __future__ import annotations

from torch import Tensor

from rlvr_lib.validation import check_choice

from .logprobs import ChunkedLogProbEntropy, chunked_logprob_entropy, naive_logprob_entropy
from .triton_logprobs import HAS_TRITON, triton_interpret_mode, triton_logprob_entropy

__all__ = [
    "BACKENDS",
    "HAS_TRITON",
    "ChunkedLogProbEntropy",
    "chunked_logprob_entropy",
    "logprob_entropy",
    "naive_logprob_entropy",
    "triton_interpret_mode",
    "triton_logprob_entropy",
]

BACKENDS = ("auto", "torch", "triton", "naive")
_TRITON_DTYPES_NAMES = ("float16", "bfloat16", "float32")


def logprob_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 4096,
    backend: str = "auto",
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-position log-prob of ``targets`` and entropy under softmax((hidden @ weight.T + bias) / T).

    Args:
        hidden: (N, H) (or (..., H)) hidden states.
        weight: (V, H) LM head, same dtype as ``hidden``.
        targets: (N,) (or ``hidden.shape[:-1]``) integer ids in [0, V).
        temperature: > 0.
        chunk_size: vocabulary chunk (torch path, and the Triton path's backward).
        backend: ``"auto"`` (Triton when installed, the tensors are on CUDA
            and the dtype is float16/bfloat16/float32; else ``"torch"``),
            ``"torch"`` (:func:`chunked_logprob_entropy`), ``"triton"``
            (:func:`triton_logprob_entropy`) or ``"naive"``
            (:func:`naive_logprob_entropy`, O(N * V) memory).
        bias: optional (V,) LM-head bias.

    Returns:
        ``(logp, entropy)``, each of shape ``targets.shape``, float32
        (float64 for float64 inputs on the torch/naive paths).

    Raises:
        ValueError: unknown ``backend`` (or bad arguments, see the backends).
    """
    check_choice("backend", backend, BACKENDS)
    if backend == "auto":
        use_triton = (
            HAS_TRITON
            and isinstance(hidden, Tensor)
            and hidden.is_cuda
            and str(hidden.dtype).removeprefix("torch.") in _TRITON_DTYPES_NAMES
        )
        backend = "triton" if use_triton else "torch"
    if backend == "triton":
        return triton_logprob_entropy(
            hidden, weight, targets, temperature=temperature, chunk_size=chunk_size, bias=bias
        )
    if backend == "naive":
        return naive_logprob_entropy(hidden, weight, targets, temperature, bias=bias)
    return chunked_logprob_entropy(hidden, weight, targets, temperature=temperature, chunk_size=chunk_size, bias=bias)
