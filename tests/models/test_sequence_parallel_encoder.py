"""A TransformerEncoder with use_sequence_parallel: two gloo ranks reproduce the whole-sequence forward and gradients."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lintf.models import EncoderConfig, TransformerEncoder
from lintf.ops import split_sequence

CONFIG = EncoderConfig(d_model=12, n_layers=2, n_heads=3, attention="linear", dropout=0.0)


def model_and_input() -> tuple[TransformerEncoder, torch.Tensor]:
    torch.manual_seed(0)
    return TransformerEncoder(CONFIG).double(), torch.randn(2, 16, 12, dtype=torch.float64)


def gradients(model: TransformerEncoder, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
    x = x.detach().clone().requires_grad_()
    out = model(x, causal=True)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return out.detach(), x.grad, {name: p.grad.clone() for name, p in model.named_parameters()}


def rank_main(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, x = model_and_input()
        model.use_sequence_parallel(dist.group.WORLD)
        weights = torch.linspace(-1, 1, x.shape[0] * x.shape[1] * x.shape[2], dtype=x.dtype).view_as(x)
        part, part_weights = split_sequence(x, dim=1), split_sequence(weights, dim=1)
        part = part.detach().clone().requires_grad_()
        out = model(part, causal=True)
        (out * part_weights).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        for grad in grads.values():
            dist.all_reduce(grad)  # every rank's share of the whole sequence's parameter gradients
        torch.save({"out": out.detach(), "dx": part.grad, "grads": grads}, os.path.join(directory, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_ranks_equal_the_whole_sequence(tmp_path):
    mp.spawn(rank_main, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    model, x = model_and_input()
    out, dx, grads = gradients(model, x)
    torch.testing.assert_close(torch.cat([p["out"] for p in parts], dim=1), out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.cat([p["dx"] for p in parts], dim=1), dx, rtol=1e-10, atol=1e-12)
    for name, grad in grads.items():
        torch.testing.assert_close(parts[0]["grads"][name], grad, rtol=1e-9, atol=1e-12)


def test_attentions_without_a_split_form_refuse():
    model = TransformerEncoder(EncoderConfig(d_model=12, n_layers=1, n_heads=3, attention="softmax"))
    with pytest.raises(ValueError, match="cannot split a sequence across ranks"):
        model.use_sequence_parallel(object())
