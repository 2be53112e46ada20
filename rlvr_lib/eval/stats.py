"""Moved to :mod:`rlvr_lib.study.stats` (issue 30): statistics over run records live with the study harness.

This module keeps the old import path working; new code imports `rlvr_lib.study.stats`.
"""

from rlvr_lib.study.stats import *  # noqa: F401,F403
from rlvr_lib.study.stats import __all__  # noqa: F401
