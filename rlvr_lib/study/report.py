"""The rendered parts of README.md and of the documentation pages, from what is committed under ``results/``.

``python -m rlvr_lib.study report`` (or ``python -m rlvr_lib.study.report``) rewrites, between their markers:

* in ``docs/results.md``, every results table (``<!-- results:start -->`` ... ``<!-- results:end -->``);
* in ``docs/reliability.md``, the hostile suite's table (``<!-- reliability:start -->`` ...
  ``<!-- reliability:end -->``, from ``results/hostile/suite.json``, which a run of ``pytest tests/hostile`` writes);
* in README.md, the scorecard, the "what was found" lines, the two commands' measured times and the methods table
  (``<!-- scorecard:start -->``, ``found``, ``commands``, ``methods``);

and draws the README's headline figure, every paper claim against its threshold (``docs/figures/claims.png``,
`rlvr_lib.study.plots.plot_claims_forest`). A test checks that README and the pages match the render, so no number
they quote can drift from the results.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_lib.study.summaries import summary_row
from rlvr_lib.study.claims.tables import (CHANCE_LEVEL, PAPER_NAMES, PREMISE_ABSENT, VERDICTS, find_claims_counts,
                                          find_claims_headline, notebook_outputs)
from rlvr_lib.study import papers
from rlvr_lib.study.executions import full_execution
from rlvr_lib.study.runs import current_testbed, load_runs, measured_on, one_run_per_seed, named_policy_shas, results_root
from rlvr_lib.study.stats import PASSK_INTERVAL, SEED_INTERVAL, format_ci
from rlvr_lib.validation import check, check_choice

START, END = "<!-- results:start -->", "<!-- results:end -->"
RELIABILITY_START, RELIABILITY_END = "<!-- reliability:start -->", "<!-- reliability:end -->"
REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
RESULTS_PAGE = DOCS / "results.md"
"""The page the results section (`render`) is rendered into."""
RELIABILITY_PAGE = DOCS / "reliability.md"
"""The page the reliability table (`render_reliability`) is rendered into."""
CLAIMS_FIGURE = DOCS / "figures" / "claims.png"
"""README's headline figure (`write_claims_figure`)."""


def _calibration_section(root: Path) -> list[str]:
    path = root / "testbed" / "calibration.json"
    if not path.exists():
        return ["*No calibration committed yet (`python -m rlvr_lib.study calibrate`).*"]
    report = json.loads(path.read_text())
    cfg = report["config"]
    wide = f", {cfg['wide_samples']} on {', '.join(cfg['wide_families'])}" if "wide_samples" in cfg else ""
    lines = [
        f"**Testbed calibration** (`results/testbed/calibration.json`, policy `{report.get('policy_sha')}`, "
        f"{cfg['problems_per_family']} problems x {cfg['samples']} samples per family{wide}):",
        "",
        "| target | value | bound | met |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {t['value']} | {t['bound']} | {'yes' if t['met'] else '**no**'} |" for name, t in report["targets"].items()]
    return lines


def _regimes_section(root: Path) -> list[str]:
    """The testbed's two regimes (``results/testbed/regimes.json``, `rlvr_lib.study.regimes`): the retention pool's
    premise check, the discovery designs tried, the one in use and its gate."""
    report = _regimes_measured(root)
    if not report:
        return ["*The regimes are not measured yet (`python -m rlvr_lib.study.regimes`).*"]
    from rlvr_lib.tasks import discovery

    r, d = report.get("retention"), report.get("discovery")
    lines = ["**Two regimes** (`results/testbed/regimes.json` and, for the gate, `discovery_gate.json`; "
             "`python -m rlvr_lib.study.regimes`, fresh sampling seeds; notebooks 00 and 08):", ""]
    if r:
        lines.append(f"- *Retention* (the RL pool of notebooks 01-07): hinted `round` earns reward on {r['share']:.2%} "
                     f"of fresh samples ({r['correct']} of {r['samples']:,}, on {r['problems_with_success']} of "
                     f"{r['problems']} problems; bound {r['bound']:.1%}): the discovery premise is "
                     f"**{r['discovery_premise']}**; the claims that need it read `premise absent`.")
    if not d:
        return lines + ["- The discovery regime is not measured yet."]
    from rlvr_lib.study.regimes import designs_tried

    tried = designs_tried(report)
    lines += ["- *Discovery* (`arith_discovery`): target problems have a first factor ending in 9 and only hinted "
             f"`round` solved them; the base policy's unhinted `round` share on them must be at most "
             f"{discovery.UNHINTED_BOUND:.0%} (stated before measuring). Designs tried in order: "
             + "; ".join(f"{t['design']} {t['share']:.2%}" if t["share"] is not None else f"{t['design']} no first "
                         "factor within the bound" for t in tried) + "."]
    if d["design"] is not None:
        unh, fresh = d["train_targets_unhinted"], d["fresh_reward"]
        profile = discovery.load_discovery()
        lines.append(f"- In use: design **{d['design']}** (policy `{profile['policy'] or 'shipped'}`): "
                     f"{len(profile['pool']['targets'])} training targets in a pool of {d['pool_size']} "
                     f"({d['visits_per_problem_200x8']:.1f} visits per problem in 200 steps x 8 prompts), "
                     f"{len(profile['heldout_targets'])} held-out targets; unhinted `round` on the training targets "
                     f"{unh['share']:.2%} ({unh['no_rare_group_share']:.0%} of groups of 8 hold none); hinted `round` "
                     f"succeeds on {fresh['share']:.0%} of fresh samples of them.")
    gate = d.get("gate")
    if gate is None:
        lines.append("- The gate (oracle exploration against GRPO) has no outcome yet.")
    else:
        c, arms = gate["conditions"], gate["arms"]
        lines.append(
            f"- **The gate {'passes' if gate['passed'] else 'fails'}** ({len(gate['seeds'])} seeds, {gate['steps']} "
            f"steps): held-out targets' pass@1 base {arms['base']['heldout_pass1']:.3f}, GRPO "
            f"{arms['grpo']['heldout_pass1']:.3f}, oracle {arms['oracle_explore']['heldout_pass1']:.3f}; oracle minus "
            f"GRPO {c['oracle_beats_grpo']['value']:+.3f} (interval low {c['oracle_beats_grpo']['ci_low']:+.3f}); "
            f"GRPO's gain {c['grpo_misses_most']['value']:+.3f} against the oracle's "
            f"{c['grpo_misses_most']['oracle_gain']:+.3f}; `round` share on the held-out targets: GRPO "
            f"{arms['grpo']['heldout_round_share']:.1%}, oracle {arms['oracle_explore']['heldout_round_share']:.1%}. "
            + ("The discovery premise is present there: notebook 08 runs the methods."
               if gate["passed"] else "The discovery premise is absent there: no method runs on it."))
    return lines


Reader = Callable[[str], list]
"""Reads one results folder's records by name (`records_reader`)."""


def records_reader(root: Path) -> Reader:
    """`load_runs` of ``root`` for one render: each folder is read once however many sections ask for it (the
    lists are shared, so sections only read them)."""
    return functools.lru_cache(maxsize=None)(lambda folder: load_runs(folder, root))


_METHOD_NAMES = {name: shown for p in papers.PAPERS for name, shown in p.variants}
"""How the results page names each paper's variant (`rlvr_lib.study.papers.Paper.variants`)."""


