"""The TRL backend (`rlvr_lib.backends.trl`): the native loop's loss and gradients, on TRL's loop.

Equality: for one RL step of each of ``grpo``, ``dapo``, ``nudgerl``, ``b3po``, ``sage`` and ``vigor`` on the
shipped tiny policy, the native `Trainer` rolls out with a recording engine; `MethodGRPOTrainer`, built on a
copy of the same initial weights, replays those completions (same prompts: its train sampler draws what the
native loop draws), and every optimizer step's loss and every parameter's gradient (after clipping, before
the optimizer step) must agree within ``TOL``; ``grpo`` with 2 inner epochs x 2 minibatches also checks that
the later optimizer steps, taken by TRL's loop, leave the same weights as the native ones. A test task whose verifier rewards a hash of the completion
gives mixed rewards, so advantages and gradients are not zero, and DAPO drops and refills groups.

Every preset the library ships then trains 3 steps through the backend with TRL's own generation
(``transformers`` ``generate``), the combinations the backend refuses fail with one line, and an
``accelerate launch`` run of ``grpo`` and ``nudgerl`` on 2 CPU processes (gloo) matches the 1-process run
(`trl_backend_worker`; marked slow, run by ``make test``).
"""

from __future__ import annotations

import copy
import gc
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr_lib.methods import method_config
from rlvr_lib.rollout import KVCacheEngine
from rlvr_lib.tasks import TASKS
from rlvr_lib.trainer import Trainer
from trl_backend_worker import HASHED_TASK, register_hashed_task

TOL = 1e-5
EQUALITY_METHODS = ("grpo", "dapo", "nudgerl", "b3po", "sage", "vigor")
# 16 new tokens: the v7 RL pool is two-digit problems, whose first 8 tokens ("split: 4") every sample shares, so
# 8 gave every group one hash and no reward spread.
TINY = dict(task=HASHED_TASK, prompts_per_step=2, group_size=4, max_new_tokens=16, train_pool_size=16, seed=0)


@pytest.fixture(scope="module", autouse=True)
def frozen_gc():
    """Objects made before this module are left out of garbage collection: ``transformers.Trainer.train`` runs a
    full ``gc.collect()``, which in a long pytest process costs more than the tiny policy's three steps."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="module")
def hashed_task():
    tasks = dict(TASKS)
    register_hashed_task()
    yield HASHED_TASK
    TASKS.clear(), TASKS.update(tasks)


class RecordingEngine:
    """Wraps an engine and records every ``generate`` call: ``(prompts, params, rollouts)``."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, params):
        rollouts = self.inner.generate(prompts, params)
        self.calls.append((list(prompts), params, rollouts))
        return rollouts

    def encode_prompts(self, prompts):
        return self.inner.encode_prompts(prompts)


class ReplayEngine:
    """Returns the recorded rollouts call by call, after checking the prompts and sampling settings match."""

    def __init__(self, calls, encoder):
        self.calls, self.encoder = list(calls), encoder

    def generate(self, prompts, params):
        assert self.calls, "the TRL backend asked for more rollouts than the native step made"
        want_prompts, want_params, rollouts = self.calls.pop(0)
        assert list(prompts) == want_prompts and params == want_params
        return rollouts

    def encode_prompts(self, prompts):
        return self.encoder.encode_prompts(prompts)


def _capture(model, optimizer, trainer_with_loss):
    """Record each optimizer step's gradients (``{name: grad}``) and each ``_loss`` call's value."""
    names = {p: n for n, p in model.named_parameters()}
    grads, losses = [], []
    # Wrapped on the instance, not by register_step_pre_hook: torch runs those hooks once per patched class on the
    # way down, so an optimizer subclass whose step calls super().step() (3PO's IVON) would record a step twice
    # once any plain IVON has been built in the process.
    step = optimizer.step

    def recording_step(*args, **kwargs):
        grads.append({names[p]: p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]
                      if p.grad is not None})
        return step(*args, **kwargs)

    optimizer.step = recording_step
    inner = trainer_with_loss._loss

    def loss(batch, temperature):
        value, stats = inner(batch, temperature)
        losses.append(float(value.detach()))
        return value, stats

    trainer_with_loss._loss = loss
    return grads, losses


def _max_diff(a: list[dict], b: list[dict]) -> float:
    assert len(a) == len(b) and all(x.keys() == y.keys() for x, y in zip(a, b))
    return max(float((x[k] - y[k]).abs().max()) for x, y in zip(a, b) for k in x)


