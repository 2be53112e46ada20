"""Paired comparisons as data: which two arms a claim compares, and the one setting in which they differ.

Every claims module that compares two trained arms declares them in ``COMPARISONS = {pair id: Pair}``: the method
arm and the comparator arm (each a registered method plus `TrainerConfig` overrides over its preset), the fields
in which they differ (``differs``), that difference in words, and the row ids that read the pair. Notebooks
build their arms from it (:meth:`Pair.arms`, `Arm.train`); ``tests/test_comparisons.py`` holds every pair's
resolved configs to differ in exactly ``differs``.

The rule (written before any run that uses it): where a comparison claims one difference, both arms share every
other setting, the lr included, and that lr is the COMPARATOR's (its pick in
`rlvr_lib.study.testbed.TUNED_LR`, its testbed preset's lr where the sweep has none, or the lr its declaration sets);
:meth:`Pair.arms` gives it to the method arm unless ``lr`` is the named difference, under the label
``"<label>@<comparator label>-lr"``. A comparison that is not one difference (notebooks 07 and 08) declares
every field in which its arms differ. Rows against the base policy are not pairs.

Why the comparator's lr, and what it costs: docs/study/comparisons.md.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr_lib.study.testbed import key_train, calibrated_config
from rlvr_lib.study import papers
from rlvr_lib.trainer_config import TrainerConfig
from rlvr_lib.validation import check

__all__ = ["Arm", "CLAIMS_MODULES", "Pair", "all_comparisons", "config_differences"]

CLAIMS_MODULES = papers.claims_modules()
"""The claims modules (`rlvr_lib.study.claims`) whose ``COMPARISONS`` :func:`all_comparisons` collects: every
notebook's of the manifest (`rlvr_lib.study.papers`)."""

NOT_COMPARED = ("seed",)
"""`TrainerConfig` fields a comparison never holds equal: the two arms of a pair are trained on each seed."""

_FIELDS = tuple(f.name for f in dataclasses.fields(TrainerConfig))


@dataclass(frozen=True)
class Arm:
    """One arm: registered method ``name`` with ``overrides`` (`TrainerConfig` fields) over its preset and tuned lr.

    Attributes:
        name: A registered method (or a composite ``"a+b"``).
        label: The run label (default ``name``); an arm with overrides that change its config names itself.
        overrides: `TrainerConfig` fields set over the preset (``calibrated_config(name, **overrides)``).
        experiment: The experiment prefix (without ``_quick`` / ``_full``) of the notebook that trains it, or
            ``None`` for the notebook that declares it.
    """

    name: str
    label: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    experiment: str | None = None

    def __post_init__(self):
        check(isinstance(self.name, str) and self.name != "", "Arm.name", self.name, "a registered method name")
        unknown = sorted(set(self.overrides) - set(_FIELDS))
        check(not unknown, f"Arm {self.name!r}: overrides", unknown, f"TrainerConfig fields: {sorted(_FIELDS)}")
        check("method" not in self.overrides and "seed" not in self.overrides, f"Arm {self.name!r}: overrides",
              sorted(self.overrides), "no 'method' (it is the arm's name) and no 'seed' (every arm runs each seed)")

    @property
    def run_label(self) -> str:
        """The label the arm's runs are cached under: ``label``, else ``name``."""
        return self.label or self.name

    def config(self, **shared: Any) -> TrainerConfig:
        """``calibrated_config(name, **shared, **overrides)``: the arm's full config (``shared``: the notebook's steps,
        prompts per step, group size, seed; the arm's overrides win)."""
        return calibrated_config(self.name, **{**shared, **self.overrides})

    def with_lr(self, lr: float, label: str) -> Arm:
        """This arm at ``lr`` under run label ``label``."""
        return dataclasses.replace(self, label=label, overrides={**self.overrides, "lr": lr})

    def train(self, arms, seeds: Sequence[int], *, profile: str | None = None, **kwargs: Any) -> list:
        """``arms.train(name, seeds, experiment, label=run_label, **overrides, **kwargs)`` (`rlvr_lib.study.arms.Arms`).

        ``experiment`` is ``f"{self.experiment}_{profile}"`` when the arm belongs to another notebook (``profile``
        is then required), else the notebook's own. ``kwargs``: ``extra_specs`` and overrides the notebook adds
        (none may repeat one of the arm's).
        """
        clash = sorted(set(kwargs) & set(self.overrides))
        check(not clash, f"arm {self.run_label!r}: overrides given again", clash, "fields the declaration leaves open")
        experiment = None
        if self.experiment is not None:
            check(profile is not None, f"arm {self.run_label!r}: profile", profile,
                  f"the profile ('quick' or 'full'): the arm is trained in {self.experiment!r}")
            experiment = f"{self.experiment}_{profile}"
        return arms.train(self.name, seeds, experiment, label=self.run_label, **self.overrides, **kwargs)


