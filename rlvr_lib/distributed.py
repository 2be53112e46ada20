"""Multi-process training with ``torch.distributed``: where this process stands, and the few collectives the loop needs.

Launch one process per device (``accelerate launch --multi_gpu`` or ``torchrun``); :func:`init_world` joins
the process group (``nccl`` on CUDA, ``gloo`` on CPU) or returns the one-process `World`, in which every
helper returns its input.

Data-parallel: every process draws the same prompts, rolls out its share of the groups (:meth:`World.shard`)
and :meth:`World.gather_batch` joins the whole batch everywhere. Each process trains on its rows
(:meth:`World.split_rows`); with n_p its rows (or tokens, for ``token_mean``) and n the minibatch's,

    loss_p = (n_p / n) * loss(rows of p),   grad = sum_p grad loss_p     (:meth:`World.summed_gradients`)

and loss statistics are averaged over the processes (:meth:`World.weighted_means`) with per-statistic weights:
a mean over completion tokens (entropy, KL, ...) by each process's token count, so the result is the token sum over
the token count of the whole minibatch; any other statistic by the loss share above. The step's other metrics
(:meth:`World.merge_metrics`) are kept where the processes agree; counts over a process's rows are summed and other
numbers averaged by each process's number of rows.

Sharded (FSDP2, ``ACCELERATE_USE_FSDP=true``; ``World.sharded``): parameters, gradients and optimizer state
are split (:meth:`World.shard_model`); every process computes the whole minibatch's loss in
``rollout_batch_size`` chunks. Methods that read the parameters use :meth:`World.sampled_weights` /
:meth:`World.unsharded`; the vLLM engine is refused. The step in full: docs/library/distributed.md.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import weakref
from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Iterator, Mapping

import numpy as np
import torch
import torch.distributed as dist

from rlvr_lib.methods.base import StepBatch

__all__ = ["SHARDING_ENV", "World", "init_world", "local_rows", "sharded_launch", "visible_weights", "weighted_mean"]


@dataclass(frozen=True)
class World:
    """This process's place among the training processes (one process: rank 0 of 1).

    Attributes: ``rank``, ``size``, ``local_rank`` (its CUDA device), ``sharded`` (FSDP2; only with size > 1).
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    sharded: bool = False

    @property
    def distributed(self) -> bool:
        """Whether there is more than one process (collectives run only then)."""
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Whether this is the process that writes files and shows progress (rank 0)."""
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        """The device of this process: CUDA device ``local_rank`` when CUDA is available, else the CPU."""
        return torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")

    # ------------------------------------------------------------------ sharding
    def shard(self, n: int) -> range:
        """This process's contiguous block of ``range(n)``; blocks differ in size by at most one, the larger first."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))

    def sampling_seed(self, seed: int) -> int:
        """The rollout seed of this process: ``seed`` on rank 0, a seed drawn from ``(seed, rank)`` elsewhere."""
        if self.rank == 0:
            return seed
        return int(np.random.default_rng([seed, self.rank]).integers(2**31))

    def split_rows(self, batch: StepBatch) -> tuple[StepBatch, torch.Tensor | None]:
        """The rows of ``batch`` this process trains on (its `shard` of the groups) as ``(part, index)``.

        ``index`` maps each row of ``batch`` to its row in ``part`` (-1: another process's); ``(batch, None)`` on one
        process or sharded.
        """
        if not self.distributed or self.sharded:  # sharded: every process trains on the whole batch
            return batch, None
        groups = self.shard(len(batch.problems))
        rows = ((batch.group_index >= groups.start) & (batch.group_index < groups.stop)).nonzero().flatten()
        index = torch.full((len(batch),), -1, dtype=torch.long)
        index[rows] = torch.arange(len(rows))
        return batch.select(rows), index

    # --------------------------------------------------------------- collectives
    def gather(self, obj: Any) -> list:
        """``obj`` of every process, in rank order (picklable objects; CPU tensors inside them)."""
        if not self.distributed:
            return [obj]
        out: list = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def gather_batch(self, batch: StepBatch | None) -> StepBatch:
        """Every process's share of a sampling round (``batch``, or ``None`` when empty) joined in rank order.

        Group ids are offset so they index the joined ``problems``.
        """
        if not self.distributed:
            return batch
        if batch is not None and batch.rewards is not None:
            batch.rewards = batch.rewards.cpu()
        parts = [part for part in self.gather(batch) if part is not None]
        return StepBatch.concat(parts)

    def summed_gradients(self, params: Iterable[torch.nn.Parameter]) -> ContextManager[None]:
        """Scope whose backward passes' gradients are summed over processes when it exits (earlier gradients kept aside)."""
        if not self.distributed or self.sharded:  # sharded: FSDP's reduce-scatter averages identical gradients
            return contextlib.nullcontext()
        return _summed_gradients([p for p in params])

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers to every process (as DDP does at start)."""
        if not self.distributed:
            return
        with torch.no_grad():
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=0)

    def shard_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Split ``model``'s parameters among the processes (FSDP2 ``fully_shard``) in a sharded world; else a no-op.

        One FSDP unit per submodule named in ``model._no_split_modules``; call after `broadcast_parameters` and before
        building the optimizer. Raises ValueError when ``_no_split_modules`` names none of its submodules.
        """
        if not self.sharded:
            return model
        from torch.distributed.fsdp import fully_shard

        names = set(getattr(model, "_no_split_modules", None) or ())
        units = [m for m in model.modules() if type(m).__name__ in names]
        if not units:
            raise ValueError(f"cannot shard {type(model).__name__}: its _no_split_modules "
                             f"({sorted(names) or 'none'}) name none of its submodules")
        # The same modules with meta parameters: `unsharded` lends it the gathered tensors (no copy).
        _PLAIN_TWINS[model] = copy.deepcopy(model, {id(p): torch.nn.Parameter(p.detach().to("meta"), p.requires_grad)
                                                    for p in model.parameters()})
        for unit in units:
            fully_shard(unit)
        fully_shard(model)
        return model

    def unsharded(self, model: torch.nn.Module) -> torch.nn.Module:
        """Inside `gathered`: a plain module whose parameters are ``model``'s gathered whole tensors (for per-row
        parameter gradients); ``model`` itself unless sharded.
        """
        if not self.sharded:
            return model
        twin = _PLAIN_TWINS[model]
        for name, tensor in model.named_parameters(remove_duplicate=False):
            if hasattr(tensor, "placements"):  # a shard: the model is not gathered
                raise RuntimeError(f"World.unsharded: {name} is a shard; call it inside World.gathered(model)")
            owner, _, leaf = name.rpartition(".")
            twin.get_submodule(owner)._parameters[leaf] = tensor
        return twin.train(model.training)

    def gathered(self, model: torch.nn.Module | None) -> ContextManager[None]:
        """Scope in which a sharded ``model`` holds its whole parameters (all-gathered once on entry, resharded on
        exit), so processes may run different numbers of forwards inside it (rollouts of unequal shares); every
        process must enter it. No gradient may be taken inside. A no-op unless sharded (or ``model`` is None)."""
        if not self.sharded or model is None:
            return contextlib.nullcontext()
        return _gathered(model)

    def sampled_weights(self, model: torch.nn.Module, scope: ContextManager, *, gathered: bool = False
                        ) -> ContextManager[None]:
        """``scope`` (a method's ``perturbed``) made visible to a sharded ``model``'s forwards; ``scope`` itself unless sharded.

        Sharded, it reshards every unit around the write (and re-unshards inside ``gathered``): a collective.
        """
        if not self.sharded:
            return scope
        return _sampled_weights(model, scope, gathered)

    def full_state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
                        ) -> tuple[dict, dict | None]:
        """``(model state, optimizer state)`` as whole CPU tensors; a collective in a sharded world (every
        process calls it; rank 0 gets the states, the others empty dicts). Unsharded: ``model.state_dict()`` and
        ``optimizer.state_dict()`` as they are."""
        if not self.sharded:
            return model.state_dict(), None if optimizer is None else optimizer.state_dict()
        own = getattr(optimizer, "gathered_state_dict", None)  # an optimizer whose state is not per parameter (IVON)
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_state = get_model_state_dict(model, options=options)
        if own is not None:
            return model_state, own()
        optim_state = None if optimizer is None else get_optimizer_state_dict(model, optimizer, options=options)
        return model_state, optim_state

    def load_full_state_dict(self, model: torch.nn.Module, model_state: dict,
                             optimizer: torch.optim.Optimizer | None = None, optim_state: dict | None = None) -> None:
        """Load states written by `full_state_dict` (every process passes the whole states)."""
        if not self.sharded:
            model.load_state_dict(model_state)
            if optimizer is not None:
                optimizer.load_state_dict(optim_state)
            return
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, model_state, options=options)
        if hasattr(optimizer, "load_gathered_state_dict"):
            optimizer.load_gathered_state_dict(optim_state)
        elif optimizer is not None:
            set_optimizer_state_dict(model, optimizer, optim_state, options=options)

    def weighted_means(self, records: list[tuple[float | Mapping[str, float], dict[str, float]]]
                       ) -> list[dict[str, float]]:
        """Per record ``(weight, stats)``, ``sum_r w_r s_r[key] / sum_r w_r`` over the processes that logged ``key``
        (`weighted_mean`: ``weight`` a number, or per key; a key logged by one process keeps its value).

        One process: the records' stats as they are."""
        if not self.distributed:
            return [stats for _, stats in records]
        gathered = self.gather(records)
        means = []
        for i in range(len(records)):
            means.append(weighted_mean([ranks[i] for ranks in gathered]))
        return means

    def merge_metrics(self, metrics: dict, *, rows: int = 1, summed: Iterable[str] = ()) -> dict:
        """One step's metrics, the same on every process: agreed values kept, ``time_*`` the slowest, the keys in
        ``summed`` (counts over this process's rows) summed, other numbers averaged weighted by each process's
        ``rows`` (its number of trained rows). Sharded, every process trains on the whole batch: ``summed`` is not
        summed and the weights are equal. One process: ``metrics`` itself."""
        if not self.distributed:
            return metrics
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ValueError(f"merge_metrics: rows must be an int >= 0, got {rows!r}")
        summed = frozenset() if self.sharded else frozenset(summed)
        gathered = self.gather((rows, metrics))
        keys = dict.fromkeys(key for _, m in gathered for key in m)
        return {key: _merge(key, [m[key] for _, m in gathered if key in m], [n for n, m in gathered if key in m],
                            summed=key in summed)
                for key in keys}