@pytest.mark.parametrize("name, extra", [*((m, {}) for m in EQUALITY_METHODS),
                                         ("grpo", {"inner_epochs": 2, "minibatches": 2})],
                         ids=[*EQUALITY_METHODS, "grpo-2epochs-2minibatches"])
def test_trl_backend_loss_and_gradients_equal_the_native_loops(name, extra, policy, hashed_task, tmp_path):
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    model0, tokenizer = policy
    config = method_config(name, steps=1, **TINY, **extra)

    native_model = copy.deepcopy(model0)
    recorder = RecordingEngine(KVCacheEngine(native_model, tokenizer))
    native = Trainer(config, native_model, tokenizer, engine=recorder)
    native_grads, native_losses = _capture(native_model, native.optimizer, native)
    native.step()

    trl_model = copy.deepcopy(model0)
    replay = ReplayEngine(recorder.calls, KVCacheEngine(trl_model, tokenizer))
    backend = MethodGRPOTrainer(config, trl_model, tokenizer, output_dir=str(tmp_path), engine=replay)
    trl_grads, trl_losses = _capture(trl_model, backend.core.optimizer, backend.core)
    backend.train()

    assert not replay.calls  # every native rollout was replayed, in order (refill rounds included)
    assert len(trl_grads) == len(native_grads) == config.minibatches * config.inner_epochs
    assert len(trl_losses) == len(native_losses) > 0
    loss_diff = max(abs(a - b) for a, b in zip(trl_losses, native_losses))
    grad_diff = _max_diff(trl_grads, native_grads)
    print(f"{name}: max |loss diff| {loss_diff:.3g}, max |grad diff| {grad_diff:.3g} over "
          f"{len(native_grads)} optimizer step(s)")
    assert loss_diff <= TOL and grad_diff <= TOL
    assert max(float(g.abs().max()) for step in native_grads for g in step.values()) > 1e-4  # a real gradient
    # The step's native metrics agree too (same rewards, advantages and kept groups).
    mine, theirs = backend.history[0], native.history[0]
    for key in ("reward_mean", "advantage_abs_mean", "accuracy", "zero_adv_frac", "dynamic_kept_groups"):
        assert mine.get(key) == pytest.approx(theirs.get(key), abs=1e-6), key


def trl_presets() -> list[str]:
    """The presets that must train through the backend: every method the library ships (the registry's own list,
    not every registered name, so a method a user registers is not asked for; tests/test_papers.py)."""
    from rlvr_lib.methods.registry import shipped_methods

    return sorted(shipped_methods())


PRESETS = trl_presets()
QUIET = {"logging_strategy": "no"}


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_trains_three_steps_through_the_backend(name, policy, hashed_task, tmp_path):
    from rlvr_lib.backends.trl import MethodGRPOTrainer, TRLEngine

    model0, tokenizer = policy
    # the oracle refuses a task without its target family: it forces the hint on the hashed task's training problems
    own = {"method_options": {"target_family": "train"}} if name == "oracle_explore" else {}
    config = method_config(name, steps=3, **TINY, **own)
    model = copy.deepcopy(model0)
    backend = MethodGRPOTrainer(config, model, tokenizer, output_dir=str(tmp_path), trl_args=QUIET)
    assert isinstance(backend.core.engine, TRLEngine)  # rollouts come from TRL's generation
    backend.train()
    assert backend.state.global_step == 3 * config.inner_epochs * config.minibatches
    assert [m["step"] for m in backend.history] == [0, 1, 2]
    for m in backend.history:
        assert 0 < m["response_length"] <= TINY["max_new_tokens"] and torch.isfinite(torch.tensor(m["loss"]))
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), model0.parameters()))  # it learnt



