"""Which strategy solves which problem, measured on the shipped policy: the *strategy profile*.

For every in-distribution problem of the RL and evaluation splits, the number of correct samples out of
``PROFILE_SAMPLES`` hinted samples per strategy (one counts when it follows the hint and is correct;
`rlvr_lib.study.calibration.measure_strategy_profile`, written by ``python -m rlvr_lib.study calibrate
--profile``), shipped beside the checkpoint (``PROFILE_FILE``) with the hash of its policy.

* The RL pool keeps the problems on which the rare strategy never succeeded (`rare_never_solves`): under a
  reverse-KL anchor the optimum is ``pi ∝ pi_ref exp(r / beta)`` (SAGE), so only a strategy without reward on
  the RL pool is driven out at a binding beta.
* ``rare_mix`` holds the evaluation problems only the rare strategy solves (`only_rare_solves`, at least
  ``RARE_MIX_MIN_SUCCESSES`` times).

Why it is measured, and what the testbed showed before: docs/tasks/arithmetic.md."""

from __future__ import annotations

import functools
import json
from pathlib import Path

PROFILE_FILE = Path(__file__).resolve().parents[1] / "policy" / "checkpoints" / "tiny-mul" / "strategy_profile.json"
PROFILE_SAMPLES = 32
"""Hinted samples per (problem, strategy) of the profile."""
PROFILE_SEED = 1234
"""Sampling seed of the profile: none of the calibrations' or evaluations' seeds."""
PROFILE_MAX_NEW_TOKENS = 48
RARE_MIX_MIN_SUCCESSES = 2
"""Least number of the rare strategy's correct hinted samples (of ``PROFILE_SAMPLES``) for a ``rare_mix`` problem.

The rule stated before the profile was measured: 4, or 2 if 4 leaves fewer than the calibration's 200
problems, or 1 if 2 does. On the shipped policy 4 leaves 187 and 2 leaves 233."""


def problem_key(a: int, b: int) -> str:
    return f"{a}*{b}"


@functools.cache
def load_profile(path: str | None = None) -> dict:
    """The strategy profile (cached per path); FileNotFoundError, naming the command that writes it, if absent."""
    file = Path(path) if path else PROFILE_FILE
    if not file.exists():
        raise FileNotFoundError(
            f"no strategy profile at {file}: measure it on the shipped policy with "
            "`python -m rlvr_lib.study calibrate --profile` (`make pretrain` does after pretraining)")
    return json.loads(file.read_text())


def successes(a: int, b: int) -> dict[str, int]:
    """Correct hinted samples per strategy of ``a*b`` in the profile; KeyError if ``a*b`` is not profiled."""
    profile = load_profile()
    counts = profile["counts"].get(problem_key(a, b))
    if counts is None:
        raise KeyError(f"{a}*{b} is not in the strategy profile ({PROFILE_FILE.name} holds the in-distribution "
                       "problems of the RL and evaluation splits)")
    return dict(zip(profile["strategies"], counts))


def rare_never_solves(a: int, b: int, rare: str = "round") -> bool:
    """Whether the rare strategy never succeeded on ``a*b`` in the profile (the RL pool's rule)."""
    return successes(a, b)[rare] == 0


def only_rare_solves(a: int, b: int, rare: str = "round") -> bool:
    """Whether only the rare strategy succeeded on ``a*b``, at least ``RARE_MIX_MIN_SUCCESSES`` times (``rare_mix``)."""
    counts = successes(a, b)
    return counts[rare] >= RARE_MIX_MIN_SUCCESSES and all(n == 0 for s, n in counts.items() if s != rare)
