"""The testbed's two regimes measured: the retention premise check, the discovery design and its gate.

* Retention (``"arith"``): :func:`rare_reward_share` of hinted ``round`` samples on the RL pool, on a fresh
  sampling seed. At most ``RETENTION_BOUND`` (0.5%) means the rare strategy earns (almost) no reward in training,
  so the discovery premise is absent there (:func:`retention_premise`).
* Discovery (``"arith_discovery"``, `rlvr_lib.tasks.discovery`): :func:`measure_regimes` profiles the candidates
  on fresh seeds, :func:`unhinted_share` gives the base policy's rare-strategy share and the share of groups of
  ``G`` with no rare sample, :func:`choose_design` applies the pre-registered designs in order.
* The gate (:func:`discovery_gate`), pre-registered: an oracle-exploration arm (GRPO with 2 of 8 rollouts of each
  target forced onto ``round``, credited to the hint-free prompt; `rlvr_lib.methods.oracle`) must beat GRPO on the
  held-out targets' pass@1 by at least ``GATE_MIN_GAIN`` with its seeds x problems interval above 0; GRPO's own
  gain over the base there is at most ``GATE_GRPO_SHARE`` of the oracle's; hinted ``round`` earns reward on fresh
  samples of the training targets (pooled success at least ``GATE_MIN_FRESH_REWARD``). Only then do methods run.

``python -m rlvr_lib.study.regimes`` measures both regimes on the shipped policy (designs d1, d2), ``--design d3`` the
discovery regime on design d3's policy; each writes the discovery profile (`rlvr_lib.tasks.discovery.DISCOVERY_FILE`)
when a design holds and ``results/testbed/regimes.json``. ``--gate`` trains the gate's arms (the calls notebook 08
makes, through the run cache) and writes the gate's outcome to ``results/testbed/discovery_gate.json``
(:data:`GATE_FILE`); ``--gate --arms NAME ...`` trains some arms only (the
methods once the gate has passed). Notebook 08 then reads every run from the cache.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_lib.study.regime_premises import GATE_FILE, PREMISES, REGIMES_FILE, load_regimes, premise_status
from rlvr_lib.tasks import discovery
from rlvr_lib.validation import check, check_range, invalid

__all__ = ["ARM_PROTOCOL", "BUDGET_HOURS", "EXPERIMENT", "GATE_ARMS", "GATE_GRPO_SHARE", "GATE_MIN_FRESH_REWARD", "GATE_MIN_GAIN",
           "GATE_FILE", "METHOD_ARMS", "PREMISES", "REGIMES_FILE", "RETENTION_BOUND", "RETENTION_SAMPLES", "RETENTION_SEED",
           "arm_extra_specs", "arm_overrides", "choose_design", "design_summary", "designs_table", "designs_tried", "discovery_arms", "discovery_gate",
           "discovery_specs", "gate_outcome", "gate_runs", "gate_table", "headroom_fraction", "measure_regimes",
           "no_rare_group_share", "premise_status", "rare_reward_share", "regime_of", "retention_line",
           "retention_premise", "round_share", "unhinted_share"]

RETENTION_BOUND = 0.005
RETENTION_SAMPLES = 64
RETENTION_SEED = 2029
FRESH_REWARD_SEED = 2028
GATE_MIN_GAIN = 0.05
GATE_GRPO_SHARE = 0.5
GATE_MIN_FRESH_REWARD = 0.05
GROUP_SIZE = 8


def regime_of(record: Any) -> str | None:
    """The regime a run record was measured on: its task's (``"arith"``: retention, ``"arith_discovery"``:
    discovery; a task without one, e.g. a real benchmark: None). The task is in every run key (``train.task`` or
    ``eval.task``, absent while it is the default ``"arith"``) beside its version, which names the discovery design."""
    from rlvr_lib.tasks import get_task
    from rlvr_lib.tasks.registry import DEFAULT_TASK

    config = record.config if hasattr(record, "config") else record["config"]
    task = (config.get("train") or {}).get("task") or (config.get("eval") or {}).get("task") or DEFAULT_TASK
    return getattr(get_task(task), "regime", None)


def rare_reward_share(correct: Any) -> dict[str, Any]:
    """Reward the rare strategy earns on hinted samples: ``correct`` is ``(P, n)`` bool (a hinted sample counts
    when it follows the hint and is correct).

    Returns:
        ``{"share", "correct", "samples", "problems", "problems_with_success"}``.
    """
    arr = np.asarray(correct)
    check(arr.ndim == 2 and arr.size > 0 and arr.dtype == bool, "correct", f"array {arr.shape} {arr.dtype}",
          "a non-empty (problems, samples) bool array")
    return {"share": float(arr.mean()), "correct": int(arr.sum()), "samples": int(arr.size),
            "problems": int(arr.shape[0]), "problems_with_success": int(arr.any(axis=1).sum())}


def retention_premise(measured: Mapping[str, Any], bound: float = RETENTION_BOUND) -> dict[str, Any]:
    """The discovery premise on the retention pool: absent when the rare strategy's hinted reward share on fresh
    samples (:func:`rare_reward_share`) is at most ``bound``."""
    share = check_range("share", measured.get("share"), 0, 1)
    bound = check_range("bound", bound, 0, 1)
    return {**measured, "bound": bound, "discovery_premise": "absent" if share <= bound else "present"}


def no_rare_group_share(counts: Any, samples: int, group_size: int = GROUP_SIZE) -> float:
    """Expected share of groups of ``group_size`` holding no rare sample, drawn without replacement from each
    problem's ``samples`` (``counts``: rare samples per problem; exact, hypergeometric), averaged over problems."""
    c = np.asarray(counts, dtype=int)
    check(c.ndim == 1 and c.size > 0 and (c >= 0).all() and (c <= samples).all(), "counts", c.tolist()[:8],
          f"a non-empty 1-D array of counts in 0..samples={samples}")
    check(isinstance(group_size, int) and 1 <= group_size <= samples, "group_size", group_size,
          f"an int in 1..samples={samples}")
    return float(np.mean([math.comb(samples - k, group_size) / math.comb(samples, group_size) for k in c]))