def _discovery_guide(root: Path, read: Reader | None = None) -> list[str]:
    """What notebook 08's runs say of each method on the discovery regime: its share of the oracle's headroom
    (`rlvr_lib.study.regimes.headroom_fraction`, held-out targets' pass@1) and its ``round`` share there, read
    from the committed records (nothing until GRPO, the oracle and a method have runs)."""
    from rlvr_lib.study.arms import Paired
    from rlvr_lib.study.regimes import METHOD_ARMS, headroom_fraction, round_share as share
    from rlvr_lib.tasks import discovery

    read = read or records_reader(root)
    runs: dict[str, list] = {}
    for r in read(papers.notebook("discovery").folder):
        runs.setdefault(r.name, []).append(r)
    arms = [a for a in METHOD_ARMS if a in runs]
    if not ({"grpo", "oracle_explore"} <= set(runs) and arms):
        return []
    held = Paired((discovery.HELDOUT_FAMILY,), runs["grpo"][0].config["eval"]["samples"])
    grpo, oracle = held.scores(runs["grpo"]), held.scores(runs["oracle_explore"])


    lines = ["", f"**Which method for which situation, on the discovery regime** (notebook 08, where the rare strategy "
                 "earns reward on training problems a prompt feature marks; held-out targets' pass@1: GRPO "
                 f"{grpo.mean():.3f}, oracle "
                 f"{oracle.mean():.3f}; `round` share GRPO {share(runs['grpo']):.1%}, oracle "
                 f"{share(runs['oracle_explore']):.1%}; each method's share of the oracle's headroom, "
                 "(method - GRPO) / (oracle - GRPO), bootstrap over seeds x problems):", ""]
    for arm in arms:
        h = headroom_fraction(held.scores(runs[arm]), grpo, oracle)
        reading = ("above 0" if h["ci_low"] > 0 else "below 0" if h["ci_high"] < 0 else "not distinguishable from 0")
        lines.append(f"- **{_METHOD_NAMES[arm]}** (discovery regime, {len(runs[arm])} seeds): {h['mean']:+.2f} "
                     f"[{h['ci_low']:+.2f}, {h['ci_high']:+.2f}] of the headroom ({reading}); `round` share "
                     f"{share(runs[arm]):.1%}.")
    return lines


def _nudgerl_premise(n: dict) -> str:
    return (f"| NudgeRL | share of problems where {n['k']} naive samples show one strategy | > 0.75 "
            f"| {_premise_ci({**n['interval'], 'mean': n['share']})} | "
            f"{'yes' if n['interval']['ci_low'] > 0.75 else '**no**'} |")


def _threepo_premise(t: dict) -> str:
    first = next((e for e, share in zip(t["ess"], t["share"]) if share > 0), None)  # least noise that moves it
    i = t["ess"].index(first) if first is not None else None
    moved = ("never, on the grid" if i is None else
             f"first at ESS {first:.2g}: {t['share'][i]:.3f} of prompts, rollouts {t['quality']['malformed'][i]:.2f} "
             f"malformed and {t['quality']['accuracy'][i]:.3f} correct (mean weights "
             f"{t['quality']['accuracy_mean']:.3f})")
    rule = t["noise_rule"]
    return (f"| 3PO | weight noise moves the top strategy token at the branch and keeps the policy "
            f"(rollouts <= {rule['max_malformed']:g} malformed, >= {rule['min_accuracy_ratio']:g}x as accurate) "
            f"| yes (Fig 1) | {moved}; training ESS {t['training_ess']:.2g} | "
            f"{'yes' if rule['premise_holds'] else '**no**'} |")


def _sage_premise(sage: dict) -> str:
    return (f"| SAGE | token entropy is high at the branch, low elsewhere (tau = the 90th percentile) | branch "
            f"tokens high-entropy | branch {sage['branch_mean']:.3f} vs other {sage['other_mean']:.3f} nats; "
            f"p90 {sage['all']['p90']:.3f} | {'yes' if sage['branch_mean'] > sage['all']['p90'] else '**no**'} |")


def _vigor_premise(v: dict) -> str:
    within = v["within"]
    return (f"| VIGOR | the score -sqrt(T) x norm(grad) ranks correct completions higher (Spearman within "
            f"problems) | > 0 | {_premise_ci(within) if within else 'no mixed problem'} | "
            f"{'yes' if within and within['ci_low'] > 0 else '**no**'} |")


def _premise_ci(d: dict) -> str:
    return f"{d['mean']:.3f} [{d['ci_low']:.3f}, {d['ci_high']:.3f}]"


PREMISE_ROWS = {"nudgerl": _nudgerl_premise, "threepo": _threepo_premise, "sage": _sage_premise,
                "vigor": _vigor_premise}
"""Per paper key (`rlvr_lib.study.papers.Paper.key`, the key of its measurement in ``premises.json``), its row of
the results page's premises table."""

_COUNT_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _premises_section(root: Path) -> list[str]:
    """The papers' methods' premises on the shipped policy (notebook 00, ``results/testbed/premises.json``): one row
    per paper of the manifest (`rlvr_lib.study.papers.PAPERS`, in its order) that the file measures."""
    path = root / "testbed" / "premises.json"
    if not path.exists():
        return ["*No premises committed yet (notebook 00 at the full profile).*"]
    p = json.loads(path.read_text())
    key = p["key"]
    measured = [paper.key for paper in papers.PAPERS if paper.key in p]
    unshown = [k for k in measured if k not in PREMISE_ROWS]
    check(not unshown, "premises.json: papers measured", unshown, f"papers with a row in PREMISE_ROWS "
          f"{sorted(PREMISE_ROWS)}")
    n = len(measured)
    lines = [f"**Premises of the {_COUNT_WORDS[n] if n < len(_COUNT_WORDS) else n} methods** "
             f"(`results/testbed/premises.json`, notebook 00: policy "
             f"`{key['policy_sha']}` on testbed `{key['testbed_version']}`, {key['problems']} problems of the RL "
             f"pool x {key['samples']} samples; reported, not gates):", "",
             "| paper | premise | the paper | ours | holds here |", "|---|---|---|---|---|"]
    lines += [PREMISE_ROWS[k](p[k]) for k in measured]
    return lines


def _target_cell(t: dict, interval: bool = True) -> str:
    """A target's value (and interval), then whether it is met."""
    ci = f" [{t['interval'][0]}, {t['interval'][1]}]" if interval and "interval" in t else ""
    return f"{t['value']}{ci} {'yes' if t['met'] else '**no**'}"


def _dynamics_section(root: Path) -> list[str]:
    path = root / "testbed" / "dynamics.json"
    if not path.exists():
        return ["*No dynamics calibration committed yet (`python -m rlvr_lib.study calibrate --dynamics`).*"]
    from rlvr_lib.study.dynamics import targets_by_steps

    report = json.loads(path.read_text())
    made = f", made on {', '.join(report['processors'])}" if report.get("processors") else ""
    per_step = targets_by_steps(report)
    steps = list(per_step)
    cfg = report["config"]
    lines = [
        f"**Dynamics calibration** (`results/testbed/dynamics.json`, policy `{report['policy_sha']}`, testbed "
        f"`{report.get('testbed_version')}`{made}: GRPO and "
        f"GRPO without its anchor, {len(cfg['seeds'])} seeds each, against {len(cfg['base_seeds'])} base "
        f"evaluations; anchor beta {report['kl_coef']}; step count of the full profile: "
        f"{report['chosen_steps'] or 'none, not every target holds'}):",
        "",
        "| target | bound | " + " | ".join(f"{s} steps" for s in steps) + " |",
        "|---|---|" + "---|" * len(steps),
    ]
    names = list(per_step[steps[0]])
    for name in names:
        cells = [_target_cell(per_step[s][name]) for s in steps]
        gates = per_step[steps[0]][name].get("gates", True)
        label = name if gates else f"{name} (reported, not a gate)"
        lines.append(f"| {label} | {per_step[steps[0]][name]['bound']} | " + " | ".join(cells) + " |")
    search = report["search"]
    if len(search) > 1:  # the anchor's beta was searched: every beta tried, at the largest step count
        last = steps[-1]
        lines += ["", f"The table above is at anchor beta {report['kl_coef']}; every beta tried, at {last} steps "
                      "(the search stops at the first beta at which some step count meets every gating target):",
                  "", "| target | " + " | ".join(f"beta {t['kl_coef']}" for t in search) + " |",
                  "|---|" + "---|" * len(search)]
        for name in names:
            cells = []
            for tried in search:
                t = tried["targets_by_steps"].get(last, {}).get(name)
                cells.append("-" if t is None else _target_cell(t, interval=False))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _policy_note(records) -> str:
    """Which policy and testbed a table's runs were measured on, flagged when not the shipped ones (a named
    policy of this package on the shipped testbed, the second model size, is named)."""
    shipped, version = current_testbed()
    measured = sorted({measured_on(r) for r in records if r.config.get("policy_sha")}, key=str)
    if not measured:
        return ""
    if measured == [(shipped, version)]:
        return f"; policy `{shipped}` on testbed `{version}`, the shipped ones"
    named = named_policy_shas()
    if len(measured) == 1 and measured[0][0] in named and measured[0][1] == version:
        sha = measured[0][0]
        return f"; policy `{sha}`, the second model size (`{named[sha]}`), on the shipped testbed `{version}`"
    if len(measured) == 1 and measured[0][0] in named and measured[0][1] == _discovery_version():
        sha = measured[0][0]
        return (f"; policy `{sha}` (`{named[sha]}`) on the discovery regime's testbed `{measured[0][1]}`, the "
                "committed ones")
    what = "; ".join(f"`{sha}`" + (f" on testbed `{v}`" if v else ", an earlier testbed") for sha, v in measured)
    return f"; measured on **a previous policy or testbed** ({what}), not the shipped `{shipped}` on `{version}`"