@dataclass(frozen=True)
class Pair:
    """A paired comparison: ``method`` against ``comparator``, differing in the `TrainerConfig` fields ``differs``.

    Attributes:
        method, comparator: The two arms as declared (:meth:`arms` applies the module's lr rule to them).
        differs: The `TrainerConfig` fields whose values differ between the resolved arms (``"method"`` when the
            two method names differ); the test holds the resolved configs to exactly this set.
        difference: The difference in words (what the claim says the arms differ by).
        claims: The ids of the module's rows (claims, measurements, checks) that read this pair; empty for a pair
            that only a notebook's table shows (an extra row, no verdict).
        match_lr: Apply the lr rule (the method arm takes the comparator's lr). ``False`` only for a pair that is
            not a one-difference comparison, whose ``differs`` then names ``"lr"`` where the lrs differ.
    """

    method: Arm
    comparator: Arm
    differs: tuple[str, ...]
    difference: str
    claims: tuple[str, ...]
    match_lr: bool = True

    def __post_init__(self):
        unknown = sorted(set(self.differs) - set(_FIELDS))
        check(not unknown, "Pair.differs", unknown, f"TrainerConfig fields: {sorted(_FIELDS)}")
        check(not (self.match_lr and "lr" in self.differs), "Pair.differs", self.differs,
              "no 'lr' while match_lr (the rule gives both arms the comparator's lr)")

    def arms(self) -> tuple[Arm, Arm]:
        """``(method arm, comparator arm)`` as trained: the method arm at the comparator's lr (the module
        docstring's rule) unless its declaration sets an lr itself or ``match_lr`` is off; relabelled
        ``"<label>@<comparator label>-lr"`` when that lr is not the one its own config would take."""
        if not self.match_lr or "lr" in self.method.overrides:
            return self.method, self.comparator
        lr = self.comparator.config().lr
        if self.method.config().lr == lr:
            return self.method, self.comparator
        return self.method.with_lr(lr, f"{self.method.run_label}@{self.comparator.run_label}-lr"), self.comparator

    def configs(self, **shared: Any) -> tuple[TrainerConfig, TrainerConfig]:
        """Both arms' full configs (:meth:`arms`) with ``shared`` fields (e.g. steps, seed)."""
        method, comparator = self.arms()
        return method.config(**shared), comparator.config(**shared)

    def differences(self, **shared: Any) -> dict[str, tuple[Any, Any]]:
        """``{field: (method's value, comparator's)}`` of every field the resolved configs differ in."""
        return config_differences(*self.configs(**shared))

    def check(self, **shared: Any) -> None:
        """Raise unless the resolved arms differ in exactly the fields ``differs`` names.

        Raises:
            ValueError: naming the arms, each field that differs without being named (with both values) and
                each named field that does not differ.
        """
        got = self.differences(**shared)
        unnamed = {k: v for k, v in got.items() if k not in self.differs}
        same = [k for k in self.differs if k not in got]
        if unnamed or same:
            method, comparator = self.arms()
            parts = [f"differ in {k} ({a!r} vs {b!r}) though the pair names only {list(self.differs)}"
                     for k, (a, b) in unnamed.items()]
            parts += [f"do not differ in {k}, which the pair names" for k in same]
            raise ValueError(f"pair {method.run_label!r} vs {comparator.run_label!r}: the arms " + "; ".join(parts))


def config_differences(a: TrainerConfig, b: TrainerConfig) -> dict[str, tuple[Any, Any]]:
    """``{field: (a's value, b's)}`` for every `TrainerConfig` field but :data:`NOT_COMPARED` where they differ.

    ``method_options`` is compared as the arms wrote them (`rlvr_lib.study.testbed.key_train`: the testbed's
    calibrated options left out; ``None`` and ``{}`` alike); ``kl_estimator`` only when both arms
    have a KL anchor (``kl_coef > 0``): without one no estimator is computed, and an anchor against none is
    named by ``kl_coef``.
    """
    out = {}
    for name in _FIELDS:
        if name in NOT_COMPARED or (name == "kl_estimator" and min(a.kl_coef, b.kl_coef) == 0):
            continue
        va, vb = getattr(a, name), getattr(b, name)
        if name == "method_options":
            va, vb = key_train(a)[name] or {}, key_train(b)[name] or {}
        if va != vb:
            out[name] = (va, vb)
    return out


def all_comparisons() -> dict[tuple[str, str], Pair]:
    """``{(claims module, pair id): Pair}`` over :data:`CLAIMS_MODULES`."""
    out = {}
    for module in CLAIMS_MODULES:
        mod = importlib.import_module(f"rlvr_lib.study.claims.{module}")
        for pid, pair in getattr(mod, "COMPARISONS", {}).items():
            out[module, pid] = pair
    return out