def unhinted_share(labels: Any, rare: str = discovery.RARE, group_size: int = GROUP_SIZE) -> dict[str, Any]:
    """The base policy's unhinted rare-strategy share on some problems: ``labels`` is ``(P, n)`` strategy labels
    (``None`` for none). Returns the pooled share, the per-problem counts and :func:`no_rare_group_share`."""
    arr = np.asarray(labels, dtype=object)
    check(arr.ndim == 2 and arr.size > 0, "labels", f"shape {arr.shape}", "a non-empty (problems, samples) array")
    counts = (arr == rare).sum(axis=1).astype(int)
    return {"share": float(counts.sum() / arr.size), "counts": counts.tolist(), "samples": int(arr.shape[1]),
            "no_rare_group_share": no_rare_group_share(counts, arr.shape[1], group_size)}


def choose_design(per_first_factor: Mapping[int, Mapping[str, Any]], bound: float = discovery.UNHINTED_BOUND,
                  designs: Sequence[str] = ("d1", "d2")) -> dict[str, Any]:
    """Apply the pre-registered ``designs`` (`rlvr_lib.tasks.discovery.DESIGNS`), in order, to measured first factors.

    ``per_first_factor``: per first factor, ``{"share": unhinted rare share on its targets, "rare": rare samples,
    "samples": samples, "train_targets": n, "heldout_targets": n}``. d1 (the shipped policy) and d3 (the policy
    pretrained for the regime) take every first factor and hold when the pooled share is at most ``bound``; d2 takes
    those whose own share is at most ``bound`` and holds with at least 2 of them, 8 training and 30 held-out targets.
    ``("d1", "d2")`` on the shipped policy, ``("d3",)`` on d3's.

    Returns:
        ``{"design": the first that holds or None, "first_factors": [...], "share": its pooled share (None when none
        holds), "tried": [...]}``.
    """
    check(per_first_factor, "per_first_factor", per_first_factor, "a non-empty mapping of measured first factors")
    check(designs and all(d in discovery.DESIGNS for d in designs), "designs", designs,
          f"a non-empty sequence of {sorted(discovery.DESIGNS)}")

    def pooled(factors):
        rare = sum(per_first_factor[a]["rare"] for a in factors)
        n = sum(per_first_factor[a]["samples"] for a in factors)
        return rare / n if n else None

    every = sorted(per_first_factor)
    tried = []
    for design in designs:
        if design == "d2":
            factors = [a for a in every if per_first_factor[a]["samples"] and
                       per_first_factor[a]["rare"] / per_first_factor[a]["samples"] <= bound]
            n_train = sum(per_first_factor[a]["train_targets"] for a in factors)
            n_held = sum(per_first_factor[a]["heldout_targets"] for a in factors)
            row = {"design": design, "first_factors": factors, "share": pooled(factors), "train_targets": n_train,
                   "heldout_targets": n_held, "holds": len(factors) >= 2 and n_train >= 8 and n_held >= 30}
        else:
            share = pooled(every) or 0.0
            row = {"design": design, "first_factors": every, "share": share, "holds": share <= bound}
        tried.append(row)
        if row["holds"]:
            return {"design": design, "first_factors": row["first_factors"], "share": row["share"], "tried": tried}
    return {"design": None, "first_factors": [], "share": None, "tried": tried}


