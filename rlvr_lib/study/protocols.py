"""Each paper's evaluation protocol for its pass@1 claims, and the one rule that scales it to this budget.

The metric of every protocol is mean@k = (1/P) sum_p (1/k) sum_i correct(p, i), the unbiased pass@1 estimate
from k samples per problem (`rlvr_lib.study.summaries.mean_at_k`):

1. NudgeRL (arXiv 2605.15726): mean@128 at temperature 0.7 (top_p not stated; used 1.0).
2. 3PO (arXiv 2608.09805): mean@8 at temperature 0.6 (top_p not stated; used 1.0).
3. VIGOR (arXiv 2605.09920): greedy pass@1, one argmax completion per problem.
4. SAGE (arXiv 2605.18864): not stated; used its training sampling (temperature 1.0), i.e. the main evaluation.

:data:`SCALING_RULE` -- temperature, top_p, greedy decoding and the metric are the paper's; samples per problem
are the paper's count capped at :data:`SAMPLE_CAP` (32 at the full profile, 8 at the quick one), so the cap
widens the interval and does not move the expected value; problems, families, length and seed are the main
evaluation's (``base_spec``). A claims module names its protocol (``PROTOCOL``, or :data:`BY_SOURCE`: each row
under its source paper's); :func:`claim_protocol` reads it, and :class:`ProtocolEvaluation` gives a notebook the
arms' extra evaluations, the base policy's, and the paired difference (:meth:`ProtocolEvaluation.versus`).

The papers' wording, the rule's reasons and a worked notebook example: docs/study/protocols.md.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from rlvr_lib.eval.policy_eval import EvalSpec
from rlvr_lib.study.executions import PROFILES
from rlvr_lib.study.stats import paired_difference_ci
from rlvr_lib.study.summaries import extra_evaluation, per_problem_mean_at_k
from rlvr_lib.validation import check, check_choice, invalid

__all__ = ["BY_SOURCE", "EvalProtocol", "METRICS", "PAPER_PROTOCOL", "PROFILES", "PROTOCOLS", "ProtocolEvaluation",
           "SAMPLE_CAP", "SCALING_RULE", "claim_protocol", "get_protocol", "notebook_protocols", "protocol_label",
           "protocol_records", "protocol_scores", "protocol_spec"]

METRICS = ("mean@k", "greedy pass@1")
"""mean@k: mean correctness over k sampled completions per problem; greedy pass@1: mean@1 of the argmax one."""

SAMPLE_CAP = {"quick": 8, "full": 32}
"""Samples per problem a protocol evaluation may draw at each profile (the scaling rule's cap)."""

SCALING_RULE = (
    "Temperature, top_p, greedy decoding and the metric are the paper's. Samples per problem: the paper's count "
    "capped at 32 at the full profile (the main evaluation's count, README \"Budget\") and at 8 at the quick "
    "profile; a paper that states no count (SAGE) uses the main evaluation's. Problems, families, completion "
    "length and seed: the main evaluation's. mean@k is unbiased for pass@1 at any k: the cap widens the "
    "interval, it does not move the expected value.")
"""The one scaling rule, in words (notebooks print it beside their claims tables)."""

BY_SOURCE = "by source"
"""A claims module's ``PROTOCOL`` when its rows come from several papers: each row under its ``source``'s protocol."""


@dataclass(frozen=True)
class EvalProtocol:
    """A paper's evaluation protocol, as the paper states it.

    Attributes:
        name: Key in :data:`PROTOCOLS`.
        paper: The paper (`rlvr_lib.study.claims.tables.PAPER_NAMES`).
        temperature, top_p: Sampling (1.0 each when ``greedy``).
        samples: Samples per problem the paper draws; ``None`` where the paper does not state it.
        greedy: Argmax decoding (one sample per problem).
        metric: One of :data:`METRICS`.
        source: The paper's statement of the protocol, verbatim from the study's summary of the paper (docs/papers/).
        not_stated: What the paper leaves unstated and what is used instead, in words.
    """

    name: str
    paper: str
    temperature: float
    top_p: float
    samples: Optional[int]
    greedy: bool
    metric: str
    source: str
    not_stated: str = ""

    def __post_init__(self):
        from rlvr_lib.study.claims.tables import PAPER_NAMES

        check_choice(f"EvalProtocol {self.name!r}: paper", self.paper, PAPER_NAMES)
        check_choice(f"EvalProtocol {self.name!r}: metric", self.metric, METRICS)
        check(self.samples is None or (isinstance(self.samples, int) and self.samples >= 1),
              f"EvalProtocol {self.name!r}: samples", self.samples, "None (not stated) or an int >= 1")
        check(not self.greedy or (self.samples == 1 and self.metric == "greedy pass@1"
                                  and self.temperature == 1.0 and self.top_p == 1.0),
              f"EvalProtocol {self.name!r}: greedy", self.greedy,
              "False, or True with samples 1, metric 'greedy pass@1' and temperature = top_p = 1.0")

    def describe(self) -> str:
        """The protocol in words, e.g. ``"NudgeRL: mean@128 at temperature 0.7, top_p 1.0"``."""
        if self.greedy:
            return f"{self.paper}: greedy pass@1 (one argmax completion per problem)"
        k = "k" if self.samples is None else str(self.samples)
        return f"{self.paper}: mean@{k} at temperature {self.temperature:g}, top_p {self.top_p:g}"


PROTOCOLS = {
    "nudgerl": EvalProtocol(
        "nudgerl", "NudgeRL", temperature=0.7, top_p=1.0, samples=128, greedy=False, metric="mean@k",
        source="Eval: 128 samples/problem at temperature 0.7, pass@1 = mean correctness",
        not_stated="top_p at evaluation (training samples at 0.95): 1.0 is used"),
    "3po": EvalProtocol(
        "3po", "3PO", temperature=0.6, top_p=1.0, samples=8, greedy=False, metric="mean@k",
        source="eval mean@8 at temperature 0.6",
        not_stated="top_p at evaluation: 1.0 is used"),
    "sage": EvalProtocol(
        "sage", "SAGE", temperature=1.0, top_p=1.0, samples=None, greedy=False, metric="mean@k",
        source="Settings (code): LoRA r=8, lr 5e-6, 8 rollouts, temperature 1.0, 1000 steps",
        not_stated=("the evaluation's temperature, top_p and sample count for pass@1: the training temperature "
                    "1.0, top_p 1.0 and the main evaluation's samples are used (pass@1 = mean correctness)")),
    "vigor": EvalProtocol(
        "vigor", "VIGOR", temperature=1.0, top_p=1.0, samples=1, greedy=True, metric="greedy pass@1",
        source="Eval greedy pass@1."),
}
"""One protocol per paper, by name."""

PAPER_PROTOCOL = {p.paper: name for name, p in PROTOCOLS.items()}
"""The protocol name of each paper (`rlvr_lib.study.claims.tables.PAPER_NAMES`)."""


def get_protocol(protocol: Union[str, EvalProtocol]) -> EvalProtocol:
    """``protocol`` itself, or :data:`PROTOCOLS` [``protocol``].

    Raises:
        ValueError: on a name that is not a protocol's.
    """
    if isinstance(protocol, EvalProtocol):
        return protocol
    check_choice("protocol", protocol, tuple(PROTOCOLS))
    return PROTOCOLS[protocol]


def protocol_label(protocol: Union[str, EvalProtocol]) -> str:
    """The extra-evaluation label of a protocol's evaluation in a run record: ``"protocol-<name>"``."""
    return f"protocol-{get_protocol(protocol).name}"


def protocol_spec(protocol: Union[str, EvalProtocol], base_spec: EvalSpec, profile: str) -> EvalSpec:
    """The `EvalSpec` that measures ``protocol`` for a notebook whose main evaluation is ``base_spec``.

    :data:`SCALING_RULE`: ``temperature``, ``top_p`` and ``greedy`` are the protocol's; ``samples`` is
    ``min(protocol.samples, SAMPLE_CAP[profile])`` (``base_spec.samples`` when the protocol states none);
    ``group_size`` is ``gcd(base_spec.group_size, samples)`` (1 when greedy); families, problems per family,
    ``max_new_tokens``, ``seed`` and ``task`` are ``base_spec``'s; no hints; clustering on 1 problem x 1 sample.
    For a protocol whose spec samples like ``base_spec`` (SAGE's) the result is ``base_spec`` itself, whose
    records already measure it.

    Raises:
        ValueError: on an unknown protocol or profile, or a ``base_spec`` that is not an `EvalSpec`.
    """
    protocol = get_protocol(protocol)
    check_choice("profile", profile, PROFILES)
    if not isinstance(base_spec, EvalSpec):
        raise invalid("base_spec", type(base_spec).__name__, "an EvalSpec (the notebook's main evaluation)")
    samples = base_spec.samples if protocol.samples is None else min(protocol.samples, SAMPLE_CAP[profile])
    sampling = dict(samples=samples, temperature=protocol.temperature, top_p=protocol.top_p, greedy=protocol.greedy)
    if all(getattr(base_spec, k) == v for k, v in sampling.items()) and base_spec.hints_per_problem == 0:
        return base_spec
    return base_spec.replace(**sampling, group_size=math.gcd(base_spec.group_size, samples), hints_per_problem=0,
                             diversity_problems=1, diversity_samples=1)


def _measures(spec: Mapping[str, Any], protocol: EvalProtocol) -> bool:
    """Does an evaluation with spec dict ``spec`` measure ``protocol`` (its sampling, no hints, at most its samples)?"""
    spec = EvalSpec.from_dict(spec)
    return (spec.temperature == protocol.temperature and spec.top_p == protocol.top_p
            and spec.greedy == protocol.greedy and spec.hints_per_problem == 0
            and (protocol.samples is None or spec.samples <= protocol.samples))


def protocol_records(records: Sequence[Any], protocol: Union[str, EvalProtocol]) -> list:
    """The evaluations of ``records`` that measure ``protocol``, as records.

    Each record's extra evaluation :func:`protocol_label` (``rlvr_lib.study.summaries.extra_evaluation``) when
    every record has one; otherwise the records themselves when their own evaluation measures the protocol (a
    base policy evaluated under :func:`protocol_spec`, or SAGE's protocol, which is the main evaluation).

    Raises:
        ValueError: on no records, or records that neither carry the protocol's evaluation nor measure it.
    """
    protocol = get_protocol(protocol)
    if isinstance(records, (str, Mapping)) or not isinstance(records, Sequence) or not records:
        raise invalid("records", type(records).__name__, "a non-empty list of run records, one per seed")
    label = protocol_label(protocol)
    if all(label in ((getattr(r, "extra", None) or {}).get("evals") or {}) for r in records):
        return extra_evaluation(records, label)
    if all(_measures(r.config["eval"], protocol) for r in records):
        return list(records)
    raise invalid("records", getattr(records[0], "run_id", "records"),
                  f"records with the extra evaluation {label!r} (train_and_evaluate's extra_specs) or evaluated "
                  f"under {protocol.describe()} (protocol_spec)")


def protocol_scores(records: Sequence[Any], protocol: Union[str, EvalProtocol], families: Sequence[str]) -> np.ndarray:
    """``(S, P)`` per-seed, per-problem mean@k of ``records`` under ``protocol`` (the protocol's pass@1)."""
    return per_problem_mean_at_k(protocol_records(records, protocol), families)


@dataclass(frozen=True)
class ProtocolEvaluation:
    """One protocol at one notebook's main evaluation and profile: what to run and how to read it.

    Attributes:
        protocol: The paper's protocol.
        spec: :func:`protocol_spec` of it.
        base_spec: The notebook's main evaluation.
        profile: ``"quick"`` or ``"full"``.
    """

    protocol: EvalProtocol
    spec: EvalSpec
    base_spec: EvalSpec
    profile: str

    @classmethod
    def of(cls, protocol: Union[str, EvalProtocol], base_spec: EvalSpec, profile: str) -> "ProtocolEvaluation":
        protocol = get_protocol(protocol)
        return cls(protocol, protocol_spec(protocol, base_spec, profile), base_spec, profile)

    @property
    def label(self) -> str:
        return protocol_label(self.protocol)

    @property
    def base_name(self) -> str:
        """Run name of the base policy's evaluation under the protocol (``"base"`` when it is the main one)."""
        return "base" if self.spec == self.base_spec else f"base-{self.label}"

    def extra_specs(self) -> dict[str, EvalSpec]:
        """``{label: spec}`` to pass as a trained arm's extra evaluation; ``{}`` when the main evaluation measures
        the protocol (SAGE's), so those arms' run keys stay as they are."""
        return {} if self.spec == self.base_spec else {self.label: self.spec}

    def base_seeds(self, seeds: Sequence[int]) -> list[int]:
        """Sampling seeds of the base policy's protocol evaluation: the first only under greedy decoding (every
        seed gives the same completions), else all."""
        seeds = list(seeds)
        check(bool(seeds), "seeds", seeds, "a non-empty list of sampling seeds")
        return seeds[:1] if self.spec.greedy else seeds

    def records(self, records: Sequence[Any]) -> list:
        """:func:`protocol_records`."""
        return protocol_records(records, self.protocol)

    def scores(self, records: Sequence[Any], families: Sequence[str]) -> np.ndarray:
        """:func:`protocol_scores`: ``(S, P)`` mean@k per seed and problem."""
        return protocol_scores(records, self.protocol, families)

    def versus(self, a: Sequence[Any], b: Sequence[Any], families: Sequence[str]) -> dict:
        """The protocol's pass@1 (mean@k) of arm ``a`` minus arm ``b``: paired bootstrap over seeds x problems."""
        return paired_difference_ci(self.scores(a, families), self.scores(b, families), bounds=(0, 1))

    def describe(self, rule: bool = True) -> str:
        """The protocol and its scaling at this profile, in words (markdown); ``rule``: end with :data:`SCALING_RULE`."""
        p, s = self.protocol, self.spec
        if p.greedy:
            what = "greedy pass@1: one argmax completion per problem (the paper's protocol, unscaled)"
        else:
            stated = "not stated by the paper" if p.samples is None else f"the paper draws {p.samples}"
            what = (f"mean@{s.samples} at temperature {s.temperature:g}, top_p {s.top_p:g} "
                    f"({s.samples} samples per problem; {stated})")
        extra = f" Not stated: {p.not_stated}." if p.not_stated else ""
        return (f"**{p.paper}'s protocol** (as the paper states it: \"{p.source}\"): measured as {what}, on "
                f"{s.problems_per_family} problems per family, {self.profile} profile.{extra}"
                + (f" Scaling rule: {SCALING_RULE}" if rule else ""))


def _module_protocol(module: str) -> Any:
    from rlvr_lib.study.claims import REGISTRIES

    check_choice("module", module, tuple(REGISTRIES.values()))
    mod = importlib.import_module(f"rlvr_lib.study.claims.{module}")
    if not hasattr(mod, "PROTOCOL"):
        raise invalid(f"rlvr_lib.study.claims.{module}.PROTOCOL", "missing",
                      f"a protocol name among {sorted(PROTOCOLS)} or {BY_SOURCE!r}")
    value = mod.PROTOCOL
    check(value == BY_SOURCE or value in PROTOCOLS, f"rlvr_lib.study.claims.{module}.PROTOCOL", value,
          f"a protocol name among {sorted(PROTOCOLS)} or {BY_SOURCE!r}")
    return value


def claim_protocol(module: str, claim_id: str) -> EvalProtocol:
    """The protocol claim ``claim_id`` of claims module ``module`` (e.g. ``"nb03_nudgerl"``) is measured under.

    The module's ``PROTOCOL`` when it names one; under :data:`BY_SOURCE`, the protocol of the claim's ``source``.

    Raises:
        ValueError: on an unknown module, a module without a valid ``PROTOCOL``, or an id that is not a claim of
            the module.
    """
    from rlvr_lib.study.claims import registry

    value = _module_protocol(module)
    claims = {c.id: c for c in registry(module).claims}
    check_choice(f"{module} claim id", claim_id, tuple(claims))
    return PROTOCOLS[PAPER_PROTOCOL[claims[claim_id].source] if value == BY_SOURCE else value]


def notebook_protocols(module: str) -> dict[str, EvalProtocol]:
    """Every protocol a claims module's rows are measured under, by name (one, or one per source paper)."""
    from rlvr_lib.study.claims import registry

    value = _module_protocol(module)
    if value != BY_SOURCE:
        return {value: PROTOCOLS[value]}
    names = sorted({PAPER_PROTOCOL[c.source] for c in registry(module).claims})
    return {name: PROTOCOLS[name] for name in names}
