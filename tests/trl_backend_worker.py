"""Train methods for one step through the TRL backend; run alone or under ``accelerate launch`` (not a test module).

``python tests/trl_backend_worker.py --out DIR --methods grpo nudgerl`` trains each method for one RL step on
the shipped tiny policy with `MethodGRPOTrainer` and writes, per process, ``DIR/rank<r>.pt``: per method its
native metrics history, the final weights and ``(rank, world size)``. Rollouts come from `RowSeededEngine`
(each row sampled alone, seeded by its prompt), so one process and two processes roll out the same
completions and any difference is the distributed update's. `tests/test_trl_backend.py` imports the task
and the engine from here and compares an ``accelerate launch --num_processes 2`` run with a one-process run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import zlib
from pathlib import Path

import torch

if __name__ == "__main__":  # this checkout's rlvr_lib, whatever is installed, under any launcher
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlvr_lib.tasks import CORRECT, TASKS, WRONG, ArithmeticTask, Verdict, register_task
from row_seeded_engine import RowSeededEngine  # noqa: E402 (tests/ is this script's folder)

HASHED_TASK = "trl_hashed"
CONFIG = dict(task=HASHED_TASK, steps=1, prompts_per_step=4, group_size=4, max_new_tokens=8, train_pool_size=16,
              seed=0)
NO_WARMUP = ("b3po", "vigor")
"""Methods whose preset's lr warm-up would give the one step lr 0 (no weight would move): trained without it."""


def method_settings(method: str) -> dict:
    """The `TrainerConfig` fields ``method``'s one step is trained with (`CONFIG`, the warm-up off for `NO_WARMUP`)."""
    return {**CONFIG, **({"lr_warmup_ratio": 0.0} if method in NO_WARMUP else {})}


class HashedTask(ArithmeticTask):
    """The testbed's problems and hints; reward 1 when the completion's crc32 is even (mixed rewards in any group)."""

    name = HASHED_TASK

    def verify(self, problem, completion):
        ok = zlib.crc32(completion.encode()) % 2 == 0
        return Verdict(float(ok), CORRECT if ok else WRONG, None, "" if ok else "odd hash")


def register_hashed_task() -> None:
    """Register `HashedTask` unless it is registered."""
    if HASHED_TASK not in TASKS:
        register_task(HASHED_TASK, HashedTask)


def train_one_step(method: str) -> dict:
    """One RL step of ``method`` (`CONFIG`) through the TRL backend: history, final weights, (rank, size)."""
    from rlvr_lib.backends.trl import MethodGRPOTrainer
    from rlvr_lib.methods import method_config
    from rlvr_lib.policy import load_policy

    register_hashed_task()
    model, tokenizer = load_policy()
    with tempfile.TemporaryDirectory(prefix="trl_worker_") as output_dir:
        backend = MethodGRPOTrainer(method_config(method, **method_settings(method)), model, tokenizer,
                                    output_dir=output_dir,
                                    engine=RowSeededEngine(model, tokenizer),
                                    trl_args={"logging_strategy": "no"})
        backend.train()
    world = backend.core.world
    weights, _ = world.full_state_dict(model)  # sharded (an FSDP launch): gathered to rank 0, {} elsewhere
    return {"history": backend.history, "world": (world.rank, world.size), "sharded": world.sharded,
            "weights": {k: v.detach().cpu().clone() for k, v in weights.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder of the rank<r>.pt files")
    parser.add_argument("--methods", nargs="+", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {method: train_one_step(method) for method in args.methods}
    rank = results[args.methods[0]]["world"][0]
    torch.save(results, Path(args.out) / f"rank{rank}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
