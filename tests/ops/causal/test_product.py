"""The compiled causal-product op against the naive O(N^2) reference: values, gradients, dtypes."""

from __future__ import annotations

import pytest
import torch

from lintf.ops import LinearAttentionState, causal_dot_product, causal_linear_attention
from lintf.ops.causal.chunked import causal_linear_attention_pytorch
from lintf.ops.causal.reference import (
    causal_dot_product_reference,
    causal_linear_attention_reference,
    final_state_reference,
)

pytestmark = [
    pytest.mark.usefixtures("compiled_op"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

OPS = {
    "normalised": (causal_linear_attention, causal_linear_attention_reference),
    "numerator": (causal_dot_product, causal_dot_product_reference),
}
SHAPES = [  # (B, H, N, C, M)
    (1, 1, 1, 1, 1),
    (2, 3, 37, 8, 5),  # N not a multiple of the chunk, C != M
    (1, 1, 300, 16, 24),  # B*H = 1: the sequence is split across threads
    (1, 2, 70, 5, 70),  # feature widths that need padding
]


def inputs(b: int, h: int, n: int, c: int, m: int, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """Positive (feature-mapped) q, k and signed v, requiring grad."""
    q, k = torch.rand(b, h, n, c, dtype=dtype), torch.rand(b, h, n, c, dtype=dtype)
    return [q.requires_grad_(), k.requires_grad_(), torch.randn(b, h, n, m, dtype=dtype).requires_grad_()]


def values_and_grads(fn, tensors: list[torch.Tensor], upstream: torch.Tensor) -> list[torch.Tensor]:
    out = fn(*tensors)
    return [out, *torch.autograd.grad(out, tensors, upstream)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.usefixtures("backward_mode")
def test_forward_and_gradients_match_reference(op, shape, dtype):
    fast, reference = OPS[op]
    tensors = inputs(*shape, dtype=dtype)
    upstream = torch.randn(*shape[:3], shape[4], dtype=dtype)
    tol = {} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-4}
    for got, want in zip(values_and_grads(fast, tensors, upstream), values_and_grads(reference, tensors, upstream)):
        torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("c, m", [(512, 3), (4, 512), (512, 512)])
def test_wide_heads(c, m):
    tensors = inputs(1, 1, 40, c, m)
    upstream = torch.randn(1, 1, 40, m, dtype=torch.float64)
    got = values_and_grads(causal_linear_attention, tensors, upstream)
    for a, b in zip(got, values_and_grads(causal_linear_attention_reference, tensors, upstream)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.usefixtures("backward_mode")
def test_gradcheck_float64(op):
    assert torch.autograd.gradcheck(OPS[op][0], inputs(1, 2, 35, 3, 2))


@pytest.mark.parametrize("states_every", [0, 32])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_opcheck(normalize, dtype, with_state, states_every):
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in inputs(2, 1, 33, 4, 3))
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    state = (torch.randn(2, 1, 4, 3, dtype=acc, requires_grad=True), torch.rand(2, 1, 4, dtype=acc, requires_grad=True))
    state = state if with_state else (None, None)
    torch.library.opcheck(torch.ops.lintf.causal_product.default, (q, k, v, 1e-6, normalize, *state, states_every))


@pytest.mark.usefixtures("backward_mode")
def test_non_contiguous_inputs():
    q, k, v = (t.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for t in inputs(2, 3, 40, 6, 4))
    assert not q.is_contiguous()
    upstream = torch.randn(2, 3, 40, 4, dtype=torch.float64)
    got = values_and_grads(causal_linear_attention, [q, k, v], upstream)
    for a, b in zip(got, values_and_grads(causal_linear_attention_reference, [q, k, v], upstream)):
        torch.testing.assert_close(a, b)
    sliced = torch.rand(1, 2, 50, 10, dtype=torch.float64)[..., ::2]  # strided last dimension
    torch.testing.assert_close(
        causal_dot_product(sliced, sliced, sliced), causal_dot_product_reference(sliced, sliced, sliced)
    )


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.usefixtures("backward_mode")
def test_splitting_heads_across_threads_matches_reference(threads):
    """With fewer heads than threads each head's sequence is split into segments; the first starts
    from the initial state, the last hands on the final state (and the reverse for gradients)."""
    q, k, v = inputs(1, 1, 1000, 8, 6)
    state = LinearAttentionState(torch.randn(1, 1, 8, 6, dtype=torch.float64, requires_grad=True),
                                 torch.rand(1, 1, 8, dtype=torch.float64, requires_grad=True))
    tensors = [q, k, v, *state]
    upstream = [torch.randn(1, 1, 1000, 6, dtype=torch.float64), torch.randn(1, 1, 8, 6, dtype=torch.float64),
                torch.randn(1, 1, 8, dtype=torch.float64)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        out, final = causal_linear_attention(q, k, v, initial_state=state, return_state=True)
        got = [out, *final, *torch.autograd.grad([out, *final], tensors, upstream)]
    finally:
        torch.set_num_threads(before)
    want = [causal_linear_attention_reference(q, k, v, initial_state=state), *final_state_reference(k, v, state)]
    want += torch.autograd.grad(want, tensors, upstream)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_eps_is_added_to_the_denominator():
    q, k, v = (t.detach() for t in inputs(1, 1, 9, 3, 2))
    for eps in (0.0, 10.0):
        want = causal_linear_attention_reference(q, k, v, eps)
        torch.testing.assert_close(causal_linear_attention(q, k, v, eps), want)


@pytest.mark.usefixtures("backward_mode")
def test_torch_compile_fullgraph():
    tensors = [t.detach().float().requires_grad_() for t in inputs(1, 2, 45, 4, 3)]
    upstream = torch.randn(1, 2, 45, 3)
    compiled = torch.compile(causal_linear_attention, fullgraph=True)
    got = values_and_grads(compiled, tensors, upstream)
    for a, b in zip(got, values_and_grads(causal_linear_attention_reference, tensors, upstream)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_autocast_bf16_runs_in_bf16_with_fp32_accumulation():
    q, k, v = (t.detach().float().requires_grad_() for t in inputs(2, 2, 130, 8, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = causal_linear_attention(q, k, v)
        direct = torch.ops.lintf.causal_product(q, k, v, 1e-6, True)[0]
    assert out.dtype == direct.dtype == torch.bfloat16
    out.float().sum().backward()
    assert q.grad.dtype == torch.float32 and torch.isfinite(q.grad).all()
    want = causal_linear_attention_reference(*(t.detach().bfloat16().double() for t in (q, k, v)))
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_match_fp64_on_the_same_values(dtype):
    tensors = [t.detach().to(dtype).requires_grad_() for t in inputs(1, 2, 100, 8, 6)]
    upstream = torch.randn(1, 2, 100, 6, dtype=dtype)
    got = values_and_grads(causal_linear_attention, tensors, upstream)
    wide = [t.detach().double().requires_grad_() for t in tensors]
    want = values_and_grads(causal_linear_attention_reference, wide, upstream.double())
    for a, b in zip(got, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_no_overflow_at_16k_positions_with_elu_features(dtype):
    """The denominator (~N * C = 262144 here) exceeds fp16's 65504 unless accumulated in fp32."""
    n = 16384
    q, k = (torch.nn.functional.elu(torch.randn(1, 1, n, 16)) + 1 for _ in range(2))
    v = torch.randn(1, 1, n, 4)
    tensors = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    out = causal_linear_attention(*tensors)
    out.float().square().sum().backward()
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert all(torch.isfinite(t.grad).all() for t in tensors)
    want = causal_linear_attention_pytorch(*(t.detach().double() for t in tensors))
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
