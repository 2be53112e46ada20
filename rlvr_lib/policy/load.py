"""Loading a policy: the embedded tiny checkpoint or any Hugging Face causal LM.

Both go through ``AutoModelForCausalLM`` / ``AutoTokenizer``, so code that runs on
the tiny policy runs unchanged on a hub name or a local checkpoint directory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

TINY_POLICY_DIR = Path(__file__).resolve().parent / "checkpoints" / "tiny-mul"
SMALL_POLICY_DIR = TINY_POLICY_DIR.with_name("small-mul")
"""The second model size: `rlvr_lib.policy.pretrain.POLICY_SIZES` ``"small"``, pretrained on the
tiny policy's data; pass it as ``policy`` (a local checkpoint directory) where it is shipped."""
POLICY_DIRS = {"tiny": TINY_POLICY_DIR, "small": SMALL_POLICY_DIR}
"""Where ``python -m rlvr_lib pretrain --size S`` writes by default."""
DISCOVERY_POLICY_DIR = TINY_POLICY_DIR.with_name("tiny-mul-discovery")
"""Design d3 of the discovery regime (`rlvr_lib.tasks.discovery`): the tiny policy pretrained with ``round`` rarer on
round-only items."""
POLICY_NAMES = {"small": SMALL_POLICY_DIR, "discovery": DISCOVERY_POLICY_DIR}
"""Policies of this package a config names by name (``policy="small"``), so that a run's cache key holds no
checkout's path; ``None`` is the embedded tiny policy. A name here takes precedence over a hub model's."""


def resolve_policy_path(name_or_path: str | Path | None) -> str:
    """``None``: the embedded tiny policy; a name of :data:`POLICY_NAMES`: this package's checkpoint; else as given.

    Raises FileNotFoundError (naming the command that builds it) when a named policy is not built.
    """
    if name_or_path is None:
        if not (TINY_POLICY_DIR / "config.json").exists():
            raise FileNotFoundError(
                f"the embedded tiny policy is missing at {TINY_POLICY_DIR}; rebuild it with `python -m rlvr_lib pretrain`"
            )
        return str(TINY_POLICY_DIR)
    if isinstance(name_or_path, str) and name_or_path in POLICY_NAMES:
        path = POLICY_NAMES[name_or_path]
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"policy={name_or_path!r} is not built at {path}: build it with `make second-size` "
                                    f"(or `python -m rlvr_lib pretrain --size {name_or_path}`)")
        return str(path)
    return str(name_or_path)


def policy_fingerprint(name_or_path: str | Path | None) -> str:
    """What a cached result depends on: a hash of a local checkpoint's ``config.json`` and weight files, else the hub name."""
    path = Path(resolve_policy_path(name_or_path))
    if not path.is_dir():
        return str(name_or_path)
    digest = hashlib.sha256()
    for file in sorted([path / "config.json", *path.glob("*.safetensors"), *path.glob("*.bin")]):
        if file.exists():
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def load_policy(
    name_or_path: str | Path | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer (pad token: EOS when none); ``name_or_path=None`` loads the tiny policy.

    ``device`` defaults to CUDA when available; ``dtype`` to float32. Returns ``(model, tokenizer)``.
    """
    path = resolve_policy_path(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device), tokenizer