def _discovery_version() -> str | None:
    """The discovery regime's task version (`rlvr_lib.tasks.discovery`), or None before its pool is measured."""
    from rlvr_lib.tasks import task_version

    try:
        return task_version("arith_discovery")
    except FileNotFoundError:
        return None


def _processor_note(records) -> str:
    """The processor models a table's runs were made on; a table that mixes models is marked.

    Two models round floats differently, so the same seed trains a different trajectory on each: a table
    whose rows come from both is not reproducible seed by seed on one machine.
    """
    counts = Counter(r.extra.get("machine", {}).get("cpu_model", "?") for r in records)
    if len(counts) <= 1:
        return "".join(f"; processor {model}" for model in counts) + _commit_note(records)
    what = ", ".join(f"{model}: {n} run{'s' * (n != 1)}" for model, n in sorted(counts.items()))
    return f"; **mixed processors** ({what}): not reproducible seed by seed on one machine" + _commit_note(records)


def _commit_note(records) -> str:
    """The commits a table's runs were made at: the first and the last run's, by start time."""
    dated = sorted((r.started or "", r.git_commit) for r in records if r.git_commit)
    if not dated:
        return ""
    first, last = dated[0][1][:7], dated[-1][1][:7]
    n = len({c for _, c in dated})
    return f"; made at commit `{first}`" if n == 1 else f"; made at {n} commits, `{first}` to `{last}`"


def _eval_scope(record) -> dict:
    """What a run's pass@k columns are taken over: its evaluation's ``families`` and ``samples``."""
    spec = record.config.get("eval", {})
    return {key: spec.get(key) for key in ("families", "samples")}


def _method_section(root: Path, experiment: str, title: str, shared: tuple = (),
                    read: Reader | None = None) -> list[str]:
    """One table per policy and testbed the section's runs were measured on, the shipped ones first.

    A recompute adds runs on the shipped policy beside the committed earlier ones; each set is its own
    table (their problems differ, so they are never pooled). ``shared`` rows are taken on the same
    policy and testbed as the table's runs. ``read``: the render's `records_reader` (one render reads each folder
    once, not once per section or shared row).
    """
    read = read or records_reader(root)
    records = read(experiment)
    if not records:
        return [f"*No `{experiment}` runs committed yet.*"]
    current = current_testbed()
    groups = sorted({measured_on(r) for r in records}, key=lambda g: (g != current, str(g)))
    lines: list[str] = []
    for i, group in enumerate(groups):
        recs = [r for r in records if measured_on(r) == group]
        rows = [(label, [r for r in read(other) if r.name == name and measured_on(r) == group])
                for other, name, label in shared]
        lines += ([] if i == 0 else [""]) + _method_table(recs, experiment, title, rows)
    return lines


def _method_table(records: list, experiment: str, title: str, shared: list) -> list[str]:
    """One table row per run name; ``shared`` = ``[(label, records), ...]`` rows read from elsewhere.

    Only runs evaluated on the section's families with its number of samples
    (those of its first trained run's evaluation) are rows: an evaluation of
    other families or at another budget (notebook 02's ``base-wide``: 256
    samples on three families) has other pass@k columns and another average.
    """
    main = _eval_scope(next((r for r in records if "train" in r.config), records[0]))
    records = one_run_per_seed([r for r in records if _eval_scope(r) == main])
    by_name: dict[str, list] = {}
    for r in records:
        by_name.setdefault(r.name, []).append(r)
    for label, recs in shared:
        by_name[label] = one_run_per_seed(recs) or by_name.get(label, [])
    by_name = {name: recs for name, recs in by_name.items() if recs}
    kmax = max(int(k) for k in records[0].final["average"]["pass_at_k"])
    ks = sorted({k for k in (1, 8, kmax) if k <= kmax})
    lines = [
        f"**{title}** (`results/{experiment}/`; average of in-distribution families; mean [95% interval]: "
        f"pass@k by a {PASSK_INTERVAL}, the other columns by a {SEED_INTERVAL}; the base policy's seeds "
        f"are its sampling seeds{_policy_note(records)}"
        f"{_processor_note([r for recs in by_name.values() for r in recs])}):",
        "",
        "| run | seeds | " + " | ".join(f"pass@{k}" for k in ks) + " | strategy entropy | malformed | modes/problem |",
        "|---|---|" + "---|" * (len(ks) + 3),
    ]
    for name, recs in sorted(by_name.items(), key=lambda kv: (kv[0] != "base", kv[0])):
        row = {col: format_ci(ci) for col, ci in summary_row(recs, ks).items()}
        passk = " | ".join(row[f"pass@{k}"] for k in ks)
        lines.append(f"| {name} | {len(recs)} | {passk} | {row.get('strategy entropy', 'n/a')} | {row['malformed']} "
                     f"| {row['modes/problem']} |")
    return lines


def _bench_machines(root: Path, summary: dict) -> str:
    """Each machine the benchmarks ran on, with the benchmarks it ran (from each benchmark's own JSON)."""
    by_machine: dict[str, list[str]] = {}
    for name in sorted(summary.get("finished_at", {})):
        if name == "reproduction":  # read from the run records, not measured
            continue
        path = root / "bench" / f"{name}.json"
        m = json.loads(path.read_text()).get("machine", {}) if path.exists() else summary.get("machine", {})
        desc = (f"{m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, {m.get('torch_threads', '?')} torch threads, "
                f"GPU: {m.get('gpu') or 'none'}")
        by_machine.setdefault(desc, []).append(name)
    return "; ".join(f"{desc} ({', '.join(names)})" for desc, names in by_machine.items()) or "?"


