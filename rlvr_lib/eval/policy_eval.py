"""Evaluate a policy on a task's families: pass@k, strategies, diversity, outcomes.

Per policy, once: pass@k for every k <= n per family and averaged over the in-distribution families (SAGE T1,
NudgeRL T1); strategy frequencies and entropy (SAGE T2); reasoning modes per problem and their ARI with the
strategy labels (NudgeRL Fig 1); outcome rates and lengths (3PO Fig 3). Problems, verifier, labels and default
families come from the task ``EvalSpec.task`` (``"arith"`` by default). A task without strategy labels (its
``strategies`` empty: `MathTask`, `CodeTask`, ...) gets no strategy measure (`STRATEGY_MEASURES`), rather than zeros;
asking a summary for one is refused in one line (`check_strategy_measure`). More: docs/library/evaluation.md."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlvr_lib.config import ConfigBase
from rlvr_lib.eval.diagnostics import zero_advantage_fraction
from rlvr_lib.eval.diversity import modes_and_ari, strategy_entropy
from rlvr_lib.eval.passk import pass_at_k_curve
from rlvr_lib.eval.sampling import ScoredSamples, sample_and_score, sample_with_hints
from rlvr_lib.rollout import SamplingParams
from rlvr_lib.tasks import DEFAULT_TASK, MALFORMED, TIMEOUT, WRONG, get_task
from rlvr_lib.tasks.registry import check_task_name

AVERAGE = "average"

STRATEGY_MEASURES = ("strategy_freq", "strategy_entropy", "strategy_counts")
"""A family summary's measures that read the task's strategy labels (the average holds the first two). An evaluation
on a task without labels has none of them: its verifier labels no completion, so they would be zeros that measure
nothing (the label-free reasoning modes, ``diversity``'s ``mean_modes``, are measured on every task)."""


def check_strategy_measure(summary, measure: str, where: str = "the evaluation") -> None:
    """Refuse ``measure`` (a strategy measure, `STRATEGY_MEASURES`) of an evaluation summary (a family's or the
    average) whose task has no strategy labels: ValueError, one line naming the measure, ``where`` and what is
    missing. Returns for a summary of a labelled task."""
    if "strategy_freq" not in summary:
        raise ValueError(f"{measure} of {where} cannot be measured: its task has no strategy labels (Task.strategies "
                         "is empty, so its verifier labels no completion's strategy); strategy measures need a task "
                         "that labels them (the label-free diversity is the reasoning modes, mean_modes)")


@dataclass(frozen=True)
class EvalSpec(ConfigBase):
    """What an evaluation measures.

    ``families=None`` takes the task's ``default_eval_families`` when the spec is built; the in-distribution ones
    (``task.eval_families``) are averaged. ``hints_per_problem`` H > 0 splits samples over the first H hints
    (NudgeRL's nudged sampling). ``greedy``: one argmax sample per problem (VIGOR's greedy pass@1; ``samples`` and
    ``group_size`` 1). ``task``, ``hints_per_problem`` and ``greedy`` are left out of `to_dict` at their defaults.
    mean@k (3PO's mean@8) is ``pass_at_k["1"]`` over ``samples`` samples: pass@1 = c / n."""

    families: tuple[str, ...] | None = None
    problems_per_family: int = 200
    samples: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    seed: int = 0
    group_size: int = 8
    diversity_problems: int = 100
    diversity_samples: int = 16
    task: str = field(default=DEFAULT_TASK, metadata={"omit_if_default": True})
    hints_per_problem: int = field(default=0, metadata={"omit_if_default": True})
    greedy: bool = field(default=False, metadata={"omit_if_default": True})

    def __post_init__(self) -> None:
        if self.families is None:
            check_task_name(self.task, "EvalSpec.task")
            object.__setattr__(self, "families", tuple(get_task(self.task).default_eval_families))
        super().__post_init__()

    def validate(self) -> None:
        check_task_name(self.task, "EvalSpec.task")
        self.check(len(self.families) > 0, "families", self.families, "a non-empty tuple of family names")
        task = get_task(self.task)
        for family in self.families:
            self.check(family in task.families, "families", family,
                       f"one of the families of task {self.task!r}, {sorted(task.families)} (families=None takes "
                       f"the task's default_eval_families, {list(task.default_eval_families)})")
        for name in ("problems_per_family", "samples", "max_new_tokens", "group_size", "diversity_problems",
                     "diversity_samples"):
            self.check_positive_int(name, getattr(self, name))
        self.check_range("temperature", self.temperature, 0, None, lo_open=True)
        self.check_range("top_p", self.top_p, 0, 1, lo_open=True)
        self.check_nonnegative_int("seed", self.seed)
        self.check(self.samples % self.group_size == 0, "samples", self.samples,
                   f"a multiple of group_size={self.group_size}")
        self.check_nonnegative_int("hints_per_problem", self.hints_per_problem)
        self.check(self.hints_per_problem == 0 or self.samples % self.hints_per_problem == 0, "hints_per_problem",
                   self.hints_per_problem, f"0 or a divisor of samples={self.samples}")
        self.check(isinstance(self.greedy, bool), "greedy", self.greedy, "a bool")
        if self.greedy:
            one = "1 when greedy=True (greedy decoding is deterministic: one sample per problem)"
            self.check(self.samples == 1, "samples", self.samples, one)
            self.check(self.group_size == 1, "group_size", self.group_size, one)
            unused = "1.0 when greedy=True (argmax decoding does not use it; one spelling)"
            self.check(self.temperature == 1.0, "temperature", self.temperature, unused)
            self.check(self.top_p == 1.0, "top_p", self.top_p, unused)


def diversity(samples: ScoredSamples, n_problems: int, n_samples: int, seed: int = 0) -> dict:
    """Modes per problem among well-formed samples and their ARI with strategy labels, from one tag-free `modes_and_ari`."""
    texts, labels = [], []
    for p in range(min(n_problems, len(samples.problems))):
        keep = [j for j in range(min(n_samples, samples.statuses.shape[1])) if samples.statuses[p, j] != MALFORMED]
        if keep:
            texts.append([samples.texts[p][j] for j in keep])
            labels.append([samples.strategies[p, j] for j in keep])
    if not texts:
        return {"mean_modes": 0.0, "histogram": {}, "n_modes": 0, "ari_vs_strategy": None, "tag_free": True,
                "counts": []}
    out = modes_and_ari(texts, labels, seed=seed)
    keys = ("mean_modes", "histogram", "n_modes", "ari_vs_strategy", "tag_free", "counts")
    return {key: out[key] for key in keys}


def summarize(samples: ScoredSamples, spec: EvalSpec) -> dict:
    """Metrics of one family's samples (JSON-ready)."""
    G = spec.group_size
    groups = samples.rewards.reshape(-1, G)
    strategies = tuple(get_task(spec.task).strategies)
    freq = samples.strategy_freq(strategies)
    summary = {
        "pass_at_k": {str(k): v for k, v in pass_at_k_curve(samples.correct).items()},
        "strategy_freq": freq,
        "strategy_entropy": strategy_entropy([s for s in samples.strategies.ravel() if s is not None])
        if freq["none"] < 1
        else 0.0,
        "malformed_rate": samples.rate(MALFORMED),
        "wrong_rate": samples.rate(WRONG),
        # only when a grading timed out, so records of runs without time-outs keep their keys
        **({"timeout_rate": samples.rate(TIMEOUT)} if samples.rate(TIMEOUT) else {}),
        "mean_length": float(samples.lengths.mean()),
        "zero_adv_frac": zero_advantage_fraction(groups.ravel(), np.repeat(np.arange(len(groups)), G)),
        "diversity": diversity(samples, spec.diversity_problems, spec.diversity_samples, spec.seed),
        "correct_counts": samples.correct.sum(1).astype(int).tolist(),
        # Per problem, how many samples used each strategy ("none": no strategy parsed), for paired share analysis.
        "strategy_counts": {
            s: [sum(x == s or (s == "none" and x is None) for x in row) for row in samples.strategies]
            for s in (*strategies, "none")
        },
        "uids": [p.uid for p in samples.problems],
    }
    if not strategies:  # a task without strategy labels: no strategy measure (STRATEGY_MEASURES), not zeros
        for key in STRATEGY_MEASURES:
            del summary[key]
    return summary


def evaluate_policy(engine, spec: EvalSpec = EvalSpec()) -> dict:
    """Evaluate the engine's policy on every family of ``spec``.

    Returns ``{"families": {name: summary}, "average": {...}}``, the average unweighted over the task's
    in-distribution families evaluated (all of them when none is)."""
    task = get_task(spec.task)
    params = SamplingParams(n=spec.samples, temperature=spec.temperature, top_p=spec.top_p,
                            max_new_tokens=spec.max_new_tokens, seed=spec.seed, greedy=spec.greedy)
    families = {}
    for family in spec.families:
        problems = task.family_problems(family, spec.problems_per_family, seed=0)
        if spec.hints_per_problem:
            samples = sample_with_hints(engine, problems, params, task.hints, spec.hints_per_problem,
                                        verifier=task.verify)
        else:
            samples = sample_and_score(engine, problems, params, verifier=task.verify)
        families[family] = summarize(samples, spec)
    ind = [f for f in spec.families if f in task.eval_families] or list(spec.families)
    keys = families[ind[0]]["pass_at_k"].keys()
    average = {
        "pass_at_k": {k: float(np.mean([families[f]["pass_at_k"][k] for f in ind])) for k in keys},
        **{
            key: float(np.mean([families[f][key] for f in ind]))
            for key in ("malformed_rate", "wrong_rate", "mean_length", "zero_adv_frac", "strategy_entropy")
            if key in families[ind[0]]  # strategy_entropy: only with strategy labels
        },
        **({"strategy_freq": {s: float(np.mean([families[f]["strategy_freq"][s] for f in ind])) for s in
                              (*task.strategies, "none")}} if "strategy_freq" in families[ind[0]] else {}),
        "mean_modes": float(np.mean([families[f]["diversity"]["mean_modes"] for f in ind])),
        "families": ind,
    }
    if any("timeout_rate" in families[f] for f in ind):
        average["timeout_rate"] = float(np.mean([families[f].get("timeout_rate", 0.0) for f in ind]))
    return {"families": families, AVERAGE: average}