def _interval(name: str, agg: Any) -> tuple[float, float, float]:
    if not isinstance(agg, Mapping) or any(k not in agg for k in ("mean", "ci_low", "ci_high")):
        raise invalid(name, agg, "an interval dict with 'mean', 'ci_low' and 'ci_high'")
    return float(agg["mean"]), float(agg["ci_low"]), float(agg["ci_high"])


def discovery_gate(oracle_minus_grpo: Mapping[str, Any], oracle_gain: float, grpo_gain: float,
                   fresh_reward_share: float) -> dict[str, Any]:
    """The pre-registered gate of the discovery regime (module docstring).

    Args:
        oracle_minus_grpo: Interval of the oracle arm's minus GRPO's pass@1 on the held-out targets (seeds x
            problems, `rlvr_lib.study.stats.paired_difference_ci`).
        oracle_gain, grpo_gain: Each arm's mean pass@1 minus the base policy's there.
        fresh_reward_share: Hinted rare-strategy success on fresh samples of the training targets.

    Returns:
        ``{"conditions": {name: {"value", "rule", "holds"}}, "passed": bool}``.
    """
    mean, lo, _ = _interval("oracle_minus_grpo", oracle_minus_grpo)
    oracle_gain = check_range("oracle_gain", oracle_gain, -1, 1)
    grpo_gain = check_range("grpo_gain", grpo_gain, -1, 1)
    fresh = check_range("fresh_reward_share", fresh_reward_share, 0, 1)
    conditions = {
        "oracle_beats_grpo": {"value": mean, "ci_low": lo,
                              "rule": f"oracle - GRPO >= {GATE_MIN_GAIN} with the interval above 0",
                              "holds": mean >= GATE_MIN_GAIN and lo > 0},
        "grpo_misses_most": {"value": grpo_gain, "oracle_gain": oracle_gain,
                             "rule": f"GRPO's gain over the base <= {GATE_GRPO_SHARE} x the oracle's",
                             "holds": oracle_gain > 0 and grpo_gain <= GATE_GRPO_SHARE * oracle_gain},
        "rare_earns_reward": {"value": fresh, "rule": f"hinted round success on fresh samples of the training "
                                                     f"targets >= {GATE_MIN_FRESH_REWARD}",
                              "holds": fresh >= GATE_MIN_FRESH_REWARD},
    }
    return {"conditions": conditions, "passed": all(c["holds"] for c in conditions.values())}


# --------------------------------------------------------------------------- measuring on a policy


def _keys(ops) -> list[str]:
    return [f"{a}*{b}" for a, b in ops]


