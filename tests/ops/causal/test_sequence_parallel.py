"""Sequence parallelism: a sequence split over 2 and 4 gloo processes gives the whole-sequence op's outputs and gradients."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lintf.ops import causal_dot_product, causal_linear_attention
from lintf.ops.causal.reference import causal_linear_attention_reference
from lintf.ops.causal.sequence_parallel import (
    sequence_parallel_causal_dot_product,
    sequence_parallel_causal_linear_attention,
    split_sequence,
)

SHAPE = dict(batch=2, heads=3, length=24, features=5, values=4)


def whole_sequence_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k (non-negative), v and an upstream gradient, fp64, the same in every process."""
    generator = torch.Generator().manual_seed(seed)
    b, h, n, c, m = SHAPE.values()
    q, k = (torch.rand(b, h, n, c, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(b, h, n, m, generator=generator, dtype=torch.float64)
    grad = torch.randn(b, h, n, m, generator=generator, dtype=torch.float64)
    return q, k, v, grad


def outputs_and_gradients(op, q, k, v, grad) -> list[torch.Tensor]:
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = op(q, k, v)
    out.backward(grad)
    return [out.detach(), q.grad, k.grad, v.grad]


def rank_main(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        q, k, v, grad = (split_sequence(t) for t in whole_sequence_inputs())
        results = {
            "normalised": outputs_and_gradients(sequence_parallel_causal_linear_attention, q, k, v, grad),
            "numerator": outputs_and_gradients(sequence_parallel_causal_dot_product, q, k, v, grad),
        }
        torch.save(results, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_split_sequence_equals_the_whole(world, tmp_path):
    mp.spawn(rank_main, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(world)]
    q, k, v, grad = whole_sequence_inputs()
    expected = {
        "normalised": outputs_and_gradients(causal_linear_attention, q, k, v, grad),
        "numerator": outputs_and_gradients(causal_dot_product, q, k, v, grad),
    }
    torch.testing.assert_close(expected["normalised"][0], causal_linear_attention_reference(q, k, v), rtol=1e-12,
                               atol=0)
    for kind, whole in expected.items():
        for name, index in (("out", 0), ("dq", 1), ("dk", 2), ("dv", 3)):
            joined = torch.cat([part[kind][index] for part in parts], dim=2)  # ranks hold consecutive positions
            relative = (joined - whole[index]).norm() / whole[index].norm()
            assert relative < 1e-10, f"{kind} {name}: relative error {relative:.2e} over {world} ranks"


def test_split_sequence_needs_a_divisible_length(tmp_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        assert split_sequence(torch.zeros(1, 1, 6, 2)).shape == (1, 1, 6, 2)
    finally:
        dist.destroy_process_group()
    with pytest.raises(ValueError, match="needs torch.distributed initialised"):
        sequence_parallel_causal_linear_attention(*whole_sequence_inputs()[:3])


def test_uneven_split_is_refused_with_the_padding_to_use(tmp_path):
    mp.spawn(uneven_main, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    assert (tmp_path / "message0.txt").read_text() == (
        "sequence parallelism: a sequence of 7 positions does not split into 2 equal parts; pad it to a multiple "
        "of 2 (e.g. 8)")


def uneven_main(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        split_sequence(torch.zeros(1, 1, 7, 2))
    except ValueError as error:
        with open(os.path.join(directory, f"message{rank}.txt"), "w") as file:
            file.write(str(error))
    finally:
        dist.destroy_process_group()
