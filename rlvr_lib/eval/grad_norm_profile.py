"""Moved to :mod:`rlvr_lib.study.probes.grad_norm_profile` (issue 30): a paper-specific probe, above the trainer.

This module keeps the old import path working; new code imports `rlvr_lib.study.probes.grad_norm_profile`.
"""

from rlvr_lib.study.probes.grad_norm_profile import *  # noqa: F401,F403
from rlvr_lib.study.probes.grad_norm_profile import __all__  # noqa: F401
