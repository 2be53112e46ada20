"""Moved to :mod:`rlvr_lib.study.probes.weight_steps` (issue 30): a paper-specific probe, above the trainer.

This module keeps the old import path working; new code imports `rlvr_lib.study.probes.weight_steps`.
"""

from rlvr_lib.study.probes.weight_steps import *  # noqa: F401,F403
from rlvr_lib.study.probes.weight_steps import __all__  # noqa: F401