def test_trl_generation_follows_the_rollout_conventions_and_is_seeded(policy, hashed_task, tmp_path):
    """`TRLEngine`: native prompt encoding, EOS-terminated completions, log-probs at the sampling temperature."""
    from rlvr_lib.backends.trl import MethodGRPOTrainer
    from rlvr_lib.rollout import SamplingParams, sequence_logprobs

    model0, tokenizer = policy
    model = copy.deepcopy(model0)
    backend = MethodGRPOTrainer(method_config("grpo", steps=1, **TINY), model, tokenizer,
                                output_dir=str(tmp_path), trl_args=QUIET)
    engine, native = backend.core.engine, KVCacheEngine(copy.deepcopy(model0), tokenizer)
    prompts = [p.prompt_with(None) for p in backend.core.train_problems[:3]]
    for got, want in zip(engine.encode_prompts(prompts), native.encode_prompts(prompts)):
        assert torch.equal(got, want)  # hint-free prompts are encoded as the native engines encode them
    params = SamplingParams(n=2, temperature=0.7, top_p=1.0, max_new_tokens=12, seed=5)
    model.eval()
    ro = engine.generate(prompts, params)
    again = engine.generate(prompts, params)
    assert torch.equal(ro.completion_ids, again.completion_ids) and ro.texts == again.texts  # seeded
    assert ro.prompt_index.tolist() == [0, 0, 1, 1, 2, 2]
    lengths = ro.completion_mask.sum(1)
    assert torch.equal(ro.completion_mask, (torch.arange(ro.completion_mask.shape[1]) < lengths[:, None]).long())
    for i, reason in enumerate(ro.finish_reasons):
        last = int(ro.completion_ids[i, lengths[i] - 1])
        assert (reason == "stop") == (last in backend.eos_token_ids)
        assert reason == "stop" or lengths[i] == params.max_new_tokens
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                    temperature=0.7)
    torch.testing.assert_close(ro.logprobs, logp * ro.completion_mask)
    assert (ro.logprobs <= 0).all() and (ro.logprobs[ro.completion_mask == 0] == 0).all()


