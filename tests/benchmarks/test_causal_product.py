"""benchmarks.causal_product: a forced vector path and backward mode hold for the backward as well as the forward."""

import os

import pytest
import torch

from benchmarks import causal_product


class RecordsPath(torch.autograd.Function):
    """Identity on v that records LINTF_CPU_PATH (and LINTF_CPU_BACKWARD, when set) when its forward and its
    backward run."""

    seen: list[tuple] = []

    @staticmethod
    def settings(when: str) -> tuple:
        mode = os.environ.get("LINTF_CPU_BACKWARD")
        return (when, os.environ.get("LINTF_CPU_PATH")) + (() if mode is None else (mode,))

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        RecordsPath.seen.append(RecordsPath.settings("forward"))
        return v.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        RecordsPath.seen.append(RecordsPath.settings("backward"))
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

    causal_product.run_once(causal_product.ForcedOp("avx2"), tensors, torch.ones(1, 2, 8, 4))

    assert RecordsPath.seen == [("forward", "avx2"), ("backward", "avx2")]
    assert os.environ.get("LINTF_CPU_PATH") == before


def test_a_forced_backward_mode_holds_through_the_backward_and_is_restored(monkeypatch):
    monkeypatch.delenv("LINTF_CPU_PATH", raising=False)
    monkeypatch.setenv("LINTF_CPU_BACKWARD", "stored")
    monkeypatch.setattr(causal_product, "causal_linear_attention", RecordsPath.apply)
    RecordsPath.seen = []
    tensors = [torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3)]

    causal_product.run_once(causal_product.ForcedOp("avx2", "recompute"), tensors, torch.ones(1, 2, 8, 4))

    assert RecordsPath.seen == [("forward", "avx2", "recompute"), ("backward", "avx2", "recompute")]
    assert os.environ.get("LINTF_CPU_BACKWARD") == "stored"


def test_targets_say_met_or_missed_with_the_ratio():
    rows = [{"N": 16384, "threads": 1, "impl": impl, "fwd+bwd % peak": share, "fwd+bwd MB": 100.0}
            for impl, share in (("lintf op", 66.0), ("lintf op [avx2, recompute]", 45.0), ("lintf op, state", 1.0))]
    lines = causal_product.targets(rows, 16384, 1)
    assert len(lines) == 2
    assert "lintf op forward+backward at N=16384, 1 thread(s) >= 60% of the matmul: met, 66% (1.10x" in lines[0]
    assert "missed, 45% (0.75x the target), peak extra memory 100 MB" in lines[1]


def test_other_implementations_run_under_the_environment_as_it_is(monkeypatch):
    monkeypatch.setenv("LINTF_CPU_PATH", "portable")
    RecordsPath.seen = []
    tensors = [torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3)]

    causal_product.run_once(RecordsPath.apply, tensors, torch.ones(1, 2, 8, 4))

    assert RecordsPath.seen == [("forward", "portable"), ("backward", "portable")]