def measure_regimes(engine, *, policy_sha: str, policy: str | None = None, designs: Sequence[str] = ("d1", "d2"),
                    max_new_tokens: int = 48) -> tuple[dict, dict | None]:
    """Both regimes on the policy behind ``engine`` (``policy``: its name, None for the shipped one): (``regimes.json``'s
    content, the discovery profile or None when none of ``designs`` holds its bound).

    ``designs``: as :func:`choose_design`."""
    from rlvr_lib.eval.sampling import SamplingParams, sample_and_score
    from rlvr_lib.study.calibration import measure_strategy_profile
    from rlvr_lib.tasks import arithmetic

    t0 = time.perf_counter()
    rare = discovery.RARE

    def hinted_correct(ops, n, seed):
        problems = [arithmetic.make_problem(a, b) for a, b in ops]
        scored = sample_and_score(engine, problems, SamplingParams(n=n, temperature=1.0, max_new_tokens=max_new_tokens,
                                                                   seed=seed), hints=rare)
        return (scored.strategies == rare) & scored.correct

    retention_ops = [ab for d in arithmetic.DIFFICULTIES for ab in arithmetic.problem_pool("train", d)]
    retention = None  # the retention regime is the shipped policy's
    if policy is None:
        retention = retention_premise(rare_reward_share(hinted_correct(retention_ops, RETENTION_SAMPLES,
                                                                       RETENTION_SEED)))
        retention.update(seed=RETENTION_SEED, samples_per_problem=RETENTION_SAMPLES)

    split_of = {ab: split for split in ("train", "eval") for ab in discovery.candidates(split)}
    profile = measure_strategy_profile(engine, sorted(split_of), samples=discovery.PROFILE_SAMPLES,
                                       seed=discovery.PROFILE_SEED, max_new_tokens=max_new_tokens)
    targets = [tuple(int(x) for x in k.split("*")) for k in discovery.select_targets(profile["counts"])]
    problems = [arithmetic.make_problem(a, b) for a, b in targets]
    scored = sample_and_score(engine, problems, SamplingParams(n=discovery.UNHINTED_SAMPLES, temperature=1.0,
                                                               max_new_tokens=max_new_tokens,
                                                               seed=discovery.UNHINTED_SEED))
    labels = np.asarray(scored.strategies, dtype=object)
    per_factor: dict[int, dict] = {}
    for i, (a, b) in enumerate(targets):
        row = per_factor.setdefault(a, {"rare": 0, "samples": 0, "train_targets": 0, "heldout_targets": 0})
        row["rare"] += int((labels[i] == rare).sum())
        row["samples"] += labels.shape[1]
        row["train_targets" if split_of[(a, b)] == "train" else "heldout_targets"] += 1
    for row in per_factor.values():
        row["share"] = row["rare"] / row["samples"]
    chosen = choose_design(per_factor, designs=designs)
    summary = {"design": chosen["design"], "first_factors": chosen["first_factors"], "tried": chosen["tried"],
               "per_first_factor": {str(a): row for a, row in sorted(per_factor.items())},
               "candidates": {"train": sum(s == "train" for s in split_of.values()),
                              "eval": sum(s == "eval" for s in split_of.values())},
               "targets": {"train": sum(split_of[t] == "train" for t in targets),
                           "eval": sum(split_of[t] == "eval" for t in targets)}}
    disc = None
    if chosen["design"] is not None:
        keep = set(chosen["first_factors"])
        train_t = [t for t in targets if split_of[t] == "train" and t[0] in keep]
        held_t = [t for t in targets if split_of[t] == "eval" and t[0] in keep]
        kept, others = discovery.discovery_pool(train_t, retention_ops)
        idx = [targets.index(t) for t in kept]
        unh = unhinted_share(labels[idx])
        fresh = rare_reward_share(hinted_correct(kept, discovery.PROFILE_SAMPLES, FRESH_REWARD_SEED))
        summary.update(train_targets_unhinted=unh, fresh_reward=fresh, pool_size=len(kept) + len(others),
                       visits_per_problem_200x8=1600 / (len(kept) + len(others)))
        disc = {"policy": policy, "policy_sha": policy_sha, "testbed_version": arithmetic.TESTBED_VERSION,
                "design": chosen["design"], "first_factors": chosen["first_factors"],
                "pool": {"targets": _keys(kept), "non_targets": _keys(others)}, "heldout_targets": _keys(held_t),
                "profile": {"seed": profile["seed"], "samples": profile["samples"], "counts": profile["counts"]}}
    report = {"policy": policy, "policy_sha": policy_sha, "testbed_version": arithmetic.TESTBED_VERSION,
              "seconds": round(time.perf_counter() - t0, 1), "retention": retention, "discovery": summary}
    return report, disc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr_lib.study.regimes", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REGIMES_FILE), help="the regimes report (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--design", choices=("shipped", "d3"), default="shipped",
                        help="shipped: designs d1, d2 on the shipped policy; d3: the policy pretrained for it")
    parser.add_argument("--gate", action="store_true",
                        help="train (or read from the run cache) the gate's arms on the measured design and write "
                             "the gate's outcome into --out")
    parser.add_argument("--arms", nargs="+", choices=(*GATE_ARMS, *METHOD_ARMS), default=None,
                        help="with --gate: train only these arms, as notebook 08 calls them (another process may "
                             "train the others), write nothing; the methods only once the gate has passed")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="with --gate: default the main seeds")
    args = parser.parse_args(argv)
    if args.gate:
        return _gate(args)
    from rlvr_lib.files import write_json_atomic
    from rlvr_lib.policy import load_policy
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.rollout import KVCacheEngine

    policy = discovery.D3_POLICY if args.design == "d3" else None
    model, tokenizer = load_policy(policy)
    engine = KVCacheEngine(model, tokenizer, batch_size=args.batch_size, progress=True)
    report, disc = measure_regimes(engine, policy_sha=policy_fingerprint(policy), policy=policy,
                                   designs=("d3",) if args.design == "d3" else ("d1", "d2"))
    out = Path(args.out)
    if out.exists():  # earlier designs' measurements are kept beside this one
        import json

        earlier = json.loads(out.read_text())
        report["discovery"]["earlier"] = [*earlier["discovery"].pop("earlier", []), earlier["discovery"]]
        if policy is not None:  # the retention regime is the shipped policy's
            report["retention"] = earlier["retention"]
    if disc is not None:
        write_json_atomic(discovery.DISCOVERY_FILE, disc)
    write_json_atomic(out, report)
    d = report["discovery"]
    print(f"retention: hinted round earns {report['retention']['share']:.3%} of fresh samples "  # noqa
          f"(discovery premise {report['retention']['discovery_premise']}); discovery design: {d['design']} "
          f"({report['seconds']} s)")
    return 0


