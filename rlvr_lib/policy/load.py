"""Loading a policy: the embedded tiny checkpoint or any Hugging Face causal LM.

Both go through ``AutoModelForCausalLM`` / ``AutoTokenizer``, so code that runs on
the tiny policy runs unchanged on a hub name or a local checkpoint directory.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

TINY_POLICY_DIR = Path(__file__).resolve().parent / "checkpoints" / "tiny-mul"


def resolve_policy_path(name_or_path: str | Path | None) -> str:
    """``None`` means the embedded tiny policy; anything else is passed to transformers."""
    if name_or_path is None:
        if not (TINY_POLICY_DIR / "config.json").exists():
            raise FileNotFoundError(
                f"the embedded tiny policy is missing at {TINY_POLICY_DIR}; rebuild it with `python -m rlvr_lib pretrain`"
            )
        return str(TINY_POLICY_DIR)
    return str(name_or_path)


def load_policy(
    name_or_path: str | Path | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer.

    Args:
        name_or_path: Hub name or local directory; ``None`` loads the embedded
            tiny policy shipped in this package.
        device: Where to put the model (default: CUDA when available, else CPU).
        dtype: Parameter dtype (default float32; pass bfloat16 for real models on GPU).

    Returns:
        ``(model, tokenizer)``; the tokenizer has a pad token (EOS when the
        checkpoint defines none).
    """
    path = resolve_policy_path(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device), tokenizer
