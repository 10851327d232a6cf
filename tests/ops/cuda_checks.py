"""Checks that every op's GPU tests share (tests/ops/<op>/test_cuda.py): a registered attention on CUDA tensors
against the same module on the CPU, forward and gradients."""

from __future__ import annotations

import torch

from lintf.registry import build_attention
from tests.ops.scaled_error import scaled_error


def assert_attention_on_cuda_matches_the_cpu(name: str, dtype: torch.dtype, tolerance: float, head_dim: int = 32,
                                             **kwargs: object) -> None:
    """Attention ``name`` (causal, B=2, H=4, N=150) on CUDA against its CPU run: output and dq, dk, dv.

    Args:
        name: the attention's registry key.
        dtype: q, k, v's dtype.
        tolerance: largest scaled error (tests.ops.scaled_error) allowed.
        head_dim: D.
        kwargs: the attention's other arguments.
    """
    torch.manual_seed(0)
    attention = build_attention(name, head_dim=head_dim, **kwargs)
    q, k, v = (torch.randn(2, 4, 150, head_dim).to(dtype).requires_grad_() for _ in range(3))
    grad = torch.randn(2, 4, 150, head_dim).to(dtype)
    want = [attention(q, k, v, causal=True)]
    want += torch.autograd.grad(want[0], (q, k, v), grad)
    gpu = [t.detach().cuda().requires_grad_() for t in (q, k, v)]
    attention_gpu = attention.cuda()
    got = [attention_gpu(*gpu, causal=True)]
    got += torch.autograd.grad(got[0], gpu, grad.cuda())
    for label, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.device.type == "cuda" and g.dtype == w.dtype, label
        error = scaled_error(g, w)
        assert error <= tolerance, f"{name} {label}: scaled error {error:.2e} > {tolerance:.0e}"
