"""Sequence parallelism of the decayed product, GLA and the delta rule: a sequence split over 2 and 4 gloo
processes gives the whole-sequence op's outputs and the gradients of every input (fp64, relative error < 1e-10)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from lintf.ops import decayed_dot_product, delta_rule, gated_linear_attention
from lintf.ops.causal.sequence_parallel import split_sequence
from lintf.ops.sequence_parallel import (sequence_parallel_decayed_dot_product, sequence_parallel_delta_rule,
                                         sequence_parallel_gated_linear_attention)
from tests.ops.causal.test_sequence_parallel import free_port

B, H, N, C, M = 2, 2, 24, 5, 4


def whole_sequence_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """fp64 inputs of every op and an upstream gradient, the same in every process."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator, dtype=torch.float64)

    return dict(q=draw(B, H, N, C) - 0.5, k=F.normalize(draw(B, H, N, C) - 0.5, dim=-1), v=draw(B, H, N, M) - 0.5,
                beta=2 * draw(B, H, N), log_decay=-draw(B, H, N), log_gate=-draw(B, H, N, C), grad=draw(B, H, N, M))


CASES = {
    "decayed": (lambda t: decayed_dot_product(t["q"], t["k"], t["v"], t["log_decay"]),
                lambda t: sequence_parallel_decayed_dot_product(t["q"], t["k"], t["v"], t["log_decay"]),
                ("q", "k", "v", "log_decay")),
    "gla": (lambda t: gated_linear_attention(t["q"], t["k"], t["v"], t["log_gate"], scale=0.7),
            lambda t: sequence_parallel_gated_linear_attention(t["q"], t["k"], t["v"], t["log_gate"], scale=0.7),
            ("q", "k", "v", "log_gate")),
    "delta": (lambda t: delta_rule(t["q"], t["k"], t["v"], t["beta"]),
              lambda t: sequence_parallel_delta_rule(t["q"], t["k"], t["v"], t["beta"]),
              ("q", "k", "v", "beta")),
    "gated delta": (lambda t: delta_rule(t["q"], t["k"], t["v"], t["beta"], log_decay=t["log_decay"]),
                    lambda t: sequence_parallel_delta_rule(t["q"], t["k"], t["v"], t["beta"], log_decay=t["log_decay"]),
                    ("q", "k", "v", "beta", "log_decay")),
}


def outputs_and_gradients(op, tensors: dict[str, torch.Tensor], leaves: tuple[str, ...]) -> list[torch.Tensor]:
    tensors = {name: t.detach().clone().requires_grad_(name in leaves) for name, t in tensors.items()}
    out = op(tensors)
    out.backward(tensors["grad"])
    return [out.detach(), *(tensors[name].grad for name in leaves)]


def rank_main(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        local = {name: split_sequence(t) for name, t in whole_sequence_inputs().items()}
        results = {kind: outputs_and_gradients(parallel, local, leaves)
                   for kind, (_, parallel, leaves) in CASES.items()}
        torch.save(results, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_split_sequence_equals_the_whole(world, tmp_path):
    mp.spawn(rank_main, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(world)]
    for kind, (whole_op, _, leaves) in CASES.items():
        whole = outputs_and_gradients(whole_op, whole_sequence_inputs(), leaves)
        for index, name in enumerate(("out", *leaves)):
            joined = torch.cat([part[kind][index] for part in parts], dim=2)  # ranks hold consecutive positions
            relative = (joined - whole[index]).norm() / whole[index].norm()
            assert relative < 1e-10, f"{kind} {name}: relative error {relative:.2e} over {world} ranks"
