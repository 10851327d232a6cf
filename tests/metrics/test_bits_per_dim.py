"""BitsPerDim against distributions with known answers."""

from __future__ import annotations

import math

import pytest
import torch

from lintf.metrics import BitsPerDim


def test_uniform_over_256_values_is_eight_bits():
    metric = BitsPerDim()
    metric.update(torch.full((4, 100), math.log(256), dtype=torch.float64))
    assert metric.compute().item() == pytest.approx(8.0, abs=1e-12)


def test_average_is_over_dimensions_not_batches():
    metric = BitsPerDim()
    metric.update(torch.full((1, 10), math.log(2)))  # 10 dims at 1 bit
    metric.update(torch.full((1, 30), 3 * math.log(2)))  # 30 dims at 3 bits
    assert metric.compute().item() == pytest.approx((10 * 1 + 30 * 3) / 40)


def test_mask_excludes_entries():
    metric = BitsPerDim()
    nll = torch.tensor([[math.log(2), 100.0]])
    metric.update(nll, mask=torch.tensor([[True, False]]))
    assert metric.compute().item() == pytest.approx(1.0)


def test_states_sum_across_processes():
    """What DDP does: each rank's (nats, dims) are summed before compute."""
    ranks = [BitsPerDim(), BitsPerDim()]
    ranks[0].update(torch.full((2, 5), math.log(2)))
    ranks[1].update(torch.full((1, 30), 2 * math.log(2)))
    merged = BitsPerDim()
    merged.nats = sum(r.nats for r in ranks)
    merged.dims = sum(r.dims for r in ranks)
    assert merged.compute().item() == pytest.approx((10 * 1 + 30 * 2) / 40)


def test_compute_without_update_raises():
    with pytest.raises(ValueError, match="before any update"):
        BitsPerDim().compute()


def _ddp_worker(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    metric = BitsPerDim()
    dims = 10 if rank == 0 else 30  # unequal shares: a mean of per-rank means would be wrong
    metric.update(torch.full((dims,), (rank + 1) * math.log(2)))
    results[rank] = metric.compute().item()
    dist.destroy_process_group()


@pytest.mark.slow
def test_bits_per_dim_under_real_ddp():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_ddp_worker, args=(port, results), nprocs=2, join=True)
    expected = (10 * 1 + 30 * 2) / 40
    assert results[0] == pytest.approx(expected) and results[1] == pytest.approx(expected)