def _bench_section(root: Path) -> list[str]:
    path = root / "bench" / "summary.json"
    if not path.exists():
        return ["*No benchmark committed yet (`make bench`).*"]
    s = json.loads(path.read_text())
    lines = [
        f"**Benchmarks** (`results/bench/`, `make bench`; measured on {_bench_machines(root, s)}; each against its "
        "baseline in the same run, medians after warm-up):",
        "",
        "| ratio | value | target | met | measured from |",
        "|---|---|---|---|---|",
    ]
    if "rollout" in s:
        r = s["rollout"]
        other = ", ".join(f"{w} {v:.2f}x" for w, v in r["speedup_by_workload"].items() if w != r["workload"])
        lines.append(
            f"| rollout_speedup_vs_generate | {s['rollout_speedup_vs_generate']:.2f} | {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} | KVCacheEngine {r['kv_cache_tokens_per_s']:.0f} vs generate "
            f"{r['generate_tokens_per_s']:.0f} tokens/s ({r['workload']} batch; other workloads: {other}; "
            f"greedy tokens equal: {r['greedy_tokens_equal']}) |"
        )
    if "step" in s:
        r = s["step"]
        lines.append(
            f"| step_time_ratio_vs_trl | {s['step_time_ratio_vs_trl']:.2f} | {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} | GRPO step {r['ours_median_s']:.3f} s (ours, {r['ours_engine']}) vs "
            f"{r['trl_median_s']:.3f} s (TRL {r['trl_version']} GRPOTrainer) |"
        )
    if "logprob" in s:
        r = s["logprob"]
        lines.append(
            f"| logprob_peak_mem_ratio | {s['logprob_peak_mem_ratio']:.3f} | {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} | peak {r['chunked_peak_bytes'] / 2**20:.0f} MiB (chunked) vs "
            f"{r['naive_peak_bytes'] / 2**20:.0f} MiB (naive), {r['tokens']} tokens x {r['vocab']} vocab on {r['device']}, "
            f"forward+backward; time ratio {r['time_ratio']:.2f}; values equal: {r['values_equal']} |"
        )
    if "gradnorm" in s:
        r = s["gradnorm"]
        models = {k: v for k, v in r.items() if isinstance(v, dict)}
        detail = "; ".join(f"{m}: loop {v['naive_median_s']:.3f} s vs ghost {v['ghost_median_s']:.3f} s "
                           f"({v['speedup']:.2f}x, values equal: {v['values_equal']})" for m, v in models.items())
        lines.append(f"| per_sample_gradnorm_speedup | {s['per_sample_gradnorm_speedup']:.2f} | {r['target']} | "
                     f"{'yes' if r['met'] else '**no**'} | VIGOR's per-sample gradient norms at the RL batch, {detail} |")
    vllm = s.get("vllm_rollout", {})
    for shape, r in vllm.items():
        if not isinstance(r, dict) or "vllm_vs_kv_cache" not in r:
            continue
        lines.append(
            f"| vllm_cpu_rollout_vs_kv_cache ({shape}) | {r['vllm_vs_kv_cache']:.2f} | - | - | vLLM "
            f"{vllm.get('vllm_version', '?')} CPU build (compiled, weights synced per call) {r['vllm_tokens_per_s']:.0f} "
            f"vs KVCacheEngine {r['kv_cache_tokens_per_s']:.0f} vs generate {r['generate_tokens_per_s']:.0f} tokens/s "
            f"(vs generate {r['vllm_vs_generate']:.2f}x; vLLM start-up {r['vllm_startup_s']:.0f} s; greedy tokens "
            f"equal: {r['greedy_tokens_equal']}; .venv-vllm) |"
        )
    for method, r in s.get("method_step_ratios", {}).items():
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        target = "-" if r["target"] is None else f"<= {r['target']}"
        lines.append(
            f"| {method}_step_time_vs_{r['reference']} | {r['ratio']:.2f} | {target} | {met} | {method} step "
            f"{r['median_s']:.3f} s vs {r['reference']} {r['reference_median_s']:.3f} s (registered presets at the "
            "same prompts, G and completion budget, stepped round robin) |"
        )
    if "profile" in s:
        p = s["profile"]
        compiled = (f" The lean decoder under `torch.compile` (CPU inductor): {p['compiled_decode_speedup']:.2f}x "
                    f"eager, after {p['compiled_decode_first_call_s']:.0f} s of compilation."
                    if "compiled_decode_speedup" in p else "")
        lines += ["", (
            f"What bounds the first two (`profile.json`, same machine): a rollout of the RL batch costs "
            f"{p['decode_us_per_layer_per_token']:.1f} us per layer per generated token; its matrix products, "
            f"replayed alone, take {p['decode_matmul_floor_share']:.0%} of it (so removing every other op could "
            f"make it at most {1 / p['decode_matmul_floor_share']:.1f}x faster), and "
            f"{p['step_matmul_floor_share']:.0%} of a GRPO step, of which the rollout is "
            f"{p['step_rollout_share']:.0%}.{compiled}")]
    return lines


SECTIONS = tuple((nb.folder, nb.title, nb.notebook, nb.shared) for nb in papers.NOTEBOOKS)
"""``(experiment, title, notebook, shared rows)`` of each notebook's section of docs/results.md, from the manifest
(`rlvr_lib.study.papers.NOTEBOOKS`: which rows each notebook reads from another's folder, and why)."""


def notebook_compute(root: str | Path | None = None, read: Reader | None = None) -> list[dict]:
    """Measured compute per notebook of the full profile, from the committed run records.

    Returns:
        One dict per notebook of `SECTIONS`: ``notebook``, ``experiment``,
        ``runs``, ``hours`` (summed ``wall_time_s``), ``median_run_s`` (``None``
        without runs), ``processors`` (the CPU models the runs recorded) and
        ``by_policy``: ``{policy: {"runs", "hours"}}`` per policy the runs were measured on (``"shipped"``, a
        named policy's name such as the second model size's, else its ``policy_sha``), the shipped one first.
    """
    root = results_root(root)
    read = read or records_reader(root)
    rows = []
    for experiment, _, notebook, _ in SECTIONS:
        records = read(experiment)
        seconds = sorted(r.wall_time_s for r in records)
        rows.append({
            "notebook": notebook, "experiment": experiment, "runs": len(records), "hours": sum(seconds) / 3600,
            "median_run_s": float(np.median(seconds)) if seconds else None,
            "processors": sorted({r.extra.get("machine", {}).get("cpu_model", "?") for r in records}),
            "by_policy": compute_by_policy(records),
        })
    return rows


def compute_by_policy(records) -> dict[str, dict]:
    """``{policy: {"runs", "hours"}}`` of ``records`` (summed ``wall_time_s``) per policy they were measured on:
    ``"shipped"`` (also a record without a ``policy_sha``), a named policy's name (the second model size's), else
    its ``policy_sha``; the shipped one first."""
    shipped, named = current_testbed()[0], named_policy_shas()
    by_policy: dict[str, dict] = {}
    for r in sorted(records, key=lambda r: r.config.get("policy_sha") not in (shipped, None)):
        sha = r.config.get("policy_sha")
        part = by_policy.setdefault("shipped" if sha in (shipped, None) else named.get(sha, str(sha)),
                                    {"runs": 0, "hours": 0.0})
        part["runs"] += 1
        part["hours"] += r.wall_time_s / 3600
    return by_policy


def calibration_compute(root: str | Path | None = None) -> dict:
    """Notebook 00's calibrations of record: the dynamics runs cached so far and where each report was made.

    Returns:
        ``runs`` and ``hours`` (summed ``wall_time_s``) of the records in the dynamics calibration's folder,
        ``by_policy`` the same per policy (`compute_by_policy`: the second size's runs share the folder), and
        ``processors``: per report of ``results/testbed/`` (``dynamics``, ``static``, ``premises``), the processor
        models it states (``["not recorded"]`` for a report written before reports recorded their machine; ``[]``
        without the report). Read from the reports, not the folder: the folder may hold a recompute in progress.
    """
    from rlvr_lib.study.dynamics import EXPERIMENT

    root = results_root(root)
    records = load_runs(EXPERIMENT, root)

    def made_on(name: str) -> list[str]:
        path = root / "testbed" / f"{name}.json"
        if not path.is_file():
            return []
        report = json.loads(path.read_text())
        if "processors" in report:  # the dynamics report: its runs' models
            return report["processors"]
        return [report.get("machine", {}).get("cpu_model", "not recorded")]

    return {"runs": len(records), "hours": sum(r.wall_time_s for r in records) / 3600,
            "by_policy": compute_by_policy(records),
            "processors": {"dynamics": made_on("dynamics"), "static": made_on("calibration"),
                           "premises": made_on("premises")}}


REPRODUCE_WORKERS = 2
"""Notebooks `make reproduce` executes side by side (the Makefile's ``WORKERS``; docs/budget.md)."""

BUDGETS = tuple((re.sub(r", issue \d+", "", b.label),  # what was decided, not where it was asked
                 tuple(nb.notebook for nb in papers.NOTEBOOKS if nb.budget == b.key), b.hours, b.policy)
                for b in papers.BUDGETS)
