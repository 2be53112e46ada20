"""Multi-process metrics equal the one-process metrics (`rlvr_lib.distributed`, `rlvr_lib.trainer`).

Two and three gloo processes (spawned as in ``test_distributed``) each train one step on their share of the
groups; their logged metrics must equal one process's on the whole batch. Completions are cut to lengths that
differ row by row (`LengthCutEngine`), so a mean over tokens taken per process and averaged by row share (what the
loop logged before) differs from the token mean of the whole minibatch; the token means (entropy, KL, the clip
statistics, SAGE's guide stats) are token sums over token counts, and counts over a process's rows (NudgeRL's
``nudge_mixed_groups``) are summed. Three processes split the 4 groups 2/1/1.
"""

from __future__ import annotations

import math
import os
import time
import zlib

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import build_char_tokenizer, build_tiny_qwen2
from rlvr_lib.distributed import World, _merge, weighted_mean
from rlvr_lib.methods import METHODS, method_config, register_method
from rlvr_lib.rollout import Rollouts
from row_seeded_engine import RowSeededEngine

TINY = dict(steps=1, prompts_per_step=4, group_size=4, max_new_tokens=10, train_pool_size=32, seed=0, lr=1e-4,
            lr_warmup_ratio=0.0)
"""lr 1e-4: the first minibatch moves the weights, so the second one's KL to the reference is far from 0."""
BASES = {
    "grpo": dict(minibatches=2),  # seq-mean loss, reverse-KL anchor: entropy, kl, the PPO clip stats
    "bnpo_loss": dict(inner_epochs=2, minibatches=2),  # token-mean loss, minibatches split unevenly
    "nudgerl": {},  # hinted rollouts: nudge_* counts over each process's groups
    "sage": dict(minibatches=2),  # the method's own token means (sage_q_*, sage_kl_unshaped)
}
SHARPEN = 60.0
"""The tiny random model's output layer is scaled by this: its per-token entropy then varies from row to row
(at scale 1 every token's is about log(vocab), and a row-share mean equals the token mean)."""
SIZES = (2, 3)
TIMEOUT_S = 240
APPROXIMATE = {"nudge_acc_hinted", "nudge_acc_none", "sage_entropy_raised"}
"""Means over a subset of a process's rows or tokens that the processes do not log the size of: averaged by the
processes' row counts, so not the one-process value in general (left out of the exact comparison)."""


class LengthCutEngine:
    """`RowSeededEngine` with each completion cut to a length drawn from its prompt and tokens (1 to its length).

    Rows do not depend on the batch or the process, and their lengths differ, so per-process token counts differ.
    """

    def __init__(self, model, tokenizer):
        self.inner, self.tokenizer = RowSeededEngine(model, tokenizer), tokenizer

    def generate(self, prompts, params):
        ro = self.inner.generate(prompts, params)
        ids, mask, logprobs = ro.completion_ids.clone(), ro.completion_mask.clone(), ro.logprobs.clone()
        texts, reasons = list(ro.texts), list(ro.finish_reasons)
        for i, prompt in enumerate(prompts):
            length = int(mask[i].sum())
            if length < 2:
                continue
            cut = 1 + zlib.crc32(f"{prompt}|{ids[i, :length].tolist()}".encode()) % length
            ids[i, cut:], mask[i, cut:], logprobs[i, cut:] = ro.pad_token_id, 0, 0.0
            texts[i] = self.tokenizer.decode(ids[i, :cut].tolist(), skip_special_tokens=True)
            reasons[i] = "stop" if cut < length else reasons[i]
        return Rollouts(prompt_index=ro.prompt_index, prompt_ids=ro.prompt_ids, prompt_mask=ro.prompt_mask,
                        completion_ids=ids, completion_mask=mask, logprobs=logprobs, texts=texts,
                        finish_reasons=reasons, pad_token_id=ro.pad_token_id)

    def encode_prompts(self, prompts):
        return self.inner.encode_prompts(prompts)


class _TextHashReward:
    """Reward = (sum of the completion's character codes mod 7) / 6: varies on a random model's output."""

    def rewards(self, batch, model):
        return torch.tensor([(sum(map(ord, text)) % 7) / 6 for text in batch.rollouts.texts])


