"""Inputs and the compared quantities of the delta rule tests: fp64 leaves, outputs and gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lintf.ops import delta_rule


def inputs(n: int, c: int = 5, m: int = 3, batch: int = 2, heads: int = 3, decay: bool = True, seed: int = 0):
    """fp64 leaves q, k (unit norm), v, beta in [0, 2], log_decay in [-1, 0] (or None), S0."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n, c, dtype=torch.float64, generator=generator)
    k = F.normalize(torch.randn(batch, heads, n, c, dtype=torch.float64, generator=generator), dim=-1)
    v = torch.randn(batch, heads, n, m, dtype=torch.float64, generator=generator)
    beta = 2 * torch.rand(batch, heads, n, dtype=torch.float64, generator=generator)
    log_decay = -torch.rand(batch, heads, n, dtype=torch.float64, generator=generator) if decay else None
    state = torch.randn(batch, heads, c, m, dtype=torch.float64, generator=generator)
    return [None if t is None else t.requires_grad_() for t in (q, k, v, beta, log_decay, state)]


def op(q, k, v, beta, log_decay, state, **options):
    return delta_rule(q, k, v, beta, log_decay=log_decay, initial_state=state, return_state=True, **options)


def outputs_and_grads(fn, leaves, **options) -> list[torch.Tensor]:
    """out, final state, then the gradients of <out, U> + <state, W> (fixed random U, W) for every tensor leaf."""
    out, state = fn(*leaves, **options)
    generator = torch.Generator().manual_seed(1)
    upstream = [torch.randn(t.shape, dtype=torch.float64, generator=generator).to(t.dtype) for t in (out, state)]
    tensors = [t for t in leaves if t is not None]
    return [out, state, *torch.autograd.grad([out, state], tensors, upstream)]
