"""Multi-process training (`rlvr_lib.distributed`): two gloo processes give the one-process update.

The end-to-end check spawns two CPU processes (``torch.multiprocessing``, the
``RANK``/``WORLD_SIZE``/``MASTER_*`` environment a launcher sets) that each train
one step on the tiny random model of ``conftest`` with 2 of the step's 4 prompts,
and compares their loss and weights with one process training on all 4. A
batch-independent engine (each row sampled alone, seeded by its prompt) makes
the two runs roll out the same completions, so any difference is the update's;
a reward that varies on the random model's output (a hash of the text) gives
non-zero advantages, so the step moves the weights.
"""

from __future__ import annotations

import math
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import build_char_tokenizer, build_tiny_qwen2
from rlvr_lib.distributed import World, _merge, init_world, local_rows, visible_weights
from rlvr_lib.methods import METHODS, method_config, register_method
from row_seeded_engine import RowSeededEngine

# lr 1e-3, not the presets' 1e-6: one step then moves weights by far more than the comparisons' 1e-5 tolerance
# (`_assert_moved`), so weights that failed to update on some process could not pass as equal.
TINY = dict(steps=1, prompts_per_step=4, group_size=2, max_new_tokens=8, train_pool_size=32, seed=0, lr=1e-3)
ATOL = 1e-5
BASES = {
    # reverse-KL anchor: reference log-probs on each process's rows; seq-mean loss
    "grpo": {},
    # token-mean loss (global token normaliser), shuffled minibatches split unevenly across processes
    "bnpo_loss": dict(inner_epochs=2, minibatches=2),
    # IVON: two weight samples per group, gradients summed inside each sample's scope; Seq-MIS extras per process.
    # Without the preset's lr warm-up, whose first step has lr 0: the one step must move the weights. IVON's step
    # is at most lr_eff * clip_radius = 1e-3 * 1e-3 at the authors' options: clip radius 1 makes it 1e-3 (`_assert_moved`).
    "c3po": dict(lr_warmup_ratio=0.0, method_options={"clip_radius": 1.0}),
}
TIMEOUT_S = 150
SHARDED_BASES = {
    # FSDP (a sharded World): every process computes the whole minibatch; rollouts split and gathered
    "grpo": {},  # the reference is sharded too
    "bnpo_loss": dict(inner_epochs=2, minibatches=2),
    "nudgerl": {},  # hinted rollouts, the extra x0 forward of the distillation term
    "sage": dict(rollout_batch_size=3),  # the k3 anchor; each minibatch's loss in chunks of 3 rows
    # IVON on the shards: two weight samples re-gathered for the rollouts, the update on each process's blocks,
    # Seq-MIS's forward at the mean weights (the root left unsharded by it must not keep them for the samples)
    "c3po": dict(lr_warmup_ratio=0.0, method_options={"clip_radius": 1.0}),
    # per-completion gradient norms on each process's share, through the plain view of the gathered weights
    "vigor": dict(lr_warmup_ratio=0.0),
}
OWN_REWARD = ("vigor",)
"""Bases trained with their own reward (VIGOR's varies on the random model: gradient norms), not the text hash."""
SHARDED_RESUMES = ("grpo", "c3po")  # AdamW's state, and IVON's (not per parameter: gathered by the optimizer)


class _TextHashReward:
    """Reward = (sum of the completion's character codes mod 7) / 6: in [0, 1], varies on a random model's output."""

    def rewards(self, batch, model):
        return torch.tensor([(sum(map(ord, text)) % 7) / 6 for text in batch.rollouts.texts])


def _register(add) -> None:
    """``scored_<base>`` for every base method: its class and preset, with the text-hash reward."""
    for base in {**BASES, **SHARDED_BASES}:
        spec = METHODS[base]
        cls = spec.cls if base in OWN_REWARD else type(f"Scored{spec.cls.__name__}", (_TextHashReward, spec.cls), {})
        add(f"scored_{base}", cls, **spec.preset)