def _register(add) -> None:
    for base in BASES:
        spec = METHODS[base]
        add(f"cut_{base}", type(f"Cut{spec.cls.__name__}", (_TextHashReward, spec.cls), {}), **spec.preset)


def _train_one_step(base: str) -> dict:
    from rlvr_lib.trainer import Trainer

    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen2(tokenizer)
    with torch.no_grad():
        model.lm_head.weight.mul_(SHARPEN)
    config = method_config(f"cut_{base}", **{**BASES[base], **TINY})
    trainer = Trainer(config, model, tokenizer, engine=LengthCutEngine(model, tokenizer))
    metrics = trainer.step()
    return {"metrics": metrics, "world": (trainer.world.rank, trainer.world.size)}


def _worker(rank: int, size: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(size))
    torch.set_num_threads(1)
    _register(lambda name, cls, **preset: register_method(name, cls, "test method", **preset))
    from rlvr_lib.distributed import init_world

    assert init_world(backend="gloo") == World(rank, size, rank)
    try:
        torch.save({base: _train_one_step(base) for base in BASES}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def multi_results(tmp_path_factory) -> dict[int, list[dict]]:
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    results = {}
    for size in SIZES:
        out = tmp_path_factory.mktemp(f"world{size}")
        context = mp.start_processes(_worker, args=(size, _free_port(), str(out)), nprocs=size, join=False,
                                     start_method="spawn")
        deadline = time.monotonic() + TIMEOUT_S
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                pytest.fail(f"{size}-process training did not finish in {TIMEOUT_S} s")
        results[size] = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(size)]
    return results


@pytest.fixture(scope="module")
def single_results() -> dict[str, dict]:
    from rlvr_lib.methods import METHODS as registry

    saved = dict(registry)
    try:
        _register(lambda name, cls, **preset: register_method(name, cls, "test method", **preset))
        return {base: _train_one_step(base) for base in BASES}
    finally:
        registry.clear()
        registry.update(saved)


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == pytest.approx(b, rel=1e-4, abs=1e-7)
    return a == b


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("base", sorted(BASES))
def test_multi_process_metrics_equal_the_one_process_metrics(base, size, multi_results, single_results):
    single = single_results[base]
    assert single["world"] == (0, 1)
    ranks = [r[base] for r in multi_results[size]]
    assert [r["world"] for r in ranks] == [(rank, size) for rank in range(size)]
    one, many = single["metrics"], ranks[0]["metrics"]
    for r in ranks[1:]:  # merged: the same history on every process
        assert r["metrics"].keys() == many.keys()
        assert all(_close(r["metrics"][k], many[k]) or k.startswith("time_") for k in many)
    assert one.keys() == many.keys()
    compared = [k for k in one if not k.startswith("time_") and k not in APPROXIMATE]
    wrong = {k: (one[k], many[k]) for k in compared if not _close(one[k], many[k])}
    assert not wrong, f"{size} processes log other values than one process (one, many): {wrong}"
    # the checks bite: lengths differ, so token means differ from row-share means; the methods log their stats
    assert "entropy" in compared and "loss" in compared
    expected = {"grpo": ("kl", "clip_frac_low", "approx_kl"), "bnpo_loss": ("ratio_mean",),
                "nudgerl": ("nudge_mixed_groups", "nudge_share_hinted"),
                "sage": ("kl", "sage_q_mean", "sage_kl_unshaped")}[base]
    assert set(expected) <= set(compared), sorted(compared)
    if "kl" in expected:
        assert one["kl"] > 1e-3, one["kl"]  # the second minibatch's policy moved away from the reference


def test_completions_have_different_lengths_within_and_across_processes():
    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen2(tokenizer)
    from rlvr_lib.rollout import SamplingParams

    ro = LengthCutEngine(model, tokenizer).generate([f"{a}+{a}=" for a in range(12, 20)],
                                                    SamplingParams(n=1, max_new_tokens=10, seed=0))
    lengths = ro.completion_mask.sum(1).tolist()
    assert len(set(lengths)) >= 3, lengths
    assert all(m.tolist() == sorted(m.tolist(), reverse=True) for m in ro.completion_mask)  # ones a prefix