"""``(label, notebooks, elapsed hours, policy)``: the stated budgets of `make reproduce` (docs/budget.md), each over
its notebooks' runs on ``policy`` (the shipped one, or a named one: `compute_by_policy`'s keys). The second model size's runs have the whole second-size budget instead
(pretraining and calibrations included, outside `make reproduce`): `SECOND_SIZE_BUDGET`, `second_size_compute`."""


SECOND_SIZE_BUDGET = 6.0
"""The second model size's own budget, in elapsed hours (docs/budget.md), beside `BUDGETS`."""


def second_size_compute(root: Path, notebooks: list[dict], dynamics_by_policy: dict[str, dict]) -> dict | None:
    """What the second model size (`rlvr_lib.study.head_to_head.SCALE_POLICY`) has cost, in hours: its pretraining
    (``pretrain_log.json`` beside its checkpoint) and static calibration (``results/testbed/calibration-<name>.json``,
    ``make second-size``'s), each on one thread, one after the other; then its dynamics runs and notebook 07's runs
    on it, summed wall times, which share `REPRODUCE_WORKERS` workers. ``elapsed`` is the budget's unit. None until
    the policy and its calibration exist.

    Args:
        notebooks: :func:`notebook_compute`'s rows; dynamics_by_policy: :func:`calibration_compute`'s
            ``by_policy`` (the budget section has both already: the records are read once).
    """
    from rlvr_lib.policy.load import resolve_policy_path
    from rlvr_lib.study.head_to_head import SCALE_POLICY

    static = root / "testbed" / f"calibration-{SCALE_POLICY}.json"
    try:
        pretrain_log = Path(resolve_policy_path(SCALE_POLICY)) / "pretrain_log.json"
    except FileNotFoundError:
        return None
    if not (static.is_file() and pretrain_log.is_file()):
        return None
    none = {"hours": 0.0}
    out = {"pretraining": json.loads(pretrain_log.read_text())["train_seconds"] / 3600,
           "static calibration": json.loads(static.read_text())["seconds"] / 3600,
           "dynamics": dynamics_by_policy.get(SCALE_POLICY, none)["hours"],
           "notebook 07": sum(row["by_policy"].get(SCALE_POLICY, none)["hours"]
                              for row in notebooks if row["notebook"] == papers.notebook("head_to_head").notebook)}
    return {**out, "elapsed": out["pretraining"] + out["static calibration"]
            + (out["dynamics"] + out["notebook 07"]) / REPRODUCE_WORKERS}


def _verdict(elapsed: float, budget: float) -> str:
    return (f"within it ({budget - elapsed:.2f} to spare)" if elapsed <= budget
            else f"**over it by {elapsed - budget:.2f}**")


def _policy_parts(by_policy: dict[str, dict]) -> str:
    """``": 10 of the shipped policy (1.37 run hours), 4 of `small` (0.34)"``; nothing when one policy only."""
    if len(by_policy) <= 1:
        return ""
    return ": " + ", ".join(f"{part['runs']} of " + ("the shipped policy" if policy == "shipped" else f"`{policy}`")
                            + f" ({part['hours']:.2f}{' run hours' if i == 0 else ''})"
                            for i, (policy, part) in enumerate(by_policy.items()))


def budget_hours(rows: list[dict]) -> list[tuple[str, tuple[str, ...], float, float]]:
    """``(label, notebooks, budget, elapsed)`` of each of `BUDGETS`: its notebooks' measured run hours on its policy
    (``rows``: :func:`notebook_compute`'s) over `REPRODUCE_WORKERS`, the elapsed hours of `make reproduce`."""
    by_notebook = {row["notebook"]: row["by_policy"] for row in rows}
    return [(label, notebooks, budget,
             sum(by_notebook[nb].get(policy, {"hours": 0.0})["hours"] for nb in notebooks) / REPRODUCE_WORKERS)
            for label, notebooks, budget, policy in BUDGETS]


def _budget_section(root: Path, read: Reader | None = None) -> list[str]:
    """Measured compute per notebook: the summed wall time of the runs each notebook owns, and that sum over
    `REPRODUCE_WORKERS`, the elapsed hours it takes when the workers are never idle (the budget's unit); then each
    of `BUDGETS` against its measured total."""
    lines = [f"**Compute** (run hours: the sum of the committed full-profile runs' wall times; elapsed: run hours / "
             f"{REPRODUCE_WORKERS}, the {REPRODUCE_WORKERS} workers of `make reproduce` never idle, the unit of the "
             "12-hour budget; a notebook's own rendering from the cache takes under a minute):", "",
             "| notebook | runs | run hours | elapsed hours | processor |", "|---|---|---|---|---|"]
    rows = notebook_compute(root, read)
    for row in rows:
        parts = row["by_policy"] or {"shipped": {"runs": 0, "hours": 0.0}}
        for policy, part in parts.items():
            label = row["notebook"] if policy == "shipped" else f"{row['notebook']}, policy `{policy}`"
            lines.append(f"| {label} | {part['runs']} | {part['hours']:.2f} | "
                         f"{part['hours'] / REPRODUCE_WORKERS:.2f} | {', '.join(row['processors']) or '-'} |")
    lines.append("")
    for label, _, budget, elapsed in budget_hours(rows):
        lines.append(f"- {label}: a budget of {budget:g} elapsed hours; the committed runs take {elapsed:.2f}, "
                     f"{_verdict(elapsed, budget)}.")
    cal = calibration_compute(root)
    second = second_size_compute(root, rows, cal["by_policy"])
    if second is not None:
        elapsed = second["elapsed"]
        lines.append(f"- the second model size (`make second-size` and notebook 07's runs on it): a "
                     f"budget of {SECOND_SIZE_BUDGET:g} elapsed hours; its pretraining {second['pretraining']:.2f} "
                     f"and static calibration {second['static calibration']:.2f} hours on one thread, then its "
                     f"dynamics runs {second['dynamics']:.2f} and notebook 07's runs {second['notebook 07']:.2f} run "
                     f"hours on {REPRODUCE_WORKERS} workers take {elapsed:.2f}, "
                     f"{_verdict(elapsed, SECOND_SIZE_BUDGET)}.")
    # Notebook 00 reads its calibrations of record (`make calibrate`'s work, outside the 12 hours): shown for their
    # processor, since the tables of notebooks 00-06 are to be made on one processor model.
    made = "; ".join(f"{part}: {', '.join(models) or '-'}" for part, models in cal["processors"].items())
    lines += ["", f"Notebook 00 reads its calibrations of record from `results/testbed/` (`make calibrate`, outside "
                  f"the 12 hours), made on {made}; `results/testbed_dynamics/` holds {cal['runs']} dynamics runs "
                  f"({cal['hours']:.2f} run hours){_policy_parts(cal['by_policy'])}."]
    return lines


def _shown(path: Path, root: Path) -> str:
    """``path`` as the pages name it: relative to the repository when inside it, else as under ``results/``."""
    path = path.resolve()
    return str(path.relative_to(REPO) if path.is_relative_to(REPO)
               else Path("results") / path.relative_to(root.resolve()))


