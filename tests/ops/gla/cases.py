"""Inputs and the compared quantities of the GLA tests: fp64 leaves, outputs and gradients."""

from __future__ import annotations

import torch

from lintf.ops import gated_linear_attention


def inputs(n: int, c: int = 5, m: int = 3, batch: int = 2, heads: int = 3, strength: float = 1.0, seed: int = 0):
    """fp64 leaves q, k, v, log_gate (B, H, N, C) in [-strength, 0], S0."""
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, heads, n, c, dtype=torch.float64, generator=generator) for _ in range(2))
    v = torch.randn(batch, heads, n, m, dtype=torch.float64, generator=generator)
    log_gate = -strength * torch.rand(batch, heads, n, c, dtype=torch.float64, generator=generator)
    state = torch.randn(batch, heads, c, m, dtype=torch.float64, generator=generator)
    return [t.requires_grad_() for t in (q, k, v, log_gate, state)]


def op(q, k, v, log_gate, state, **options):
    return gated_linear_attention(q, k, v, log_gate, initial_state=state, return_state=True, **options)


def outputs_and_grads(fn, leaves, **options) -> list[torch.Tensor]:
    """out, final state, then the gradients of <out, U> + <state, W> (fixed random U, W) for every leaf."""
    out, state = fn(*leaves, **options)
    generator = torch.Generator().manual_seed(1)
    upstream = [torch.randn(t.shape, dtype=torch.float64, generator=generator).to(t.dtype) for t in (out, state)]
    return [out, state, *torch.autograd.grad([out, state], leaves, upstream)]