def _config(base: str):
    return method_config(f"scored_{base}", **{**BASES, **SHARDED_BASES}[base], **TINY)


def _train_one_step(base: str, checkpoint: str | None = None) -> dict:
    """One step of ``_config(base)`` on the tiny random model; its metrics and final weights (whole, on rank 0;
    also written to ``checkpoint`` when given)."""
    from rlvr_lib.trainer import Trainer

    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen2(tokenizer)
    trainer = Trainer(_config(base), model, tokenizer, engine=RowSeededEngine(model, tokenizer))
    metrics = trainer.step()
    weights, _ = trainer.world.full_state_dict(model)  # sharded: gathered to rank 0
    if checkpoint:
        trainer.save_checkpoint(checkpoint)
    return {"metrics": metrics, "weights": {k: v.detach().clone() for k, v in weights.items()},
            "world": (trainer.world.rank, trainer.world.size), "sharded": trainer.world.sharded}


def _sharded_resume(out_dir: str, base: str) -> dict:
    """Two steps of ``scored_<base>`` uninterrupted, and one step, a new `Trainer` resuming from its checkpoint,
    and one more: both runs' whole weights (rank 0) and histories."""
    from rlvr_lib.trainer import Trainer

    tokenizer = build_char_tokenizer()
    config = _config(base).replace(steps=2, checkpoint_every=1)

    def trainer(folder):
        model = build_tiny_qwen2(tokenizer)
        return Trainer(config, model, tokenizer, checkpoint_dir=os.path.join(out_dir, base, folder))  # stateless

    whole = trainer("whole")
    whole.train(progress=False)
    first = trainer("resumed")
    first.step()  # "killed" after the step-1 checkpoint
    resumed = trainer("resumed")
    resumed.train(progress=False)
    return {name: {"weights": t.world.full_state_dict(t.model)[0], "history": t.history, "resumed_at": t.resumed_at_step}
            for name, t in (("whole", whole), ("resumed", resumed))}


def _unshared_checkpoint(out_dir: str, rank: int) -> str:
    """Each rank's own checkpoint folder, as on two machines without a shared file system: rank 0's holds a
    checkpoint, rank 1's none. The error both processes raise (the check runs before the file is read)."""
    from rlvr_lib.trainer import Trainer

    folder = os.path.join(out_dir, f"unshared_rank{rank}")
    os.makedirs(folder, exist_ok=True)
    if rank == 0:
        with open(os.path.join(folder, "checkpoint.pt"), "wb") as f:
            f.write(b"rank 0's checkpoint")
    tokenizer = build_char_tokenizer()
    try:
        Trainer(_config("grpo"), build_tiny_qwen2(tokenizer), tokenizer, checkpoint_dir=folder)
    except ValueError as e:
        return str(e)
    return "no error"


def _weight_sample_logits() -> dict[str, torch.Tensor]:
    """Logits of a `scored_c3po` trainer's model on a fixed prompt: at the mean weights, at weight sample 0 for a
    gradient (after a forward without gradient, which leaves a sharded root unsharded; C3PO as the authors run it
    takes every gradient at its one training draw), inside a rollout's gathered scope at sample 0 and at the
    training draw, at the training draw as before_update reads it (`visible_weights`, outside any gathered scope),
    and at the mean weights again after the scopes."""
    from rlvr_lib.trainer import Trainer

    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen2(tokenizer)
    trainer = Trainer(_config("c3po"), model, tokenizer, engine=RowSeededEngine(model, tokenizer))
    ids = torch.tensor([tokenizer.encode("12+34=")])
    out = {}
    with torch.no_grad():
        out["mean"] = model(ids).logits
    with trainer._weight_sample(0, train=True):  # IVON records the sample's gradient: a backward must run
        logits = model(ids).logits
        logits.sum().backward()
        out["sample_for_gradient"] = logits.detach()
    with trainer.world.gathered(model):
        with trainer._weight_sample(0, train=False):
            out["sample_in_rollout"] = model(ids).logits
        with trainer._weight_sample(trainer.method.TRAINING_DRAW, train=False):
            out["training_draw_in_rollout"] = model(ids).logits
        out["mean_in_rollout"] = model(ids).logits
    with torch.no_grad(), visible_weights(model, trainer.method.perturbed(model, trainer.method.TRAINING_DRAW)):
        out["training_draw_visible"] = model(ids).logits
    with torch.no_grad():
        out["mean_after"] = model(ids).logits
    if trainer.world.sharded:  # outside `gathered` the parameters are shards: no plain view of them
        try:
            trainer.world.unsharded(model)
        except RuntimeError as err:
            out["unsharded_outside"] = str(err)
    return out