def _gate(args) -> int:
    import json

    from rlvr_lib.files import write_json_atomic
    from rlvr_lib.study.dynamics import full_profile_steps
    from rlvr_lib.study.profiles import MAIN_SEEDS

    arms = discovery_arms(full_profile_steps())
    seeds = args.seeds or list(MAIN_SEEDS)
    out = Path(args.out)
    regimes = load_regimes(out.parent)
    if args.arms:
        if set(args.arms) & set(METHOD_ARMS):
            gate = regimes["discovery"]["gate"]
            check(gate is not None and gate["passed"], "--arms", args.arms,
                  "the gate's arms only: the methods run once the gate has passed (python -m rlvr_lib.study.regimes "
                  "--gate writes its outcome)")
        gate_runs(arms, seeds, args.arms)
        return 0
    outcome = gate_outcome(gate_runs(arms, seeds), regimes["discovery"]["fresh_reward"]["share"])
    write_json_atomic(out.with_name(GATE_FILE.name), {"gate": outcome, "seeds": seeds, "steps": arms.steps,
                                                      "design": discovery.load_discovery()["design"]})
    report = json.loads(out.read_text())
    if "gate" in report["discovery"]:  # written there before the gate had a file of its own
        del report["discovery"]["gate"]
        write_json_atomic(out, report)
    print(json.dumps({k: v for k, v in outcome.items() if k != "arms"}, indent=1))
    return 0


