"""Notebook 07's rules, stated once before any of its runs (docs/study/head_to_head.md).

* :class:`Budget` -- every arm: ``steps x prompts_per_step x group_size`` completions and ``steps`` optimizer
  steps (``minibatches = inner_epochs = 1``; DAPO keeps its filter, not its refills).
* :func:`select_arms` -- GRPO, the best two of notebook 02's baselines, the best 3PO variant, NudgeRL, SAGE,
  VIGOR and every pair that composes, with :func:`pair_settings`: ``kl_coef`` the largest, ``lr`` the smallest,
  the 3PO variant's schedule, any other conflict refused.
* :func:`own_comparators` -- each method's arm with only its mechanism undone; an effect against GRPO is the
  method's only where its own comparator shows it too (:func:`attribution`).
* :func:`protocol_plan` -- each ``*-beats-grpo`` / ``*-beats-own`` row under its paper's pass@1 protocol.
* :func:`gain_growth` -- ``mean(small gains) - mean(tiny gains)`` of per-seed gains over GRPO, Welch t interval.
* :func:`gain_map` -- per-problem pass@k gain over GRPO per quartile bucket of the base's pass@1, paired
  seeds x problems bootstrap; a bucket *helps* / *hurts* only when its whole interval is above / below 0.

Not from a paper: the equal-compute comparison is this study's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import combinations
from typing import Any

import numpy as np

from rlvr_lib.eval.policy_eval import EvalSpec
from rlvr_lib.methods import METHODS
from rlvr_lib.methods.baselines import BASELINES
from rlvr_lib.methods.compose import SEPARATOR, compose, hook_conflicts, overrides, preset_conflicts
from rlvr_lib.study import papers
from rlvr_lib.study.profiles import BASELINES_WITH_WIDE, WIDE
from rlvr_lib.study.protocols import SCALING_RULE, ProtocolEvaluation, claim_protocol
from rlvr_lib.study.runs import PrerequisitesMissing, load_runs, one_run_per_seed
from rlvr_lib.study.stats import paired_difference_ci
from rlvr_lib.study.testbed import (agreed_settings, calibrated_claims, calibrated_config, calibrated_conflicts,
                                    config_from_key, key_train, tuned_lr)
from rlvr_lib.trainer import compute_spent
from rlvr_lib.trainer_config import TrainerConfig
from rlvr_lib.validation import check, check_int

__all__ = ["BASELINE_CANDIDATES", "BESIDE_READING", "Budget", "Comparator", "Comparison", "FALLBACK", "METHOD_ARMS",
           "ROLES", "SCALE_POLICY", "SHARED", "THREEPO_VARIANTS", "attribution", "bucket_edges", "better_component",
           "compare", "comparator_config", "comparator_home", "comparator_run", "comparison_map", "composable_pairs",
           "config_difference", "difference_words", "gain_growth", "gain_map", "find_map", "guide", "guide_summary",
           "home", "map_rows", "map_summary", "mean_pass", "own_comparators", "pair_name", "pair_settings",
           "CLAIMS_MODULE", "paper_comparator", "pick_best", "ProtocolPlan", "protocol_plan", "record_config",
           "records_by_name", "scale_policy", "seed_gains", "select_arms", "signed_interval"]

THREEPO_VARIANTS = papers.paper("threepo").methods
"""The 3PO variants :func:`select_arms` picks from (notebook 04's headline rows; `rlvr_lib.study.papers`)."""
METHOD_ARMS = papers.composition_order()
"""The papers' methods, in the order they compose (`rlvr_lib.study.papers`; ``"threepo"`` stands for the selected
variant)."""
BASELINE_CANDIDATES = tuple(n for n in BASELINES if n != "grpo_k2")
"""Notebook 02's baselines the pass@1 pick is made from (``grpo_k2`` is its identity check, not a baseline)."""
FALLBACK = {"pass1": "dapo", "wide": "grpo_forward_kl", "threepo": "b3po"}
"""The quick profile's arms while notebooks 02 and 04 have no full-profile records (a smoke test, not a selection)."""
SHARED = {**{n: "baselines" for n in ("grpo", *BASELINES_WITH_WIDE)}, "sage": "sage"}
"""Arms another notebook trains with the wide evaluation (its folder's experiment prefix); :func:`home` reads them
there."""


def _refill_free(name: str) -> dict:
    """``method_options`` that turn off a method's refill rounds (its filter stays), or ``{}`` without any."""
    cls = METHODS[name].cls
    if not overrides(cls, "refill_rounds"):
        return {}
    names = {f.name for f in fields(cls.Options)}
    check("max_refill_rounds" in names, f"method {name!r}: options", sorted(names),
          "a 'max_refill_rounds' option: the method refills dropped groups, and equal compute needs 0 refills")
    return {"max_refill_rounds": 0}


@dataclass(frozen=True)
class Budget:
    """Compute per arm: ``steps`` batches of ``prompts_per_step x group_size``, one optimizer step each."""

    steps: int
    prompts_per_step: int
    group_size: int = 8

    def __post_init__(self):
        for name in ("steps", "prompts_per_step", "group_size"):
            check_int(name, getattr(self, name), 1)

    def spent(self) -> dict[str, int]:
        """What a run at this budget spends: ``compute_spent``'s counts, ``steps * P * G`` and ``steps``."""
        return {"completions": self.steps * self.prompts_per_step * self.group_size, "optimizer_steps": self.steps}

    def overrides(self, name: str) -> dict[str, Any]:
        """The `TrainerConfig` fields that put method ``name`` (a composite too) at this budget (no refills)."""
        check(name in METHODS or SEPARATOR in name, "name", name, "a registered method or a composite 'a+b'")
        out: dict[str, Any] = dict(steps=self.steps, prompts_per_step=self.prompts_per_step,
                                   group_size=self.group_size, minibatches=1, inner_epochs=1)
        parts = name.split(SEPARATOR)
        no_refill = {part: _refill_free(part) for part in parts}
        if any(no_refill.values()):
            options = dict(METHODS[name].preset.get("method_options") or {}) if name in METHODS else {}
            if len(parts) == 1:
                out["method_options"] = {**options, **no_refill[name]}
            else:
                out["method_options"] = {p: {**options.get(p, {}), **no_refill[p]} for p in parts if no_refill[p]
                                         or p in options}
        return out

    def check(self, label: str, records: Sequence) -> dict[str, int]:
        """Each record's `compute_spent` against :meth:`spent`, exactly; returns the budget.

        Raises:
            ValueError: naming the arm ``label``, the seed, and each count that differs.
        """
        want = self.spent()
        check(len(records) > 0, f"arm {label!r}: records", records, "one or more run records")
        for r in records:
            got = compute_spent(config_from_key(r.config["train"]), r.history)
            diff = {k: f"{got[k]} spent, budget {want[k]}" for k in want if got[k] != want[k]}
            if diff:
                raise ValueError(f"arm {label!r}, seed {r.seed} ({r.run_id}): not at the equal-compute budget: "
                                 + "; ".join(f"{k} {v}" for k, v in diff.items()))
        return want


def home(name: str, budget: Budget, protocols: Mapping[str, EvalSpec] | None = None) -> str:
    """The experiment prefix an arm is read from: its :data:`SHARED` notebook's when the budget's config is that
    notebook's and ``protocols`` (:meth:`ProtocolPlan.extra_specs`) asks nothing more, else ``"head_to_head"``.
    """
    if name not in SHARED or protocols:
        return "head_to_head"
    plain = dict(steps=budget.steps, prompts_per_step=budget.prompts_per_step, group_size=budget.group_size, seed=0)
    same = calibrated_config(name, **budget.overrides(name), seed=0) == calibrated_config(name, **plain)
    return SHARED[name] if same else "head_to_head"


# ----------------------------------------------------------------------------- arm selection
def records_by_name(experiment: str, names: Sequence[str], root=None) -> dict[str, list]:
    """``{name: records}`` of ``experiment``'s runs named ``names`` on the shipped policy and testbed."""
    return {n: one_run_per_seed(load_runs(experiment, root, name=n, current=True)) for n in names}


def mean_pass(records: Sequence, k: int = 1, family: str | None = None, label: str | None = None) -> float:
    """Mean over seeds of a run's stored pass@k (in-distribution, ``family``'s, or extra evaluation ``label``'s)."""
    check(len(records) > 0, "records", records, "one or more run records")
    values = []
    for r in records:
        final = r.final if label is None else r.extra["evals"][label]
        values.append(float((final["average"] if family is None else final["families"][family])["pass_at_k"][str(k)]))
    return float(np.mean(values))


def pick_best(scores: Mapping[str, float], exclude: Sequence[str] = ()) -> str:
    """The name with the highest score, ``exclude`` left out; a tie goes to the first name alphabetically."""
    left = {n: s for n, s in scores.items() if n not in exclude}
    check(left, "scores", dict(scores), f"at least one name besides {list(exclude)}")
    return min(left, key=lambda n: (-left[n], n))


def select_arms(nb02: Mapping[str, Sequence], nb04: Mapping[str, Sequence], *, k_wide: int,
                rare_family: str = "rare_mix", seeds: int = 1, fallback: bool = False) -> dict[str, Any]:
    """Notebook 07's selected arms from notebook 02's and 04's records (``{name: records}``), by the module's rules.

    A candidate with fewer than ``seeds`` records counts as missing.

    Returns:
        ``{"pass1": baseline, "wide": baseline, "threepo": variant, "source": "records" | "fallback"}``.

    Raises:
        PrerequisitesMissing: a candidate is missing and ``fallback`` is False (names the notebooks to finish first).
    """
    seeds = check_int("seeds", seeds, 1)
    missing = ([n for n in BASELINE_CANDIDATES if len(nb02.get(n) or ()) < seeds]
               + [n for n in THREEPO_VARIANTS if len(nb04.get(n) or ()) < seeds])
    if missing:
        if fallback:
            return {**FALLBACK, "source": "fallback"}
        raise PrerequisitesMissing(f"select_arms: fewer than {seeds} records of {missing}: finish notebooks 02 and 04 at this "
                         "profile first (the selection reads their records; only the quick profile falls back to "
                         "FALLBACK)")
    pass1 = pick_best({n: mean_pass(nb02[n]) for n in BASELINE_CANDIDATES})
    wide = pick_best({n: mean_pass(nb02[n], k_wide, rare_family, WIDE) for n in BASELINES_WITH_WIDE if n != "grpo"},
                     exclude=[pass1])
    threepo = pick_best({n: mean_pass(nb04[n]) for n in THREEPO_VARIANTS})
    return {"pass1": pass1, "wide": wide, "threepo": threepo, "source": "records"}


# ----------------------------------------------------------------------------- pairs
def composable_pairs(methods: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of ``methods`` (in order) whose hooks compose (`rlvr_lib.methods.compose.hook_conflicts`)."""
    return [(a, b) for a, b in combinations(methods, 2) if not hook_conflicts((a, b))]


def _tuned_lr(name: str) -> float | None:
    lr = tuned_lr(name)
    return calibrated_claims(name)[0].get("lr") if lr is None else lr


def pair_settings(a: str, b: str) -> dict[str, Any]:
    """The `TrainerConfig` keys on which the testbed presets of ``a`` and ``b`` disagree, settled by the module's rules.

    Raises:
        ValueError: a conflicting key no rule covers (named, with each method's value).
    """
    out: dict[str, Any] = {}
    conflicts = calibrated_conflicts((a, b))
    threepo = next((n for n in (a, b) if n in THREEPO_VARIANTS), None)
    for key, values in conflicts.items():
        if key == "kl_coef":
            out[key] = max(values.values())  # with SAGE: the testbed's beta, the largest preset beta
        elif key == "lr":
            out[key] = min(lr for lr in (_tuned_lr(a), _tuned_lr(b)) if lr is not None)
        elif key in ("lr_schedule", "lr_warmup_ratio"):
            out[key] = values.get(threepo, values.get(a, next(iter(values.values()))))
        else:
            raise ValueError(f"pair_settings({a!r}, {b!r}): the presets differ on {key!r} ({values}) and no rule of "
                             "rlvr_lib.study.head_to_head settles it")
    return out


def pair_name(a: str, b: str) -> str:
    """Register the composite of ``a`` then ``b`` with :func:`pair_settings` and return ``"a+b"``; refused for a 3PO
    pair with no calibrated IVON regime.
    """
    from rlvr_lib.study.probes.ivon_regime import composite_regime

    threepo = next((n for n in (a, b) if n in THREEPO_VARIANTS), None)
    regime = {"method_options": {threepo: composite_regime(f"{a}{SEPARATOR}{b}")}} if threepo else {}
    settled = pair_settings(a, b)
    # The papers' presets may disagree where the testbed's agree (lr, beta): the testbed's value settles those.
    agreed = agreed_settings((a, b))[0]
    agreed = {k: agreed[k] for k in preset_conflicts((a, b)) if k in agreed and k not in settled}
    return compose(a, b, **settled, **agreed, **regime)


def better_component(pair: str, means: Mapping[str, float]) -> str:
    """The component of ``pair`` (``"a+b"``) with the higher mean in ``means`` (tie: first alphabetically)."""
    return pick_best({n: means[n] for n in pair.split(SEPARATOR)})


# ----------------------------------------------------------------------------- each method's own comparator
@dataclass(frozen=True)
class Comparator:
    """A method's own paper's comparator: the method's arm at the budget with only ``replace``'s fields changed.

    Attributes:
        label: The run's label (its cache name).
        replace: The `TrainerConfig` fields that differ from the arm's, with the comparator's values.
        mechanism: What the difference reads, in words.
        home: The experiment prefix of a notebook that trains the same config with the wide evaluation, or None.
    """

    label: str
    replace: Mapping[str, Any]
    mechanism: str
    home: str | None = None

    def __post_init__(self):
        names = {f.name for f in fields(TrainerConfig)} - {"seed"}
        check(isinstance(self.replace, Mapping) and self.replace and set(self.replace) <= names,
              f"Comparator {self.label!r}: replace", self.replace, f"a non-empty mapping of TrainerConfig fields {sorted(names)}")
        if "method" in self.replace:
            check(self.replace["method"] in METHODS, f"Comparator {self.label!r}: method", self.replace["method"],
                  "a registered method")

    @property
    def method(self) -> str | None:
        """The comparator's method when it replaces the arm's, else None (the arm's own method)."""
        return self.replace.get("method")

    def named(self) -> frozenset[str]:
        """The fields the comparison names (``replace``'s keys): the only ones arm and comparator differ in."""
        return frozenset(self.replace)

    def config(self, arm: TrainerConfig) -> TrainerConfig:
        """``arm`` with ``replace``'s fields (``method_options`` merged), at the comparator's testbed calibration."""
        written = key_train(arm)
        changes = dict(self.replace)
        if "method_options" in changes:
            changes["method_options"] = {**(written["method_options"] or {}), **changes["method_options"]}
        return config_from_key({**written, **changes})

    def check(self, arm: TrainerConfig, comparator: TrainerConfig) -> dict[str, tuple]:
        """The fields where ``arm`` and ``comparator`` differ; they must be exactly :meth:`named`.

        Raises:
            ValueError: naming the comparator and each field that differs unnamed, or named and equal.
        """
        diff = config_difference(arm, comparator)
        check(set(diff) == set(self.named()), f"comparator {self.label!r}: fields that differ from the arm",
              {k: diff[k] for k in sorted(diff)}, f"exactly the named ones {sorted(self.named())}: every other "
              "setting, the lr included, shared")
        return diff


def own_comparators(key: str, name: str) -> tuple[Comparator, ...]:
    """Method ``key``'s own paper's comparators (``name``: its registered method), each the arm with one mechanism
    undone: NudgeRL -- GRPO at NudgeRL's settings; SAGE -- ``grpo_k3``; 3PO -- the variant without noise and GRPO at
    3PO's settings; VIGOR -- GRPO with the verifier at VIGOR's settings and lr (docs/study/head_to_head.md).
    """
    check(key in METHOD_ARMS, "key", key, f"one of {METHOD_ARMS}")
    check(name in METHODS, "name", name, "a registered method")
    if key == "nudgerl":
        return (Comparator("grpo-nudgerl-settings", {"method": "grpo", "advantage": "grpo"},
                           "NudgeRL's hints, context dropout, inter/intra advantage and distillation"),)
    if key == "sage":
        return (Comparator("grpo_k3", {"method": "grpo_k3"}, "SAGE's guide q alone", home="sage"),)
    if key == "vigor":
        return (Comparator("grpo-vigor-settings", {"method": "grpo", "advantage": "grpo"},
                           "VIGOR's gradient-norm rank reward in place of the verifier's"),)
    check(name in THREEPO_VARIANTS, "name", name, f"a 3PO variant {THREEPO_VARIANTS} for key 'threepo'")
    return (Comparator("ivon-no-noise" if name == "b3po" else f"{name}-no-noise", {"method_options": {"noise_scale": 0.0}},
                       "the weight noise alone (the same IVON step at the mean weights)"),
            Comparator("grpo-3po-settings", {"method": "grpo_no_kl"},
                       "IVON with its weight noise in place of AdamW"))


def paper_comparator(key: str, name: str) -> Comparator:
    """The comparator method ``key``'s headline row is against: the last of :func:`own_comparators`."""
    return own_comparators(key, name)[-1]


def comparator_config(name: str, comparator: Comparator, budget: Budget, seed: int = 0) -> TrainerConfig:
    """The comparator's config beside ``name``'s arm at ``budget``, checked to differ in the named fields only."""
    arm = calibrated_config(name, **budget.overrides(name), seed=seed)
    out = comparator.config(arm)
    comparator.check(arm, out)
    return out


def comparator_run(name: str, comparator: Comparator, budget: Budget) -> tuple[str, dict[str, Any]]:
    """``(method, overrides)`` for `Arms.train` whose config at seed ``s`` is :func:`comparator_config`'s."""
    config = comparator_config(name, comparator, budget)
    overrides = {f.name: getattr(config, f.name) for f in fields(config) if f.name not in ("method", "seed")}
    return config.method, overrides


def comparator_home(name: str, comparator: Comparator, budget: Budget,
                    protocols: Mapping[str, EvalSpec] | None = None) -> str:
    """Where a comparator's records are read: its home notebook's prefix or ``"head_to_head"``, as :func:`home`."""
    if comparator.home is None or comparator.method is None or protocols:
        return "head_to_head"
    plain = dict(steps=budget.steps, prompts_per_step=budget.prompts_per_step, group_size=budget.group_size, seed=0)
    same = comparator_config(name, comparator, budget) == calibrated_config(comparator.method, **plain)
    return comparator.home if same else "head_to_head"


def record_config(records: Sequence) -> TrainerConfig:
    """The `TrainerConfig` an arm's records share (every field but the seed).

    Raises:
        ValueError: no records, or records whose configs differ beyond the seed (named).
    """
    check(len(records) > 0, "records", records, "one or more run records")
    configs = [config_from_key(r.config["train"]) for r in records]
    for r, c in zip(records[1:], configs[1:]):
        diff = config_difference(configs[0], c)
        check(not diff, f"record {r.run_id}: config", diff, "the same config as the arm's other records but the seed")
    return configs[0]


def config_difference(a: TrainerConfig, b: TrainerConfig) -> dict[str, tuple]:
    """``{field: (a's value, b's value)}`` for every `TrainerConfig` field but ``seed`` where ``a`` and ``b`` differ."""
    a, b = (TrainerConfig.from_dict(key_train(c)) for c in (a, b))
    return {f.name: (getattr(a, f.name), getattr(b, f.name)) for f in fields(a)
            if f.name != "seed" and getattr(a, f.name) != getattr(b, f.name)}


def difference_words(diff: Mapping[str, tuple]) -> str:
    """``"method 'sage' vs 'grpo'; kl_estimator 'k3' vs 'reverse'"``: a :func:`config_difference` in words."""
    return "; ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in diff.items()) or "no setting"


ROLES = {"grpo": "against GRPO (notebook 02's)", "own": "against its paper's own comparator"}
"""A comparison's role: against plain GRPO, or against the method's paper's own comparator."""


@dataclass(frozen=True)
class Comparison:
    """One row of the map and the guide: arm ``arm`` against ``versus``, what the difference between them reads.

    Attributes:
        role: A key of :data:`ROLES`.
        reads: The difference it reads, in words (from the two arms' configs).
        method: The method whose mechanism an ``"own"`` comparison isolates, or None.
    """

    arm: str
    versus: str
    role: str
    reads: str
    method: str | None = None

    def __post_init__(self):
        check(self.role in ROLES, "role", self.role, f"one of {sorted(ROLES)}")
        check(self.arm != self.versus, "versus", self.versus, f"an arm other than {self.arm!r}")

    @property
    def label(self) -> str:
        """``"SAGE vs grpo_k3"``: the row's name on the map and in the guide."""
        return f"{self.arm} vs {self.versus}"


def compare(arm: str, arm_records: Sequence, versus: str, versus_records: Sequence, *,
            comparator: Comparator | None = None, method: str | None = None) -> Comparison:
    """The :class:`Comparison` of two arms from their records' configs (role ``"own"`` against ``comparator``,
    checked by :meth:`Comparator.check`; else ``"grpo"``, reading every field that differs).
    """
    diff = config_difference(record_config(arm_records), record_config(versus_records))
    if comparator is not None:
        comparator.check(record_config(arm_records), record_config(versus_records))
        return Comparison(arm, versus, "own", f"{comparator.mechanism} ({difference_words(diff)}; every other "
                                              "setting shared)", method or arm)
    return Comparison(arm, versus, "grpo", f"the method with every setting it changes ({difference_words(diff)})",
                      method)


def comparison_map(levels: Any, scores: Mapping[str, Any], comparisons: Sequence[Comparison], edges=None):
    """:func:`gain_map` of every comparison (rows named by :attr:`~Comparison.label`), on one set of bucket edges."""
    import pandas as pd

    edges = bucket_edges(levels) if edges is None else np.asarray(edges, dtype=float)
    frames = []
    for c in comparisons:
        for label in (c.arm, c.versus):
            check(label in scores, f"scores of comparison {c.label!r}", sorted(scores), f"an entry for {label!r}")
        frames.append(gain_map(levels, {c.label: scores[c.arm]}, scores[c.versus], edges))
    check(frames, "comparisons", comparisons, "one or more comparisons")
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------- each pass@1 row under its paper's protocol
CLAIMS_MODULE = "nb07_head_to_head"
"""Notebook 07's claims module (`rlvr_lib.study.claims`): its ``PROTOCOL`` is ``"by source"``."""


@dataclass(frozen=True)
class ProtocolPlan:
    """Which paper's evaluation protocol each of notebook 07's pass@1 claims is read under.

    Attributes:
        rows: ``{claim id: (arm, versus, protocol name)}``.
        evaluations: ``{protocol name: ProtocolEvaluation}`` at the notebook's main evaluation and profile.
    """

    rows: Mapping[str, tuple[str, str, str]]
    evaluations: Mapping[str, ProtocolEvaluation]

    def __post_init__(self):
        for claim, row in self.rows.items():
            check(isinstance(row, tuple) and len(row) == 3 and row[2] in self.evaluations, f"rows[{claim!r}]", row,
                  f"(arm, versus, protocol) with protocol one of {sorted(self.evaluations)}")

    def arms(self) -> list[str]:
        """Every arm a row reads, in the rows' order."""
        return list(dict.fromkeys(label for arm, versus, _ in self.rows.values() for label in (arm, versus)))

    def protocols(self, arm: str) -> tuple[str, ...]:
        """The protocols arm ``arm`` is read under (sorted; empty for an arm no pass@1 claim reads)."""
        return tuple(sorted({p for a, b, p in self.rows.values() if arm in (a, b)}))

    def extra_specs(self, arm: str) -> dict[str, EvalSpec]:
        """``{label: spec}``: the protocol evaluations ``arm`` carries as extra evaluations (none for the main one)."""
        return {label: spec for p in self.protocols(arm) for label, spec in self.evaluations[p].extra_specs().items()}

    def base_evaluations(self) -> dict[str, ProtocolEvaluation]:
        """The protocols the base policy is evaluated under besides its main evaluation."""
        return {p: e for p, e in self.evaluations.items() if e.extra_specs()}

    def evaluation(self, claim: str) -> ProtocolEvaluation:
        """The protocol evaluation claim ``claim`` is read under."""
        check(claim in self.rows, "claim", claim, f"one of the pass@1 rows {sorted(self.rows)}")
        return self.evaluations[self.rows[claim][2]]

    def versus(self, claim: str, records: Mapping[str, Sequence], families: Sequence[str]) -> dict:
        """Claim ``claim``'s paired difference under its protocol (arm minus versus, bootstrap over seeds x problems).

        Raises:
            ValueError: an arm's records lack the protocol's evaluation (names the run and the evaluation).
        """
        protocol = self.evaluation(claim)
        arm, versus, _ = self.rows[claim]
        for label in (arm, versus):
            check(label in records, f"records of claim {claim!r}", sorted(records), f"an entry for {label!r}")
        return protocol.versus(records[arm], records[versus], families)

    def cost(self, seeds: int, base_seeds: Sequence[int]) -> dict[str, dict[str, int]]:
        """Per protocol with extra evaluations: ``evaluations`` (arms x ``seeds`` plus the base's), ``completions``
        (evaluations x families x problems x samples) and the main evaluation's count ``main``, for scale.
        """
        seeds = check_int("seeds", seeds, 1)
        out = {}
        for p, e in self.base_evaluations().items():
            n = seeds * sum(p in self.protocols(a) for a in self.arms()) + len(e.base_seeds(base_seeds))
            per = len(e.spec.families) * e.spec.problems_per_family * e.spec.samples
            out[p] = {"evaluations": n, "completions": n * per, "per_evaluation": per,
                      "main": len(e.base_spec.families) * e.base_spec.problems_per_family * e.base_spec.samples}
        return out

    def describe(self) -> str:
        """Markdown: each row with its arms and protocol, each protocol and its scaling, and the scaling rule once."""
        rows = "\n".join(f"- `{claim}`: `{arm}` vs `{versus}` under {self.evaluations[p].protocol.paper}'s protocol"
                         for claim, (arm, versus, p) in self.rows.items())
        protocols = [e.describe(rule=False) + ("" if e.extra_specs() else " Its evaluation is the main one: no extra "
                                                                            "evaluation.")
                     for e in self.evaluations.values()]
        return "\n\n".join([rows, *protocols, f"**Scaling rule.** {SCALING_RULE}"])


def protocol_plan(method_names: Mapping[str, str], base_spec: EvalSpec, profile: str) -> ProtocolPlan:
    """Notebook 07's :class:`ProtocolPlan` from the claims module's ``PROTOCOL_ROWS``, ``method_names`` and ``profile``.

    Raises:
        ValueError: on ``method_names`` missing a method of :data:`METHOD_ARMS`, an unknown profile, or a claim
            with no declared protocol.
    """
    from rlvr_lib.study.claims.nb07_head_to_head import PROTOCOL_ROWS

    check(isinstance(method_names, Mapping) and set(method_names) == set(METHOD_ARMS), "method_names",
          method_names, f"{{method key: registered name}} for exactly {list(METHOD_ARMS)}")
    rows, evaluations = {}, {}
    for claim, (key, versus) in PROTOCOL_ROWS.items():
        protocol = claim_protocol(CLAIMS_MODULE, claim)
        if protocol.name not in evaluations:
            evaluations[protocol.name] = ProtocolEvaluation.of(protocol, base_spec, profile)
        name = method_names[key]
        rows[claim] = (name, "grpo" if versus == "grpo" else paper_comparator(key, name).label, protocol.name)
    return ProtocolPlan(rows, dict(sorted(evaluations.items())))


# ----------------------------------------------------------------------------- the map
def bucket_edges(levels: Any, quantiles: Sequence[float] = (0.25, 0.5, 0.75)) -> np.ndarray:
    """Inner edges of the buckets of a per-problem property: its ``quantiles`` (``np.quantile``, linear)."""
    levels = np.asarray(levels, dtype=float)
    check(levels.ndim == 1 and levels.size > 0 and np.isfinite(levels).all(), "levels", levels,
          "a non-empty 1-D array of finite per-problem values")
    check(all(0 < q < 1 for q in quantiles) and list(quantiles) == sorted(quantiles), "quantiles", quantiles,
          "increasing values in (0, 1)")
    return np.quantile(levels, quantiles)


def _bucket_label(low: float, high: float) -> str:
    """``"<= 0"``, ``"(0, 0.344]"`` or ``"> 0.703"``: the first and last buckets are open on one side."""
    return f"<= {high:.3g}" if low == -np.inf else f"> {low:.3g}" if high == np.inf else f"({low:.3g}, {high:.3g}]"


def gain_map(levels: Any, runs: Mapping[str, Any], reference: Any, edges: Any | None = None):
    """Each run's per-problem gain over ``reference`` in each bucket of ``levels``: the "when does it help" map.

    Bucket ``b``: ``edges[b-1] < level <= edges[b]`` (edges default :func:`bucket_edges`, quartiles; empty buckets
    left out); per run and bucket ``paired_difference_ci(run[:, in b], reference[:, in b], bounds=(0, 1))``.

    Args:
        levels: ``(P,)`` the property per problem.
        runs: ``{name: (S, P) scores}``.
        reference: ``(S_ref, P)`` scores of the comparator.

    Returns:
        ``pandas.DataFrame``: ``run``, ``bucket``, ``problems``, ``mean``, ``ci_low``, ``ci_high``.
    """
    import pandas as pd

    levels = np.asarray(levels, dtype=float)
    edges = bucket_edges(levels) if edges is None else np.asarray(edges, dtype=float)
    reference = np.asarray(reference, dtype=float)
    check(reference.ndim == 2 and reference.shape[1] == levels.size, "reference", reference.shape,
          f"(seeds, {levels.size}): one column per problem of levels")
    which = np.searchsorted(edges, levels, side="left")
    bounds = [-np.inf, *edges, np.inf]
    rows = []
    for name, scores in runs.items():
        scores = np.asarray(scores, dtype=float)
        check(scores.ndim == 2 and scores.shape[1] == levels.size, f"runs[{name!r}]", scores.shape,
              f"(seeds, {levels.size}): one column per problem of levels")
        for b in range(len(edges) + 1):
            mask = which == b
            if not mask.any():
                continue
            ci = paired_difference_ci(scores[:, mask], reference[:, mask], bounds=(0, 1))
            rows.append({"run": name, "bucket": _bucket_label(bounds[b], bounds[b + 1]), "problems": int(mask.sum()),
                         **{k: ci[k] for k in ("mean", "ci_low", "ci_high")}, "ci": ci})
    return pd.DataFrame(rows, columns=["run", "bucket", "problems", "mean", "ci_low", "ci_high", "ci"])


HELPS, HURTS, NO_DIFFERENCE = "helps", "hurts", "no difference shown"
"""A bucket's reading: its gain's whole 95% interval above 0, wholly below 0, or touching 0."""
BESIDE_READING = {HELPS: "above 0", HURTS: "below 0", NO_DIFFERENCE: "no difference shown"}
"""A measure beside the map is not always a gain (a growth with size, say): its reading in neutral words."""
_MAP_COMMENT = re.compile(r"<!-- when-map (\{.*?\}) -->")


def _bucket_reading(low: float, high: float) -> str:
    return HELPS if low > 0 else HURTS if high < 0 else NO_DIFFERENCE


def map_summary(gains, prop: str = "the base policy's per-problem pass@1", metric: str = "pass@1",
                beside: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
                comparisons: Sequence[Comparison] | None = None) -> str:
    """The map of :func:`gain_map` in markdown, one bullet per run, then a ``<!-- when-map {...} -->`` JSON comment
    that :func:`find_map` reads back (format: docs/study/head_to_head.md).

    Args:
        beside: ``{label: {run: interval}}``, signed differences read as the buckets are.
        comparisons: The :class:`Comparison` each run is; None: every run against GRPO.
    """
    runs: dict[str, list[dict]] = {}
    for _, row in gains.iterrows():
        runs.setdefault(row["run"], []).append({
            "bucket": row["bucket"], "problems": int(row["problems"]), "mean": float(row["mean"]),
            "ci_low": float(row["ci_low"]), "ci_high": float(row["ci_high"]),
            "reading": _bucket_reading(float(row["ci_low"]), float(row["ci_high"]))})
    besides = {}
    for label, values in (beside or {}).items():
        check(isinstance(values, Mapping) and all(isinstance(v, Mapping) and {"mean", "ci_low", "ci_high"} <= set(v)
                                                  for v in values.values()),
              f"beside[{label!r}]", values, "{run: an interval with mean, ci_low and ci_high}")
        besides[label] = {run: {k: float(v[k]) for k in ("mean", "ci_low", "ci_high")}
                          | {"reading": _bucket_reading(float(v["ci_low"]), float(v["ci_high"]))}
                          for run, v in values.items()}
    data = {"property": prop, "metric": metric, "runs": runs, "beside": besides}
    if comparisons is not None:
        known = {c.label: {"arm": c.arm, "versus": c.versus, "role": c.role, "reads": c.reads, "method": c.method}
                 for c in comparisons}
        unknown = [run for run in map_rows(data) if run not in known]
        check(not unknown, "runs without a comparison", unknown, f"each one of the comparisons {sorted(known)}")
        data["comparisons"] = known
    over = "over the comparator each row names" if comparisons is not None else "over GRPO"
    lines = [f"**When does it help** ({metric} gain {over} per bucket of {prop}; a bucket *{HELPS}* or "
             f"*{HURTS}* only when its whole 95% interval is above or below 0):", ""]
    for run, buckets in runs.items():
        lines.append(f"- {run}: " + "; ".join(
            f"{b['bucket']} ({b['problems']} problems) {signed_interval(b)} {b['reading']}" for b in buckets))
    for label, values in besides.items():
        lines += ["", f"Beside the map, {label}:", ""]
        lines += [f"- {run}: {signed_interval(v)} {BESIDE_READING[v['reading']]}" for run, v in values.items()]
    if comparisons is not None:
        lines += ["", "What each row's difference reads:", ""]
        lines += [f"- {c.label}: {ROLES[c.role]}; {c.reads}" for c in comparisons if c.label in map_rows(data)]
    return "\n".join([*lines, "", f"<!-- when-map {json.dumps(data)} -->"])


def signed_interval(v: Mapping[str, float]) -> str:
    """``"+0.144 [0.038, 0.250]"``: an interval dict's mean, signed, and its bounds (the map's and guide's cells)."""
    return f"{v['mean']:+.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]"


def find_map(text: str) -> dict | None:
    """The map :func:`map_summary` wrote into ``text`` (the last one), or None."""
    found = _MAP_COMMENT.findall(text)
    return json.loads(found[-1]) if found else None


def map_rows(data: Mapping[str, Any]) -> list[str]:
    """Every run a map names, in order: those with buckets, then those only measured beside the map."""
    measured = (run for values in data.get("beside", {}).values() for run in values)
    return list(dict.fromkeys([*data["runs"], *measured]))


def _check_map(data: Any) -> None:
    check(isinstance(data, Mapping) and {"property", "metric", "runs"} <= set(data), "data", type(data).__name__,
          "a map as map_summary writes it: property, metric and runs")


def _versus(data: Mapping[str, Any], run: str) -> str:
    """The comparator a run's statements name: its comparison's ``versus``, ``"GRPO"`` on a map without any."""
    return data.get("comparisons", {}).get(run, {}).get("versus", "GRPO")


def _measures(data: Mapping[str, Any], run: str) -> dict[str, dict]:
    """``{measure: interval with its reading}`` of one run: each bucket and each measure beside the map."""
    out = {f"{data['metric']} in bucket {b['bucket']}": b for b in data["runs"].get(run, ())}
    return out | {label: values[run] for label, values in data.get("beside", {}).items() if run in values}


def attribution(data: Mapping[str, Any], run: str) -> list[str]:
    """What of a ``"grpo"`` comparison's shown effects its method's own comparators attribute to the method.

    Per measure that reads *helps* / *hurts* against GRPO: attributed when every own comparison reads the same,
    **not attributed** when all read no difference, else each said as it reads (docs/study/head_to_head.md).
    """
    comps = data.get("comparisons", {})
    mine = comps.get(run)
    if not mine or mine["role"] != "grpo" or mine.get("method") is None:
        return []
    own = [label for label, c in comps.items() if c["role"] == "own" and c.get("method") == mine["method"]]
    if not own:
        return []
    method, theirs = mine["method"], {label: _measures(data, label) for label in own}
    out = []
    for measure, v in _measures(data, run).items():
        if v["reading"] == NO_DIFFERENCE:
            continue
        shown = f"{measure} {BESIDE_READING[v['reading']]} against GRPO"
        got = {label: theirs[label].get(measure) for label in own}
        versus = lambda label: comps[label]["versus"]  # noqa: E731
        if all(g is not None and g["reading"] == v["reading"] for g in got.values()):
            out.append(f"{shown}: attributed to {method}'s mechanism (also {BESIDE_READING[v['reading']]} against "
                       + ", ".join(f"{versus(lb)} {signed_interval(g)}" for lb, g in got.items()) + ")")
        elif all(g is not None and g["reading"] == NO_DIFFERENCE for g in got.values()):
            out.append(f"{shown}: not attributed to {method}: against "
                       + ", ".join(f"{versus(lb)}, its own comparator, no difference shown ({signed_interval(g)})"
                                   for lb, g in got.items())
                       + "; what the arm's settings change from GRPO's shows it")
        else:
            out.append(f"{shown}: against its own comparator"
                       + ", ".join(f" {versus(lb)} " + ("not measured" if g is None else
                                                        f"{signed_interval(g)} {BESIDE_READING[g['reading']]}")
                                   for lb, g in got.items())
                       + f": attributed to {method}'s mechanism only where that reads the same way")
    return out


def guide(data: Mapping[str, Any]) -> list[str]:
    """"Which method for which situation": one markdown bullet per run, read off :func:`map_summary`'s data
    (buckets shown helping / hurting, measures beside the map, and :func:`attribution` against GRPO).
    """
    _check_map(data)
    comps = data.get("comparisons")
    lines = []
    for run in map_rows(data):
        ref = _versus(data, run)
        buckets = data["runs"].get(run)
        parts = []
        if buckets is not None:
            shown = {r: [b for b in buckets if b["reading"] == r] for r in (HELPS, HURTS, NO_DIFFERENCE)}
            say = lambda bs: "; ".join(f"{'in ' if b['bucket'].startswith('(') else ''}{b['bucket']} "
                                       f"({signed_interval(b)})" for b in bs)
            if shown[HELPS]:
                parts.append(f"use it over {ref} where {data['property']} is {say(shown[HELPS])}")
            if shown[HURTS]:
                where = "it" if shown[HELPS] else data["property"]  # "it": the property the first part named
                parts.append(f"prefer {ref} where {where} is {say(shown[HURTS])}")
            if not parts:
                parts.append(f"no bucket of {data['property']} where its {data['metric']} differs from {ref}'s at "
                             f"this precision: nothing here says to prefer it, or {ref}, for any band of problems")
            rest = len(shown[NO_DIFFERENCE])
            if rest and (shown[HELPS] or shown[HURTS]):
                parts[-1] += f" ({rest} other bucket{'s' if rest != 1 else ''}: no difference shown)"
        measured = [f"{label} {signed_interval(values[run])} ({BESIDE_READING[values[run]['reading']]})"
                    for label, values in data.get("beside", {}).items() if run in values]
        sentence = "; ".join(parts) + ("." if parts else "")
        if measured:
            sentence += (" Beside the map: " if parts else "") + "; ".join(measured) + "."
        if comps is not None:
            c = comps[run]
            sentence = f"{ROLES[c['role']]}, the difference read: {c['reads']}. " + sentence[:1].upper() + sentence[1:]
            said = attribution(data, run)
            if said:
                sentence += " Attribution: " + "; ".join(said) + "."
        lines.append(f"- **{run}**: {sentence}")
    return lines


def guide_summary(data: Mapping[str, Any]) -> str:
    """The map in one paragraph: runs that gain / lose in some bucket, each measure beside the map, and the
    effects not attributed to their methods (:func:`attribution`).
    """
    _check_map(data)

    def names(found: list[str]) -> str:
        return f"{', '.join(found[:-1])} and {found[-1]}" if len(found) > 1 else "".join(found)

    runs = data["runs"]
    over = "GRPO's" if "comparisons" not in data else "its comparator's"
    gain, loss = ([run for run, buckets in runs.items() if any(b["reading"] == r for b in buckets)]
                  for r in (HELPS, HURTS))
    parts = [(f"{names(gain)} gain{'s' * (len(gain) == 1)} over {over} {data['metric']} in some bucket" if gain
              else f"none of the {len(runs)} runs on the map gains over {over} {data['metric']} in any bucket")
             + (f"; {names(loss)} lose{'s' * (len(loss) == 1)} in at least one" if loss else "")]
    for label, values in data.get("beside", {}).items():
        said = []
        for reading in (HELPS, HURTS):
            ranked = sorted(((v["mean"], run) for run, v in values.items() if v["reading"] == reading),
                            reverse=reading == HELPS)
            if ranked:
                said.append(f"{BESIDE_READING[reading]} for " + ", ".join(f"{run} ({m:+.3f})" for m, run in ranked))
        rest = sum(v["reading"] == NO_DIFFERENCE for v in values.values())
        if rest:
            said.append(f"no difference shown for {'the other ' if said else ''}{rest}")
        parts.append(f"{label}: {'; '.join(said)}")
    if "comparisons" in data:
        unattributed = [f"{run} ({said.split(':')[0]})" for run in map_rows(data) for said in attribution(data, run)
                        if ": not attributed to " in said]
        parts.append("Not attributed to the method (shown against GRPO, not against the method's own comparator, "
                     "which shares every setting but its mechanism): " + ("; ".join(unattributed) or "none"))
    return "In short: " + ". ".join(parts) + "."


# ----------------------------------------------------------------------------- the second model size
SCALE_POLICY = "small"
"""The second size's policy, by name (`rlvr_lib.policy.load.POLICY_NAMES`: no checkout path in a cache key)."""


def scale_policy(profile: str) -> str | None:
    """The policy of notebook 07's second-size arms: :data:`SCALE_POLICY` at the full profile, ``None`` (the tiny one)
    at the quick.

    Raises:
        PrerequisitesMissing: at the full profile before ``make second-size`` has built the policy.
    """
    from rlvr_lib.policy.load import resolve_policy_path

    check(profile in ("quick", "full"), "profile", profile, "'quick' or 'full'")
    if profile == "quick":
        return None
    try:
        resolve_policy_path(SCALE_POLICY)
    except FileNotFoundError as err:
        raise PrerequisitesMissing(f"notebook 07's second size: {err}") from None
    return SCALE_POLICY


def seed_gains(method: Sequence, grpo: Sequence) -> dict[int, float]:
    """``{seed: method's in-distribution pass@1 minus GRPO's}`` over the seeds both arms have."""
    mine = {r.seed: mean_pass([r]) for r in method}
    theirs = {r.seed: mean_pass([r]) for r in grpo}
    common = sorted(set(mine) & set(theirs))
    check(common, "seeds", {"method": sorted(mine), "grpo": sorted(theirs)}, "at least one seed both arms have")
    return {s: mine[s] - theirs[s] for s in common}


def gain_growth(tiny: Sequence[float], small: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """``mean(small) - mean(tiny)`` of per-seed gains, with Welch's t interval (``ttest_ind(..., equal_var=False)``).

    No interval with fewer than two values on a side.

    Returns:
        ``mean``, ``ci_low``, ``ci_high``, ``n`` (the smaller side), ``n_tiny``, ``n_small``, ``method``.
    """
    from scipy import stats

    tiny, small = np.asarray(tiny, dtype=float), np.asarray(small, dtype=float)
    for name, values in (("tiny", tiny), ("small", small)):
        check(values.ndim == 1 and values.size > 0 and np.isfinite(values).all(), name, values.tolist(),
              "a non-empty 1-D sequence of finite per-seed gains")
    mean = float(small.mean() - tiny.mean())
    out = {"mean": mean, "n": int(min(tiny.size, small.size)), "n_tiny": int(tiny.size), "n_small": int(small.size)}
    if min(tiny.size, small.size) < 2:
        return {**out, "ci_low": mean, "ci_high": mean, "n": 1, "method": "single seed on a side: no interval"}
    ci = stats.ttest_ind(small, tiny, equal_var=False).confidence_interval(confidence)
    return {**out, "ci_low": float(ci.low), "ci_high": float(ci.high),
            "method": f"Welch t over seeds ({small.size} vs {tiny.size})"}
