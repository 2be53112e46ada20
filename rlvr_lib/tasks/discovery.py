"""The discovery regime of the testbed: a rare strategy that earns reward in training, tied to a prompt feature.

``"arith"`` is the *retention* regime (its RL pool holds only problems the rare ``round`` never solved);
NudgeRL and 3PO are about *discovery*, which ``"arith_discovery"`` is, with the testbed's verifier and hints:

1. Feature: the first factor ends in 9 (19-79, `rlvr_lib.tasks.arithmetic.round_only`).
2. Targets: problems with the feature on which, in a fresh hinted profile (``PROFILE_SEED``), only ``round``
   succeeded (at least ``MIN_RARE_SUCCESSES`` of ``PROFILE_SAMPLES``): ``targets_train`` and ``targets_heldout``.
3. Design (`DESIGNS`, pre-registered, at most three): which first factors carry the feature, on which policy;
   d3 (`D3_POLICY`) is in use (``results/testbed/regimes.json``).
4. RL pool (``train``): at most ``MAX_TARGETS`` targets plus ``NON_TARGETS_PER_TARGET`` times as many retention
   problems; targets carry ``family == TARGET_FAMILY``.

The profile is ``DISCOVERY_FILE`` (``python -m rlvr_lib.study.regimes``); the task version names the design and a
hash of the pools. Why and how it was chosen: docs/tasks/arithmetic.md."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np

from rlvr_lib.tasks import arithmetic
from rlvr_lib.tasks.base import Problem
from rlvr_lib.tasks.registry import ArithmeticTask, register_task

__all__ = ["DESIGNS", "DISCOVERY_FILE", "DiscoveryTask", "RARE", "REGIMES", "TARGET_FAMILY", "candidates",
           "discovery_pool", "load_discovery", "select_targets"]

REGIMES = ("retention", "discovery")
"""``retention``: the rare strategy earns no reward in training (``"arith"``); ``discovery``: it does (here)."""
RARE = "round"
TARGET_FAMILY = "targets_train"
HELDOUT_FAMILY = "targets_heldout"
DISCOVERY_FILE = Path(__file__).resolve().with_name("discovery_pool.json")
PROFILE_SAMPLES = 32
PROFILE_SEED = 2026
"""Fresh hinted profile of the candidates: a seed no calibration, evaluation or the shipped profile uses."""
MIN_RARE_SUCCESSES = 2
UNHINTED_SAMPLES = 64
UNHINTED_SEED = 2027
UNHINTED_BOUND = 0.02
"""Stated before measuring: the base policy's unhinted ``round`` share on the training targets is at most 2%."""
MAX_TARGETS = 26
NON_TARGETS_PER_TARGET = 5
POOL_SEED = 0
D3_ROUND_SHARE = 0.01
"""Design d3's ``round`` share among the unhinted pretraining traces of round-only items (the prior's is 0.06)."""
D3_POLICY = "discovery"
"""Design d3's policy by name (`rlvr_lib.policy.load.POLICY_NAMES`)."""
DESIGNS = {
    "d1": "every round-only first factor (19, 29, ..., 79)",
    "d2": "the round-only first factors whose own unhinted round share is at most UNHINTED_BOUND "
          "(needs at least 2 of them, 8 training and 30 held-out targets)",
    "d3": "a policy pretrained with round-only items shown with round at 1% (not the 6% prior), every "
          "round-only first factor",
}
"""The designs, in the order they are tried; a design is used only when its bound and then its gate hold."""


def candidates(split: str) -> list[tuple[int, int]]:
    """Every in-distribution ``(a, b)`` of ``split`` with the feature (first factor 19-79 ending in 9), ``b != 9``."""
    return [(a, b) for d in arithmetic.DIFFICULTIES
            for a, b in arithmetic.problem_pool(split, d, first_units=(9,), profiled=False)
            if arithmetic.round_only(a, b) and a < 89]  # 89: round's 90*b is held out too


def select_targets(counts: dict[str, list[int]], strategies=arithmetic.STRATEGIES,
                   min_rare: int = MIN_RARE_SUCCESSES) -> list[str]:
    """The keys ``"a*b"`` of ``counts`` (hinted correct samples per strategy) on which only ``RARE`` succeeded,
    at least ``min_rare`` times; in the order of ``counts``."""
    rare = list(strategies).index(RARE)
    return [key for key, row in counts.items()
            if row[rare] >= min_rare and all(n == 0 for i, n in enumerate(row) if i != rare)]