def test_token_means_are_token_sums_over_token_counts():
    # process 0: 3 tokens of entropy 1; process 1: 1 token of entropy 5 -> (3 + 5) / 4 = 2, not (1 + 5) / 2 = 3
    records = [({"entropy": 3.0, "loss": 0.5}, {"entropy": 1.0, "loss": 2.0}),
               ({"entropy": 1.0, "loss": 0.5}, {"entropy": 5.0, "loss": 4.0})]
    assert weighted_mean(records) == {"entropy": 2.0, "loss": 3.0}
    assert weighted_mean([(0.25, {"x": 0.1 + 0.2})]) == {"x": 0.1 + 0.2}  # one entry: its value as it is
    assert weighted_mean([(0.0, {"x": 1.0}), (2.0, {"x": 3.0})]) == {"x": 3.0}  # no weight, no say
    with pytest.raises(ValueError, match="lack the stat 'kl'"):
        weighted_mean([({"entropy": 1.0}, {"entropy": 1.0, "kl": 2.0})])


def test_counts_are_summed_and_means_weighted_by_rows():
    assert _merge("nudge_mixed_groups", [1.0, 1.0, 0.0], [2, 1, 1], summed=True) == 2.0  # equal values summed too
    assert _merge("nudge_share_hinted", [0.5, 1.0], [3, 1]) == pytest.approx(0.625)
    assert _merge("nudge_share_hinted", [0.5, float("nan")], [3, 1]) == 0.5
    assert _merge("x", [0.5, 1.5], [0, 0]) == 1.0  # no rows anywhere: equal weights
    assert _merge("time_step", [1.0, 3.0], [5, 1]) == 3.0
    assert _merge("label", ["a", "b"], [1, 1], summed=True) == "a"


def test_one_process_reductions_are_the_identity():
    """The one-process path (every committed run) does not reduce anything: the metrics are the very objects."""
    world = World()
    metrics = {"entropy": 0.1 + 0.2, "nudge_mixed_groups": 3.0}
    assert world.merge_metrics(metrics, rows=7, summed={"nudge_mixed_groups"}) is metrics
    records = [({"entropy": 3.0}, {"entropy": 0.3}), (0.5, {"loss": 0.7})]
    out = world.weighted_means(records)
    assert out[0] is records[0][1] and out[1] is records[1][1]


def test_a_sharded_world_does_not_sum_counts(monkeypatch):
    world = World(0, 2, 0, sharded=True)  # every process holds the whole batch: its counts are the whole's
    monkeypatch.setattr(World, "gather", lambda self, obj: [obj, obj])
    assert world.merge_metrics({"nudge_mixed_groups": 2.0}, rows=8, summed={"nudge_mixed_groups"}) == \
        {"nudge_mixed_groups": 2.0}
    world = World(0, 2, 0)
    assert world.merge_metrics({"nudge_mixed_groups": 2.0}, rows=8, summed={"nudge_mixed_groups"}) == \
        {"nudge_mixed_groups": 4.0}


def test_composites_unite_their_components_metric_declarations(registered):  # METHODS restored afterwards
    from rlvr_lib.methods.compose import ensure_registered

    ensure_registered("nudgerl+sage")
    cls = METHODS["nudgerl+sage"].cls
    assert {"nudge_mixed_groups"} <= cls.summed_metrics
    assert {"sage_q_mean", "sage_kl_unshaped"} <= cls.token_mean_stats


def test_the_vllm_refusal_names_valid_engines():
    from rlvr_lib.rollout import ENGINES
    from rlvr_lib.trainer import check_shardable

    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8, engine="vllm")
    with pytest.raises(ValueError) as err:
        check_shardable(config)
    message = str(err.value)
    advice = message.split("; use ", 1)[1]
    named = [name for name in ENGINES if f"'{name}'" in advice or f"--engine {name}" in advice]
    assert named == [name for name in ENGINES if not name.startswith("vllm")] and "'kv'" not in message, message
    assert named  # kvcache and hf
    for name in named:
        method_config("grpo", steps=1, engine=name)  # a valid engine name
