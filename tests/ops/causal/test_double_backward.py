"""Second-order gradients of the causal products (gradient penalties, Hessian-vector products)."""

from __future__ import annotations

import pytest
import torch

from lintf.ops import LinearAttentionState, causal_dot_product, causal_linear_attention
from lintf.ops.causal.reference import causal_linear_attention_reference

OPS = {"normalised": causal_linear_attention, "numerator": causal_dot_product}


def tiny_inputs(n: int = 7, c: int = 3, m: int = 2) -> tuple[torch.Tensor, ...]:
    """fp64 positive q, k, signed v (1, 2, n, .) and a state (S0 signed, z0 positive), requiring grad."""
    q, k = torch.rand(1, 2, n, c, dtype=torch.float64), torch.rand(1, 2, n, c, dtype=torch.float64)
    v, kv = torch.randn(1, 2, n, m, dtype=torch.float64), torch.randn(1, 2, c, m, dtype=torch.float64)
    z = torch.rand(1, 2, c, dtype=torch.float64)
    return tuple(t.requires_grad_() for t in (q, k, v, kv, z))


@pytest.mark.parametrize("op", OPS)
def test_gradgradcheck(op, op_path):
    q, k, v, _, _ = tiny_inputs()
    assert torch.autograd.gradgradcheck(OPS[op], (q, k, v))


@pytest.mark.parametrize("op", OPS)
def test_gradgradcheck_with_state(op, op_path):
    def with_state(q, k, v, kv, z):
        out, state = OPS[op](q, k, v, initial_state=LinearAttentionState(kv, z), return_state=True)
        return out, state.kv, state.normaliser

    assert torch.autograd.gradgradcheck(with_state, tiny_inputs())


def test_gradient_penalty_matches_reference(op_path):
    """d/dq of |dL/dv|^2, through a backward recorded with create_graph, against the naive form."""
    q, k, v, _, _ = tiny_inputs(n=40, c=4, m=3)
    upstream = torch.randn(1, 2, 40, 3, dtype=torch.float64)

    def penalty_grad(fn) -> tuple[torch.Tensor, ...]:
        (grad_v,) = torch.autograd.grad(fn(q, k, v), v, upstream, create_graph=True)
        return torch.autograd.grad(grad_v.square().sum(), (q, k))

    for got, want in zip(penalty_grad(causal_linear_attention), penalty_grad(causal_linear_attention_reference)):
        torch.testing.assert_close(got, want)
