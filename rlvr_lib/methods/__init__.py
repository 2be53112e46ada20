"""Methods as plug-ins of the one RL loop, and the registry of named presets.

A registry entry (`rlvr_lib.methods.registry`) is a `Method` subclass plus the
`TrainerConfig` fields its paper fixes (its preset), and a one-line
description (``METHODS[name].description``). GRPO is `Method` itself; the
baselines the papers compare against live in `rlvr_lib.methods.baselines`.
``method_config("grpo", steps=50)`` gives a validated config;
``build_method(config)`` the hook object the trainer calls.
"""

from __future__ import annotations

from rlvr_lib.methods.base import GRPO_KL_COEF, GRPO_LR, Method, NoOptions, StepBatch
from rlvr_lib.methods.presets import method_config
from rlvr_lib.methods.registry import METHODS, MethodSpec, build_method, register_method

# GRPO (DeepSeekMath, arXiv 2402.03300) at its paper's beta and lr. The "reverse" estimator's
# gradient is the reverse KL(pi || pi_ref)'s, as the papers write the KL (k3 as used has the forward
# KL's; see rlvr_lib.algos.kl). SAGE's comparator is grpo_k3 (the authors' k3; rlvr_lib.methods.sage).
register_method("grpo", Method, "GRPO: group-normalised advantages, PPO-clip, reverse-KL anchor to the base policy",
                kl_coef=GRPO_KL_COEF, kl_estimator="reverse", lr=GRPO_LR)

# Each module of methods registers its own on import.
from rlvr_lib.methods import baselines  # noqa: E402,F401
from rlvr_lib.methods import nudgerl  # noqa: E402,F401
from rlvr_lib.methods import oracle  # noqa: E402,F401
from rlvr_lib.methods import sage  # noqa: E402,F401
from rlvr_lib.methods import threepo  # noqa: E402,F401
from rlvr_lib.methods import vigor  # noqa: E402,F401
from rlvr_lib.methods.compose import compose  # noqa: E402
from rlvr_lib.methods.registry import seal_shipped  # noqa: E402

seal_shipped()  # the methods registered above are the library's own (`shipped_methods`); later ones are not

__all__ = ["METHODS", "Method", "MethodSpec", "NoOptions", "StepBatch", "build_method", "compose",
           "method_config", "register_method"]