# --------------------------------------------------------------------------- the gate's and the methods' runs

EXPERIMENT = "discovery"
HELDOUT_SPEC_PROBLEMS = 200
SAMPLES = 32
TRAIN_TARGETS = "train_targets"
"""The label of the training targets' evaluation in a record's extra evaluations."""
GATE_ARMS = ("grpo", "oracle_explore")
METHOD_ARMS = ("nudgerl", "b3po", "m3po", "c3po", "sage", "vigor")
"""Notebook 08's methods, each at its preset; they run only once the gate passes."""
ARM_PROTOCOL = {"nudgerl": "nudgerl", "b3po": "3po", "m3po": "3po", "c3po": "3po", "sage": "sage", "vigor": "vigor"}
"""Each method arm's paper's evaluation protocol (`rlvr_lib.study.protocols`): its claim rows read
the held-out targets' pass@1 under it, against GRPO under the same protocol."""
BASE_SEEDS = (0, 1)
"""Two sampling seeds of the base policy: the resampling null."""
BUDGET_HOURS = 2.0
"""Notebook 08's budget in elapsed hours on two workers, stated before its first run: 8 arms x 5 seeds at the full
profile's 200 steps (a tiny-policy run took 270-380 s with notebooks 01-07's larger evaluations; this one evaluates
only the targets) and 4 base evaluations, about 40 x 150-300 s."""


def discovery_specs(task_name: str = "arith_discovery", problems: int = HELDOUT_SPEC_PROBLEMS,
                    samples: int = SAMPLES):
    """(the main evaluation: held-out targets, ``{TRAIN_TARGETS: the training targets}``), every problem up to
    ``problems``, ``samples`` each at temperature 1 (clustering skipped: the strategy labels are the measure)."""
    from rlvr_lib.eval.policy_eval import EvalSpec
    from rlvr_lib.tasks import get_task

    task = get_task(task_name)
    held = min(problems, task.family_capacity(discovery.HELDOUT_FAMILY))
    main = EvalSpec(task=task_name, families=(discovery.HELDOUT_FAMILY,), problems_per_family=held, samples=samples,
                    diversity_problems=1, diversity_samples=1)
    train = main.replace(families=(discovery.TARGET_FAMILY,),
                         problems_per_family=min(problems, task.family_capacity(discovery.TARGET_FAMILY)))
    return main, {TRAIN_TARGETS: train}


def discovery_arms(steps: int, prompts_per_step: int = 8, root=None, experiment: str = f"{EXPERIMENT}_full",
                   **spec_args):
    """`rlvr_lib.study.arms.Arms` of the discovery regime: its evaluation, with every arm on ``task`` and
    ``policy`` of the measured design (pass them to ``train``: :func:`arm_overrides`)."""
    from rlvr_lib.study.arms import Arms

    spec, _ = discovery_specs(**spec_args)
    return Arms(experiment, root, spec, steps=steps, prompts_per_step=prompts_per_step)


def arm_overrides() -> dict[str, Any]:
    """What every discovery arm sets beside its method's preset: the task and the design's policy."""
    return {"task": "arith_discovery", "policy": discovery.load_discovery().get("policy")}


