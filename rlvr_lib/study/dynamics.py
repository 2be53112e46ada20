"""Dynamics calibration: does GRPO on the testbed show the bottleneck the four papers fix?

GRPO (``grpo``, anchored) and ``grpo_no_kl`` are trained for several seeds, evaluated against the base policy at
each step count of :data:`STEP_CANDIDATES`, and checked against the targets of the papers' premise
(`dynamics_targets`):

1. ``pass_at_1_gain``: in-distribution pass@1 rises by >= 0.05, paired interval above 0;
2. ``rare_pass_at_256_drop``: on ``rare_mix`` base pass@256 - GRPO's >= 0.05, interval above 0 (Yue et al., 2025);
3. ``crossover_k``: the smallest k with base pass@k >= GRPO's (in-distribution average) is <= 256;
4. ``strategy_entropy_fall``: first-token strategy entropy falls by >= 30%;
5. ``rare_share_fall``: the rare strategy's share falls >= 2x;
6. ``rare_lost_vs_rescued``: on ``rare_mix`` at 256 samples, (lost - resampling null) >= 3 x rescued
   (``rare_lost_vs_rescued_main``, at the main 32 samples, is reported and never gates);
7. ``kl_binds``: KL(anchored || base) <= 0.5 x KL(``grpo_no_kl`` || base), both by `rlvr_lib.eval.reference_kl`.

A target is met when its point value, and its 95% interval where it names one, meet the bound. ``chosen_steps``
is the smallest candidate meeting every gating target; the anchor's beta is the first of
:data:`KL_COEF_CANDIDATES` that does (`rlvr_lib.study.testbed.TESTBED_KL_COEF`). Reasons: docs/study/dynamics.md.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rlvr_lib.config import ConfigBase, hash_jsonable
from rlvr_lib.eval.policy_eval import EvalSpec, check_strategy_measure, evaluate_policy
from rlvr_lib.study.stats import bootstrap_ci, paired_difference_ci, per_problem_scores, rescued_lost_counts
from rlvr_lib.files import write_json_atomic
from rlvr_lib.study.runs import RESUMED, RunRecord, cached_run, jsonable, results_root
from rlvr_lib.tasks.arithmetic import EVAL_FAMILIES, RARE_FAMILIES, STRATEGIES
from rlvr_lib.validation import invalid

STEP_CANDIDATES = (100, 200, 300)
"""Step counts at which the dynamics are measured, stated before any measurement."""
KL_COEF_CANDIDATES = (0.05, 0.1, 0.2, 0.4)
"""Betas of the anchored arm, tried in this order (the papers' 0.05, then doubling), stated before measuring any
but the first (at 0.05 the anchor cut the KL by 15%, the target asks for 50%)."""
EXPERIMENT = "testbed_dynamics"
ANCHORED, UNANCHORED = "grpo", "grpo_no_kl"
RARE_FAMILY = RARE_FAMILIES[0]
WIDE_K = 256


@dataclass(frozen=True)
class DynamicsConfig(ConfigBase):
    """What the dynamics calibration trains and measures.

    Attributes:
        base_seeds: Sampling seeds of the base evaluations (the second is the resampling null).
        step_candidates: Step counts evaluated, increasing.
        wide_problems, wide_samples: The pass@256 evaluation of ``rare_mix`` and the in-distribution families.
        kl_problems, kl_samples: Prompts (``hardest_mix`` first) and samples of the KL measurement.
        kl_coefs: The anchored arm's candidate betas, increasing, tried in order.
        policy: Initial policy (``None``: the shipped tiny policy).
    """

    seeds: tuple[int, ...] = (0, 1, 2)
    base_seeds: tuple[int, ...] = (0, 1)
    step_candidates: tuple[int, ...] = STEP_CANDIDATES
    prompts_per_step: int = 8
    group_size: int = 8
    problems_per_family: int = 200
    samples: int = 32
    wide_problems: int = 100
    wide_samples: int = WIDE_K
    kl_problems: int = 200
    kl_samples: int = 8
    kl_coefs: tuple[float, ...] = KL_COEF_CANDIDATES
    policy: str | None = None

    def validate(self) -> None:
        for name in ("prompts_per_step", "group_size", "problems_per_family", "samples", "wide_problems",
                     "wide_samples", "kl_problems", "kl_samples"):
            self.check_positive_int(name, getattr(self, name))
        self.check(len(self.seeds) >= 1 and all(isinstance(s, int) and s >= 0 for s in self.seeds), "seeds",
                   self.seeds, "a non-empty tuple of non-negative ints")
        self.check(len(self.base_seeds) >= 2 and len(set(self.base_seeds)) == len(self.base_seeds)
                   and all(isinstance(s, int) and s >= 0 for s in self.base_seeds), "base_seeds", self.base_seeds,
                   "at least two distinct non-negative ints (the second evaluation is the resampling null)")
        cands = self.step_candidates
        self.check(len(cands) >= 1 and all(isinstance(s, int) and s > 0 for s in cands)
                   and list(cands) == sorted(set(cands)), "step_candidates", cands,
                   "a non-empty, strictly increasing tuple of positive ints")
        self.check(len(self.kl_coefs) >= 1 and all(isinstance(b, (int, float)) and b > 0 for b in self.kl_coefs)
                   and list(self.kl_coefs) == sorted(set(self.kl_coefs)), "kl_coefs", self.kl_coefs,
                   "a non-empty, strictly increasing tuple of positive numbers")
        self.check(self.samples % 8 == 0 and self.wide_samples % 8 == 0, "samples", (self.samples, self.wide_samples),
                   "multiples of 8 (the evaluation's group size)")

    def spec(self, seed: int = 0) -> EvalSpec:
        return EvalSpec(problems_per_family=self.problems_per_family, samples=self.samples, seed=seed)

    def wide_spec(self, seed: int = 0) -> EvalSpec:
        # Clustering is the main evaluation's job: one problem keeps the wide one cheap.
        return EvalSpec(families=EVAL_FAMILIES + RARE_FAMILIES, problems_per_family=self.wide_problems,
                        samples=self.wide_samples, seed=seed, diversity_problems=1, diversity_samples=1)

    def train_config(self, method: str, seed: int, kl_coef: float | None = None):
        """``method``'s preset at this calibration's batch; ``kl_coef`` overrides the preset's beta."""
        from rlvr_lib.study.testbed import calibrated_config

        extra = {} if kl_coef is None else {"kl_coef": float(kl_coef)}
        return calibrated_config(method, steps=max(self.step_candidates), prompts_per_step=self.prompts_per_step,
                             group_size=self.group_size, seed=seed, policy=self.policy, **extra)


# ----------------------------------------------------------------------------- targets (pure)


def _target(value: float | None, bound: str, met: bool, interval: Sequence[float] | None = None, *,
            gates: bool = True, **detail) -> dict:
    out = {"value": None if value is None or not np.isfinite(value) else round(float(value), 4), "bound": bound,
           "met": bool(met)}
    if not gates:
        out["gates"] = False
    if interval is not None:
        out["interval"] = [round(float(interval[0]), 4), round(float(interval[1]), 4)]
    if detail:
        out["detail"] = jsonable(detail)
    return out


def gain_target(rl: np.ndarray, base: np.ndarray, *, at_least: float) -> dict:
    """``mean(rl) - mean(base) >= at_least``, paired interval above 0 (``(S_a, P)``, ``(S_b, P)`` in [0, 1])."""
    ci = paired_difference_ci(rl, base, bounds=(0, 1))
    return _target(ci["mean"], f">= {at_least}, interval above 0", ci["mean"] >= at_least and ci["ci_low"] > 0,
                   (ci["ci_low"], ci["ci_high"]))


def crossover_k(base_curve: Mapping[int, float], rl_curve: Mapping[int, float]) -> int | None:
    """The smallest k at which the base's pass@k is at least the RL policy's (``{k: pass@k}`` each), or ``None``."""
    ks = sorted(base_curve)
    if ks != sorted(rl_curve):
        raise invalid("rl_curve", sorted(rl_curve), f"a curve on the base curve's ks {ks}")
    return next((k for k in ks if base_curve[k] >= rl_curve[k]), None)


def mean_curve(scores_by_k: Mapping[int, np.ndarray]) -> dict[int, float]:
    """``{k: mean}`` of per-seed, per-problem pass@k matrices."""
    return {int(k): float(np.mean(v)) for k, v in scores_by_k.items()}


def relative_fall(before: Sequence[float], after: Sequence[float]) -> dict:
    """``1 - mean(after) / mean(before)`` with a bootstrap interval over the ``after`` seeds."""
    before_mean = float(np.mean(before))
    if before_mean <= 0:
        raise invalid("before", list(before), "values with a positive mean")
    falls = 1.0 - np.asarray(after, dtype=float) / before_mean
    ci = bootstrap_ci(falls)
    return {"mean": ci["mean"], "ci_low": ci["ci_low"], "ci_high": ci["ci_high"]}


def fall_ratio(before: Sequence[float], after: Sequence[float]) -> float:
    """``mean(before) / mean(after)`` (``inf`` when ``after`` is all 0 and ``before`` is not)."""
    b, a = float(np.mean(before)), float(np.mean(after))
    if a == 0:
        return float("inf") if b > 0 else float("nan")
    return b / a


def rescued_lost_vs_null(base_counts: np.ndarray, null_counts: np.ndarray, rl_counts: Sequence[np.ndarray]) -> dict:
    """Problems lost and rescued by the RL runs against one base evaluation, and the resampling null.

    ``lost`` / ``rescued``: means over RL seeds of `rescued_lost_counts` (base -> run); ``null = (rescued + lost) / 2``
    of base -> second base; ``excess_lost = lost - null``.
    """
    per_seed = [rescued_lost_counts(base_counts, c) for c in rl_counts]
    null = rescued_lost_counts(base_counts, null_counts)
    out = {"lost": float(np.mean([r["lost"] for r in per_seed])),
           "rescued": float(np.mean([r["rescued"] for r in per_seed])),
           "null": (null["lost"] + null["rescued"]) / 2.0,
           "per_seed": per_seed}
    out["excess_lost"] = out["lost"] - out["null"]
    return out


def lost_target(stats: Mapping[str, Any], *, ratio: float = 3.0, gates: bool = True) -> dict:
    """``excess_lost >= ratio * rescued`` and ``excess_lost > 0`` (every rescued problem counted: conservative)."""
    excess, rescued = stats["excess_lost"], stats["rescued"]
    value = excess / rescued if rescued > 0 else (float("inf") if excess > 0 else 0.0)
    return _target(min(value, 1e6), f"(lost - null) / rescued >= {ratio}", excess > 0 and excess >= ratio * rescued,
                   gates=gates, lost=stats["lost"], rescued=rescued, null=stats["null"])


def strategy_entropy_of(evaluation: Mapping[str, Any]) -> float:
    check_strategy_measure(evaluation["average"], "strategy_entropy")  # refused without strategy labels
    return float(evaluation["average"]["strategy_entropy"])


def strategy_share_of(evaluation: Mapping[str, Any], strategy: str) -> float:
    check_strategy_measure(evaluation["average"], "strategy_freq")
    return float(evaluation["average"]["strategy_freq"][strategy])


def dynamics_targets(
    base: Sequence[Mapping], base_wide: Sequence[Mapping], rl: Sequence[Mapping], rl_wide: Sequence[Mapping],
    kl_anchored: Sequence[float], kl_unanchored: Sequence[float], *, samples: int, wide_samples: int,
    rare_strategy: str,
) -> dict[str, dict]:
    """Every dynamics target at one step count (module docstring).

    Args:
        base, base_wide: The base's main and wide evaluations, one per sampling seed (>= 2; the second is the null).
        rl, rl_wide: The RL policy's, one per training seed.
        kl_anchored, kl_unanchored: Per-token KL to the base of the two runs, per seed.
    """
    if len(base) < 2 or len(base_wide) < 2 or not rl or len(rl_wide) != len(rl):
        raise invalid("base/rl", (len(base), len(base_wide), len(rl), len(rl_wide)),
                      ">= 2 base evaluations, >= 2 wide base evaluations and one wide evaluation per RL evaluation")
    ind = list(base[0]["average"]["families"])
    targets = {}
    targets["pass_at_1_gain"] = gain_target(per_problem_scores(rl, ind, samples=samples)[0],
                                            per_problem_scores(base, ind, samples=samples)[0], at_least=0.05)
    rare_base = per_problem_scores(base_wide[:1], [RARE_FAMILY], samples=wide_samples, k=wide_samples)[0]
    rare_rl = per_problem_scores(rl_wide, [RARE_FAMILY], samples=wide_samples, k=wide_samples)[0]
    drop = gain_target(rare_base, rare_rl, at_least=0.05)
    targets[f"rare_pass_at_{wide_samples}_drop"] = drop
    wide_ind = [f for f in EVAL_FAMILIES if f in base_wide[0]["families"]]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if k <= wide_samples]
    curve = lambda evs: mean_curve({k: per_problem_scores(evs, wide_ind, samples=wide_samples, k=k)[0]  # noqa: E731
                                    for k in ks})
    base_curve, rl_curve = curve(base_wide[:1]), curve(rl_wide)
    k_cross = crossover_k(base_curve, rl_curve)
    targets["crossover_k"] = _target(k_cross, f"<= {wide_samples}", k_cross is not None and k_cross <= wide_samples,
                                     base_curve=base_curve, rl_curve=rl_curve)
    ent = relative_fall([strategy_entropy_of(e) for e in base], [strategy_entropy_of(e) for e in rl])
    targets["strategy_entropy_fall"] = _target(ent["mean"], ">= 0.3", ent["mean"] >= 0.3,
                                               (ent["ci_low"], ent["ci_high"]))
    share_base = [strategy_share_of(e, rare_strategy) for e in base]
    share_rl = [strategy_share_of(e, rare_strategy) for e in rl]
    ratio = fall_ratio(share_base, share_rl)
    targets["rare_share_fall"] = _target(min(ratio, 1e6), ">= 2 (base share / RL share)", ratio >= 2,
                                         base=float(np.mean(share_base)), rl=float(np.mean(share_rl)))
    counts = lambda ev: np.asarray(ev["families"][RARE_FAMILY]["correct_counts"])  # noqa: E731
    targets["rare_lost_vs_rescued"] = lost_target(
        rescued_lost_vs_null(counts(base_wide[0]), counts(base_wide[1]), [counts(e) for e in rl_wide]))
    targets["rare_lost_vs_rescued_main"] = lost_target(
        rescued_lost_vs_null(counts(base[0]), counts(base[1]), [counts(e) for e in rl]), gates=False)
    kl_ratio = fall_ratio(kl_anchored, kl_unanchored)  # mean(anchored) / mean(unanchored)
    targets["kl_binds"] = _target(kl_ratio, "<= 0.5 (anchored KL / unanchored KL)", kl_ratio <= 0.5,
                                  anchored=float(np.mean(kl_anchored)), unanchored=float(np.mean(kl_unanchored)))
    return targets