def _worker(rank: int, port: int, out_dir: str, sharded: bool = False) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2")
    if sharded:
        os.environ["ACCELERATE_USE_FSDP"] = "true"  # what an accelerate FSDP launch config sets
    torch.set_num_threads(1)
    _register(lambda name, cls, **preset: register_method(name, cls, "test method", **preset))
    # from the environment; gloo even where CUDA exists
    assert init_world(backend="gloo") == World(rank, 2, rank, sharded)
    try:
        bases = SHARDED_BASES if sharded else BASES
        results = {base: _train_one_step(base, os.path.join(out_dir, f"{base}.pt") if sharded else None)
                   for base in bases}
        if not sharded:
            results["unshared_checkpoint"] = _unshared_checkpoint(out_dir, rank)
        if sharded:
            results.update({f"resume_{base}": _sharded_resume(out_dir, base) for base in SHARDED_RESUMES})
            results["weight_sample_logits"] = _weight_sample_logits()
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(out, sharded: bool) -> list[dict]:
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    context = mp.start_processes(_worker, args=(_free_port(), str(out), sharded), nprocs=2, join=False,
                                 start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"two-process training did not finish in {TIMEOUT_S} s")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory):
    return _two_processes(tmp_path_factory.mktemp("ddp"), sharded=False)


@pytest.fixture(scope="module")
def sharded_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    return out, _two_processes(out, sharded=True)


def _same(a: dict, b: dict) -> bool:
    """Equal metric dicts, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def _assert_moved(weights: dict[str, torch.Tensor]) -> None:
    """The step moved the weights by far more than the comparisons' tolerance: else equal weights prove nothing."""
    initial = build_tiny_qwen2(build_char_tokenizer()).state_dict()
    moved = max((w - initial[k]).abs().max().item() for k, w in weights.items() if w.is_floating_point())
    assert moved > 10 * ATOL, f"the step moved no weight by more than {moved:.2e}: the comparison would be vacuous"