def headroom_fraction(method: Any, grpo: Any, oracle: Any, *, n_resamples: int = 10_000, seed: int = 0,
                      confidence: float = 0.95) -> dict[str, Any]:
    """The share of the oracle's headroom a method captures: ``(mean M - mean G) / (mean O - mean G)``.

    ``method``, ``grpo``, ``oracle``: ``(S, P)`` per-seed, per-problem scores on the same problems. Each resample
    draws each arm's seeds with replacement, independently, and one draw of problems shared by the three (as
    `rlvr_lib.study.stats.paired_difference_ci`); the interval is the percentile interval of the ratio over the
    resamples whose denominator is positive (``"dropped"`` counts the others).
    """
    arrs = [np.asarray(x, dtype=float) for x in (method, grpo, oracle)]
    for name, a in zip(("method", "grpo", "oracle"), arrs):
        check(a.ndim == 2 and a.size > 0 and np.isfinite(a).all(), name, f"shape {a.shape}",
              "a finite (seeds, problems) array")
    check(len({a.shape[1] for a in arrs}) == 1, "problems", [a.shape[1] for a in arrs], "the same in all three")
    m, g, o = arrs
    denominator = o.mean() - g.mean()
    point = (m.mean() - g.mean()) / denominator if denominator > 0 else float("nan")
    rng = np.random.default_rng(seed)
    P = m.shape[1]
    ratios = []
    for _ in range(n_resamples):
        cols = rng.integers(P, size=P)
        means = [a[rng.integers(a.shape[0], size=a.shape[0])][:, cols].mean() for a in arrs]
        den = means[2] - means[1]
        if den > 0:
            ratios.append((means[0] - means[1]) / den)
    alpha = (1 - confidence) / 2
    lo, hi = (np.quantile(ratios, [alpha, 1 - alpha]).tolist() if ratios else (float("nan"), float("nan")))
    return {"mean": float(point), "ci_low": float(lo), "ci_high": float(hi), "n": int(m.shape[0]),
            "method": "headroom ratio, bootstrap over seeds x problems", "dropped": n_resamples - len(ratios)}


def arm_extra_specs(name: str, main, train_targets, profile: str = "full") -> dict:
    """A discovery arm's extra evaluations: the training targets (``train_targets``, :data:`TRAIN_TARGETS`) and the
    held-out targets (``main``, the arms' evaluation) under each protocol its rows are read under
    (`rlvr_lib.study.protocols.ProtocolEvaluation` at ``profile``): a method arm's own paper's (:data:`ARM_PROTOCOL`;
    SAGE's is the main evaluation, so it adds none), a gate arm's (GRPO, the oracle) every method's, so that each
    method's row compares it with GRPO under the same protocol."""
    from rlvr_lib.study.protocols import ProtocolEvaluation

    check(name in (*GATE_ARMS, *METHOD_ARMS), "arm", name, f"one of {[*GATE_ARMS, *METHOD_ARMS]}")
    protocols = sorted(set(ARM_PROTOCOL.values())) if name in GATE_ARMS else [ARM_PROTOCOL[name]]
    out = {TRAIN_TARGETS: train_targets}
    for protocol in protocols:
        out.update(ProtocolEvaluation.of(protocol, main, profile).extra_specs())
    return out


def gate_runs(arms, seeds: Sequence[int], names: Sequence[str] = GATE_ARMS, profile: str = "full") -> dict[str, list]:
    """The gate's arms (``names``) on ``seeds`` and the base policy on :data:`BASE_SEEDS`, through the run cache;
    ``"base"`` and ``"base-train-targets"`` hold the base policy's two evaluations. Each arm carries
    :func:`arm_extra_specs` (the protocol evaluations at ``profile``)."""
    overrides = arm_overrides()
    _, extra = discovery_specs()
    runs = {name: arms.train(name, seeds, extra_specs=arm_extra_specs(name, arms.spec, extra[TRAIN_TARGETS], profile),
                             **overrides) for name in names}
    runs["base"] = arms.base(BASE_SEEDS, policy=overrides["policy"])
    runs["base-train-targets"] = arms.base(BASE_SEEDS, name="base-train-targets", spec=extra[TRAIN_TARGETS],
                                           policy=overrides["policy"])
    return runs


def round_share(records, family: str = discovery.HELDOUT_FAMILY) -> float:
    """The rare strategy's share of the samples of ``family``, averaged over ``records`` (one evaluation per seed)."""
    return float(np.mean([r.final["families"][family]["strategy_freq"][discovery.RARE] for r in records]))