def scorecard(root: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Per paper, the verdict counts of every claims table the executed full-profile notebooks show.

    Read from the comment each :func:`rlvr_lib.study.claims.tables.claims_summary` writes into a notebook's outputs
    (:func:`rlvr_lib.study.executions.full_execution`), summed over tables and notebooks; papers without a table
    are left out.
    """
    root = results_root(root)
    totals: dict[str, dict[str, int]] = {}
    for _, _, notebook, _ in SECTIONS:
        path = full_execution(notebook, root)
        if path is None:
            continue
        for paper, counts in find_claims_counts(notebook_outputs(path)).items():
            mine = totals.setdefault(paper, {v: 0 for v in VERDICTS})
            for v in VERDICTS:
                mine[v] += counts[v]
    return {paper: totals[paper] for paper in (*PAPER_NAMES, *sorted(set(totals) - set(PAPER_NAMES)))
            if paper in totals}


def _chance(n: int) -> str:
    """``reproduced`` verdicts chance alone gives over ``n`` rows: each row's interval lies wholly beyond a
    threshold its true value sits on with probability CHANCE_LEVEL (one-sided 2.5%); mean and the binomial's
    95th percentile."""
    from scipy import stats

    return f"{CHANCE_LEVEL * n:.1f} (95%: at most {int(stats.binom.ppf(0.95, n, CHANCE_LEVEL))})"


def _scorecard_section(root: Path) -> list[str]:
    """README's scorecard: per paper, the verdicts of its claims over every notebook."""
    card = scorecard(root)
    if not card:
        return ["*No executed full-profile notebook with a claims table yet.*"]
    lines = ["**Scorecard** (every paper claim the executed full-profile notebooks test; "
             "`reproduced`: the whole 95% interval on the paper's side of the threshold; `contradicted`: wholly on "
             "the other side; `unresolved`: it straddles; `not specific`: reproduced, but GRPO passes the same "
             "test; `premise absent`: the premise the claim needs is measured absent on the regime it is measured "
             "on, so it is not tested there (each row names its regime and premise, and keeps its interval and the "
             "verdict that interval alone would give); *chance*: `reproduced` verdicts expected if every effect of "
             "the rows whose premise is not absent sat exactly on its threshold, at the "
             f"one-sided {CHANCE_LEVEL:.1%} level):", "",
             "| paper | claims | " + " | ".join(VERDICTS) + " | chance |", "|---|---|" + "---|" * (len(VERDICTS) + 1)]
    for paper, counts in card.items():
        n = sum(counts.values())
        lines.append(f"| {paper} | {n} | " + " | ".join(str(counts[v]) for v in VERDICTS)
                     + f" | {_chance(n - counts[PREMISE_ABSENT])} |")
    total = {v: sum(c[v] for c in card.values()) for v in VERDICTS}
    n = sum(total.values())
    lines.append(f"| all | {n} | " + " | ".join(str(total[v]) for v in VERDICTS)
                 + f" | {_chance(n - total[PREMISE_ABSENT])} |")
    # An executed copy older than the three-verdict tables has no scorecard comment: say so, never count it as 0.
    missing = [notebook for _, _, notebook, _ in SECTIONS
               if full_execution(notebook, root) is not None
               and not find_claims_counts(notebook_outputs(full_execution(notebook, root)))]
    if missing:
        lines += ["", "Not in the scorecard (their executed copies show no three-verdict claims table; re-execute "
                      "them from the cache): " + ", ".join(f"`{m}`" for m in missing) + "."]
    return lines


def render(root: str | Path | None = None) -> str:
    """The markdown of the results section (without the markers)."""
    root = results_root(root)
    lines = _calibration_section(root)
    lines += [""] + _dynamics_section(root)
    lines += [""] + _premises_section(root)
    lines += [""] + _regimes_section(root)
    lines += [""] + _scorecard_section(root)
    read = records_reader(root)
    for experiment, title, notebook, shared in SECTIONS:
        lines += [""] + _method_section(root, experiment, title, shared, read)
        path = full_execution(notebook, root)
        if path is not None:
            outputs = notebook_outputs(path)  # read once: the headline and the guide both come from it
            headline = find_claims_headline(outputs)
            lines += ["", f"Claims table and figures: `{_shown(path, root)}`"
                          + (f" ({headline})." if headline else ".")]
            lines += _guide_section(outputs, experiment, root)
        if experiment == papers.notebook("discovery").folder:
            lines += _discovery_guide(root, read)
    lines += [""] + _budget_section(root, read)
    lines += [""] + _verification_section(root)
    lines += [""] + _bench_section(root)
    return "\n".join(lines)


_REGIME_WORDS = {
    "retention": "where the rare strategy earns (almost) no reward in training, so an arm can keep a strategy GRPO "
                 "drives out but has nothing to discover",
    "discovery": "where the rare strategy earns reward on training problems that a prompt feature marks",
}
"""How the results page's guide describes each regime (`rlvr_lib.tasks.discovery.REGIMES`)."""


def _map_regime(data: Mapping[str, Any], experiment: str) -> str:
    """The regime a map is measured on: the map's own ``regime`` when it names one, else the one regime every
    claims and measurement row of the notebook that owns ``experiment`` names."""
    from rlvr_lib.study.claims import registry_for

    if data.get("regime"):
        return check_choice("map regime", data["regime"], tuple(_REGIME_WORDS))
    reg = registry_for(experiment)
    regimes = sorted({r.regime for r in (*reg.claims, *reg.measurements)}) if reg is not None else []
    check(len(regimes) == 1, f"{experiment}: regimes of its rows", regimes,
          "exactly one, the regime its map is measured on (or the map names its own)")
    return regimes[0]


def _regimes_measured(root: Path) -> dict:
    """``<root>/testbed/regimes.json`` with the gate of ``discovery_gate.json`` beside it
    (`rlvr_lib.study.regime_premises.load_regimes`), or {} when not measured yet."""
    from rlvr_lib.study.regime_premises import load_regimes

    return load_regimes(root / "testbed")


def _needs_discovery(run: str) -> bool:
    """Whether a map's run (``"NudgeRL"``, ``"B3PO"``, a pair ``"nudgerl+b3po"``) involves a method whose effect
    needs the discovery premise (NudgeRL, a 3PO variant: `rlvr_lib.study.claims.nb07_head_to_head.EXPLORERS`)."""
    return any(part.lower() == "nudgerl" or re.fullmatch(r"[bmc]3po", part.lower()) for part in run.split("+"))


def _discovery_status(regime: str, regimes: Mapping[str, Any]) -> tuple[str, str]:
    """(``present``/``absent``/``not measured``, the measurement) of the discovery premise on ``regime``
    (`rlvr_lib.study.regime_premises.premise_status`)."""
    from rlvr_lib.study.regime_premises import premise_status

    status = premise_status(regime, "discovery", regimes)
    said = {None: "not measured", True: "present", False: "absent"}[status["present"]]
    return said, status["measurement"]


def _run_regime(run: str, regime: str, regimes: Mapping[str, Any]) -> str:
    """What a guide bullet says of its regime: the regime, and for a run whose method needs the discovery premise
    whether that premise is measured there (the measurement itself is in the guide's opening line)."""
    if not _needs_discovery(run):
        return f"{regime} regime"
    return f"{regime} regime; the discovery premise its exploration needs: {_discovery_status(regime, regimes)[0]}"


def _guide_section(outputs: str, experiment: str, root: Path) -> list[str]:
    """The results page's "which method for which situation", read off the map an executed notebook's
    ``outputs`` carry (`rlvr_lib.study.head_to_head.map_summary`, notebook 07), with what the testbed cannot tell;
    nothing for a notebook without a map."""
    from rlvr_lib.study import head_to_head as h2h
    from rlvr_lib.study.claims import registry_for
    from rlvr_lib.study.claims.tables import TESTBED_LIMITS

    data = h2h.find_map(outputs)
    if data is None:
        return []
    buckets = list(dict.fromkeys(b["bucket"] for rows in data["runs"].values() for b in rows))
    beside = data.get("beside", {})
    shown = lambda v, words: (h2h.signed_interval(v)  # noqa: E731
                              + ("" if v["reading"] == h2h.NO_DIFFERENCE else f" {words[v['reading']]}"))
    cell = {(run, b["bucket"]): shown(b, {h2h.HELPS: h2h.HELPS, h2h.HURTS: h2h.HURTS})
            for run, rows in data["runs"].items() for b in rows}
    cell |= {(run, label): shown(v, h2h.BESIDE_READING)
             for label, values in beside.items() for run, v in values.items()}
    columns = [*buckets, *beside]
    regime = _map_regime(data, experiment)
    regimes = _regimes_measured(root)
    comparisons = data.get("comparisons")  # each row an arm against GRPO or its own comparator
    arm = lambda run: comparisons[run]["arm"] if comparisons else run  # noqa: E731
    explorers = [run for run in h2h.map_rows(data) if _needs_discovery(arm(run))]
    premise = ""
    if explorers:
        said, measured = _discovery_status(regime, regimes)
        premise = (f"; the discovery premise, which the exploration of {', '.join(explorers)} needs, is {said} there"
                   + (f" ({measured})" if said != "not measured" else "")
                   + ("; the discovery regime's statements follow under notebook 08" if regime == "retention" else ""))
    lines = ["", f"**Which method for which situation** (every statement on the {regime} regime, "
                 f"{_REGIME_WORDS[regime]}{premise}; read off notebook 07's map: each method's {data['metric']} "
                 + ("gain over GRPO" if not comparisons else "gain over the comparator its row names (GRPO, "
                    "notebook 02's: the method with every setting it changes; or the method's own paper's "
                    "comparator: its mechanism alone, every other setting shared; each row says which difference "
                    "it reads, and an effect against GRPO is attributed to the method only where its own "
                    "comparator shows it too)")
                 + f" at equal compute per quartile bucket of {data['property']}, a paired bootstrap "
                 "interval over seeds x problems; a bucket says *helps* or *hurts* only when its whole 95% "
                 "interval is above or below 0"
                 + (f"; beside the map, read the same way: {'; '.join(beside)}" if beside else "") + "):", "",
             "| arm | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {run} | " + " | ".join(cell.get((run, c), "-") for c in columns) + " |" for run in h2h.map_rows(data)]
    summary = h2h.guide_summary(data)
    check(summary.startswith("In short: "), "guide_summary", summary[:40], "a paragraph opening 'In short: '")
    lines += ["", f"In short, on the {regime} regime: " + summary[len("In short: "):], ""]
    for run, line in zip(h2h.map_rows(data), h2h.guide(data)):
        head = f"- **{run}**: "
        check(line.startswith(head), "guide line", line[:40], f"a bullet opening {head!r}")
        lines.append(f"- **{run}** ({_run_regime(arm(run), regime, regimes)}): " + line[len(head):])
    own = registry_for(experiment)
    lines += ["", f"What the testbed cannot tell: {TESTBED_LIMITS} {own.limits.strip() if own else ''}".rstrip()]
    return lines


VERIFICATION_FILE = "verification.json"
"""`make verify`'s summary under the results root (written by `rlvr_lib.study.verify`)."""


def _verification_section(root: Path) -> list[str]:
    """`make verify`'s last result (`rlvr_lib.study.verify`): which committed runs were recomputed, and how
    each compared with its record."""
    path = root / VERIFICATION_FILE
    if not path.exists():
        return ["*No verification committed yet (`make verify` recomputes a seeded sample of committed runs at "
                "HEAD and compares them with their records).*"]
    v = json.loads(path.read_text())
    lines = [f"**Verification** (`results/{VERIFICATION_FILE}`: `make verify` on {v['date'][:10]}, commit "
             f"`{(v['commit'] or 'unknown')[:7]}`, {v['processor']}; {v['per_notebook']} run(s) per notebook drawn "
             f"with seed {v['seed']}: {v['matches']} match, {v['mismatches']} mismatch, {v['unverifiable']} "
             "unverifiable):", "", "| notebook | run | made on | comparison | result |", "|---|---|---|---|---|"]
    for run in v["runs"]:
        result = {True: "match", False: "**mismatch**", None: "unverifiable"}[run["match"]]
        # A record archived or recomputed since the check (same run id, another commit) is no longer the one the
        # tables read: say so rather than hide the row.
        path = root / run["experiment"] / f"{run['run_id']}.json"
        current = json.loads(path.read_text()).get("git_commit") if path.is_file() else None
        where = "" if current == run["record_commit"] else " (record replaced since: archived or recomputed)"
        lines.append(f"| {run['notebook']} | `{run['run_id']}`{where} | {run['record_processor']} | {run['mode']} "
                     f"| {result}: {run['detail']} |")
    return lines


def render_reliability(root: str | Path | None = None) -> str:
    """The markdown of docs/reliability.md's table (without the markers), from ``hostile/suite.json``.

    One row per class of the hostile suite (``tests/hostile_suite_recorder.py`` says how
    tests get their class): the inputs tried (tests run, skipped ones left out),
    how many were blocked or graded right (passed), and whether the host stayed
    unchanged / nothing was lost: ``yes`` when every test of a class that checks
    it passed, ``n/a`` for a class that only grades.
    """
    path = results_root(root) / "hostile" / "suite.json"
    if not path.exists():
        return "*No hostile-suite results committed yet (`pytest tests/hostile`, then `python -m rlvr_lib.study.report`).*"
    suite = json.loads(path.read_text())
    classes = suite["classes"]
    commit = (suite.get("git_commit") or "unknown")[:10]
    dirty = "" if suite.get("worktree_clean", True) else ", with uncommitted changes"
    tried = sum(c["tried"] for c in classes.values())
    passed = sum(c["passed"] for c in classes.values())
    lines = [f"**Hostile suite** (`results/hostile/suite.json`: `pytest tests/hostile` on {suite['date'][:10]}, "
             f"commit `{commit}`{dirty}; {passed} of {tried} inputs blocked or graded right):", "",
             "| class | inputs tried | blocked or graded right | host unchanged / nothing lost |",
             "|---|---|---|---|"]
    for name, c in classes.items():
        all_passed = c["failed"] == 0 and c["passed"] == c["tried"]
        right = f"{c['passed']}" if all_passed else f"**{c['passed']} ({c['failed']} failed)**"
        if not c["host_checked"]:
            host = "n/a (grading only)"
        else:
            host = "yes" if all_passed else "**not shown** (a failed test)"
        skipped = f" ({c['skipped']} skipped)" if c.get("skipped") else ""
        lines.append(f"| {name} | {c['tried']}{skipped} | {right} | {host} |")
    return "\n".join(lines)


README_PARTS = ("scorecard", "found", "commands", "methods")
"""README's rendered parts, each between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``."""

_IDEAS = {
    "nudgerl": ("strategy hints on rollouts, inter/intra-hint credit, distillation", "methods/nudgerl.py", "nudgerl"),
    "threepo": ("roll out from IVON posterior weight samples (B3PO, M3PO, C3PO)", "methods/threepo.py", "3po"),
    "sage": ("reshape the KL anchor toward high-entropy branch points", "methods/sage.py", "sage"),
    "vigor": ("reward completions with a small NLL gradient, no verifier", "methods/vigor.py, rewards/grad_norm.py",
              "vigor"),
}
"""Each paper's idea, module (under ``rlvr_lib/``) and page (``docs/papers/<page>.md``), for README's methods
table."""

TEST_MINUTES = 33
"""`make test` from a fresh clone on a 2-core machine like CI's, alone on it, in minutes (the last measured run, every
stage; docs/checking.md, "How long each takes", has its stages and commit)."""


def _nonzero(counts: Mapping[str, int]) -> str:
    """``"1 reproduced, 4 contradicted, 9 unresolved of 14"``: the verdicts a paper or notebook has, in order."""
    n = sum(counts.values())
    return ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts.get(v)) + f" of {n}" if n else "no claim yet"


