"""benchmarks.causal_product: a forced vector path holds for the backward as well as the forward."""

import os

import pytest
import torch

from benchmarks import causal_product


class RecordsPath(torch.autograd.Function):
    """Identity on v that records LINTF_CPU_PATH when its forward and its backward run."""

    seen: list[tuple[str, str | None]] = []

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        RecordsPath.seen.append(("forward", os.environ.get("LINTF_CPU_PATH")))
        return v.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        RecordsPath.seen.append(("backward", os.environ.get("LINTF_CPU_PATH")))
        return torch.zeros_like(grad), torch.zeros_like(grad), grad


@pytest.mark.parametrize("before", [None, "portable"])
def test_a_forced_path_holds_through_the_backward_and_is_restored(monkeypatch, before):
    if before is None:
        monkeypatch.delenv("LINTF_CPU_PATH", raising=False)
    else:
        monkeypatch.setenv("LINTF_CPU_PATH", before)
    monkeypatch.setattr(causal_product, "causal_linear_attention", RecordsPath.apply)
    RecordsPath.seen = []
    tensors = [torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3)]

    causal_product.run_once(causal_product.OpOnPath("avx2"), tensors, torch.ones(1, 2, 8, 4))

    assert RecordsPath.seen == [("forward", "avx2"), ("backward", "avx2")]
    assert os.environ.get("LINTF_CPU_PATH") == before


def test_other_implementations_run_under_the_environment_as_it_is(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_PATH", "portable")
    RecordsPath.seen = []
    tensors = [torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3)]

    causal_product.run_once(RecordsPath.apply, tensors, torch.ones(1, 2, 8, 4))

    assert RecordsPath.seen == [("forward", "portable"), ("backward", "portable")]
