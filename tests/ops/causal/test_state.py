"""Causal products with an initial state and a returned final state, on both paths.

Checked against the naive O(N^2) reference with the initial state written into its formula, and
by splitting sequences: the pieces, chained through the state, must give the unsplit output and
gradients.
"""

from __future__ import annotations

import pytest
import torch

from lintf.ops import LinearAttentionState, causal_dot_product, causal_linear_attention
from lintf.ops.causal.reference import (
    causal_dot_product_reference,
    causal_linear_attention_reference,
    final_state_reference,
)

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

OPS = {
    "normalised": (causal_linear_attention, causal_linear_attention_reference),
    "numerator": (causal_dot_product, causal_dot_product_reference),
}
SHAPES = [  # (B, H, N, C, M)
    (2, 3, 37, 8, 5),  # N not a multiple of either path's chunk
    (1, 1, 300, 16, 24),  # B*H = 1: the compiled op splits the sequence across threads
    (1, 2, 1, 5, 70),  # one position, padded feature widths
    (1, 2, 0, 3, 2),  # no positions: the final state is the initial one
    (1, 2, 6, 0, 2),  # no features
    (1, 2, 6, 3, 0),  # no value columns
]


def inputs(b: int, h: int, n: int, c: int, m: int, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """Positive q, k, signed v, signed S0 and positive z0 in the accumulation dtype, all requiring grad."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    tensors = [torch.rand(b, h, n, c, dtype=dtype), torch.rand(b, h, n, c, dtype=dtype),
               torch.randn(b, h, n, m, dtype=dtype), torch.randn(b, h, c, m, dtype=acc),
               n * torch.rand(b, h, c, dtype=acc)]
    return [t.requires_grad_() for t in tensors]


def run(op: str, tensors: list[torch.Tensor], reference: bool = False) -> list[torch.Tensor]:
    """Output and final state (kv, normaliser) of op on q, k, v from the state (S0, z0)."""
    fast, naive = OPS[op]
    q, k, v, kv, z = tensors
    state = LinearAttentionState(kv, z)
    if reference:
        return [naive(q, k, v, initial_state=state), *final_state_reference(k, v, state)]
    out, final = fast(q, k, v, initial_state=state, return_state=True)
    assert isinstance(final, LinearAttentionState)
    return [out, *final]


def values_and_grads(outputs: list[torch.Tensor], tensors: list[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    upstream = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype) for o in outputs]
    grads = torch.autograd.grad(outputs, tensors, upstream, allow_unused=True)
    return [o.detach() for o in outputs] + [torch.zeros_like(t) if g is None else g for g, t in zip(grads, tensors)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.usefixtures("backward_mode")
def test_matches_reference_with_initial_and_final_state(op, shape, op_path):
    tensors = inputs(*shape)
    got = values_and_grads(run(op, tensors), tensors)
    want = values_and_grads(run(op, tensors, reference=True), tensors)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.usefixtures("backward_mode")
def test_gradcheck_with_state(op, op_path):
    assert torch.autograd.gradcheck(lambda *t: tuple(run(op, list(t))), inputs(1, 2, 35, 3, 2))


@pytest.mark.parametrize("op", OPS)
def test_without_a_state_the_final_state_starts_from_zeros(op, op_path):
    q, k, v, _, _ = inputs(2, 1, 20, 4, 3)
    out, final = OPS[op][0](q, k, v, return_state=True)
    torch.testing.assert_close(out, OPS[op][1](q, k, v))
    for a, b in zip(final, final_state_reference(k, v)):
        torch.testing.assert_close(a, b)
    empty = [t[:, :, :0] for t in (q, k, v)]
    _, final = OPS[op][0](*empty, return_state=True)
    assert final.kv.shape == (2, 1, 4, 3) and not final.kv.any() and not final.normaliser.any()


TOLERANCES = {
    torch.float64: {},
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.bfloat16: {"rtol": 3e-2, "atol": 3e-2},
}


@pytest.mark.parametrize("dtype", TOLERANCES, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", [0, 1, 32, 37, 64, 69, 70])
@pytest.mark.usefixtures("backward_mode")
def test_split_sequence_reproduces_the_whole(split, op, dtype, op_path):
    """Positions [0, split) then [split, N) from the first piece's state equal one call on [0, N)."""
    tensors = inputs(1, 2, 70, 6, 5, dtype)
    whole = values_and_grads(run(op, tensors), tensors)
    q, k, v, kv, z = tensors
    first = run(op, [q[:, :, :split], k[:, :, :split], v[:, :, :split], kv, z])
    second = run(op, [q[:, :, split:], k[:, :, split:], v[:, :, split:], *first[1:]])
    pieces = values_and_grads([torch.cat([first[0], second[0]], dim=2), *second[1:]], tensors)
    for a, b in zip(pieces, whole):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **TOLERANCES[dtype])


@pytest.mark.usefixtures("backward_mode")
def test_torch_compile_fullgraph_with_state(op_path):
    tensors = [t.detach().float().requires_grad_() for t in inputs(1, 2, 45, 4, 3)]

    def attention(q, k, v, kv, z):
        out, final = causal_linear_attention(q, k, v, initial_state=LinearAttentionState(kv, z), return_state=True)
        return out, final.kv, final.normaliser

    compiled = torch.compile(attention, fullgraph=True)
    got = values_and_grads(list(compiled(*tensors)), tensors)
    want = values_and_grads(run("normalised", [t.double() for t in tensors], reference=True), tensors)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b.to(a.dtype), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("backward_mode")
def test_autocast_bf16_keeps_the_state_in_fp32(op_path):
    q, k, v, kv, z = inputs(2, 2, 50, 8, 8, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, final = causal_linear_attention(q, k, v, initial_state=LinearAttentionState(kv, z), return_state=True)
    assert out.dtype == torch.bfloat16 and final.kv.dtype == final.normaliser.dtype == torch.float32
    (out.float().sum() + final.kv.sum()).backward()
    assert kv.grad.dtype == torch.float32 and torch.isfinite(q.grad).all()
    rounded = [t.detach().bfloat16().double() for t in (q, k, v)] + [kv.detach().double(), z.detach().double()]
    want = run("normalised", rounded, reference=True)
    torch.testing.assert_close(out.double(), want[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(final.kv.double(), want[1], rtol=1e-4, atol=1e-4)