def render_methods(root: str | Path | None = None) -> str:
    """README's methods table: one line per paper of the manifest (idea, module, notebook, its claims' verdicts over
    every notebook, from `scorecard`)."""
    card = scorecard(root)
    lines = ["| paper | idea | module (`rlvr_lib/`) | notebook | claims over every notebook |", "|---|---|---|---|---|"]
    for paper in papers.PAPERS:
        idea, module, page = _IDEAS[paper.key]
        modules = ", ".join(f"`{m.strip()}`" for m in module.split(","))
        lines.append(f"| [{paper.name}](docs/papers/{page}.md) | {idea} | {modules} | `{paper.notebook}` | "
                     f"{_nonzero(card.get(paper.name, {}))} |")
    return "\n".join(lines)


def _notebook_counts(root: Path) -> list[tuple[str, dict[str, int]]]:
    """``(notebook, verdict counts)`` of each executed full-profile notebook with a claims table, in order."""
    out = []
    for _, _, notebook, _ in SECTIONS:
        path = full_execution(notebook, root)
        if path is not None:
            per_paper = find_claims_counts(notebook_outputs(path))
            if per_paper:
                out.append((notebook, {v: sum(c[v] for c in per_paper.values()) for v in VERDICTS}))
    return out


def _found_lines(root: Path) -> list[str]:
    """At most ten lines of what was found, each read off a committed report or executed notebook."""
    lines = []
    path = root / "testbed" / "dynamics.json"
    if path.exists():
        d = json.loads(path.read_text())
        t = d["targets"]
        lines.append(f"- GRPO shows the bottleneck on the testbed ({d['chosen_steps']} steps, anchor beta "
                     f"{d['kl_coef']:g}; notebook 00): in-distribution pass@1 {t['pass_at_1_gain']['value']:+.3f}, "
                     f"`rare_mix` pass@256 {-t['rare_pass_at_256_drop']['value']:+.3f}, first-token strategy entropy "
                     f"-{t['strategy_entropy_fall']['value']:.0%}, the rare strategy's share "
                     f"{t['rare_share_fall']['value']:.1f}x lower.")
    premises = [row for row in _premises_section(root) if row.startswith("| ") and not row.startswith("| paper")]
    if premises:
        cells = [[c.strip() for c in row.strip("|").split("|")] for row in premises]
        holds = [c[0] for c in cells if c[-1] == "yes"]
        absent = [c[0] for c in cells if c[-1] != "yes"]
        lines.append(f"- The methods' premises on the testbed (notebook 00): "
                     + "; ".join(part for part in (f"hold for {', '.join(holds)}" if holds else "",
                                                   f"absent for {', '.join(absent)}" if absent else "") if part)
                     + ".")
    report = _regimes_measured(root)
    r, d = report.get("retention"), report.get("discovery") or {}
    if r:
        lines.append(f"- On the retention regime (notebooks 01-07) hinted `round` earns reward on {r['share']:.2%} of "
                     f"fresh samples (bound {r['bound']:.1%}): the discovery premise is {r['discovery_premise']}, so "
                     "the claims that need it read `premise absent`.")
    gate = d.get("gate")
    if gate is not None:
        c = gate["conditions"]["oracle_beats_grpo"]
        lines.append(f"- On the discovery regime oracle exploration beats GRPO on held-out targets by "
                     f"{c['value']:+.3f} "
                     f"(interval low {c['ci_low']:+.3f}): the gate {'passes' if gate['passed'] else 'fails'}"
                     + (", and notebook 08 runs the methods there." if gate["passed"] else "."))
    h2h_nb = papers.notebook("head_to_head").notebook
    path = full_execution(h2h_nb, root)
    if path is not None:
        from rlvr_lib.study import head_to_head as h2h

        data = h2h.find_map(notebook_outputs(path))
        if data is not None:
            first = h2h.guide_summary(data)[len("In short: "):].split(". ")[0].rstrip(".")
            lines.append(f"- Head to head at equal compute (notebook 07, {_map_regime(data, 'head_to_head')} regime): "
                         f"{first}.")
    counts = _notebook_counts(root)
    if counts:
        lines.append("- Claims per notebook: " + "; ".join(f"{nb[:2]} {_nonzero(c)}" for nb, c in counts) + ".")
    check(len(lines) <= 10, "README's found lines", len(lines), "at most 10")
    return lines


