"""Training across nodes: two "machines" on one host, each a launcher with one process, give the one-process update.

Each launch starts two launcher processes, as two machines would, that meet at a rendezvous on 127.0.0.1 (a
free port) and start one training process each (gloo, CPU):

- ``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT``, the same
  command on both (the c10d rendezvous: the first launcher to bind the port hosts its store, the other joins it,
  and the rendezvous numbers the nodes: torchrun ignores ``--node-rank`` with c10d);
- ``accelerate launch --config_file configs/accelerate/multinode_fsdp.yaml --num_processes 2 --machine_rank R
  --main_process_ip 127.0.0.1 --main_process_port PORT`` (the shipped multi-machine file; accelerate starts
  torchrun with a static rendezvous hosted by machine 0, and ``ACCELERATE_USE_FSDP=true``: the native loop
  shards the policy and its reference over the two machines' processes).

Each process runs this file as a script (`main`): the native `Trainer` trains ``grpo`` for `STEPS` steps on the
embedded tiny policy, on the hashed task of ``trl_backend_worker`` (reward from the completion's crc32, so groups
have mixed rewards and the steps move the weights), with `StepSeededEngine` (each row sampled alone, seeded by its
prompt, the step and its place in its group), so the two processes roll out the completions one process rolls out
and any difference is the distributed update's. The test compares the metrics and weights with one process
trained on the whole batch here, within the tolerance of ``tests/test_distributed.py`` (1e-5); sharded, the
weights as ``tests/test_trl_backend.py`` compares FSDP's (99.9% of elements within 1e-6, none further than lr).
The test owns the launchers it starts (each in its own session) and kills their process groups in a ``finally``.
Also: the multi-machine accelerate files are read by accelerate's own loader.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # this checkout's rlvr_lib and the tests' helpers, under any launcher
    sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import torch

REPO = Path(__file__).resolve().parents[1]
STEPS = 2
SETTINGS = dict(steps=STEPS, prompts_per_step=4, group_size=4, max_new_tokens=8, train_pool_size=16, seed=0,
                lr=1e-4)
TOLERANCE = 1e-5
"""Of the one-machine multi-process tests (tests/test_distributed.py). lr 1e-4, not grpo's 1e-6: AdamW moves each
weight by about lr per step, so the weights move by more than `MOVED` x the tolerance and their comparison
tells a trained run from an untrained one."""
MOVED = 10
LAUNCH_TIMEOUT_S = 240
"""Per launch: four fresh interpreters (two launchers, two trainers) import torch and transformers on a loaded
2-core machine."""
COMPARED = ("loss", "reward_mean", "advantage_abs_mean", "response_length", "grad_norm", "entropy")


class StepSeededEngine:
    """`RowSeededEngine` whose rows are seeded by their prompt, the step (this engine's call count: ``grpo`` rolls
    out once per step on every process) and their place among the prompt's rows of the call.

    `RowSeededEngine` counts a prompt's rows over the whole run, in each process: a prompt drawn at two steps
    (the pool is small) and rolled out by different processes then gets other seeds than on one process.
    """

    def __init__(self, model, tokenizer):
        from rlvr_lib.rollout import KVCacheEngine

        self.inner, self.calls = KVCacheEngine(model, tokenizer), 0

    def generate(self, prompts, params):
        import collections
        import dataclasses
        import zlib

        from rlvr_lib.rollout import Rollouts

        seen, parts = collections.Counter(), []
        for prompt in prompts:
            seed = zlib.crc32(f"{prompt}|{self.calls}|{seen[prompt]}".encode())
            seen[prompt] += 1
            parts.append(self.inner.generate([prompt], dataclasses.replace(params, seed=seed)))
        self.calls += 1
        return Rollouts.concat(parts)

    def encode_prompts(self, prompts):
        return self.inner.encode_prompts(prompts)


def train_grpo() -> dict:
    """`STEPS` steps of ``grpo`` (`SETTINGS`, hashed task) on the embedded tiny policy in this process's world:
    history, whole final weights (rank 0; ``{}`` on other ranks of a sharded world), world and launcher facts."""
    from rlvr_lib.methods import method_config
    from rlvr_lib.policy import load_policy
    from rlvr_lib.trainer import Trainer
    from trl_backend_worker import HASHED_TASK, register_hashed_task

    register_hashed_task()
    model, tokenizer = load_policy(device="cpu")
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer = Trainer(method_config("grpo", task=HASHED_TASK, **SETTINGS), model, tokenizer,
                      engine=StepSeededEngine(model, tokenizer))
    history = trainer.train(progress=False)
    world = trainer.world
    weights, _ = world.full_state_dict(model)  # sharded: a collective, whole weights on rank 0
    return {"history": history, "weights": {k: v.detach().cpu().clone() for k, v in weights.items()},
            "initial": initial, "world": (world.rank, world.size), "sharded": world.sharded,
            # what the launcher told this process: its node (torchrun's GROUP_RANK) and processes per node
            "node": os.environ.get("GROUP_RANK"), "local_world_size": os.environ.get("LOCAL_WORLD_SIZE")}


def main(argv: list[str] | None = None) -> int:
    """Worker: train (`train_grpo`) and write ``OUT/rank<r>.pt``."""
    parser = argparse.ArgumentParser(description="one process of a multi-node launch (tests/test_multinode.py)")
    parser.add_argument("--out", required=True, help="folder of the rank<r>.pt files")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = train_grpo()
    torch.save(result, Path(args.out) / f"rank{result['world'][0]}.pt")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

import pytest  # noqa: E402 (the worker above runs without pytest)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_FSDP",
                 "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_MIXED_PRECISION"):
        env.pop(name, None)  # a test run under a launcher must not leak its own world into the two nodes
    return env


def _launch_two_nodes(commands: list[list[str]], out: Path) -> list[dict]:
    """Start one launcher per "node" (node 0 first: it hosts the rendezvous), wait for both, return each rank's
    results; on failure or timeout show both launchers' output. Kills what it started in any case."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    launchers, logs = [], []
    try:
        for node, command in enumerate(commands):
            log = open(out / f"node{node}.log", "w+")
            logs.append(log)
            launchers.append(subprocess.Popen(command, cwd=out, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))  # its own process group: killed below
            if node == 0:
                time.sleep(1.0)  # node 0 binds the rendezvous port first
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while any(p.poll() is None for p in launchers) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in launchers):
                time.sleep(5)  # let the other launcher see the failure and stop, for its log
                break
            time.sleep(0.5)
        codes = [p.poll() for p in launchers]
        if codes != [0, 0]:
            tails = []
            for node, log in enumerate(logs):
                log.flush()
                log.seek(0)
                tails.append(f"--- node {node} (exit {codes[node]}) ---\n{log.read()[-3000:]}")
            pytest.fail(f"two-node launch failed or did not finish in {LAUNCH_TIMEOUT_S} s\n" + "\n".join(tails))
    finally:
        for p in launchers:
            if p.poll() != 0:  # running, or failed with its trainer perhaps left: its session, which it leads
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in logs:
            log.close()
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def one_process(registered_module):
    return train_grpo()