@functools.cache
def load_discovery(path: str | None = None) -> dict:
    """The measured discovery profile (design in use, targets); FileNotFoundError, naming the command, if absent."""
    file = Path(path) if path else DISCOVERY_FILE
    if not file.exists():
        raise FileNotFoundError(f"no discovery profile at {file}: measure it with `python -m rlvr_lib.study.regimes`")
    return json.loads(file.read_text())


def _operands(keys) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in key.split("*")) for key in keys]


def discovery_pool(targets: list[tuple[int, int]], retention_pool: list[tuple[int, int]],
                   max_targets: int = MAX_TARGETS, ratio: int = NON_TARGETS_PER_TARGET,
                   seed: int = POOL_SEED) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(targets, non_targets)``: at most ``max_targets`` targets and ``ratio`` times as many of ``retention_pool`` (seeded draws).

    Raises ValueError on no target or a retention pool too small."""
    if not targets:
        raise ValueError("targets is empty: the design selected no training target")
    rng = np.random.default_rng(seed)
    if len(targets) > max_targets:
        keep = set(rng.choice(len(targets), max_targets, replace=False).tolist())
        targets = [t for i, t in enumerate(targets) if i in keep]
    need = ratio * len(targets)
    if need > len(retention_pool):
        raise ValueError(f"ratio={ratio} needs {need} non-targets: the retention pool has {len(retention_pool)}")
    keep = set(rng.choice(len(retention_pool), need, replace=False).tolist())
    return list(targets), [p for i, p in enumerate(retention_pool) if i in keep]


class DiscoveryTask(ArithmeticTask):
    """The testbed in the discovery regime (module docstring): ``"arith"`` with its own ``train`` pool and the
    two target families; every other family is the testbed's."""

    name = "arith_discovery"
    regime = "discovery"
    families = (*ArithmeticTask.families, TARGET_FAMILY, HELDOUT_FAMILY)
    eval_families = (TARGET_FAMILY, HELDOUT_FAMILY)
    default_eval_families = eval_families

    def __init__(self, hint_pool=None, profile: dict | None = None):
        super().__init__(hint_pool)
        self._profile = profile

    @property
    def profile(self) -> dict:
        return self._profile if self._profile is not None else load_discovery()

    @property
    def version(self) -> str:
        """The testbed's version, the design and a hash of the pools: a re-measured pool never reads old runs."""
        pools = json.dumps([self.profile["pool"], self.profile["heldout_targets"]], sort_keys=True)
        return f"{arithmetic.TESTBED_VERSION}-discovery-{self.profile['design']}-{hashlib.sha256(pools.encode()).hexdigest()[:8]}"

    def _family_operands(self, family: str) -> list[tuple[int, int]]:
        profile = self.profile
        if family == "train":
            return _operands(profile["pool"]["targets"]) + _operands(profile["pool"]["non_targets"])
        if family == TARGET_FAMILY:
            return _operands(profile["pool"]["targets"])
        return _operands(profile["heldout_targets"])

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        if family not in ("train", TARGET_FAMILY, HELDOUT_FAMILY):
            return super().family_problems(family, n, seed)
        pool = self._family_operands(family)
        if not isinstance(n, int) or not 1 <= n <= len(pool):
            raise ValueError(f"n={n!r} is not valid for family {family!r}: must be an int in 1..{len(pool)}")
        targets = set(self._family_operands(TARGET_FAMILY)) | set(self._family_operands(HELDOUT_FAMILY))
        rng = np.random.default_rng([seed, int(arithmetic._stable_unit(f"family:discovery:{family}") * 2**31)])
        picked = [pool[i] for i in rng.choice(len(pool), n, replace=False)]
        out = []
        for a, b in picked:
            target = (a, b) in targets
            label = family if family != "train" else (TARGET_FAMILY if target else "train")
            strategy = RARE if target else arithmetic.USEFUL_STRATEGIES[arithmetic.difficulty_of(a, b)][0]
            out.append(arithmetic.make_problem(a, b, label, strategy))
        return out

    def family_capacity(self, family: str) -> int:
        if family not in ("train", TARGET_FAMILY, HELDOUT_FAMILY):
            return super().family_capacity(family)
        return len(self._family_operands(family))

    def __repr__(self) -> str:
        return "DiscoveryTask()"


register_task(DiscoveryTask.name, DiscoveryTask)
