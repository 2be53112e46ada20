"""IVON on FSDP2 shards (`rlvr_lib.methods.sharded_ivon`): the one-process pieces.

The sharded path itself (two gloo processes, a C3PO step and its resume equal to one process's) is in
``tests/test_distributed.py``; here, what it rests on: the chunked noise draw equals IVON's whole draw bit for
bit, and on plain tensors every helper is the identity.
"""

from __future__ import annotations

import pytest
import torch

from rlvr_lib.methods import sharded_ivon
from rlvr_lib.methods.threepo import _SummedIVON


@pytest.mark.parametrize("n", [1, 15, 16, 17, 47, 64, 100, 1000])
def test_noise_chunks_cover_the_draw_in_multiples_of_16_with_a_long_last_piece(n):
    pieces = sharded_ivon.noise_chunks(n, chunk=16)
    assert [a for a, _ in pieces] == [0, *[b for _, b in pieces[:-1]]] and pieces[-1][1] == n
    assert all(b - a == 16 for a, b in pieces[:-1])
    assert 16 <= pieces[-1][1] - pieces[-1][0] < 32 or n < 16


@pytest.mark.parametrize("chunk", [0, 8, 24])
def test_noise_chunks_refuse_a_chunk_not_a_multiple_of_16(chunk):
    with pytest.raises(ValueError, match=f"chunk={chunk} is invalid: must be a positive multiple of 16"):
        sharded_ivon.noise_chunks(100, chunk=chunk)


@pytest.mark.parametrize("n, ranges", [
    (1000, [(0, 1000)]),
    (1000, [(3, 40), (40, 40), (100, 517), (999, 1000)]),  # an empty block, blocks across chunk edges
    (37, [(5, 33)]),  # a short tail the whole draw redraws as its last 16 values
    (12, [(0, 12)]),  # under 16 values: one piece
])
def test_streamed_noise_equals_the_whole_draw_at_the_ranges(n, ranges):
    torch.manual_seed(7)
    whole = torch.randn(n)
    after_whole = torch.randn(3)
    torch.manual_seed(7)
    part = sharded_ivon.streamed_noise(n, ranges, device="cpu", dtype=torch.float32, chunk=16)
    assert torch.equal(part, torch.cat([whole[a:b] for a, b in ranges]))
    assert torch.equal(torch.randn(3), after_whole)  # the RNG advanced as by the whole draw


def test_plain_tensors_pass_through_the_shard_helpers():
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    assert not sharded_ivon.is_sharded(params)
    assert sharded_ivon.local(params[0]) is params[0]
    assert [sharded_ivon.shard_range(p) for p in params] == [(0, 12), (0, 5)]
    flat = torch.arange(17.0)
    assert torch.equal(sharded_ivon.local_flat(flat, params), flat)
    assert torch.equal(sharded_ivon.gather_flat(flat, params), flat)
    with pytest.raises(ValueError, match="18 values does not fit parameters of 17 values"):
        sharded_ivon.local_flat(torch.arange(18.0), params)


def test_unsharded_ivon_keeps_its_state_dict_and_mean_statistics():
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    optimizer = _SummedIVON(params, lr=0.1, ess=1e4, hess_init=2e-3, weight_decay=1e-6)
    assert optimizer.sharded is False
    gathered = optimizer.gathered_state_dict()
    assert gathered["param_groups"][0]["numel"] == 17 and torch.equal(gathered["param_groups"][0]["hess"],
                                                                      torch.full((17,), 2e-3))
    assert optimizer.mean_hess() == pytest.approx(2e-3)
    assert optimizer.mean_sigma() == pytest.approx(1 / (1e4 * (2e-3 + 1e-6)) ** 0.5)
