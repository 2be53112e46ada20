"""The study's command line: ``python -m rlvr_lib.study {calibrate,calibrate-threepo,tune-lr,plateau,testbed-config,
reproduce,verify,compare-roots,report,bench,regimes,provenance,what-changed} ...``.

The first four measure the testbed and write under ``results/testbed/``; ``testbed-config`` writes a method's
testbed calibration as a settings file for ``python -m rlvr_lib train --config``; the others run the study's own modules
(``python -m rlvr_lib.study.<module>``: same flags). The library's commands (pretrain, train, evaluate) are
``python -m rlvr_lib``. A bad input is a usage error: one line naming the flag and what is allowed, exit status
2, nothing created (`rlvr_lib.cli_checks`); every integer flag has a range (`STUDY_INT_FLAGS`). The study's own
commands take ``--import MODULE`` (a user's methods, tasks and rewards, `rlvr_lib.plugins`) and ``--threads N``, as
``python -m rlvr_lib``'s do.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlvr_lib.cli_checks import (OneLineParser, UsageError, add_common_flags, run_command, check_model,
                                 check_out_file, check_out_folder, flag_errors, number_in, int_at_least, prelude)
from rlvr_lib.study.runs import results_root

_SEEDS = (0, 2**32 - 1)  # python -m rlvr_lib's seeds' and --threads' ranges (its INT_FLAGS; tested equal)
_THREADS = (1, 4096)
STUDY_COMMANDS = ("calibrate", "calibrate-threepo", "tune-lr", "plateau", "testbed-config")
"""The commands this module parses itself (the others run a study module's own command line, `MODULE_COMMANDS`)."""

STUDY_INT_FLAGS: dict[str, tuple[int, int]] = {
    "calibrate --problems": (1, 1_000_000), "calibrate --samples": (1, 100_000),
    "calibrate --wide-samples": (1, 100_000), "calibrate --seeds": _SEEDS, "calibrate --steps": (1, 1_000_000),
    "calibrate --dyn-problems": (1, 1_000_000), "calibrate --dyn-samples": (1, 100_000),
    "calibrate --dyn-wide-problems": (1, 1_000_000), "calibrate --dyn-wide-samples": (1, 100_000),
    "calibrate --dyn-kl-problems": (1, 1_000_000), "calibrate --seed": _SEEDS, "calibrate --batch-size": (1, 1_000_000),
    "calibrate-threepo --run-steps": (1, 1_000_000), "calibrate-threepo --hess-init-steps": (0, 1_000_000),
    "calibrate-threepo --steps": (1, 1_000_000), "calibrate-threepo --skip": (0, 1_000_000),
    "calibrate-threepo --rounds": (1, 1_000), "calibrate-threepo --prompts-per-step": (1, 100_000),
    "calibrate-threepo --group-size": (1, 100_000), "calibrate-threepo --seed": _SEEDS,
    "tune-lr --steps": (1, 1_000_000), "tune-lr --prompts-per-step": (1, 100_000), "tune-lr --tail": (1, 1_000_000),
    "plateau --steps": (1, 1_000_000), "plateau --seeds": _SEEDS, "plateau --window": (1, 1_000_000),
    **{f"{command} --threads": _THREADS for command in STUDY_COMMANDS},
}
"""Every integer flag's allowed range ``(lowest, highest)`` (the seeds' and ``--threads``' are those of ``python -m
rlvr_lib``'s ``INT_FLAGS``): a value outside is a usage error naming the flag, the value and the range."""


def _int(command: str, flag: str):
    """``type=`` of an integer flag: an integer in ``STUDY_INT_FLAGS[f"{command} {flag}"]``."""
    return int_at_least(*STUDY_INT_FLAGS[f"{command} {flag}"])


def _range(command: str, flag: str) -> str:
    lo, hi = STUDY_INT_FLAGS[f"{command} {flag}"]
    return f"{lo} to {hi:,}".replace(",", "_")


def _add_common(p: argparse.ArgumentParser, command: str) -> None:
    """``--import`` and ``--threads``, as every command of ``python -m rlvr_lib`` takes them (`prelude` runs them)."""
    add_common_flags(p, _int(command, "--threads"), _range(command, "--threads"))


def _calibrate(args: argparse.Namespace) -> int:
    if args.dynamics and args.profile:
        raise UsageError("--profile: not with --dynamics (one calibration at a time)")
    if args.dynamics:
        return _calibrate_dynamics(args)
    if args.profile:
        return _calibrate_profile(args)
    from rlvr_lib.study.calibration import CalibrationConfig, calibrate, format_report, write_report
    from rlvr_lib.policy import load_policy
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.rollout import KVCacheEngine
    from rlvr_lib.tasks.arithmetic import TESTBED_VERSION

    check_model("--model", args.model)
    check_out_file("--out", args.out)
    flags = {"problems_per_family": "--problems", "hint_problems": "--problems", "samples": "--samples",
             "wide_samples": "--wide-samples", "seed": "--seed"}
    with flag_errors(flags, "--problems"):
        config = CalibrationConfig(
            problems_per_family=args.problems, samples=args.samples, wide_samples=args.wide_samples,
            hint_problems=min(args.problems, 100), seed=args.seed
        )
    model, tokenizer = load_policy(args.model)
    engine = KVCacheEngine(model, tokenizer, batch_size=args.batch_size, progress=True)
    report = calibrate(engine, config, policy=args.model or "embedded tiny policy")
    report["policy_sha"] = policy_fingerprint(args.model)  # which checkpoint this calibration is of
    report["testbed_version"] = TESTBED_VERSION  # and which design of the testbed (the RL pool can change alone)
    return _write_targets(report, args.out, "calibration.json", write_report, format_report)


def _write_targets(report: dict, out: str | None, default_name: str, write, format_report) -> int:
    """Write a calibration report (``out`` or ``results/testbed/<default_name>``), print it; exit 1 if a target fails."""
    path = Path(out) if out else results_root() / "testbed" / default_name
    write(report, path)
    print(format_report(report))
    print(f"wrote {path}")
    return 0 if report["all_targets_met"] else 1


def _calibrate_profile(args: argparse.Namespace) -> int:
    """Measure the strategy profile (`rlvr_lib.tasks.strategy_profile`): the testbed's RL pool and rare_mix."""
    import time

    from rlvr_lib.study.calibration import measure_strategy_profile, profile_operands
    from rlvr_lib.files import write_json_atomic
    from rlvr_lib.policy import load_policy
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.rollout import KVCacheEngine
    from rlvr_lib.tasks.arithmetic import TESTBED_VERSION
    from rlvr_lib.tasks.strategy_profile import (PROFILE_FILE, PROFILE_MAX_NEW_TOKENS, PROFILE_SAMPLES,
                                                 PROFILE_SEED)

    check_model("--model", args.model)
    check_out_file("--out", args.out)
    if args.model and not args.out:  # the shipped profile belongs to the shipped policy
        raise UsageError("--out: required with --model (the default path holds the shipped policy's profile)")
    t0 = time.perf_counter()
    model, tokenizer = load_policy(args.model)
    engine = KVCacheEngine(model, tokenizer, batch_size=args.batch_size, progress=True)
    profile = measure_strategy_profile(engine, profile_operands(), samples=PROFILE_SAMPLES, seed=PROFILE_SEED,
                                       max_new_tokens=PROFILE_MAX_NEW_TOKENS)
    profile = {"policy_sha": policy_fingerprint(args.model), "testbed_version": TESTBED_VERSION,
               "seconds": round(time.perf_counter() - t0, 1), **profile}
    path = Path(args.out) if args.out else PROFILE_FILE
    write_json_atomic(path, profile)
    print(f"profiled {len(profile['counts'])} problems x {len(profile['strategies'])} strategies "
          f"in {profile['seconds']} s; wrote {path}")
    return 0


def _calibrate_dynamics(args: argparse.Namespace) -> int:
    """Train GRPO (and GRPO without its anchor) for several seeds and check the dynamics targets."""
    from rlvr_lib.study.dynamics import DynamicsConfig, format_dynamics, measure_dynamics, write_dynamics

    check_model("--model", args.model)
    check_out_file("--out", args.out)
    check_out_folder("--results-root", args.results_root)
    overrides = {"seeds": tuple(args.seeds), "policy": args.model}
    if args.steps:
        overrides["step_candidates"] = tuple(args.steps)
    if args.kl_coefs:
        overrides["kl_coefs"] = tuple(args.kl_coefs)
    for name in ("problems", "samples", "wide_problems", "wide_samples", "kl_problems"):
        value = getattr(args, f"dyn_{name}")
        if value is not None:
            overrides["problems_per_family" if name == "problems" else name] = value
    flags = {"seeds": "--seeds", "policy": "--model", "step_candidates": "--steps", "kl_coefs": "--kl-coefs",
             **{name: f"--dyn-{name.replace('_', '-')}" for name in ("samples", "wide_problems", "wide_samples",
                                                                       "kl_problems")},
             "problems_per_family": "--dyn-problems"}
    with flag_errors(flags, "--dynamics"):
        config = DynamicsConfig(**overrides)
    report = measure_dynamics(config, root=args.results_root)
    return _write_targets(report, args.out, "dynamics.json", write_dynamics, format_dynamics)


def _calibrate_threepo(args: argparse.Namespace) -> int:
    """3PO's IVON regime: clip_radius and IVON lr by the rule of `rlvr_lib.methods.threepo.calibrate_clip_and_lr`."""
    import torch

    from rlvr_lib.files import write_json_atomic
    from rlvr_lib.study.testbed import calibrated_config
    from rlvr_lib.study.probes.ivon_regime import calibrate_threepo
    from rlvr_lib.policy.load import policy_fingerprint

    fields = {"prompts_per_step": args.prompts_per_step, "group_size": args.group_size, "seed": args.seed}
    check_model("--model", args.model)
    check_out_file("--out", args.out)
    if args.skip >= args.steps:  # the measured means average steps skip..steps: none would be left
        raise UsageError(f"argument --skip: {args.skip} is invalid: must be below --steps ({args.steps})")
    flags = {"prompts_per_step": "--prompts-per-step", "group_size": "--group-size", "seed": "--seed",
             "steps": "--run-steps", "policy": "--model"}
    adamw_method, adamw_fields = args.adamw_method, None
    if args.method not in ("b3po", "m3po", "c3po"):  # a head-to-head composite: its own regime
        from rlvr_lib.methods.compose import SEPARATOR, compose
        from rlvr_lib.study.head_to_head import pair_settings
        from rlvr_lib.study.probes.ivon_regime import ivon_component

        parts = args.method.split(SEPARATOR)
        component = ivon_component(args.method) if len(parts) == 2 else None
        if component is None:
            raise UsageError(f"argument --method: {args.method!r} is invalid: must be b3po, m3po, c3po or a pair "
                             f"'a{SEPARATOR}b' with one of them (notebook 07's composites)")
        adamw_fields = pair_settings(*parts)  # the composite's settings, for its AdamW counterpart too
        compose(*parts, **adamw_fields)
        adamw_method = adamw_method or next(p for p in parts if p != component)
    adamw_method = adamw_method or "grpo"
    with flag_errors(flags, "--adamw-method"):  # the two configs calibrate_threepo builds, built here first
        calibrated_config(adamw_method, **fields, **(adamw_fields or {}), steps=args.run_steps, policy=args.model)
    with flag_errors(flags, "--method"):
        calibrated_config(args.method, **fields, steps=args.run_steps, policy=args.model)
    learnt = {"hess_init_steps": args.hess_init_steps} if args.hess_init_steps else None
    report = calibrate_threepo(method=args.method, adamw_method=adamw_method, run_steps=args.run_steps,
                               steps=args.steps, skip=args.skip, rounds=args.rounds, max_clipped=args.max_clipped,
                               policy=args.model, adamw_fields=adamw_fields, method_options=learnt, **fields)
    report.update(policy_sha=policy_fingerprint(args.model), torch_threads=torch.get_num_threads())
    suffix = ("" if args.method == "b3po" else f"_{args.method}") + ("_learnt_hess" if learnt else "")
    name = f"threepo_calibration{suffix}.json"
    out = Path(args.out) if args.out else results_root() / "testbed" / name
    write_json_atomic(out, report)
    last = report["rounds"][-1]
    print(f"clip_radius {report['clip_radius']:g}, IVON lr {report['lr']:g} (AdamW mean step "
          f"{report['adamw_mean_abs_step']:.3g}; last round measured {last['measured_clipped_frac']:.3f} clipped at "
          f"clip_radius {last['clip_radius']:g}, lr {last['lr']:g}); wrote {out}")
    return 0


def _tune_lr(args: argparse.Namespace) -> int:
    """The equal lr-tuning budget (`rlvr_lib.study.tuning`): every method's grid on the tuning seeds, picks recorded."""
    import torch

    from rlvr_lib.study.testbed import calibrated_config
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.tasks.arithmetic import TESTBED_VERSION
    from rlvr_lib.study.tuning import TUNING_SEEDS, record_tuning, tune_lr

    check_model("--model", args.model)
    check_out_file("--out", args.out)
    out = Path(args.out) if args.out else results_root() / "testbed" / "lr_tuning.json"
    fields = {"steps": args.steps, "prompts_per_step": args.prompts_per_step}
    if args.methods is None:  # the study manifest's methods that take their own lr
        from rlvr_lib.study.tuning import methods_to_tune

        args.methods = list(methods_to_tune())
    for name in args.methods:  # all checked before the first is tuned: a typo in the last stops no sweep halfway
        with flag_errors({"steps": "--steps", "prompts_per_step": "--prompts-per-step", "policy": "--model"},
                         "--methods"):
            calibrated_config(name, **fields, policy=args.model)
    if args.tail > args.steps:
        raise UsageError(f"argument --tail: {args.tail} is invalid: must be at most --steps ({args.steps})")
    # The rule's words name the module by its name when the committed picks were made (results/testbed/
    # lr_tuning.json); record_tuning keeps earlier picks only under an equal header, so the words stay.
    header = {"rule": "rlvr_lib.tuning (x1/3, x1, x3 around each method's default lr; final training accuracy, "
                      f"mean of the last {args.tail} steps over seeds {list(TUNING_SEEDS)})",
              "policy_sha": policy_fingerprint(args.model), "testbed_version": TESTBED_VERSION,
              "config_fields": fields}
    for name in args.methods:  # recorded after each method: a long sweep keeps what it finished
        result = tune_lr(name, tail=args.tail, policy=args.model, progress=args.progress, **fields)
        record_tuning(out, header, name, dict(result, torch_threads=torch.get_num_threads()))
        print(f"{name}: default lr {result['default_lr']:.4g}, pick {result['pick']:.4g} "
              f"(mean final accuracy {result['mean_final_accuracy']})")
    print(f"wrote {out}")
    return 0


def _plateau(args: argparse.Namespace) -> int:
    """Train GRPO longer than the profiles do and find where its training entropy flattens."""
    import torch

    from rlvr_lib.eval.diagnostics import plateau_step
    from rlvr_lib.files import write_json_atomic
    from rlvr_lib.study.testbed import calibrated_config
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.trainer import Trainer

    check_model("--model", args.model)
    check_out_file("--out", args.out)
    if args.steps < 2 * args.window:  # plateau_step compares windows: fewer than two would fail after training
        raise UsageError(f"argument --steps: {args.steps} is invalid: must be at least two --window "
                         f"({2 * args.window})")
    with flag_errors({"steps": "--steps", "seed": "--seeds", "policy": "--model"}, "--steps"):
        configs = {seed: calibrated_config("grpo", steps=args.steps, prompts_per_step=8, group_size=8, seed=seed,
                                       policy=args.model)
                   for seed in args.seeds}  # every seed's config, before the first seed trains
    runs = {}
    for seed, config in configs.items():
        history = Trainer(config).train(progress=True)
        entropy = [h["entropy"] for h in history]
        runs[str(seed)] = {"entropy": entropy, "accuracy": [h["accuracy"] for h in history],
                           "plateau_step": plateau_step(entropy, window=args.window, rel_drop=args.rel_drop)}
    steps = [r["plateau_step"] for r in runs.values()]
    report = {"method": "grpo", "steps": args.steps, "window": args.window, "rel_drop": args.rel_drop,
              "policy_sha": policy_fingerprint(args.model), "torch_threads": torch.get_num_threads(),
              "plateau_step_per_seed": steps,
              "plateau_step": None if None in steps else max(steps), "runs": runs}
    out = Path(args.out) if args.out else results_root() / "testbed" / "entropy_plateau.json"
    write_json_atomic(out, report)
    print(f"entropy flattens by step {report['plateau_step']} (per seed {steps}); wrote {out}")
    return 0 if report["plateau_step"] is not None else 1


def _reproduce(argv: list[str]) -> int:
    from rlvr_lib.study.reproduce import main

    return main(argv)


def _verify(argv: list[str]) -> int:
    from rlvr_lib.study.reproduce import main

    return main(["--verify", *argv])


def _compare_roots(argv: list[str]) -> int:
    from rlvr_lib.study.verify import compare_main

    return compare_main(argv)


def _report(argv: list[str]) -> int:
    from rlvr_lib.study.report import update_readme

    OneLineParser(prog="python -m rlvr_lib.study report",
                  description="Render README's parts, docs/results.md and docs/reliability.md from "
                              "results/.").parse_args(argv)
    changed = update_readme()
    print("README's rendered parts, docs/results.md and docs/reliability.md",
          "updated" if changed else "already up to date")
    return 0


def _calibrated_config(args: argparse.Namespace) -> int:
    import yaml

    from rlvr_lib.study.testbed import testbed_settings

    check_out_file("--out", args.out)
    try:
        settings = testbed_settings(args.method)
    except ValueError as err:
        raise UsageError(f"method: {err}") from None
    text = yaml.safe_dump(settings, sort_keys=False)
    if args.out is None:
        print(text, end="")
    else:
        Path(args.out).expanduser().write_text(text)
        print(f"wrote {args.out}")
    return 0


def _bench(argv: list[str]) -> int:
    from rlvr_lib.study.bench.__main__ import main

    main(argv)
    return 0


def _regimes(argv: list[str]) -> int:
    from rlvr_lib.study.regimes import main

    return main(argv)


def _provenance(argv: list[str]) -> int:
    from rlvr_lib.study.provenance import main

    return main(argv)


def _what_changed(argv: list[str]) -> int:
    from rlvr_lib.study.what_changed import main

    return main(argv)


def _plan(argv: list[str]) -> int:
    from rlvr_lib.study.plan import main

    return main(argv)


MODULE_COMMANDS = {
    "plan": (_plan, "each notebook's cached runs, listed without executing it (rlvr_lib.study.plan)"),
    "reproduce": (_reproduce, "every notebook with papermill, resumably (python -m rlvr_lib.study.reproduce)"),
    "verify": (_verify, "recompute a sample of committed runs and compare (reproduce --verify)"),
    "compare-roots": (_compare_roots, "two results roots compared record by record, bit for bit except their times "
                                      "(rlvr_lib.study.verify)"),
    "report": (_report, "render README's parts and the results pages from results/ (rlvr_lib.study.report)"),
    "bench": (_bench, "benchmarks against their baselines, written to results/bench (rlvr_lib.study.bench)"),
    "regimes": (_regimes, "notebook 08's regime designs and gate (rlvr_lib.study.regimes)"),
    "provenance": (_provenance, "which committed records are stale, and declared (rlvr_lib.study.provenance)"),
    "what-changed": (_what_changed, "each notebook's claims verdicts, archived against recomputed, and the cause "
                                    "(rlvr_lib.study.what_changed)"),
}
"""Commands that run a study module's own command line with the remaining arguments (``--help``: its flags)."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] in MODULE_COMMANDS:
            return MODULE_COMMANDS[argv[0]][0](argv[1:])
        return run_command(build_parser(), argv)
    except BrokenPipeError:  # the reader of stdout went away (`... plan | head -1`): nothing more to say, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would fail again
        return 0


def build_parser() -> OneLineParser:
    """The study's parser: its own commands (`STUDY_COMMANDS`, each sub-parser runs ``func``) and, for ``--help``,
    the names of `MODULE_COMMANDS` (dispatched by `main` before parsing)."""
    parser = OneLineParser(prog="python -m rlvr_lib.study", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="measure a policy against the testbed's calibration targets")
    c.add_argument("--model", default=None, help="hub name or local path (default: the embedded tiny policy)")
    c.add_argument("--problems", type=_int("calibrate", "--problems"), default=200, help="problems per family")
    c.add_argument("--samples", type=_int("calibrate", "--samples"), default=64, help="samples per problem at T=1")
    c.add_argument("--wide-samples", type=_int("calibrate", "--wide-samples"), default=256,
                   help="samples per problem on the in-distribution families and rare_mix (pass@256 targets)")
    c.add_argument("--dynamics", action="store_true",
                   help="the dynamics calibration instead: train GRPO and check the bottleneck's targets "
                        "(writes results/testbed/dynamics.json; runs are cached under results/testbed_dynamics)")
    c.add_argument("--profile", action="store_true",
                   help="measure the strategy profile instead: each strategy's hinted successes on every "
                        "in-distribution RL and evaluation problem, which define the RL pool and rare_mix "
                        "(writes rlvr_lib/policy/checkpoints/tiny-mul/strategy_profile.json)")
    c.add_argument("--seeds", type=_int("calibrate", "--seeds"), nargs="+",
                   default=[0, 1, 2], help="--dynamics: training seeds")
    c.add_argument("--steps", type=_int("calibrate", "--steps"), nargs="+", default=None,
                   help="--dynamics: step counts to evaluate (default: rlvr_lib.study.dynamics.STEP_CANDIDATES)")
    c.add_argument("--kl-coefs", type=number_in(0, None, lo_open=True), nargs="+", default=None,
                   help="--dynamics: the anchor's candidate betas, tried in order "
                        "(default: rlvr_lib.study.dynamics.KL_COEF_CANDIDATES)")
    c.add_argument("--dyn-problems", type=_int("calibrate", "--dyn-problems"),
                   default=None, help="--dynamics: problems per family (main evaluation)")
    c.add_argument("--dyn-samples", type=_int("calibrate", "--dyn-samples"),
                   default=None, help="--dynamics: samples per problem (main evaluation)")
    c.add_argument("--dyn-wide-problems", type=_int("calibrate", "--dyn-wide-problems"),
                   default=None, help="--dynamics: problems of the pass@256 evaluation")
    c.add_argument("--dyn-wide-samples", type=_int("calibrate", "--dyn-wide-samples"),
                   default=None, help="--dynamics: samples of the pass@256 evaluation")
    c.add_argument("--dyn-kl-problems", type=_int("calibrate", "--dyn-kl-problems"),
                   default=None, help="--dynamics: prompts of the KL measurement")
    c.add_argument("--results-root",
                   default=None, help="--dynamics: results root of the cached runs (default results/)")
    c.add_argument("--seed", type=_int("calibrate", "--seed"), default=0)
    c.add_argument("--batch-size", type=_int("calibrate", "--batch-size"), default=512)
    c.add_argument("--out", default=None, help="JSON path (default: results/testbed/calibration.json)")
    _add_common(c, "calibrate")
    c.set_defaults(func=prelude(_calibrate), parser=c)
    q = sub.add_parser("calibrate-threepo",
                       help="3PO's IVON regime: clip_radius (<= 20%% clipped) and the IVON lr (AdamW's mean step)")
    q.add_argument("--model", default=None, help="hub name or local path (default: the embedded tiny policy)")
    q.add_argument("--method", default="b3po",
                   help="the 3PO variant probed (b3po, m3po, c3po), or a composite of notebook 07 ('b3po+vigor')")
    q.add_argument("--adamw-method", default=None,
                   help="the AdamW method whose mean step IVON's matches (default: grpo; a composite's other component)")
    q.add_argument("--run-steps", type=_int("calibrate-threepo", "--run-steps"),
                   default=100, help="the runs' length (sets the lr schedule)")
    q.add_argument("--hess-init-steps", type=_int("calibrate-threepo", "--hess-init-steps"), default=0,
                   help="IVON's Hessian learnt over K SFT steps first (the learnt-Hessian ablation; 0: constant)")
    q.add_argument("--steps", type=_int("calibrate-threepo", "--steps"), default=20, help="RL steps probed per round")
    q.add_argument("--skip", type=_int("calibrate-threepo", "--skip"), default=5, help="first steps left out (warm-up)")
    q.add_argument("--rounds", type=_int("calibrate-threepo", "--rounds"),
                   default=2, help="probe again at the previous round's picks")
    q.add_argument("--max-clipped", type=number_in(0, 1, lo_open=True, hi_open=True),
                   default=0.2, help="largest share of clipped weights")
    q.add_argument("--prompts-per-step", type=_int("calibrate-threepo", "--prompts-per-step"), default=8)
    q.add_argument("--group-size", type=_int("calibrate-threepo", "--group-size"), default=8)
    q.add_argument("--seed", type=_int("calibrate-threepo", "--seed"), default=0)
    q.add_argument("--out", default=None, help="JSON path (default: results/testbed/threepo_calibration.json; "
                                                 "for another method threepo_calibration_<method>.json)")
    _add_common(q, "calibrate-threepo")
    q.set_defaults(func=prelude(_calibrate_threepo), parser=q)
    u = sub.add_parser("tune-lr", help="equal lr-tuning budget: x1/3, x1, x3 on 2 tuning seeds, pick by final accuracy")
    u.add_argument("--methods", nargs="+", default=None,
                   help="registered methods to tune (default: the study's, rlvr_lib.study.tuning.methods_to_tune)")
    u.add_argument("--model", default=None, help="hub name or local path (default: the embedded tiny policy)")
    u.add_argument("--steps", type=_int("tune-lr", "--steps"), default=100, help="RL steps per tuning run")
    u.add_argument("--prompts-per-step", type=_int("tune-lr", "--prompts-per-step"), default=8)
    u.add_argument("--tail", type=_int("tune-lr", "--tail"),
                   default=5, help="final accuracy: mean of the last TAIL steps")
    u.add_argument("--progress", action="store_true", help="show a progress bar per run")
    u.add_argument("--out", default=None, help="JSON path (default: results/testbed/lr_tuning.json)")
    _add_common(u, "tune-lr")
    u.set_defaults(func=prelude(_tune_lr), parser=u)
    t = sub.add_parser("plateau", help="where GRPO's training entropy flattens (sets the full profile's steps)")
    t.add_argument("--model", default=None, help="hub name or local path (default: the embedded tiny policy)")
    t.add_argument("--steps", type=_int("plateau", "--steps"), default=200)
    t.add_argument("--seeds", type=_int("plateau", "--seeds"), nargs="+", default=[0, 1])
    t.add_argument("--window", type=_int("plateau", "--window"), default=20)
    t.add_argument("--rel-drop", type=number_in(0, None, lo_open=True), default=0.1)
    t.add_argument("--out", default=None, help="JSON path (default: results/testbed/entropy_plateau.json)")
    _add_common(t, "plateau")
    t.set_defaults(func=prelude(_plateau), parser=t)
    s = sub.add_parser("testbed-config",
                       help="a method's testbed calibration (rlvr_lib.study.testbed) as a settings file for "
                            "'python -m rlvr_lib train --config'")
    s.add_argument("method", help="a registered method (or a composite 'a+b' the testbed settles)")
    s.add_argument("--out", default=None, help="YAML path (default: print it)")
    _add_common(s, "testbed-config")
    s.set_defaults(func=prelude(_calibrated_config), parser=s)
    for name, (_, text) in MODULE_COMMANDS.items():  # listed in --help; dispatched above
        sub.add_parser(name, help=text, add_help=False)
    return parser


if __name__ == "__main__":
    sys.exit(main())
