"""LoRA adapters for the native loop (``TrainerConfig.lora``), through the `peft` library.

`apply_lora` wraps the policy in a `peft.PeftModel` whose only trainable parameters are the adapters' (the base
weights frozen): every optimizer, IVON's noise (3PO) and VIGOR's gradient norm read "the trainable parameters", so
they act on the adapters. The reference model of the KL anchor is the adapter-free base, `base_model` (peft's
``disable_adapter()``): no second copy of the weights. `merged` gives a plain model with the adapters merged in,
to save or to serve.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from rlvr_lib.config import ConfigBase

__all__ = ["LoraSettings", "apply_lora", "base_model", "is_lora", "merged"]


@dataclass(frozen=True)
class LoraSettings(ConfigBase):
    """LoRA's settings (`peft.LoraConfig`): rank ``r``, scale ``alpha`` (the update is ``alpha / r * B A``),
    ``target_modules`` (module names, or ``"all-linear"``: every linear layer but the output head) and ``dropout``
    on the adapters' input. SAGE's authors train with r = 8."""

    r: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] | str = "all-linear"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, list):
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if isinstance(self.alpha, int) and not isinstance(self.alpha, bool):  # one spelling, one key: 16 -> 16.0
            object.__setattr__(self, "alpha", float(self.alpha))
        super().__post_init__()

    def validate(self) -> None:
        self.check_positive_int("r", self.r)
        self.check_positive("alpha", self.alpha)
        self.check_range("dropout", self.dropout, 0, 1, hi_open=True)
        ok = self.target_modules == "all-linear" or (
            isinstance(self.target_modules, tuple) and len(self.target_modules) > 0
            and all(isinstance(m, str) and m for m in self.target_modules))
        self.check(ok, "target_modules", self.target_modules,
                   "'all-linear' or a non-empty list of module names (e.g. ['q_proj', 'v_proj'])")


def apply_lora(model: torch.nn.Module, settings: LoraSettings, seed: int = 0) -> torch.nn.Module:
    """``model`` wrapped in a `peft.PeftModel` with fresh adapters (the only trainable parameters).

    The adapters' random initialisation (peft's: ``A`` Kaiming-uniform, ``B`` zero, so the start equals the base)
    draws from a generator seeded by ``seed``, leaving the global RNG as it was. Raises ValueError naming the
    target modules when none of them is in the model.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, bias="none",
                        target_modules=settings.target_modules if isinstance(settings.target_modules, str)
                        else list(settings.target_modules), task_type="CAUSAL_LM")
    devices = [model.device] if getattr(model, "device", torch.device("cpu")).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        try:
            return get_peft_model(model, config)
        except ValueError as err:
            raise ValueError(f"LoraSettings.target_modules={settings.target_modules!r}: {err}") from None


def is_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a `peft.PeftModel`."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


def base_model(model: torch.nn.Module):
    """Context in which the `peft.PeftModel` ``model`` computes as its base (adapters off): the reference model."""
    if not is_lora(model):
        raise ValueError(f"base_model: {type(model).__name__} has no LoRA adapters (a peft.PeftModel is needed)")
    return model.disable_adapter()


def merged(model: torch.nn.Module) -> torch.nn.Module:
    """A plain model (no peft layers) with ``model``'s adapters merged into a copy of its weights; a model
    without adapters is returned as is."""
    if not is_lora(model):
        return model
    return copy.deepcopy(model).merge_and_unload()
