"""Packed documents split across ranks: every sequence-parallel form with the whole row's cu_seqlens gives the
packed op's outputs and gradients on the whole row (fp64, 2 and 4 gloo processes).

The layouts put a document across two and across four ranks (carried through a whole rank), a document
starting exactly at a rank's first position, an empty document at a rank boundary and documents of one
position; the packed op on the whole row is itself checked against each document alone
(test_packed_documents.py).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from lintf.ops import (
    causal_dot_product,
    causal_linear_attention,
    decayed_dot_product,
    delta_rule,
    gated_linear_attention,
    sequence_parallel_causal_dot_product,
    sequence_parallel_causal_linear_attention,
    sequence_parallel_decayed_dot_product,
    sequence_parallel_delta_rule,
    sequence_parallel_gated_linear_attention,
    split_sequence,
)
from tests.ops.causal.test_sequence_parallel import free_port

H, N, C, M = 2, 24, 3, 4
LAYOUTS = {
    "across ranks": [0, 1, 6, 6, 7, 20, 24],  # 4 ranks: 6 starts rank 1, 7..20 runs through rank 2
    "at the middle": [0, 2, 12, 12, 19, 24],  # 2 ranks: a document starts at rank 1's first position
    "one document": [0, 24],
}


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """fp64 inputs of every op and an upstream gradient, the same in every process."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        return torch.rand(1, *shape, generator=generator, dtype=torch.float64)

    return dict(q=draw(H, N, C), k=F.normalize(draw(H, N, C) - 0.5, dim=-1), v=draw(H, N, M) - 0.5,
                beta=2 * draw(H, N), log_decay=-draw(H, N), log_gate=-draw(H, N, C), grad=draw(H, N, M) - 0.5)


CASES = {  # name: (whole-row op, sequence-parallel op, leaves)
    "causal": (lambda t, cu: causal_linear_attention(t["q"], t["k"], t["v"], cu_seqlens=cu),
               lambda t, cu: sequence_parallel_causal_linear_attention(t["q"], t["k"], t["v"], cu_seqlens=cu),
               ("q", "k", "v")),
    "numerator": (lambda t, cu: causal_dot_product(t["q"], t["k"], t["v"], cu_seqlens=cu),
                  lambda t, cu: sequence_parallel_causal_dot_product(t["q"], t["k"], t["v"], cu_seqlens=cu),
                  ("q", "k", "v")),
    "decayed": (lambda t, cu: decayed_dot_product(t["q"], t["k"], t["v"], t["log_decay"], cu_seqlens=cu),
                lambda t, cu: sequence_parallel_decayed_dot_product(t["q"], t["k"], t["v"], t["log_decay"],
                                                                    cu_seqlens=cu),
                ("q", "k", "v", "log_decay")),
    "gla": (lambda t, cu: gated_linear_attention(t["q"], t["k"], t["v"], t["log_gate"], cu_seqlens=cu),
            lambda t, cu: sequence_parallel_gated_linear_attention(t["q"], t["k"], t["v"], t["log_gate"],
                                                                   cu_seqlens=cu),
            ("q", "k", "v", "log_gate")),
    "gated delta": (lambda t, cu: delta_rule(t["q"], t["k"], t["v"], t["beta"], log_decay=t["log_decay"],
                                             cu_seqlens=cu),
                    lambda t, cu: sequence_parallel_delta_rule(t["q"], t["k"], t["v"], t["beta"],
                                                               log_decay=t["log_decay"], cu_seqlens=cu),
                    ("q", "k", "v", "beta", "log_decay")),
}


def outputs_and_gradients(op, tensors: dict[str, torch.Tensor], leaves: tuple[str, ...], cu) -> list[torch.Tensor]:
    tensors = {name: t.detach().clone().requires_grad_(name in leaves) for name, t in tensors.items()}
    out = op(tensors, cu)
    out.backward(tensors["grad"])
    return [out.detach(), *(tensors[name].grad for name in leaves)]


def errors_of_bad_boundaries() -> list[str]:
    """The messages of a rank's own boundaries passed where the whole row's belong, and of a decreasing one."""
    local = split_sequence(inputs()["q"])
    messages = []
    for bad in (torch.tensor([0, local.shape[2]]), torch.tensor([0, 9, 5, N])):
        for _, parallel, _ in CASES.values():
            try:
                parallel(dict(inputs(), q=local, k=local, v=split_sequence(inputs()["v"]),
                              beta=split_sequence(inputs()["beta"]), log_decay=split_sequence(inputs()["log_decay"]),
                              log_gate=split_sequence(inputs()["log_gate"])), bad)
                messages.append("no error")
            except ValueError as error:
                messages.append(str(error))
    return messages


def rank_main(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        local = {name: split_sequence(t) for name, t in inputs().items()}
        results = {(kind, layout): outputs_and_gradients(parallel, local, leaves, torch.tensor(bounds))
                   for kind, (_, parallel, leaves) in CASES.items() for layout, bounds in LAYOUTS.items()}
        torch.save({"results": results, "errors": errors_of_bad_boundaries()}, os.path.join(directory, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_split_packed_row_equals_the_whole(world, tmp_path):
    mp.spawn(rank_main, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True)
    parts = [torch.load(tmp_path / f"{r}.pt", weights_only=True) for r in range(world)]
    for kind, (whole_op, _, leaves) in CASES.items():
        for layout, bounds in LAYOUTS.items():
            whole = outputs_and_gradients(whole_op, inputs(), leaves, torch.tensor(bounds))
            for index, name in enumerate(("out", *leaves)):
                joined = torch.cat([part["results"][kind, layout][index] for part in parts], dim=2)
                relative = (joined - whole[index]).norm() / whole[index].norm()
                assert relative < 1e-10, f"{kind}, {layout}, {name}: relative error {relative:.2e} over {world} ranks"
    for part in parts:
        own, decreasing = part["errors"][: len(CASES)], part["errors"][len(CASES):]
        assert all(f"end at N = {N}, got 0 ... {N // world}" in message for message in own), own
        assert all("never decrease" in message for message in decreasing), decreasing


def test_the_state_is_cut_where_a_document_starts(tmp_path):
    """Without the cut the second document of 'at the middle' would see the first: the outputs must differ."""
    t = inputs()
    whole = causal_linear_attention(t["q"], t["k"], t["v"], cu_seqlens=torch.tensor(LAYOUTS["at the middle"]))
    unpacked = causal_linear_attention(t["q"], t["k"], t["v"])
    assert torch.equal(whole[:, :, :2], unpacked[:, :, :2])
    assert not torch.allclose(whole[:, :, 12:], unpacked[:, :, 12:])
