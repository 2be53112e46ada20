"""Command line: ``python -m rlvr_lib {pretrain,calibrate} ...``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr_lib.experiments import results_root


def _pretrain(args: argparse.Namespace) -> int:
    from rlvr_lib.policy.load import TINY_POLICY_DIR
    from rlvr_lib.policy.pretrain import PretrainConfig, pretrain

    config = PretrainConfig(seed=args.seed, **({"steps": args.steps} if args.steps else {}))
    out = Path(args.out) if args.out else TINY_POLICY_DIR
    log = pretrain(config, out)
    print(f"saved {log['parameters']:,}-parameter policy to {out} in {log['train_seconds']} s (final loss {log['final_loss']})")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from rlvr_lib.calibration import CalibrationConfig, calibrate, format_report, write_report
    from rlvr_lib.policy import load_policy
    from rlvr_lib.rollout import HFEngine

    model, tokenizer = load_policy(args.model)
    engine = HFEngine(model, tokenizer, batch_size=args.batch_size, progress=True)
    config = CalibrationConfig(
        problems_per_family=args.problems, samples=args.samples, hint_problems=min(args.problems, 100), seed=args.seed
    )
    report = calibrate(engine, config, policy=args.model or "embedded tiny policy")
    out = Path(args.out) if args.out else results_root() / "testbed" / "calibration.json"
    write_report(report, out)
    print(format_report(report))
    print(f"wrote {out}")
    return 0 if report["all_targets_met"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr_lib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pretrain", help="rebuild the embedded tiny policy (SFT on the strategy mixture)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: PretrainConfig.steps)")
    p.add_argument("--out", default=None, help="output directory (default: the embedded checkpoint)")
    p.set_defaults(func=_pretrain)
    c = sub.add_parser("calibrate", help="measure a policy against the testbed's calibration targets")
    c.add_argument("--model", default=None, help="hub name or local path (default: the embedded tiny policy)")
    c.add_argument("--problems", type=int, default=200, help="problems per family")
    c.add_argument("--samples", type=int, default=64, help="samples per problem at T=1")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--batch-size", type=int, default=512)
    c.add_argument("--out", default=None, help="JSON path (default: results/testbed/calibration.json)")
    c.set_defaults(func=_calibrate)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