@pytest.mark.parametrize("base", sorted(BASES))
def test_two_processes_give_the_one_process_loss_and_weights(base, two_process_results, registered):
    _register(registered)
    single = _train_one_step(base)
    assert single["world"] == (0, 1)
    ranks = [results[base] for results in two_process_results]
    assert [r["world"] for r in ranks] == [(0, 2), (1, 2)]
    assert single["metrics"]["advantage_abs_mean"] > 0
    for key in ("loss", "reward_mean", "advantage_abs_mean", "response_length", "grad_norm", "entropy"):
        assert ranks[0]["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5, abs=1e-5), key
    assert _same(ranks[0]["metrics"], ranks[1]["metrics"])  # merged: one history on every process
    for key, weight in single["weights"].items():
        for r in ranks:
            torch.testing.assert_close(r["weights"][key], weight, rtol=1e-5, atol=1e-5, msg=key)
        assert torch.equal(ranks[0]["weights"][key], ranks[1]["weights"][key]), key  # identical steps
    _assert_moved(single["weights"])


def test_a_checkpoint_only_some_processes_see_is_refused_by_all(two_process_results):
    """Rank 0 decides nothing alone: when only some processes see checkpoint.pt (no shared file system), every
    process refuses to start, naming the ranks, instead of rank 0 resuming while the others start over."""
    for result in two_process_results:
        assert "is seen by ranks [0] but not by ranks [1]" in result["unshared_checkpoint"], result["unshared_checkpoint"]


@pytest.mark.parametrize("base", sorted(SHARDED_BASES))
def test_two_sharded_processes_give_the_one_process_loss_and_weights(base, sharded_results, registered):
    from rlvr_lib.trainer import read_checkpoint

    out, results = sharded_results
    _register(registered)
    single = _train_one_step(base)
    ranks = [r[base] for r in results]
    assert [(r["world"], r["sharded"]) for r in ranks] == [((0, 2), True), ((1, 2), True)]
    assert single["metrics"]["advantage_abs_mean"] > 0
    ivon = ("ivon_mean_sigma", "ivon_clipped_frac", "ivon_mean_abs_step", "weight_sample_disagreement")
    for key in ("loss", "reward_mean", "advantage_abs_mean", "response_length", "grad_norm", "entropy",
                *(ivon if base == "c3po" else ()), *(("vigor_grad_norm",) if base == "vigor" else ())):
        assert ranks[0]["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5, abs=1e-5), key
    assert _same(ranks[0]["metrics"], ranks[1]["metrics"])
    assert ranks[1]["weights"] == {}  # whole weights are gathered to rank 0 only
    checkpoint = read_checkpoint(out / f"{base}.pt")  # written by rank 0 from the gathered states
    assert checkpoint["sharded"] is True
    for key, weight in single["weights"].items():
        torch.testing.assert_close(ranks[0]["weights"][key], weight, rtol=1e-5, atol=1e-5, msg=key)
        torch.testing.assert_close(checkpoint["model"][key], weight, rtol=1e-5, atol=1e-5, msg=key)
    _assert_moved(single["weights"])


@pytest.mark.parametrize("base", SHARDED_RESUMES)
def test_a_sharded_run_resumes_as_the_uninterrupted_one(base, sharded_results):
    runs = sharded_results[1][0][f"resume_{base}"]  # rank 0
    assert runs["resumed"]["resumed_at"] == 1 and runs["whole"]["resumed_at"] is None
    untimed = lambda h: [{k: v for k, v in m.items() if not k.startswith("time_")} for m in h]  # noqa: E731
    assert untimed(runs["resumed"]["history"]) == untimed(runs["whole"]["history"])
    for key, weight in runs["whole"]["weights"].items():
        assert torch.equal(runs["resumed"]["weights"][key], weight), key


def test_a_sharded_weight_sample_reaches_every_forward(sharded_results, registered):
    _register(registered)
    single = _weight_sample_logits()
    assert not torch.allclose(single["sample_for_gradient"], single["mean"], atol=1e-4)  # the noise is visible
    # the gradient is taken at the training draw, not at rollout sample 0's
    torch.testing.assert_close(single["training_draw_in_rollout"], single["sample_for_gradient"], rtol=0, atol=0)
    torch.testing.assert_close(single["training_draw_visible"], single["sample_for_gradient"], rtol=0, atol=0)
    assert not torch.allclose(single["sample_in_rollout"], single["sample_for_gradient"], atol=1e-4)
    for r in sharded_results[1]:
        for key, logits in single.items():
            torch.testing.assert_close(r["weight_sample_logits"][key], logits, rtol=1e-6, atol=1e-6, msg=key)
        assert "is a shard; call it inside World.gathered(model)" in r["weight_sample_logits"]["unsharded_outside"]


# ------------------------------------------------------------------ one-process helpers
def test_one_process_world_is_the_identity(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    world = init_world()
    assert world == World() and not world.distributed and world.is_main
    assert world.shard(5) == range(5) and world.sampling_seed(123) == 123
    records = [(1.0, {"loss": 0.5}), (0.25, {"loss": 2.0})]
    assert world.weighted_means(records) == [{"loss": 0.5}, {"loss": 2.0}]
    metrics = {"loss": 1.0}
    assert world.merge_metrics(metrics) is metrics
    rows = torch.tensor([3, 1, 2])
    assert local_rows(rows, None) is rows


def test_a_deepspeed_launch_is_refused_from_python_too(tmp_path, monkeypatch):
    # The command line refuses it first (tests/test_cli_train.py); a Trainer or train_run built from Python
    # joins the world through init_world, which refuses it before any model is loaded or file written.
    from rlvr_lib.study.pipeline import train_run
    from rlvr_lib.trainer import Trainer

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8)
    for start in (init_world, lambda: Trainer(config), lambda: train_run(config, tmp_path / "run", progress=False)):
        with pytest.raises(RuntimeError, match="asks for DeepSpeed .*shard with FSDP2 instead"):
            start()
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    assert init_world() == World()
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert init_world() == World()  # one process: nothing to shard


def test_a_sharded_world_refuses_the_vllm_engine(monkeypatch):
    import rlvr_lib.trainer as trainer_module
    from rlvr_lib.trainer import Trainer

    monkeypatch.setattr(trainer_module, "init_world", lambda: World(0, 2, 0, sharded=True))  # no process group
    tokenizer = build_char_tokenizer()
    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8, engine="vllm")
    with pytest.raises(ValueError, match="engine='vllm' cannot run on a sharded"):
        Trainer(config, build_tiny_qwen2(tokenizer), tokenizer)


def test_every_registered_method_says_whether_it_reads_parameters():
    reads = sorted(name for name, spec in METHODS.items() if spec.cls.reads_parameters)
    assert {"b3po", "m3po", "c3po", "vigor"} <= set(reads)
    assert not {"grpo", "nudgerl", "sage", "dapo", "intuitor"} & set(reads)


def test_shards_cover_every_index_once_in_rank_order():
    for n in range(0, 9):
        for size in (1, 2, 3, 4):
            blocks = [World(rank, size).shard(n) for rank in range(size)]
            assert [i for b in blocks for i in b] == list(range(n))
            assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
            assert len(blocks[0]) == max(map(len, blocks))  # rank 0 holds a group whenever there is one


def test_rank_seeds_differ_and_are_deterministic():
    seeds = [World(rank, 4).sampling_seed(7) for rank in range(4)]
    assert seeds[0] == 7 and len(set(seeds)) == 4
    assert seeds == [World(rank, 4).sampling_seed(7) for rank in range(4)]


def test_local_rows_keeps_this_processs_rows_in_minibatch_order():
    index = torch.tensor([-1, -1, 0, 1, 2, -1])  # rows 2-4 of the whole batch are rows 0-2 here
    assert local_rows(torch.tensor([4, 0, 2, 5]), index).tolist() == [2, 0]
    assert local_rows(torch.tensor([0, 5]), index).tolist() == []


def test_metric_merge_rules():
    assert _merge("loss", [0.5, 0.5]) == 0.5
    assert math.isnan(_merge("reward_acc_corr", [float("nan"), float("nan")]))
    assert _merge("time_step", [1.0, 3.0]) == 3.0
    assert _merge("vigor_grad_norm", [1.0, float("nan"), 3.0]) == 2.0
    assert _merge("label", ["a", "b"]) == "a"


def test_every_deepspeed_refusal_gives_the_same_reason_and_alternatives(monkeypatch):
    """The command line and init_world refuse DeepSpeed with one text (DEEPSPEED_REFUSAL; the TRL backend's:
    tests/test_trl_backend.py), naming FSDP2 and DDP-style processes as what to use instead."""
    import rlvr_lib.__main__ as cli
    from rlvr_lib import distributed

    assert "FSDP2" in distributed.DEEPSPEED_REFUSAL and "ddp_8gpu.yaml" in distributed.DEEPSPEED_REFUSAL
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(cli.UsageError) as err:
        cli._check_no_sharding("native")
    assert str(err.value).endswith(distributed.DEEPSPEED_REFUSAL)
    with pytest.raises(RuntimeError) as err:
        distributed.init_world()
    assert str(err.value).endswith(distributed.DEEPSPEED_REFUSAL)
