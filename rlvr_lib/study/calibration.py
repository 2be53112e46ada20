"""Static calibration of the testbed: can the base policy show the exploration bottleneck?

Measures a policy on the fixed evaluation split and checks the targets (whether GRPO then *does* sharpen is
`rlvr_lib.study.dynamics`):

* a long tail: mean in-distribution pass@1 in [0.15, 0.45] and pass@256 >= 2 x pass@1;
* mode skew: the dominant strategy >= 60% of unhinted samples, the rare one <= 10%;
* the dominant strategy's success on the ``train`` family >= 1.5x the rare strategy's;
* steerable: every strategy hint followed >= 80% of the time;
* GRPO's dead groups: 30-80% of training prompts have all G=8 rewards equal;
* degeneration when hot: malformed <= 10% at T=1.0 and >= 30% at T=2.0;
* ``rare_mix``: pass@1 <= 0.10, pass@256 >= 0.60, the rare strategy >= 3x as accurate as each other;
* in-distribution pass@1 falls from ``easy_mix`` to ``hardest_mix``.

Strategy success rates are measured on hinted samples (the rare strategy is too rare unhinted). Reasons:
docs/study/testbed.md ("The static calibration").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlvr_lib.config import ConfigBase
from rlvr_lib.eval.diagnostics import zero_advantage_fraction
from rlvr_lib.eval.passk import pass_at_k_curve
from rlvr_lib.eval.sampling import ScoredSamples, sample_and_score
from rlvr_lib.files import write_json_atomic
from rlvr_lib.study.runs import jsonable, machine
from rlvr_lib.rollout import SamplingParams
from rlvr_lib.tasks.arithmetic import (
    EVAL_FAMILIES,
    FAMILIES,
    HARD_DIFFICULTY,
    OOD_FAMILIES,
    PRETRAIN_STRATEGY_PRIOR,
    RARE_FAMILIES,
    STRATEGIES,
    TRAIN_FAMILY,
    family_problems,
)

DOMINANT = max(PRETRAIN_STRATEGY_PRIOR, key=PRETRAIN_STRATEGY_PRIOR.get)
RARE = min(PRETRAIN_STRATEGY_PRIOR, key=PRETRAIN_STRATEGY_PRIOR.get)


@dataclass(frozen=True)
class CalibrationConfig(ConfigBase):
    """What to measure.

    Attributes:
        problems_per_family: Evaluation problems per family (targets need >= 200).
        samples: Unhinted samples per problem at T=1 outside ``wide_families``.
        wide_samples, wide_families: Samples per problem for the pass@256 targets, and where.
        hint_problems, hint_samples: Problems per family and samples per (problem, hint) for hint following.
        hot_samples, hot_temperature: Samples per problem at the "too hot" temperature.
        group_size: G for the zero-advantage fraction.
    """

    problems_per_family: int = 200
    samples: int = 64
    wide_samples: int = 256
    wide_families: tuple[str, ...] = EVAL_FAMILIES + RARE_FAMILIES
    hint_problems: int = 100
    hint_samples: int = 8
    hot_samples: int = 8
    hot_temperature: float = 2.0
    group_size: int = 8
    max_new_tokens: int = 48
    seed: int = 0
    families: tuple[str, ...] = EVAL_FAMILIES + RARE_FAMILIES + OOD_FAMILIES + (TRAIN_FAMILY,)

    def validate(self) -> None:
        for name in ("problems_per_family", "samples", "wide_samples", "hint_problems", "hint_samples", "hot_samples",
                     "group_size"):
            self.check_positive_int(name, getattr(self, name))
        self.check_positive_int("max_new_tokens", self.max_new_tokens)
        self.check_nonnegative_int("seed", self.seed)
        self.check_positive("hot_temperature", self.hot_temperature)
        for name in ("samples", "wide_samples"):
            self.check(getattr(self, name) % self.group_size == 0, name, getattr(self, name),
                       f"a multiple of group_size={self.group_size}")
        for family in self.wide_families:
            self.check_choice("wide_families", family, sorted(FAMILIES))
        for family in self.families:
            self.check_choice("families", family, sorted(FAMILIES))
        self.check(TRAIN_FAMILY in self.families, "families", self.families,
                   f"a tuple of family names that includes {TRAIN_FAMILY!r}")


def _mean_or_nan(x: np.ndarray) -> float:
    return float(np.mean(x)) if np.size(x) else float("nan")


def _strategy_accuracy(samples: list[ScoredSamples], strategy: str) -> tuple[float, int]:
    used = np.concatenate([s.strategies.ravel() == strategy for s in samples])
    correct = np.concatenate([s.correct.ravel() for s in samples])
    return _mean_or_nan(correct[used]), int(used.sum())


def measure_family(engine, family: str, config: CalibrationConfig) -> tuple[dict, dict]:
    """Per-family metrics, plus the raw samples the pooled targets need."""
    problems = family_problems(family, config.problems_per_family, seed=config.seed)
    n = config.wide_samples if family in config.wide_families else config.samples
    params = SamplingParams(n=n, temperature=1.0, max_new_tokens=config.max_new_tokens, seed=config.seed)
    plain = sample_and_score(engine, problems, params)
    hot = sample_and_score(
        engine,
        problems,
        SamplingParams(
            n=config.hot_samples,
            temperature=config.hot_temperature,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed + 1,
        ),
    )
    hint_params = SamplingParams(
        n=config.hint_samples, temperature=1.0, max_new_tokens=config.max_new_tokens, seed=config.seed + 2
    )
    hinted = {s: sample_and_score(engine, problems[: config.hint_problems], hint_params, hints=s) for s in STRATEGIES}
    ks = sorted({k for k in (1, 8, n) if k <= n})
    curve = pass_at_k_curve(plain.correct, ks=ks)
    G = config.group_size
    groups = plain.rewards.reshape(len(problems), n // G, G).reshape(-1, G)
    hard = {s: h.subset([p.difficulty == HARD_DIFFICULTY for p in h.problems]) for s, h in hinted.items()}
    metrics = {
        "n_problems": len(problems),
        "n_samples": n,
        **{f"pass_at_{k}": curve[k] for k in ks},
        "pass_at_k": {str(k): v for k, v in pass_at_k_curve(plain.correct).items()},
        "strategy_freq": plain.strategy_freq(STRATEGIES),
        "hint_follow": {s: float(np.mean(h.strategies == s)) for s, h in hinted.items()},
        "hard_acc_by_strategy": {s: _strategy_accuracy([hard[s]], s)[0] for s in STRATEGIES},
        "acc_by_strategy": {s: _strategy_accuracy([hinted[s]], s)[0] for s in STRATEGIES},
        "malformed_t1": plain.rate("malformed"),
        "malformed_t2": hot.rate("malformed"),
        "zero_adv_frac_g8": zero_advantage_fraction(groups.ravel(), np.repeat(np.arange(len(groups)), G)),
        "mean_length": float(plain.lengths.mean()),
        "truncated_t1": float(plain.truncated.mean()),
    }
    return metrics, {"plain": plain, "hot": hot, "hard": hard, "hinted": hinted}


def _target(value: float, lo: float | None = None, hi: float | None = None) -> dict:
    bound = f"in [{lo}, {hi}]" if lo is not None and hi is not None else (f">= {lo}" if lo is not None else f"<= {hi}")
    met = bool(np.isfinite(value) and (lo is None or value >= lo) and (hi is None or value <= hi))
    return {"value": round(float(value), 4) if np.isfinite(value) else None, "bound": bound, "met": met}


def _ratio(num: float, den: float) -> float:
    """``num / den``, capped at 1e6 (``den == 0 < num``); NaN when both are 0 or either is unmeasured."""
    if not (np.isfinite(num) and np.isfinite(den)) or (num == 0 and den == 0):
        return float("nan")
    return min(num / den, 1e6) if den > 0 else 1e6


def rare_family_targets(family: str, metrics: dict) -> dict[str, dict]:
    """Targets of a family where only the rare strategy works: pass@1 <= 0.10, pass@n >= 0.60 (n its samples,
    256 by default) and the rare strategy's hinted accuracy >= 3x each other strategy's there."""
    n = metrics["n_samples"]
    acc = metrics["acc_by_strategy"]  # hinted, over the whole family: every item of it is rare-strategy-only
    targets = {f"pass_at_1[{family}]": _target(metrics["pass_at_1"], hi=0.10),
               f"pass_at_{n}[{family}]": _target(metrics[f"pass_at_{n}"], lo=0.60)}
    for other in (s for s in STRATEGIES if s != RARE):
        targets[f"acc_ratio[{family}: {RARE}/{other}]"] = _target(_ratio(acc[RARE], acc[other]), lo=3.0)
        targets[f"acc_ratio[{family}: {RARE}/{other}]"]["detail"] = {
            RARE: round(acc[RARE], 4), other: round(acc[other], 4)}
    return targets


def pooled_targets(families: dict[str, dict], raw: dict[str, dict]) -> dict[str, dict]:
    """The calibration targets over the in-distribution evaluation families and the RL pool (module docstring)."""
    ind = [f for f in EVAL_FAMILIES if f in families]
    plain = [raw[f]["plain"] for f in ind]
    pass1 = np.mean([families[f]["pass_at_1"] for f in ind])
    n = min(families[f]["n_samples"] for f in ind)
    passmax = np.mean([families[f]["pass_at_k"][str(n)] for f in ind])
    strategies = np.concatenate([s.strategies.ravel() for s in plain])
    follow = {
        s: float(np.mean(np.concatenate([raw[f]["hinted"][s].strategies.ravel() == s for f in ind])))
        for s in STRATEGIES
    }
    pool = families[TRAIN_FAMILY]["acc_by_strategy"]
    targets = {
        "mean_pass_at_1": _target(pass1, 0.15, 0.45),
        f"pass_at_{n}_over_pass_at_1": _target(passmax / pass1 if pass1 > 0 else float("nan"), lo=2.0),
        f"dominant_strategy_share[{DOMINANT}]": _target(np.mean(strategies == DOMINANT), lo=0.60),
        f"rare_strategy_share[{RARE}]": _target(np.mean(strategies == RARE), hi=0.10),
        f"rl_pool_acc_ratio[{DOMINANT}/{RARE}]": _target(_ratio(pool[DOMINANT], pool[RARE]), lo=1.5),
        **{f"hint_follow[{s}]": _target(v, lo=0.80) for s, v in follow.items()},
        "zero_adv_frac_g8[train]": _target(families[TRAIN_FAMILY]["zero_adv_frac_g8"], 0.30, 0.80),
        "malformed_t1": _target(np.mean([s.rate("malformed") for s in plain]), hi=0.10),
        "malformed_t2": _target(np.mean([raw[f]["hot"].rate("malformed") for f in ind]), lo=0.30),
    }
    targets[f"rl_pool_acc_ratio[{DOMINANT}/{RARE}]"]["detail"] = {s: round(pool[s], 4) for s in STRATEGIES}
    if len(ind) >= 2:  # the smallest drop in pass@1 from one family to the next harder one
        drops = [families[a]["pass_at_1"] - families[b]["pass_at_1"] for a, b in zip(ind, ind[1:])]
        targets["pass_at_1_falls_with_difficulty"] = _target(min(drops), lo=0.0)
        targets["pass_at_1_falls_with_difficulty"]["detail"] = {f: round(families[f]["pass_at_1"], 4) for f in ind}
    for family in RARE_FAMILIES:
        if family in families:
            targets.update(rare_family_targets(family, families[family]))
    return targets


def calibrate(engine, config: CalibrationConfig = CalibrationConfig(), *, policy: str = "embedded tiny policy") -> dict:
    """Measure every family and check the targets; returns the report dict (with ``machine``: where it ran)."""
    t0 = time.perf_counter()
    families, raw = {}, {}
    for family in config.families:
        families[family], raw[family] = measure_family(engine, family, config)
    report = {
        "policy": policy,
        "config": config.to_dict(),
        "families": families,
        "targets": pooled_targets(families, raw),
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": machine(),  # float rounding, hence the sampled completions, depend on the processor
    }
    report["all_targets_met"] = all(t["met"] for t in report["targets"].values())
    return report


def profile_operands() -> list[tuple[int, int]]:
    """The problems a strategy profile covers: every in-distribution ``a*b`` of the RL and evaluation splits."""
    from rlvr_lib.tasks.arithmetic import DIFFICULTIES, problem_pool

    return sorted({ab for split in ("train", "eval") for d in DIFFICULTIES
                   for ab in problem_pool(split, d, profiled=False)})


def measure_strategy_profile(engine, operands, *, samples: int, seed: int, max_new_tokens: int) -> dict:
    """Correct hinted samples per strategy of each problem (`rlvr_lib.tasks.strategy_profile`).

    Each strategy's hint is appended to every prompt and ``samples`` completions are drawn at T=1; one counts
    when it names the hinted strategy and the verifier accepts it.

    Returns:
        ``{"strategies": [...], "counts": {"a*b": [correct per strategy]}, "samples", "seed", "max_new_tokens"}``.
    """
    from rlvr_lib.tasks.arithmetic import make_problem
    from rlvr_lib.tasks.strategy_profile import problem_key

    operands = [tuple(ab) for ab in operands]
    if not operands:
        raise ValueError("operands is empty: give at least one (a, b)")
    problems = [make_problem(a, b) for a, b in operands]
    params = SamplingParams(n=samples, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
    per_strategy = []
    for strategy in STRATEGIES:
        scored = sample_and_score(engine, problems, params, hints=strategy)
        per_strategy.append(((scored.strategies == strategy) & scored.correct).sum(axis=1))
    counts = np.stack(per_strategy, axis=1)
    return {"strategies": list(STRATEGIES), "samples": samples, "seed": seed, "max_new_tokens": max_new_tokens,
            "counts": {problem_key(a, b): [int(c) for c in row] for (a, b), row in zip(operands, counts)}}


def format_report(report: dict) -> str:
    """A plain-text summary: one line per family, one per target."""
    lines = [f"calibration of {report['policy']} ({report['seconds']} s)"]
    for name, m in report["families"].items():
        freq = ", ".join(f"{s} {m['strategy_freq'][s]:.2f}" for s in STRATEGIES)
        n = m["n_samples"]
        lines.append(
            f"  {name:12s} pass@1 {m['pass_at_1']:.3f} pass@8 {m.get('pass_at_8', float('nan')):.3f} "
            f"pass@{n} {m[f'pass_at_{n}']:.3f} | {freq} | "
            f"malformed T1 {m['malformed_t1']:.3f} T2 {m['malformed_t2']:.3f} | zero-adv {m['zero_adv_frac_g8']:.2f}"
        )
    for name, t in report["targets"].items():
        lines.append(f"  [{'met' if t['met'] else 'NOT MET'}] {name} = {t['value']} (target {t['bound']})")
    return "\n".join(lines)


def write_report(report: dict, path: str | Path) -> Path:
    """Write the report as strict JSON, atomically (NaN becomes null)."""
    path = Path(path)
    write_json_atomic(path, jsonable(report))
    return path