def test_a_backend_run_replays_exactly(policy, hashed_task, tmp_path):
    """Two runs of one config (TRL's generation seeded per call from the native streams) give one history."""
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    model0, tokenizer = policy
    config = method_config("grpo", steps=2, **TINY)
    runs = []
    for k in range(2):
        model = copy.deepcopy(model0)
        backend = MethodGRPOTrainer(config, model, tokenizer, output_dir=str(tmp_path / str(k)), trl_args=QUIET)
        backend.train()
        runs.append(([{k: v for k, v in m.items() if not k.startswith("time_")} for m in backend.history],
                     [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


class _RecordingVLLM:
    """Stands in for TRL's ``VLLMGeneration`` (vLLM needs a GPU): records what reaches "the engine" and when.

    ``sync_weights`` snapshots the policy's weights (what TRL would push to vLLM); ``generate`` records the
    sampling settings in force and returns a fixed two-token completion with made-up log-probs in TRL's
    ``(prompt_ids, completion_ids, logprobs, logprob_token_ids)`` form.
    """

    def __init__(self, model, eos: int):
        self.model, self.eos = model, eos
        self.temperature, self.top_p, self.max_completion_length = 1.0, 1.0, 16
        self.synced, self.calls = [], []

    def sync_weights(self):
        self.synced.append(torch.cat([p.detach().flatten() for p in self.model.parameters()]).clone())

    def generate(self, prompts, images, num_generations, profiler=None):
        self.calls.append((len(self.synced), self.temperature, self.max_completion_length, len(prompts)))
        completions = [[5, self.eos] for _ in prompts]
        return prompts, completions, [[[-0.5], [-0.25]] for _ in prompts], None


def test_with_vllm_each_weight_samples_draw_sees_its_perturbed_weights(policy, hashed_task, tmp_path):
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    model0, tokenizer = policy
    model = copy.deepcopy(model0)
    config = method_config("m3po", steps=1, **{**TINY, "temperature": 0.9})  # two IVON weight samples
    backend = MethodGRPOTrainer(config, model, tokenizer, output_dir=str(tmp_path), trl_args=QUIET)
    fake = _RecordingVLLM(model, backend.eos_token_ids[0])
    backend.use_vllm, backend.vllm_generation, backend._last_loaded_step = True, fake, -1
    mean = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    backend.train()
    # one draw per weight sample, each after its own sync, at the step's temperature and length
    length = TINY["max_new_tokens"]
    assert [(synced, t, n) for synced, t, n, _ in fake.calls] == [(1, 0.9, length), (2, 0.9, length)]
    assert sum(rows for *_, rows in fake.calls) == config.prompts_per_step * config.group_size
    first, second = fake.synced
    assert not torch.equal(first, mean) and not torch.equal(second, mean) and not torch.equal(first, second)
    (row,) = backend.history
    assert row["response_length"] == 2 and row["truncated_rate"] == 0  # vLLM's completions, EOS-terminated

    # A method without weight samples: TRL's own sync, once per optimizer step (the weights change only there).
    model = copy.deepcopy(model0)
    backend = MethodGRPOTrainer(method_config("dapo", steps=2, **TINY), model, tokenizer,
                                output_dir=str(tmp_path / "dapo"), trl_args=QUIET)
    fake = _RecordingVLLM(model, backend.eos_token_ids[0])
    backend.use_vllm, backend.vllm_generation, backend._last_loaded_step = True, fake, -1
    backend.train()
    assert len(fake.synced) == 2 and [synced for synced, *_ in fake.calls][0] == 1

# ----------------------------------------------------------------------------- what the backend refuses
def _one_line_error(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_trl_arguments_the_config_owns_or_trl_lacks_are_refused(tmp_path):
    from rlvr_lib.backends.trl import grpo_args

    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=4)
    _one_line_error(lambda: grpo_args(config, tmp_path, trl_args={"beta": 0.1}),
                    r"trl_args\['beta'\] is set by the TrainerConfig \(kl_coef .*set that TrainerConfig field")
    _one_line_error(lambda: grpo_args(config, tmp_path, trl_args={"learning_rate": 1.0}),
                    r"trl_args\['learning_rate'\] is set by the TrainerConfig \(lr ")
    _one_line_error(lambda: grpo_args(config, tmp_path, trl_args={"no_such_field": 1}),
                    r"trl_args\['no_such_field'\] is not a GRPOConfig field")
    args = grpo_args(config, tmp_path, trl_args={"logging_steps": 5})
    assert (args.logging_steps, args.beta, args.num_generations, args.max_steps) == (5, 0.0, 4, 1)


def test_batches_that_do_not_split_are_refused(tmp_path):
    from rlvr_lib.backends.trl import grpo_args

    _one_line_error(lambda: grpo_args(method_config("grpo", prompts_per_step=3, group_size=4), tmp_path, processes=2),
                    r"prompts_per_step=3 must be divisible by the number of processes \(2\)")
    _one_line_error(lambda: grpo_args(method_config("grpo", prompts_per_step=4, group_size=2, minibatches=8),
                                      tmp_path, processes=2), r"each process's 4 rows .* must split into minibatches=8")
    _one_line_error(lambda: grpo_args(method_config("grpo", group_size=1), tmp_path),
                    r"group_size=1: TRL's GRPOTrainer needs num_generations >= 2")


def test_dynamic_sampling_with_a_collective_vllm_mode_on_several_processes_is_refused(tmp_path):
    from rlvr_lib.backends.trl import check_hostable, grpo_args
    from rlvr_lib.methods import build_method

    config = method_config("dapo", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8)
    args = grpo_args(config, tmp_path, trl_args={"use_vllm": True, "vllm_mode": "server"})
    _one_line_error(lambda: check_hostable(build_method(config), config, args, 2),
                    r"method 'dapo' overrides keep_groups \(dynamic sampling\) and TRL's vLLM 'server' mode .* on 2 "
                    r"processes: .*use vllm_mode='colocate' with vllm_tensor_parallel_size=1")
    check_hostable(build_method(config), config, args, 1)  # one process: every call has this process's prompts
    grpo = method_config("grpo", steps=1, prompts_per_step=2, group_size=4)
    check_hostable(build_method(grpo), grpo, args, 2)  # no dynamic sampling: equal shares every call
    args.vllm_mode, args.vllm_tensor_parallel_size = "colocate", 2
    _one_line_error(lambda: check_hostable(build_method(config), config, args, 2), r"'colocate' mode")


def test_a_deepspeed_launch_and_vllm_on_an_fsdp_launch_are_refused_by_the_backend_itself(tmp_path, monkeypatch):
    # accelerate's config file reaches the processes only as environment variables, not as GRPOConfig fields.
    from rlvr_lib.backends.trl import check_hostable, grpo_args
    from rlvr_lib.methods import build_method

    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8)
    args = grpo_args(config, tmp_path)
    check_hostable(build_method(config), config, args, 1)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    check_hostable(build_method(config), config, args, 2)  # hosted: the core's sharding (rlvr_lib.distributed)
    vllm_args = grpo_args(config, tmp_path, trl_args={"use_vllm": True})
    _one_line_error(lambda: check_hostable(build_method(config), config, vllm_args, 2),
                    r"use_vllm is not hosted on an FSDP launch")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    _one_line_error(lambda: check_hostable(build_method(config), config, args, 1),
                    r"DeepSpeed, and FSDP given as TRL arguments, are not hosted .*no training loop here hosts "
                    r"DeepSpeed .*shard with FSDP2 instead")


def test_settings_trl_cannot_host_fail_at_construction(policy, tmp_path):
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    model, tokenizer = policy
    config = method_config("b3po", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8)
    build = lambda **trl_args: MethodGRPOTrainer(config, model, tokenizer, output_dir=str(tmp_path),
                                                 trl_args=trl_args)
    _one_line_error(lambda: build(use_transformers_continuous_batching=True),
                    r"method 'b3po': use_transformers_continuous_batching is not hosted")
    _one_line_error(lambda: build(eval_strategy="steps", eval_steps=1), r"eval_strategy='steps' is not hosted")
    _one_line_error(lambda: MethodGRPOTrainer(config.to_dict(), model, tokenizer, output_dir=str(tmp_path)),
                    r"config must be a TrainerConfig, got dict")


def test_resuming_from_a_trl_checkpoint_is_refused(policy, tmp_path):
    from rlvr_lib.backends.trl import MethodGRPOTrainer

    model, tokenizer = policy
    config = method_config("polaris", steps=1, prompts_per_step=2, group_size=4, max_new_tokens=8)
    backend = MethodGRPOTrainer(config, copy.deepcopy(model), tokenizer, output_dir=str(tmp_path))
    _one_line_error(lambda: backend.train(resume_from_checkpoint=str(tmp_path)),
                    r"resume_from_checkpoint is not hosted: TRL's checkpoints do not hold method 'polaris'")


# ----------------------------------------------------------------------------- two processes (accelerate launch)
TWO_PROCESS_METHODS = ("grpo", "nudgerl")
SHARDED_ONLY_METHODS = ("b3po", "vigor")  # IVON's weight samples on the shards; gradient norms on the gathered weights
LAUNCH_TIMEOUT_S = 900  # two fresh interpreters import torch, transformers and TRL: slow on a loaded 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "fsdp"])
def test_two_process_accelerate_launch_matches_one_process(hashed_task, tmp_path, sharded):
    import trl_backend_worker

    repo = Path(__file__).resolve().parents[1]
    accelerate = Path(sys.executable).with_name("accelerate")
    launcher = [str(accelerate)] if accelerate.exists() else [sys.executable, "-m", "accelerate.commands.launch"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
           "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    if sharded:  # what an accelerate FSDP config sets in each process (on CPU accelerate itself launches DDP-style)
        env["ACCELERATE_USE_FSDP"] = "true"
    methods = TWO_PROCESS_METHODS + (SHARDED_ONLY_METHODS if sharded else ())
    command = [*launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               str(repo / "tests" / "trl_backend_worker.py"), "--out", str(tmp_path),
               "--methods", *methods]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]

    for method in methods:
        single = trl_backend_worker.train_one_step(method)  # this process: one process
        assert single["world"] == (0, 1)
        assert [(r[method]["world"], r[method]["sharded"]) for r in ranks] == [((0, 2), sharded), ((1, 2), sharded)]
        (one,), (two,), (other,) = single["history"], ranks[0][method]["history"], ranks[1][method]["history"]
        assert one["advantage_abs_mean"] > 0 and one["grad_norm"] > 0
        for key in ("loss", "reward_mean", "advantage_abs_mean", "response_length", "grad_norm", "entropy"):
            assert two[key] == pytest.approx(one[key], rel=1e-5, abs=1e-5), (method, key)
        assert two == other  # merged metrics: one history on every process
        if sharded:
            # The sharded forward takes the model's logits where one process uses the separate LM head
            # (`plain_lm_head`), so gradients agree to float rounding (grad_norm above, 1e-5); AdamW's first step,
            # g / (|g| + eps), turns that rounding into visible differences only where |g| is near eps. Each side
            # moves a weight by less than lr, so where rounding flips the sign of a near-zero gradient the two
            # differ by up to 2 lr (1.05 lr was seen), plus one float spacing of the stored weight (eps32 * |w|).
            assert ranks[1][method]["weights"] == {}  # the whole weights are gathered to rank 0
            lr = trl_backend_worker.method_settings(method).get("lr", method_config(method).lr)
            floats = [(ranks[0][method]["weights"][k], w) for k, w in single["weights"].items() if w.is_floating_point()]
            diffs = torch.cat([(a - w).abs().flatten() for a, w in floats])
            bounds = torch.cat([(2 * lr + torch.finfo(w.dtype).eps * w.abs()).flatten() for _, w in floats])
            assert float((diffs <= 1e-6).float().mean()) >= 0.999, method
            assert bool((diffs <= bounds).all()), (method, float((diffs - bounds).max()))
            continue
        for key, weight in single["weights"].items():
            for r in ranks:
                torch.testing.assert_close(r[method]["weights"][key], weight, rtol=1e-5, atol=1e-5,
                                           msg=f"{method} {key}")
            assert torch.equal(ranks[0][method]["weights"][key], ranks[1][method]["weights"][key])