def gate_outcome(runs: Mapping[str, list], fresh_reward_share: float) -> dict[str, Any]:
    """:func:`discovery_gate` read from :func:`gate_runs`' records (held-out targets' pass@1), with each arm's
    pass@1 and ``round`` share on both target families beside it."""
    from rlvr_lib.study.arms import Paired
    from rlvr_lib.study.summaries import extra_evaluation

    held = Paired((discovery.HELDOUT_FAMILY,), runs["grpo"][0].config["eval"]["samples"])
    oracle, grpo, base = (held.scores(runs[k]) for k in ("oracle_explore", "grpo", "base"))
    gate = discovery_gate(held.versus(runs["oracle_explore"], runs["grpo"]), float(oracle.mean() - base.mean()),
                          float(grpo.mean() - base.mean()), fresh_reward_share)

    share = round_share
    arms = {}
    for name in ("base", "grpo", "oracle_explore"):
        train = (runs["base-train-targets"] if name == "base" else extra_evaluation(runs[name], TRAIN_TARGETS))
        arms[name] = {"heldout_pass1": float(held.scores(runs[name]).mean()),
                      "heldout_round_share": share(runs[name], discovery.HELDOUT_FAMILY),
                      "train_pass1": float(np.mean([r.final["families"][discovery.TARGET_FAMILY]["pass_at_k"]["1"]
                                                    for r in train])),
                      "train_round_share": share(train, discovery.TARGET_FAMILY), "seeds": len(runs[name])}
    return {**gate, "arms": arms}


# --------------------------------------------------------------------------- what notebooks 00 and 08 show


def retention_line(report: Mapping[str, Any]) -> str:
    """Markdown: the retention regime's premise check of ``report`` (``regimes.json``)."""
    r = report["retention"]
    return (f"**Retention regime** (the shipped policy's RL pool): hinted `round` earns reward on {r['share']:.2%} of "
            f"fresh samples ({r['correct']} of {r['samples']}, on {r['problems_with_success']} of {r['problems']} "
            f"problems; bound {r['bound']:.1%}): the discovery premise is **{r['discovery_premise']}** there.")


def designs_table(report: Mapping[str, Any]):
    """Each design tried, in order, with its first factors and measured unhinted ``round`` share (a DataFrame)."""
    import pandas as pd

    return pd.DataFrame([{"design": t["design"], "what": discovery.DESIGNS[t["design"]],
                          "first factors": t["first_factors"], "unhinted round share": t["share"],
                          f"within {discovery.UNHINTED_BOUND:.0%}": t["holds"]} for t in designs_tried(report)])


def designs_tried(report: Mapping[str, Any]) -> list[dict]:
    """Every design tried, in order: those of earlier measurements (other policies) first."""
    disc = report["discovery"]
    return [*[t for e in disc.get("earlier", []) for t in e["tried"]], *disc["tried"]]


def design_summary(report: Mapping[str, Any], profile: Mapping[str, Any]):
    """The design in use: its pool, the unhinted share and the fresh reward on its training targets (a Series)."""
    import pandas as pd

    disc = report["discovery"]
    unh = disc["train_targets_unhinted"]
    return pd.Series({
        "design in use": disc["design"], "policy": profile["policy"] or "shipped",
        "training targets (in the pool)": len(profile["pool"]["targets"]),
        "non-targets (retention pool)": len(profile["pool"]["non_targets"]),
        "held-out targets": len(profile["heldout_targets"]),
        "target share of the pool": round(len(profile["pool"]["targets"]) / disc["pool_size"], 3),
        "visits per problem (200 steps x 8 prompts)": round(disc["visits_per_problem_200x8"], 1),
        "unhinted round share, training targets": round(unh["share"], 4),
        "groups of 8 with no round sample": round(unh["no_rare_group_share"], 3),
        "hinted round success, fresh samples of the training targets": round(disc["fresh_reward"]["share"], 3)})


def gate_table(gate: Mapping[str, Any]):
    """The gate's conditions (value, rule, holds) as a DataFrame."""
    import pandas as pd

    return pd.DataFrame({name: {"value": round(c["value"], 4), "rule": c["rule"], "holds": c["holds"]}
                         for name, c in gate["conditions"].items()}).T


if __name__ == "__main__":
    raise SystemExit(main())