_PLAIN_TWINS: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()
"""Per sharded model, its modules with meta parameters (`World.shard_model`, `World.unsharded`)."""

DEEPSPEED_REFUSAL = ("no training loop here hosts DeepSpeed (ZeRO is untested: on a CPU-only torch accelerate gives "
                     "every DeepSpeed process rank 0 of 1; docs/scaling-out.md#deepspeed): shard with FSDP2 instead "
                     "(accelerate launch --config_file configs/accelerate/fsdp_8gpu.yaml), or launch DDP-style "
                     "processes (configs/accelerate/ddp_8gpu.yaml)")
"""Why a DeepSpeed launch is refused and what to use instead: one text for the command line, `init_world` and the
TRL backend."""

SHARDING_ENV = {"ACCELERATE_USE_DEEPSPEED": "DeepSpeed", "ACCELERATE_USE_FSDP": "FSDP"}
"""What ``accelerate launch --config_file F`` sets when F's ``distributed_type`` is DEEPSPEED or FSDP."""


def sharded_launch() -> list[str]:
    """The sharding engines (``"DeepSpeed"``, ``"FSDP"``) an accelerate launch config asked for (environment), or ``[]``."""
    return [name for variable, name in SHARDING_ENV.items() if os.environ.get(variable, "").lower() in ("1", "true")]


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _merge(key: str, values: list, weights: list[float] | None = None, *, summed: bool = False) -> Any:
    """One metric from its per-process values (see `World.merge_metrics`): the sum of numbers when ``summed`` (equal
    or not: each counts its own rows); else agreed values kept, else (numbers only) the largest for ``time_*``, else
    the mean of the non-NaN values weighted by
    ``weights`` (default equal; equal too when the non-NaN values' weights are all 0)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if summed and numbers:
        return sum(values)
    if all(_same(v, values[0]) for v in values):
        return values[0]
    if not numbers:
        return values[0]
    if key.startswith("time_"):
        return max(values)
    finite = [(float(v), 1.0 if weights is None else float(w))
              for v, w in zip(values, weights or values) if not math.isnan(v)]
    if not finite:
        return float("nan")
    if sum(w for _, w in finite) <= 0:  # no process that logged it trained a row: equal weights
        finite = [(v, 1.0) for v, _ in finite]
    return sum(v * w for v, w in finite) / sum(w for _, w in finite)


@contextlib.contextmanager
def _gathered(model) -> Iterator[None]:
    from torch.distributed.fsdp import FSDPModule

    # Every unit, not only the root: engines that read weights off the modules (KVCacheEngine) call no forward.
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.unshard()
    model.set_reshard_after_forward(False)  # every unit (recurse): forwards inside keep the whole weights
    try:
        with torch.no_grad():
            yield
    finally:
        model.set_reshard_after_forward(True)
        for unit in units:
            unit.reshard()


def visible_weights(model: torch.nn.Module, scope: ContextManager) -> ContextManager:
    """``scope`` (writes a weight sample into ``model``) made visible to forwards outside the trainer's scopes:
    `World.sampled_weights` with ``gathered=False`` on an FSDP2 model, else ``scope`` itself.
    """
    from torch.distributed.fsdp import FSDPModule

    if not any(isinstance(m, FSDPModule) for m in model.modules()):
        return scope
    return _sampled_weights(model, scope, False)


@contextlib.contextmanager
def _sampled_weights(model, scope: ContextManager, gathered: bool) -> Iterator[None]:
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]

    def regather(unshard: bool) -> None:
        for unit in units:
            unit.reshard()
        if unshard:
            for unit in units:
                unit.unshard()

    regather(False)
    with scope:
        regather(gathered)
        yield
        regather(False)
    regather(gathered)


@contextlib.contextmanager
def _summed_gradients(params: list[torch.nn.Parameter]) -> Iterator[None]:
    earlier = [p.grad for p in params]
    for p in params:
        p.grad = None
    yield
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    for handle in [dist.all_reduce(g, op=dist.ReduceOp.SUM, async_op=True) for g in grads]:
        handle.wait()
    for p, grad, before in zip(params, grads, earlier):
        p.grad = grad if before is None else before.add_(grad)


def weighted_mean(entries: Iterable[tuple[float | Mapping[str, float], dict[str, float]]]) -> dict[str, float]:
    """Per key, ``sum w s[key] / sum w`` over the ``(w, stats)`` entries that hold the key with weight ``w > 0``
    (the processes of `World.weighted_means`, or the chunks of a sharded update).

    ``w`` is one weight for every key of its entry, or a mapping with a weight per key of ``stats`` (a token mean
    weighted by its token count, other stats by their loss share); a key that one entry alone holds keeps its
    value as it is. Raises ValueError when a mapping lacks a key of its stats.
    """
    pairs: dict[str, list[tuple[float, float]]] = {}
    for w, stats in entries:
        for key, value in stats.items():
            if isinstance(w, Mapping):
                if key not in w:
                    raise ValueError(f"weighted_mean: the weights {sorted(w)} lack the stat {key!r}")
                weight = w[key]
            else:
                weight = w
            if weight > 0:
                pairs.setdefault(key, []).append((weight, value))
    return {key: p[0][1] if len(p) == 1 else sum(w * v for w, v in p) / sum(w for w, _ in p)
            for key, p in pairs.items()}


def local_rows(rows: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """This process's rows among ``rows`` (row ids of the whole batch), as rows of its part; ``rows`` when ``index`` is None."""
    if index is None:
        return rows
    mine = index[rows]
    return mine[mine >= 0]


def init_world(backend: str | None = None) -> World:
    """This process's `World`, joining the process group set up by the launcher if there is one.

    With ``WORLD_SIZE`` > 1 the group is initialised from ``env://`` (``backend``: default ``nccl`` with CUDA, else
    ``gloo``). Raises RuntimeError without ``torch.distributed`` or for a DeepSpeed launch (`sharded_launch`).
    """
    engines = sharded_launch()
    if "DeepSpeed" in engines:
        raise RuntimeError(f"this launch asks for DeepSpeed (set by the accelerate launch config): {DEEPSPEED_REFUSAL}")
    sharded = "FSDP" in engines
    if dist.is_available() and dist.is_initialized():
        rank, size = dist.get_rank(), dist.get_world_size()
        return World(rank, size, int(os.environ.get("LOCAL_RANK", rank)), sharded and size > 1)
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    if not dist.is_available():
        raise RuntimeError(f"WORLD_SIZE={size} but torch.distributed is not available in this torch build")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend, rank=rank, world_size=size)
    return World(rank, size, local_rank, sharded)