def render_found(root: str | Path | None = None) -> str:
    """README's "what was found" lines (without the markers)."""
    lines = _found_lines(results_root(root))
    return "\n".join(lines) if lines else "*Nothing measured yet (`make reproduce`).*"


def render_commands(root: str | Path | None = None) -> str:
    """README's measured time of each of the two commands: `TEST_MINUTES`, and `make reproduce`'s elapsed hours
    from the committed runs (`budget_hours`, and the second model size's own)."""
    root = results_root(root)
    rows = notebook_compute(root)
    budgets = budget_hours(rows)
    total = sum(elapsed for *_, elapsed in budgets)
    second = second_size_compute(root, rows, calibration_compute(root)["by_policy"])
    parts = "; ".join(f"{label}: {elapsed:.1f} of its {budget:g}" for label, _, budget, elapsed in budgets)
    extra = (f"; the second model size's runs {second['elapsed']:.1f} more (`make second-size` first, of its "
             f"{SECOND_SIZE_BUDGET:g})" if second is not None else "")
    return (f"`make test` takes about {TEST_MINUTES} minutes from a fresh clone on a 2-core machine like CI's, every "
            "stage included. `make reproduce` recomputes nothing on a fresh clone: every run is cached in `results/`, so it "
            "only executes the notebooks from the cache, under a minute each. From an empty cache the committed runs "
            f"take **{total:.1f} elapsed hours** on {REPRODUCE_WORKERS} workers ({parts}){extra}, measured on the "
            "processors the [results](docs/results.md) name.")


def render_readme(root: str | Path | None = None) -> dict[str, str]:
    """Each of `README_PARTS`' markdown (without the markers)."""
    root = results_root(root)
    return {"scorecard": "\n".join(_scorecard_section(root)), "found": render_found(root),
            "commands": render_commands(root), "methods": render_methods(root)}


def claims_rows(root: str | Path | None = None) -> list[dict]:
    """Every claims row the executed full-profile notebooks show, in notebook order, as numbers
    (`rlvr_lib.study.claims.tables.claims_rows` of each): what README's headline figure draws."""
    from rlvr_lib.study.claims.tables import claims_rows as rows_of

    root = results_root(root)
    return [row for _, _, notebook, _ in SECTIONS if full_execution(notebook, root) is not None
            for row in rows_of(full_execution(notebook, root))]


def write_claims_figure(path: Path = CLAIMS_FIGURE, root: str | Path | None = None) -> Path:
    """README's headline figure: every claim's distance from its threshold with its interval, one panel per paper,
    coloured by verdict (`rlvr_lib.study.plots.plot_claims_overview` over `claims_rows`), written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlvr_lib.study import plots

    path.parent.mkdir(parents=True, exist_ok=True)
    fig = plots.plot_claims_overview(claims_rows(root), title="Every paper claim the notebooks test", path=path)
    plt.close(fig)
    return path


def _fill(text: str, start: str, end: str, body: str, readme: Path) -> str:
    """``text`` with the part between the ``start`` and ``end`` markers replaced by ``body``."""
    if start not in text or end not in text:
        raise ValueError(f"{readme} has no '{start}' ... '{end}' section to fill")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def marked(part: str) -> tuple[str, str]:
    """The start and end markers of a README part (`README_PARTS`)."""
    return f"<!-- {part}:start -->", f"<!-- {part}:end -->"


def section(path: Path, start: str, end: str) -> str:
    """The text between ``start`` and ``end`` in the file at ``path`` (what a test compares with the render)."""
    return path.read_text().split(start, 1)[1].split(end, 1)[0].strip("\n")


def _rewrite(path: Path, parts: list[tuple[str, str, str]]) -> bool:
    """Fill each ``(start, end, body)`` of ``parts`` in the file at ``path``; returns whether it changed."""
    text = path.read_text()
    new = text
    for start, end, body in parts:
        new = _fill(new, start, end, body, path)
    if new != text:
        path.write_text(new)
    return new != text


def update_readme(readme: Path = README, root: str | Path | None = None, docs: Path = DOCS,
                  figure: bool = True) -> bool:
    """Rewrite README's rendered parts, the results page and the reliability page (and, with ``figure``, draw
    README's headline figure); returns whether a page changed."""
    parts = render_readme(root)
    changed = _rewrite(readme, [(*marked(name), parts[name]) for name in README_PARTS])
    changed |= _rewrite(docs / RESULTS_PAGE.name, [(START, END, render(root))])
    changed |= _rewrite(docs / RELIABILITY_PAGE.name, [(RELIABILITY_START, RELIABILITY_END, render_reliability(root))])
    if figure:
        write_claims_figure(docs / "figures" / CLAIMS_FIGURE.name, root)
    return changed


if __name__ == "__main__":
    changed = update_readme()
    print("README's rendered parts, docs/results.md and docs/reliability.md", "updated" if changed else
          "already up to date")
    sys.exit(0)
