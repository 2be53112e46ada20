"""Command line of the library: ``python -m rlvr_lib {pretrain,train,evaluate} ...``.

A bad input (a flag's value, ``--model``, ``--out``, a config value) is a usage error: one line naming the
flag and what is allowed, exit status 2, nothing created (`rlvr_lib.cli_checks`). Each command checks its
inputs first, before it loads a model or writes anything; what fails after that is not an input error.

``train`` (`rlvr_lib.run.train`) runs one method on one process, or on several under a launcher
(``accelerate launch --multi_gpu [...] -m rlvr_lib train ...`` or
``torchrun --nproc_per_node N -m rlvr_lib train ...``); see ``configs/README.md``. With ``--backend trl`` the
method runs on TRL's ``GRPOTrainer`` (`rlvr_lib.backends.trl`; ``--trl-set KEY=VALUE`` sets ``GRPOConfig`` fields).
Every command takes ``--import MODULE`` (a user's methods, tasks and rewards; `rlvr_lib.plugins`, which also loads
installed packages' ``rlvr_lib.plugins`` entry points) and ``--threads N`` (`rlvr_lib.cli_checks.default_threads`);
``train`` and ``evaluate`` take ``--dataset`` (a Hub data set or a local file as a `MathTask`, with ``--prompt-column`` /
``--answer-column`` / ``--split``). The study's commands (calibrate, calibrate-threepo, tune-lr, plateau, reproduce, ...) are
``python -m rlvr_lib.study``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Iterator

from rlvr_lib.cli_checks import (OneLineParser, UsageError, add_common_flags, check_model, check_out_file,
                                 check_out_folder, existing_file, flag_errors, int_at_least, number_in, run_command)
from rlvr_lib.cli_checks import prelude as _prelude
# --threads' default, shared with the study's command line: named here as before (tests, users' scripts)
from rlvr_lib.cli_checks import (LOCAL_PROCESS_ENV, apply_threads, default_threads, host_cores,  # noqa: F401
                                 local_processes)
from rlvr_lib.backends import BACKENDS

STUDY_COMMANDS = ("calibrate", "calibrate-threepo", "tune-lr", "plateau", "reproduce", "verify", "report", "bench",
                  "regimes", "provenance")
"""Commands of ``python -m rlvr_lib.study`` (named here, not imported: the library never imports the study)."""


INT_FLAGS: dict[str, tuple[int, int]] = {
    "pretrain --seed": (0, 2**32 - 1), "pretrain --steps": (1, 10_000_000),
    "train --steps": (1, 1_000_000), "train --eval-every": (0, 1_000_000),
    "evaluate --problems": (1, 1_000_000), "evaluate --samples": (1, 100_000), "evaluate --group-size": (1, 100_000),
    "evaluate --max-new-tokens": (1, 100_000), "evaluate --seed": (0, 2**32 - 1),
    "evaluate --batch-size": (1, 1_000_000),
    "pretrain --threads": (1, 4096), "train --threads": (1, 4096), "evaluate --threads": (1, 4096),
}
"""Every integer flag's allowed range ``(lowest, highest)``: a value outside is a usage error naming the flag, the
value and the range. ``train``'s config fields (``--config``, ``--set``) have theirs in
`rlvr_lib.config_files.CONFIG_INT_BOUNDS` (``train --steps`` is that of ``steps``)."""


def _int_flag(command: str, flag: str):
    """``type=`` of an integer flag: an integer in ``INT_FLAGS[f"{command} {flag}"]``."""
    return int_at_least(*INT_FLAGS[f"{command} {flag}"])


def _range(command: str, flag: str) -> str:
    lo, hi = INT_FLAGS[f"{command} {flag}"]
    return f"{lo} to {hi:,}".replace(",", "_")


def _pretrain(args: argparse.Namespace) -> int:
    from rlvr_lib.policy.load import POLICY_DIRS
    from rlvr_lib.policy.pretrain import pretrain, size_config

    overrides = {name: value for name, value in (("seed", args.seed), ("steps", args.steps)) if value is not None}
    check_out_folder("--out", args.out)
    with flag_errors({"seed": "--seed", "steps": "--steps"}, "--steps"):
        config = size_config(args.size, **overrides)
    out = Path(args.out) if args.out else POLICY_DIRS[args.size]
    log = pretrain(config, out)
    print(f"saved {log['parameters']:,}-parameter policy to {out} in {log['train_seconds']} s (final loss {log['final_loss']})")
    return 0


def _add_common(p: argparse.ArgumentParser, command: str) -> None:
    """The flags every command takes: ``--import`` and ``--threads`` (`rlvr_lib.cli_checks.add_common_flags`)."""
    add_common_flags(p, _int_flag(command, "--threads"), _range(command, "--threads"))


DATASET_FLAGS = {"source": "--dataset", "prompt_column": "--prompt-column", "answer_column": "--answer-column",
                 "split": "--split"}
"""``--dataset`` and its flags: ``{dataset block key: flag}`` (`rlvr_lib.config_files.use_dataset`)."""


def _dataset_block(args: argparse.Namespace) -> dict | None:
    """The ``dataset`` block the flags give (``None`` without ``--dataset``); a column flag without it, or with
    ``--task``, is a usage error."""
    given = {key: getattr(args, key if key != "source" else "dataset") for key in DATASET_FLAGS}
    given = {key: value for key, value in given.items() if value is not None}
    if "source" not in given:
        extra = [DATASET_FLAGS[key] for key in given]
        if extra:
            raise UsageError(f"argument {extra[0]}: only with --dataset (a Hub data set name or a local "
                             ".jsonl/.json/.csv/.parquet file)")
        return None
    if args.task is not None:
        raise UsageError("argument --dataset: not with --task (the data set is the task)")
    return given


def _add_dataset_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default=None, metavar="NAME_OR_FILE",
                   help="your data as the task (a MathTask, graded by math-verify): a Hub data set name or a local "
                        ".jsonl/.json/.csv/.parquet file (datasets.load_dataset); instead of --task")
    p.add_argument("--prompt-column", dest="prompt_column", default=None,
                   help="--dataset: the question's column (default: prompt)")
    p.add_argument("--answer-column", dest="answer_column", default=None,
                   help="--dataset: the gold answer's column (default: answer)")
    p.add_argument("--split", default=None, help="--dataset: the split to train on / evaluate (default: train)")


DTYPES = ("bfloat16", "float16", "float32")
"""``train --dtype`` choices (torch dtype names)."""


def _train(args: argparse.Namespace) -> int:
    """Build the config (preset < --config file < --set < flags), train, write under --out."""
    _check_no_sharding(args.backend)
    _check_mixed_precision(args.backend)
    config = _train_config(args)
    _check_shardable(config)
    _use_server_url(args.server_url, config)
    trl_args = _trl_args(args, config)
    out = Path(args.out) if args.out else Path("runs") / f"{config.method}-s{config.seed}"
    _check_train_out(out, config)
    import torch  # the training stack, imported once the input is known good: a usage error comes before it

    from rlvr_lib.run import train
    from rlvr_lib.trainer import CheckpointError

    try:
        with hub_data_errors("train", config.task):
            trained = train(config, out, dtype=getattr(torch, args.dtype), backend=args.backend, trl_args=trl_args,
                            progress=not args.no_progress)
    except CheckpointError as err:  # damage only a full read finds (a sha256 mismatch): one line, status 1
        raise SystemExit(f"python -m rlvr_lib train: error: {' '.join(str(err).split())}") from None
    if trained is not None:  # rank 0
        last = trained.history[-1] if trained.history else {}
        checkpoint = "" if args.backend == "trl" else f", {out}/checkpoint.pt"  # TRL's lack the method's state
        print(f"trained {config.method} for {config.steps} steps (last step: reward_mean {last.get('reward_mean')}, "
              f"loss {last.get('loss')}); wrote {out / trained.record.name}{checkpoint}, {out}/model")
    return 0


def _use_server_url(url: str | None, config) -> None:
    """``--server-url``: only with ``--engine vllm-server``, checked, and handed to the engine the trainer builds
    through ``RLVR_VLLM_SERVER_URL`` (`rlvr_lib.rollout.vllm_server`)."""
    if url is None:
        return
    if config.engine != "vllm-server":
        raise UsageError(f"argument --server-url: only with --engine vllm-server (the engine is {config.engine!r})")
    from rlvr_lib.rollout.vllm_server import SERVER_URL_ENV, server_url

    with flag_errors({}, "--server-url"):
        os.environ[SERVER_URL_ENV] = server_url(url)


def _check_no_sharding(backend: str) -> None:
    """Refuse, before anything is loaded, a launch under an accelerate DeepSpeed config
    (`rlvr_lib.distributed.sharded_launch`), which neither backend hosts (FSDP: both, through
    `rlvr_lib.distributed`)."""
    from rlvr_lib.distributed import DEEPSPEED_REFUSAL, sharded_launch

    if "DeepSpeed" in sharded_launch():
        raise UsageError(f"argument --backend: {backend!r} does not host DeepSpeed (set by the accelerate launch "
                         f"config): {DEEPSPEED_REFUSAL}")


def _check_mixed_precision(backend: str) -> None:
    """The native loop applies no autocast: a launch config asking for accelerate's ``mixed_precision`` (which
    ``accelerate launch`` passes as ``ACCELERATE_MIXED_PRECISION``) would be silently ignored, so it is refused.
    (`--backend trl`: transformers' Trainer applies it.)"""
    asked = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    if backend == "native" and asked not in ("no", ""):
        raise UsageError(f"argument --backend: 'native' does not apply accelerate's mixed_precision={asked!r} (set by "
                         "the accelerate launch config): set mixed_precision: 'no' there and choose the parameters' "
                         "dtype with --dtype (e.g. --dtype bfloat16), or use --backend trl")


def _check_shardable(config) -> None:
    """On a sharded (FSDP) launch, refuse before loading anything what the trainer would refuse after
    (`rlvr_lib.trainer.check_shardable`: the vLLM engine), as a usage error naming the flag."""
    from rlvr_lib.distributed import sharded_launch

    if "FSDP" not in sharded_launch() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    from rlvr_lib.trainer import check_shardable

    with flag_errors({}, "--engine"):
        check_shardable(config)


TRAIN_FLAGS = {"task": "--task", "policy": "--model", "engine": "--engine", "steps": "--steps",
               "reward_funcs": "--reward-func", "report_to": "--report-to", "eval_every": "--eval-every"}
"""``train``'s flags that set a `TrainerConfig` field: ``{field: flag}``."""


def _train_config(args: argparse.Namespace):
    """``train``'s validated `TrainerConfig`; a bad value is a `UsageError` naming the layer that set it."""
    from rlvr_lib.config_files import build_config, load_settings, parse_assignments

    check_model("--model", args.model)
    with flag_errors({}, "--config"):
        file = load_settings(args.config) if args.config else {}
    with flag_errors({}, "--set"):
        assignments = parse_assignments(args.set)
    flags = {field: value for field, value in (("task", args.task), ("policy", args.model), ("engine", args.engine),
                                               ("steps", args.steps), ("eval_every", args.eval_every),
                                               ("reward_funcs", args.reward_funcs and tuple(args.reward_funcs)),
                                               ("report_to", args.report_to and tuple(args.report_to)))
             if value is not None}
    block = _dataset_block(args)
    if block is not None:
        with flag_errors(DATASET_FLAGS, "--dataset"):
            from rlvr_lib.config_files import use_dataset

            flags["task"] = use_dataset(block, "--dataset")
    # The flag named for a bad field is the last layer that set it (the one build_config kept).
    where = {field: "--config" for field in file} | {field: "--set" for field in assignments}
    where |= {field: TRAIN_FLAGS[field] for field in flags}
    if block is not None:
        where["task"] = "--dataset"
    where["method"] = "--method" if args.method is not None else where.get("method", "--method")
    layers = [(args.config, file)] if args.config else []
    with flag_errors(where, "--set" if assignments else "--config" if args.config else "--method"):
        try:
            return build_config(args.method, *layers, ("--set", assignments), ("command line", flags))
        except ValueError as err:
            _check_task_family(err, where, flags.get("task", assignments.get("task", file.get("task"))))
            raise


def _check_task_family(err: ValueError, where: dict, task: object) -> None:
    """A `UsageError` of the layer that set the task when ``err`` is the default ``train_family`` (one no layer set)
    that the task lacks: ``--task math500`` with a method whose training family is ``train``. Returns otherwise."""
    if not str(err).startswith("TrainerConfig.train_family=") or "train_family" in where or "task" not in where:
        return
    from rlvr_lib.tasks import get_task

    try:
        found = get_task(str(task))
    except (KeyError, ValueError):
        return
    families = list(found.families)
    family = _TRAIN_FAMILY.match(str(err))
    origin = f". {found.data_origin()}" if hasattr(found, "data_origin") else ""
    raise UsageError(f"argument {where['task']}: task {task!r} has no family {family.group(1) if family else ''} "
                     f"(the default train_family: no flag, file or --set gave one); its families are {families}: "
                     f"pass e.g. --set train_family={families[0]}{origin}")


_TRAIN_FAMILY = re.compile(r"TrainerConfig\.train_family=('[^']*'|\S+)")


def _trl_args(args: argparse.Namespace, config) -> dict:
    """``--trl-set`` as ``GRPOConfig`` fields, checked (with ``--backend trl``) before anything is loaded."""
    from rlvr_lib.config_files import parse_assignments

    if args.trl_set and args.backend != "trl":
        raise UsageError("argument --trl-set: only with --backend trl")
    if args.backend != "trl":
        return {}
    with flag_errors({}, "--trl-set"):
        trl_args = parse_assignments(args.trl_set)
    import os
    import tempfile

    from rlvr_lib.backends.trl import check_hostable, grpo_args
    from rlvr_lib.methods import build_method

    processes = int(os.environ.get("WORLD_SIZE", "1"))
    with flag_errors({}, "--trl-set" if trl_args else "--backend"), tempfile.TemporaryDirectory() as scratch:
        args_ = grpo_args(config, scratch, processes=processes,
                          trl_args={**({"use_vllm": True} if config.engine == "vllm" else {}), **trl_args})
        check_hostable(build_method(config), config, args_, processes)
    return trl_args


def _check_train_out(out: Path, config) -> None:
    """``--out`` is a folder to write whose name is file-name safe, and any checkpoint in it is of this config
    (a rerun resumes from it): `rlvr_lib.run.check_run`'s checks, made here as usage errors."""
    from rlvr_lib.run import SAFE_NAME, check_resumable
    from rlvr_lib.validation import invalid

    check_out_folder("--out", str(out))
    if not SAFE_NAME.match(out.absolute().name):  # the record's experiment is the folder's name
        raise UsageError(str(invalid("--out", str(out), "a folder whose name is file-name safe (letters, digits "
                                     "and . _ + = @ -, not starting with a symbol)")))
    with flag_errors({}, "--out"):
        check_resumable(config, out)


EVAL_FLAGS = {"task": "--task", "families": "--families", "problems_per_family": "--problems",
              "samples": "--samples", "temperature": "--temperature", "max_new_tokens": "--max-new-tokens",
              "seed": "--seed", "greedy": "--greedy", "group_size": "--group-size"}
"""``evaluate``'s flags that set an `EvalSpec` field: ``{field: flag}``."""


def _evaluate(args: argparse.Namespace) -> int:
    """Evaluate a policy (`rlvr_lib.eval.policy_eval.evaluate_policy`) and write the summary as JSON."""
    from rlvr_lib.eval.policy_eval import EvalSpec, evaluate_policy
    from rlvr_lib.files import write_json_atomic

    check_model("--model", args.model)
    check_out_file("--out", args.out)
    given = {field: getattr(args, field) for field in EVAL_FLAGS if getattr(args, field) is not None}
    block = _dataset_block(args)
    if block is not None:
        from rlvr_lib.config_files import use_dataset

        with flag_errors(DATASET_FLAGS, "--dataset"):
            given["task"] = use_dataset(block, "--dataset")
    if "families" in given:
        given["families"] = tuple(given["families"])
    with flag_errors(EVAL_FLAGS | ({"task": "--dataset"} if block is not None else {}), "--task"):
        spec = EvalSpec.from_dict(given)
    from rlvr_lib.policy import load_policy  # transformers, imported once the input is known good
    from rlvr_lib.policy.load import policy_fingerprint
    from rlvr_lib.rollout import KVCacheEngine

    model, tokenizer = load_policy(args.model)
    with hub_data_errors("evaluate", spec.task):
        summary = evaluate_policy(KVCacheEngine(model, tokenizer, batch_size=args.batch_size, progress=True), spec)
    out = Path(args.out) if args.out else Path("eval.json")
    write_json_atomic(out, {"policy": args.model, "policy_sha": policy_fingerprint(args.model),
                            "spec": spec.to_dict(), "final": summary})
    print(f"evaluated {args.model or 'the embedded tiny policy'} on {spec.task} ({', '.join(spec.families)}): "
          f"pass@1 {summary['average']['pass_at_k']['1']} (in-distribution mean); wrote {out}")
    return 0


_HUB_MODULES = ("datasets", "huggingface_hub", "requests", "urllib3", "httpx", "httpcore", "fsspec", "aiohttp")


@contextlib.contextmanager
def hub_data_errors(command: str, task: str) -> Iterator[None]:
    """End a command whose task could not fetch its data from the Hugging Face Hub (no network, offline mode, no
    cached copy) in one line (exit status 1): what failed, that the task reads the Hub, and how to run it from a
    local copy. Other errors pass through."""
    try:
        yield
    except OSError as err:
        if not (isinstance(err, (ConnectionError, TimeoutError)) or type(err).__module__.split(".")[0] in _HUB_MODULES):
            raise
        from rlvr_lib.tasks import get_task

        found = get_task(task)
        origin = found.data_origin() if hasattr(found, "data_origin") else f"Task {task!r} reads data it fetches"
        message = (f"task {task!r} could not load its data ({type(err).__name__}: {err}). {origin}. To run it "
                   "without the network, load it once where the Hub is reachable (the same command caches it under "
                   "HF_HOME, default ~/.cache/huggingface), copy that cache here and set HF_HOME to it and "
                   "HF_HUB_OFFLINE=1")
        raise SystemExit(f"python -m rlvr_lib {command}: error: {' '.join(message.split())}") from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv and argv[0] in STUDY_COMMANDS:  # moved: say where, in the usage error's one line
        parser.error(f"argument command: {argv[0]!r} is a command of the study: python -m rlvr_lib.study {argv[0]} ...")
    return run_command(parser, argv)


def build_parser() -> OneLineParser:
    """The command line's parser: ``pretrain``, ``train`` and ``evaluate`` (each sub-parser runs ``func``)."""
    parser = OneLineParser(prog="python -m rlvr_lib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pretrain", help="rebuild the embedded tiny policy, or pretrain the second size (SFT on the "
                                        "strategy mixture)")
    p.add_argument("--seed", type=_int_flag("pretrain", "--seed"), default=None,
                   help=f"default: PretrainConfig.seed (the shipped checkpoint's); {_range('pretrain', '--seed')}")
    p.add_argument("--steps", type=_int_flag("pretrain", "--steps"), default=None,
                   help=f"optimizer steps (default: PretrainConfig.steps); {_range('pretrain', '--steps')}")
    p.add_argument("--size", choices=("tiny", "small"), default="tiny",
                   help="model shape (rlvr_lib.policy.pretrain.POLICY_SIZES): tiny, the shipped policy; small, "
                        "twice its width (about 4x the parameters)")
    p.add_argument("--out", default=None,
                   help="output directory (default: the size's checkpoint, rlvr_lib/policy/checkpoints/<size>-mul)")
    _add_common(p, "pretrain")
    p.set_defaults(func=_prelude(_pretrain), parser=p)
    r = sub.add_parser("train", help="train one method (one process, or several under accelerate launch / torchrun)")
    r.add_argument("--method", default=None, help="registered method (default: the config file's `method`)")
    r.add_argument("--task", default=None, help="registered task (default: the method's / config's)")
    r.add_argument("--model", default=None, help="hub name or local path (default: the embedded tiny policy)")
    r.add_argument("--engine", default=None, help="rollout engine: kvcache (default), hf, vllm or vllm-server")
    r.add_argument("--server-url", default=None, metavar="URL",
                   help="--engine vllm-server: the vLLM server, e.g. http://127.0.0.1:8000 (docs/scaling-out.md)")
    r.add_argument("--config", type=existing_file, default=None,
                   help="YAML/JSON file of TrainerConfig fields, `imports:` and a `dataset:` block (see configs/)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a TrainerConfig field (repeatable; VALUE: JSON, a YAML {...}/[...], else a string)")
    r.add_argument("--steps", type=_int_flag("train", "--steps"), default=None,
                   help=f"RL steps (overrides the config); {_range('train', '--steps')}")
    r.add_argument("--dtype", default="float32", choices=DTYPES, help="parameter dtype of the policy")
    r.add_argument("--reward-func", dest="reward_funcs", action="append", default=None, metavar="MODULE:FUNCTION",
                   help="a reward function with TRL's signature (repeatable; an import path or a registered name), "
                        "summed with the verifier's reward (reward_weights, use_verifier: --set)")
    r.add_argument("--report-to", nargs="+", default=None, metavar="TRACKER",
                   help="log each step to these trackers: tensorboard, wandb, trackio, mlflow, ... (files under "
                        "--out/logs)")
    r.add_argument("--eval-every", type=_int_flag("train", "--eval-every"), default=None,
                   help="evaluate every N steps with eval_spec (--set eval_spec={...}); records in --out/eval")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (it is off without a terminal too)")
    r.add_argument("--backend", default="native", choices=BACKENDS,
                   help="training loop: native (rlvr_lib.trainer, default) or trl (TRL's GRPOTrainer running the "
                        "method's hooks, rlvr_lib.backends.trl; --engine vllm uses TRL's vLLM)")
    r.add_argument("--trl-set", action="append", default=[], metavar="KEY=VALUE",
                   help="--backend trl: a GRPOConfig field (repeatable), e.g. vllm_mode=server, logging_steps=10")
    r.add_argument("--out", default=None,
                   help="output folder of the checkpoint, final model and run record (default: runs/<method>-s<seed>)")
    _add_dataset_flags(r)
    _add_common(r, "train")
    r.set_defaults(func=_prelude(_train), parser=r)
    e = sub.add_parser("evaluate", help="evaluate a policy on a task's families (pass@k, diversity, diagnostics)")
    e.add_argument("--model", default=None, help="hub name or local path, e.g. runs/<run>/model (default: the "
                                                  "embedded tiny policy)")
    e.add_argument("--task", default=None, help="registered task (default: EvalSpec's, arith)")
    e.add_argument("--families", nargs="+", default=None, help="the task's families (default: EvalSpec's)")
    e.add_argument("--problems", dest="problems_per_family", type=_int_flag("evaluate", "--problems"), default=None,
                   help=f"problems per family; {_range('evaluate', '--problems')}")
    e.add_argument("--samples", type=_int_flag("evaluate", "--samples"), default=None,
                   help=f"samples per problem (pass@k up to this); {_range('evaluate', '--samples')}")
    e.add_argument("--group-size", type=_int_flag("evaluate", "--group-size"), default=None,
                   help="G of the zero-advantage share (divides --samples; default: EvalSpec's); "
                        f"{_range('evaluate', '--group-size')}")
    e.add_argument("--temperature", type=number_in(0, None, lo_open=True), default=None)
    e.add_argument("--max-new-tokens", type=_int_flag("evaluate", "--max-new-tokens"), default=None,
                   help=_range("evaluate", "--max-new-tokens"))
    e.add_argument("--greedy", action="store_true", default=None, help="argmax decoding (one sample per problem)")
    e.add_argument("--seed", type=_int_flag("evaluate", "--seed"), default=None,
                   help=f"sampling seed; {_range('evaluate', '--seed')}")
    e.add_argument("--batch-size", type=_int_flag("evaluate", "--batch-size"), default=512,
                   help=f"rollouts per forward; {_range('evaluate', '--batch-size')}")
    e.add_argument("--out", default=None, help="JSON path of the summary (default: eval.json)")
    _add_dataset_flags(e)
    _add_common(e, "evaluate")
    e.set_defaults(func=_prelude(_evaluate), parser=e)
    return parser


if __name__ == "__main__":
    sys.exit(main())