@pytest.fixture(scope="module")
def registered_module():
    """The task registry as it was, after the hashed task is registered here."""
    from rlvr_lib.tasks import TASKS

    tasks = dict(TASKS)
    yield
    TASKS.clear(), TASKS.update(tasks)


def _assert_equal_to_one_process(ranks: list[dict], single: dict, *, sharded: bool) -> None:
    assert single["world"] == (0, 1) and len(single["history"]) == STEPS
    assert [(r["world"], r["sharded"]) for r in ranks] == [((0, 2), sharded), ((1, 2), sharded)]
    # two nodes of one process each, not one node of two
    assert sorted(r["node"] for r in ranks) == ["0", "1"] and [r["local_world_size"] for r in ranks] == ["1", "1"]
    assert single["history"][0]["advantage_abs_mean"] > 0  # mixed rewards: the first step has a gradient
    for step, (one, two) in enumerate(zip(single["history"], ranks[0]["history"], strict=True)):
        for key in COMPARED:
            assert two[key] == pytest.approx(one[key], rel=TOLERANCE, abs=TOLERANCE), (step, key)
    assert ranks[0]["history"] == ranks[1]["history"]  # merged metrics: one history on every process
    if sharded:
        assert ranks[1]["weights"] == {}  # the whole weights are gathered to rank 0
    moved = max(float((w - single["initial"][k]).abs().max()) for k, w in single["weights"].items()
                if w.is_floating_point())
    assert moved > MOVED * TOLERANCE, f"training moved the weights by {moved:.3g} only: the comparison is vacuous"
    if sharded:
        # As tests/test_trl_backend.py's FSDP check: the sharded loss agrees with one process's to float rounding
        # (the metrics above, grad_norm included); AdamW's step g / (sqrt(v) + eps) turns that rounding into visible
        # differences only where |g| is near eps (measured: 8 of 641,568 elements, at most 3.7e-5), bounded by lr.
        diffs = torch.cat([(ranks[0]["weights"][k] - w).abs().flatten()
                           for k, w in single["weights"].items() if w.is_floating_point()])
        assert float((diffs <= 1e-6).float().mean()) >= 0.999 and float(diffs.max()) <= SETTINGS["lr"]
        return
    for key, weight in single["weights"].items():
        for r in ranks:
            torch.testing.assert_close(r["weights"][key], weight, rtol=TOLERANCE, atol=TOLERANCE, msg=key)


def test_torchrun_two_nodes_c10d_give_the_one_process_update(tmp_path, one_process):
    port = _free_port()
    # The same command on both "nodes": with c10d the rendezvous numbers the nodes (torchrun ignores --node-rank)
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "test-multinode",
               str(Path(__file__).resolve()), "--out", str(tmp_path)]
    commands = [command, command]
    _assert_equal_to_one_process(_launch_two_nodes(commands, tmp_path), one_process, sharded=False)


def test_accelerate_two_machines_fsdp_give_the_one_process_update(tmp_path, one_process):
    accelerate = Path(sys.executable).with_name("accelerate")
    launcher = [str(accelerate)] if accelerate.exists() else [sys.executable, "-m", "accelerate.commands.launch"]
    port = _free_port()
    commands = [[*launcher, "launch", "--config_file", str(REPO / "configs" / "accelerate" / "multinode_fsdp.yaml"),
                 "--num_processes", "2", "--machine_rank", str(node), "--main_process_ip", "127.0.0.1",
                 "--main_process_port", str(port), "--dynamo_backend", "no",
                 str(Path(__file__).resolve()), "--out", str(tmp_path)]
                for node in range(2)]
    _assert_equal_to_one_process(_launch_two_nodes(commands, tmp_path), one_process, sharded=True)


@pytest.mark.parametrize("name, kind", [("multinode_ddp.yaml", "MULTI_GPU"), ("multinode_fsdp.yaml", "FSDP")])
def test_multinode_files_are_read_by_accelerate(name, kind):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(REPO / "configs" / "accelerate" / name))
    assert config.distributed_type.value == kind and not config.use_cpu and config.mixed_precision == "no"
    assert config.num_machines == 2 and config.num_processes == 16 and config.machine_rank == 0
    assert config.main_process_ip and config.main_process_port and config.rdzv_backend == "static"
    assert f"configs/accelerate/{name}" in (REPO / "configs" / "README.md").read_text()