def verdict_at(targets: Mapping[str, Mapping]) -> dict[str, dict]:
    """Split one step count's targets into ``{"targets": gating ones, "reported": the others}``."""
    return {"targets": {n: t for n, t in targets.items() if t.get("gates", True)},
            "reported": {n: t for n, t in targets.items() if not t.get("gates", True)}}


def targets_by_steps(report: Mapping[str, Any]) -> dict[str, dict]:
    """Every target (gating and reported) at every step count, at the report's anchor beta ``kl_coef``."""
    return next(t["targets_by_steps"] for t in report["search"] if t["kl_coef"] == report["kl_coef"])


def chosen_steps(per_step: Mapping[int, Mapping[str, Mapping]]) -> int | None:
    """The smallest step count at which every gating target is met, or ``None``."""
    return next((s for s in sorted(per_step)
                 if all(t["met"] for t in per_step[s].values() if t.get("gates", True))), None)


# ----------------------------------------------------------------------------- runs


def _kl_problems(config: DynamicsConfig):
    from rlvr_lib.tasks.arithmetic import family_problems

    per = -(-config.kl_problems // len(EVAL_FAMILIES))
    problems = [p for f in reversed(EVAL_FAMILIES) for p in family_problems(f, per, seed=0)]
    return problems[: config.kl_problems]


def train_with_checkpoint_evals(config: DynamicsConfig, method: str, seed: int, *, root=None,
                                wide: bool = True, kl_coef: float | None = None) -> RunRecord:
    """Train ``method`` (beta ``kl_coef``, default its preset's) to the largest candidate, evaluating at every
    candidate (cached, resumable).

    ``record.extra["checkpoints"][str(S)]`` holds ``eval`` (the main evaluation), ``wide`` (when ``wide``)
    and ``kl`` (`rlvr_lib.eval.reference_kl`) at step ``S``; ``record.final`` is the last ``eval``.
    """
    import torch

    from rlvr_lib.eval.reference_kl import reference_kl
    from rlvr_lib.study.pipeline import versioned_key
    from rlvr_lib.study.testbed import key_train
    from rlvr_lib.policy import load_policy
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams
    from rlvr_lib.trainer import Trainer, nan_to_none

    train_cfg = config.train_config(method, seed, kl_coef)
    key = versioned_key({"train": key_train(train_cfg), "policy_sha": policy_fingerprint(config.policy),
                         "eval": config.spec().to_dict(), "wide": config.wide_spec().to_dict() if wide else None,
                         "kl": {"problems": config.kl_problems, "samples": config.kl_samples},
                         "checkpoints": list(config.step_candidates)}, train_cfg.task)
    ckpt = results_root(root) / ".checkpoints" / EXPERIMENT / f"{method}-{hash_jsonable(key)}-s{seed}"

    def run():
        trainer = Trainer(train_cfg.replace(checkpoint_every=10), checkpoint_dir=ckpt)
        reference, _ = load_policy(config.policy)
        reference.eval()
        kl_problems = _kl_problems(config)  # the same prompts at every step count
        kl_params = SamplingParams(n=config.kl_samples, temperature=1.0, max_new_tokens=train_cfg.max_new_tokens,
                                   seed=seed)
        evals = {}
        for steps in config.step_candidates:
            done = ckpt / f"eval-{steps}.json"
            if done.exists():  # evaluated before an interruption
                evals[str(steps)] = json.loads(done.read_text())
                continue
            while trainer.step_count < steps:
                trainer.step()
            engine = KVCacheEngine(trainer.model, trainer.tokenizer)
            trainer.model.eval()
            with torch.no_grad():
                out = {"eval": evaluate_policy(engine, config.spec()),
                       "kl": reference_kl(engine, reference, kl_problems, kl_params)}
                if wide:
                    out["wide"] = evaluate_policy(engine, config.wide_spec())
            trainer.model.train()
            evals[str(steps)] = jsonable(out)
            write_json_atomic(done, evals[str(steps)])
            # Steps already taken stay in the checkpoint, so an interruption from here resumes at `steps`.
            trainer.save_checkpoint(ckpt / "checkpoint.pt")
        final = evals[str(max(config.step_candidates))]["eval"]
        return nan_to_none(trainer.history), final, {"checkpoints": evals, RESUMED: trainer.resumed()}

    record = cached_run(EXPERIMENT, method, key, seed, run, root=root)
    if isinstance(record, RunRecord):  # not a plan's stand-in (rlvr_lib.study.plan): a run another process
        shutil.rmtree(ckpt, ignore_errors=True)  # is computing keeps its checkpoint while a plan is listed
    return record


def measure_dynamics(config: DynamicsConfig = DynamicsConfig(), *, root=None) -> dict:
    """Run (or read from the cache) the dynamics calibration and check the targets per step count.

    Betas ``config.kl_coefs`` are tried in order until one meets every gating target; ``targets`` / ``reported``
    are at ``chosen_steps`` (else the largest candidate); ``search`` lists every beta tried.
    """
    from rlvr_lib.study.pipeline import evaluate_base
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.tasks.arithmetic import TESTBED_VERSION

    base_runs = [evaluate_base(EXPERIMENT, config.spec(s), config.policy, root=root) for s in config.base_seeds]
    wide_runs = [evaluate_base(EXPERIMENT, config.wide_spec(s), config.policy, root=root, name="base-wide")
                 for s in config.base_seeds]
    base, base_wide = [r.final for r in base_runs], [r.final for r in wide_runs]
    unanchored = [train_with_checkpoint_evals(config, UNANCHORED, s, root=root, wide=False) for s in config.seeds]
    runs = [*base_runs, *wide_runs, *unanchored]
    search = []
    for beta in config.kl_coefs:
        anchored = [train_with_checkpoint_evals(config, ANCHORED, s, root=root, kl_coef=beta) for s in config.seeds]
        runs += anchored
        per_step, summary = _targets_per_step(config, base, base_wide, anchored, unanchored)
        chosen = chosen_steps(per_step)
        search.append({"kl_coef": beta, "chosen_steps": chosen,
                       "targets_by_steps": {str(s): t for s, t in per_step.items()}})
        if chosen is not None:
            break
    rare = lambda evs: per_problem_scores(evs, [RARE_FAMILY], samples=config.wide_samples,  # noqa: E731
                                          k=config.wide_samples)
    base_rare, uids = rare(base_wide[:1])
    rare_per_problem = {"uids": uids, "base": base_rare.mean(0).round(4).tolist(),
                        ANCHORED: {str(s): rare([r.extra["checkpoints"][str(s)]["wide"] for r in anchored])[0]
                                   .mean(0).round(4).tolist() for s in config.step_candidates}}
    curves = {name: {key: [[row.get(key) for row in r.history] for r in records]
                     for key in ("accuracy", "entropy", *(f"strategy_share_{s}" for s in STRATEGIES))}
              for name, records in ((ANCHORED, anchored), (UNANCHORED, unanchored))}
    return {
        "testbed_version": TESTBED_VERSION,
        "policy_sha": policy_fingerprint(config.policy),
        "config": config.to_dict(),
        "step_candidates": list(config.step_candidates),
        "kl_coef": beta,
        "chosen_steps": chosen,
        "all_targets_met": chosen is not None,
        **verdict_at(per_step[chosen if chosen is not None else max(per_step)]),
        "search": search,
        # One model in a calibration of record: the same seed trains another trajectory on another one.
        "processors": sorted({(r.extra or {}).get("machine", {}).get("cpu_model", "?") for r in runs}),
        "summary": {str(s): v for s, v in summary.items()},
        "training_curves": curves,
        f"{RARE_FAMILY}_pass_at_{config.wide_samples}_per_problem": rare_per_problem,
    }


def _targets_per_step(config: DynamicsConfig, base, base_wide, anchored, unanchored) -> tuple[dict, dict]:
    """`dynamics_targets` and a pass@1 / strategy-share summary at every step candidate."""
    from rlvr_lib.study.calibration import RARE

    per_step, summary = {}, {}
    for steps in config.step_candidates:
        at = lambda records, part: [r.extra["checkpoints"][str(steps)][part] for r in records]  # noqa: E731
        per_step[steps] = dynamics_targets(
            base, base_wide, at(anchored, "eval"), at(anchored, "wide"),
            [k["kl_per_token"] for k in at(anchored, "kl")], [k["kl_per_token"] for k in at(unanchored, "kl")],
            samples=config.samples, wide_samples=config.wide_samples, rare_strategy=RARE)
        summary[steps] = {
            "pass_at_1": {"base": float(np.mean([e["average"]["pass_at_k"]["1"] for e in base])),
                          ANCHORED: float(np.mean([e["average"]["pass_at_k"]["1"] for e in at(anchored, "eval")])),
                          UNANCHORED: float(np.mean([e["average"]["pass_at_k"]["1"]
                                                     for e in at(unanchored, "eval")]))},
            "strategy_freq": {name: {s: float(np.mean([strategy_share_of(e, s) for e in evs])) for s in STRATEGIES}
                              for name, evs in (("base", base), (ANCHORED, at(anchored, "eval")),
                                                (UNANCHORED, at(unanchored, "eval")))},
        }
    return per_step, summary


def format_dynamics(report: Mapping[str, Any]) -> str:
    """The verdict at the chosen beta and step count, then every target tried (one line per step count and target)."""
    where = (f"{report['chosen_steps']} steps" if report["chosen_steps"] is not None
             else f"{max(report['step_candidates'])} steps, the largest candidate")
    met = sum(t["met"] for t in report["targets"].values())
    lines = [f"dynamics of policy {report['policy_sha']} ({report['testbed_version']}): "
             f"anchor beta {report['kl_coef']}, chosen steps {report['chosen_steps']}"
             + (f"; runs made on {', '.join(report['processors'])}" if report.get("processors") else ""),
             f"  at beta {report['kl_coef']} and {where}: {met} of {len(report['targets'])} gating targets met"
             + "".join(f"; {name} = {t['value']} (reported)" for name, t in report["reported"].items()),
             "search:"]
    for tried in report["search"][:-1]:
        lines.append(f"  beta {tried['kl_coef']}: chosen steps {tried['chosen_steps']}; not met: " + ", ".join(
            sorted({f"{name}@{steps}" for steps, ts in tried["targets_by_steps"].items() for name, t in ts.items()
                    if not t["met"] and t.get("gates", True)})))
    for steps, targets in targets_by_steps(report).items():
        for name, t in targets.items():
            ci = f" [{t['interval'][0]}, {t['interval'][1]}]" if "interval" in t else ""
            verdict = ("met" if t["met"] else "NOT MET") + ("" if t.get("gates", True) else ", reported")
            lines.append(f"  beta {report['kl_coef']} {steps:>4} [{verdict}] {name} = {t['value']}{ci} "
                         f"(target {t['bound']})")
    return "\n".join(lines)


def write_dynamics(report: Mapping[str, Any], path: str | Path) -> Path:
    path = Path(path)
    write_json_atomic(path, jsonable(report))
    return path


def full_profile_steps(path: str | Path | None = None, *, policy: str | None = None) -> int:
    """The full profile's GRPO step count: ``chosen_steps`` of ``results/testbed/dynamics.json`` (or ``path``).

    Raises:
        ValueError: when the file is missing, measured on another policy (content hash) or testbed version, or no
            candidate met every target.
    """
    from rlvr_lib.policy.load import policy_fingerprint

    path = Path(path) if path is not None else results_root() / "testbed" / "dynamics.json"
    if not path.is_file():
        raise invalid("dynamics report", str(path), "an existing file: run `python -m rlvr_lib.study calibrate --dynamics`")
    report = json.loads(path.read_text())
    sha = policy_fingerprint(policy)
    if report.get("policy_sha") != sha:
        raise invalid("dynamics report's policy_sha", report.get("policy_sha"),
                      f"{sha}, the policy's own (the report is of another checkpoint: run the calibration again)")
    from rlvr_lib.tasks.arithmetic import TESTBED_VERSION

    if report.get("testbed_version") != TESTBED_VERSION:
        raise invalid("dynamics report's testbed_version", report.get("testbed_version"),
                      f"{TESTBED_VERSION}, the testbed's own (the report is of another design: run the calibration again)")
    if report.get("chosen_steps") is None:
        raise invalid("dynamics report's chosen_steps", None,
                      f"one of {report.get('step_candidates')}: not every dynamics target holds at any candidate, "
                      "so the full profile has no step count (see results/testbed/dynamics.json)")
    return int(report["chosen_steps"])
