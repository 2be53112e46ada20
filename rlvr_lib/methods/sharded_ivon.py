"""IVON on FSDP2 shards: the pieces `rlvr_lib.methods.threepo._SummedIVON` needs when its parameters are DTensors.

Every parameter is ``Shard(0)`` on a 1-D mesh: process ``r`` of ``W`` holds rows ``[r c, min((r + 1) c, d0))``,
``c = ceil(d0 / W)``, one contiguous block of the flattened parameter, so IVON runs on the local blocks:

* its flat buffers hold this process's elements only, parameter by parameter in group order;
* the noise equals the unsharded draw: each process draws the group's whole stream in chunks of
  :data:`NOISE_CHUNK` and keeps its slices (:func:`streamed_noise`, :func:`noise_chunks`);
* statistics over all weights are summed over the processes (:func:`global_sums`);
* a checkpoint holds the unsharded layout (:func:`gather_flat`, :func:`local_flat`).

Why the chunked draw is bit-identical on CPU: docs/methods/threepo.md.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.distributed as dist

__all__ = ["NOISE_CHUNK", "gather_flat", "global_sums", "is_sharded", "local", "local_flat", "noise_chunks",
           "shard_range", "streamed_noise"]

NOISE_CHUNK = 1 << 20
"""Values per chunk of the streamed noise draw (a multiple of 16: see the module docstring)."""


def is_sharded(params: Iterable[torch.Tensor]) -> bool:
    """Whether any of ``params`` is a ``DTensor`` (FSDP2's sharded parameters)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in params)


def local(p: torch.Tensor) -> torch.Tensor:
    """This process's block of ``p`` (a view: writing it writes the shard FSDP all-gathers); ``p`` when plain."""
    return p.to_local() if hasattr(p, "to_local") else p


def shard_range(p: torch.Tensor) -> tuple[int, int]:
    """``[a, b)``: the elements of ``p.flatten()`` this process holds (all of them for a plain tensor).

    Raises ValueError for a DTensor that is not ``Shard(0)`` on a 1-D mesh in ``torch.chunk``'s layout.
    """
    if not hasattr(p, "placements"):
        return 0, p.numel()
    from torch.distributed.tensor import Shard

    if p.device_mesh.ndim != 1 or tuple(p.placements) != (Shard(0),):
        raise ValueError(f"a sharded IVON parameter of shape {tuple(p.shape)} has placements {tuple(p.placements)} "
                         f"on a {p.device_mesh.ndim}-D mesh: must be (Shard(dim=0),) on a 1-D mesh "
                         "(FSDP2 fully_shard without HSDP)")
    rows, world, rank = p.shape[0], p.device_mesh.size(), p.device_mesh.get_local_rank()
    per = math.ceil(rows / world)
    start, stop = min(rank * per, rows), min((rank + 1) * per, rows)
    block = local(p)
    if block.shape[0] != stop - start:
        raise ValueError(f"a sharded IVON parameter of shape {tuple(p.shape)} holds {block.shape[0]} rows on rank "
                         f"{rank} of {world}: must hold torch.chunk's rows [{start}, {stop})")
    row = p.numel() // rows if rows else 0
    return start * row, stop * row


def noise_chunks(n: int, chunk: int = NOISE_CHUNK) -> list[tuple[int, int]]:
    """``[start, stop)`` pieces of ``range(n)``: ``chunk`` values each, the remainder joined to the last piece."""
    if chunk % 16 or chunk < 16:
        raise ValueError(f"chunk={chunk} is invalid: must be a positive multiple of 16")
    pieces, start = [], 0
    while start < n:
        stop = n if n - start < 2 * chunk else start + chunk
        pieces.append((start, stop))
        start = stop
    return pieces


def streamed_noise(n: int, ranges: list[tuple[int, int]], *, device, dtype, chunk: int = NOISE_CHUNK
                   ) -> torch.Tensor:
    """The values at ``ranges`` (sorted, disjoint ``[a, b)`` of ``range(n)``) of ``torch.randn(n)``, concatenated,
    drawn in :func:`noise_chunks` from the current RNG (which advances as by the whole draw)."""
    out = torch.empty(sum(b - a for a, b in ranges), device=device, dtype=dtype)
    at, i = 0, 0
    for start, stop in noise_chunks(n, chunk):
        values = torch.randn(stop - start, device=device, dtype=dtype)
        while i < len(ranges) and ranges[i][0] < stop:
            a, b = max(ranges[i][0], start), min(ranges[i][1], stop)
            if b > a:
                out[at:at + b - a] = values[a - start:b - start]
                at += b - a
            if ranges[i][1] <= stop:
                i += 1
            else:
                break
    return out


def global_sums(values: list[float]) -> list[float]:
    """``values`` summed over the processes (float64 all-reduce); as they are without a process group."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    total = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(total)
    return total.tolist()


def gather_flat(flat: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    """The unsharded flat vector (``params``' whole elements in order) from this process's ``flat`` (their local
    blocks in order); a collective over the parameters' meshes (every process calls it)."""
    from torch.distributed.tensor import DTensor

    pieces, at = [], 0
    for p in params:
        block = local(p)
        part = flat[at:at + block.numel()]
        at += block.numel()
        if isinstance(p, DTensor):
            whole = DTensor.from_local(part.view(block.shape), p.device_mesh, p.placements, shape=p.shape,
                                       stride=p.stride()).full_tensor()
            pieces.append(whole.flatten())
        else:
            pieces.append(part)
    return torch.cat(pieces) if pieces else flat


def local_flat(whole: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    """This process's part of the unsharded flat vector ``whole`` (the inverse of :func:`gather_flat`)."""
    pieces, at = [], 0
    for p in params:
        a, b = shard_range(p)
        pieces.append(whole[at + a:at + b])
        at += p.numel()
    if at != whole.numel():
        raise ValueError(f"an IVON buffer of {whole.numel()} values does not fit parameters of {at} values")
    return torch.cat(pieces).to(device=local(params[0]).device) if pieces else whole
