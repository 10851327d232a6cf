"""The pure-PyTorch chunked causal product against the naive O(N^2) reference."""

from __future__ import annotations

import pytest
import torch

from lintf.ops.causal.chunked import chunked_causal_product, default_chunk_size
from lintf.ops.causal.reference import causal_dot_product_reference


def positive_inputs(n: int, c: int = 6, m: int = 5, dtype=torch.float64):
    return torch.rand(2, 3, n, c, dtype=dtype), torch.rand(2, 3, n, c, dtype=dtype), torch.randn(2, 3, n, m, dtype=dtype)


@pytest.mark.parametrize("n", [1, 3, 16, 17, 50])
@pytest.mark.parametrize("chunk_size", [1, 4, 16, 64])
def test_chunked_product_matches_reference(n, chunk_size):
    q, k, v = positive_inputs(n)
    torch.testing.assert_close(chunked_causal_product(q, k, v, chunk_size), causal_dot_product_reference(q, k, v))


@pytest.mark.parametrize("n, chunk_size", [(1, 8), (8, 8), (37, 8), (37, 64), (70, 16)])
def test_chunked_product_gradients_match_reference(n, chunk_size):
    q, k, v = (t.requires_grad_() for t in positive_inputs(n))
    upstream = torch.randn(2, 3, n, 5, dtype=torch.float64)
    got = torch.autograd.grad(chunked_causal_product(q, k, v, chunk_size), (q, k, v), upstream)
    want = torch.autograd.grad(causal_dot_product_reference(q, k, v), (q, k, v), upstream)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_chunked_product_gradcheck():
    q, k, v = (t[:1, :1, :9].clone().requires_grad_() for t in positive_inputs(9, c=3, m=2))
    assert torch.autograd.gradcheck(lambda *t: chunked_causal_product(*t, chunk_size=4), (q, k, v))


def test_default_chunk_size_is_bounded():
    assert default_chunk_size(64, 64) == 64
    assert default_chunk_size(2145, 64) == 512
    assert default_chunk_size(1, 1) == 64


def test_fp16_inputs_accumulate_in_fp32_without_overflow():
    """At N=16384 with elu features the fp16 denominator (~N * C) exceeds 65504 unless accumulated in fp32."""
    from lintf.ops import causal_linear_attention

    n = 16384
    q = torch.nn.functional.elu(torch.randn(1, 1, n, 16)) + 1
    k = torch.nn.functional.elu(torch.randn(1, 1, n, 16)) + 1
    v = torch.randn(1, 1, n, 4)
    out = causal_linear_attention(q.half(), k.half(), v.half())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    expected = causal_linear_attention(q, k, v)
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)
    for row in (n - 1, n // 2):  # a single row of the naive formula is O(N)
        weights = k[0, 0, : row + 1].double() @ q[0, 0, row].double()  # (row + 1,)
        naive = (weights @ v[0, 0, : row + 1].double()) / (weights.sum() + 1e-6)
        torch.testing.assert_close(expected[0, 0, row].double(), naive, atol=1e-5, rtol=1e-4)
