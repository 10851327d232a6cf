"""The chunked decayed product against the naive O(N^2) matrix form and the step-by-step recurrence."""

from __future__ import annotations

import math

import pytest
import torch

from lintf.ops.causal.state import LinearAttentionState
from lintf.ops.decayed.product import (
    bidirectional_decayed_dot_product,
    decayed_dot_product,
    decayed_linear_attention,
)
from lintf.ops.decayed.reference import (
    bidirectional_decayed_dot_product_reference,
    decayed_dot_product_reference,
    decayed_recurrence_reference,
)


def inputs(n: int, c: int = 4, m: int = 3, dtype=torch.float64, strength: float = 1.0):
    q, k = torch.randn(2, 3, n, c, dtype=dtype), torch.randn(2, 3, n, c, dtype=dtype)
    v = torch.randn(2, 3, n, m, dtype=dtype)
    log_decay = -strength * torch.rand(2, 3, n, dtype=dtype)
    return q, k, v, log_decay


@pytest.mark.parametrize("n", [1, 5, 16, 23])
@pytest.mark.parametrize("chunk_size", [1, 4, 16, None])
def test_chunked_matches_naive_matrix_form(n, chunk_size):
    q, k, v, log_decay = inputs(n)
    got = decayed_dot_product(q, k, v, log_decay, chunk_size=chunk_size)
    torch.testing.assert_close(got, decayed_dot_product_reference(q, k, v, log_decay))


@pytest.mark.parametrize("n, chunk_size", [(9, 4), (16, 16), (30, 7)])
def test_chunked_matches_recurrence_with_initial_and_final_state(n, chunk_size):
    q, k, v, log_decay = inputs(n)
    start = torch.randn(2, 3, 4, 3, dtype=torch.float64)
    out, final = decayed_dot_product(
        q, k, v, log_decay, chunk_size=chunk_size, initial_state=start, return_state=True
    )
    want_out, want_final = decayed_recurrence_reference(q, k, v, log_decay, start)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(final, want_final)


def test_prefill_then_continue_equals_one_pass():
    q, k, v, log_decay = inputs(21)
    whole = decayed_dot_product(q, k, v, log_decay, chunk_size=4)
    first, state = decayed_dot_product(q[:, :, :8], k[:, :, :8], v[:, :, :8], log_decay[:, :, :8], return_state=True)
    second = decayed_dot_product(q[:, :, 8:], k[:, :, 8:], v[:, :, 8:], log_decay[:, :, 8:], initial_state=state)
    torch.testing.assert_close(torch.cat([first, second], dim=2), whole)


@pytest.mark.parametrize("n, chunk_size", [(7, 3), (12, 12), (33, 8)])
def test_gradients_match_naive_form(n, chunk_size):
    q, k, v, log_decay = (t.requires_grad_() for t in inputs(n))
    upstream = torch.randn(2, 3, n, 3, dtype=torch.float64)
    got = torch.autograd.grad(decayed_dot_product(q, k, v, log_decay, chunk_size=chunk_size), (q, k, v, log_decay), upstream)
    want = torch.autograd.grad(decayed_dot_product_reference(q, k, v, log_decay), (q, k, v, log_decay), upstream)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_gradcheck_including_initial_state():
    q, k, v, log_decay = (t[:1, :1].clone().requires_grad_() for t in inputs(7, c=2, m=2))
    start = torch.randn(1, 1, 2, 2, dtype=torch.float64, requires_grad=True)

    def run(q, k, v, log_decay, start):
        return decayed_dot_product(q, k, v, log_decay, chunk_size=3, initial_state=start, return_state=True)

    assert torch.autograd.gradcheck(run, (q, k, v, log_decay, start))


def test_strong_decays_stay_finite_and_exact():
    """log-decays of -60 per step: a global cumulative sum would reach -1e4, exp(+1e4) overflows."""
    q, k, v, log_decay = inputs(200, dtype=torch.float32, strength=60.0)
    out = decayed_dot_product(q, k, v, log_decay, chunk_size=64)
    assert torch.isfinite(out).all()
    want, _ = decayed_recurrence_reference(*(t.double() for t in (q, k, v, log_decay)))
    torch.testing.assert_close(out.double(), want, atol=1e-4, rtol=1e-4)


def test_zero_decay_is_the_plain_causal_product():
    q, k, v, _ = inputs(13)
    weights = (q @ k.transpose(-1, -2)).tril()  # (B, H, N, N)
    torch.testing.assert_close(decayed_dot_product(q, k, v, torch.zeros(2, 3, 13, dtype=torch.float64)), weights @ v)


@pytest.mark.parametrize("n, chunk_size", [(1, 4), (10, 4), (17, None)])
def test_bidirectional_matches_naive_matrix_form_and_gradients(n, chunk_size):
    q, k, v, log_decay = (t.requires_grad_() for t in inputs(n))
    got = bidirectional_decayed_dot_product(q, k, v, log_decay, chunk_size=chunk_size)
    want = bidirectional_decayed_dot_product_reference(q, k, v, log_decay)
    torch.testing.assert_close(got, want)
    upstream = torch.randn_like(got)
    for a, b in zip(torch.autograd.grad(got, (q, k, v, log_decay), upstream),
                    torch.autograd.grad(want, (q, k, v, log_decay), upstream)):
        torch.testing.assert_close(a, b)


def test_constant_bidirectional_decay_is_gamma_to_the_distance():
    gamma = 0.8
    q, k, v, _ = inputs(9)
    log_decay = torch.full((2, 3, 9), math.log(gamma), dtype=torch.float64)
    distance = (torch.arange(9)[:, None] - torch.arange(9)[None, :]).abs().double()
    expected = ((q @ k.transpose(-1, -2)) * gamma**distance) @ v
    torch.testing.assert_close(bidirectional_decayed_dot_product(q, k, v, log_decay), expected)


@pytest.mark.parametrize("causal", [True, False])
def test_normalised_form_divides_by_the_decayed_weight_sum(causal):
    q, k, v, log_decay = inputs(11)
    q, k = q.exp(), k.exp()  # positive features
    form = decayed_dot_product_reference if causal else bidirectional_decayed_dot_product_reference
    numerator = form(q, k, v, log_decay)
    denominator = form(q, k, torch.ones_like(v[..., :1]), log_decay)
    expected = numerator / (denominator + 1e-6)
    torch.testing.assert_close(decayed_linear_attention(q, k, v, log_decay, causal=causal), expected)


@pytest.mark.parametrize("n, chunk_size", [(1, 4), (9, 4), (30, 7)])
def test_normalised_form_continues_from_a_state_like_the_recurrence(n, chunk_size):
    """(S, z) carried in and out: the step-by-step recurrence over the values with a column of ones."""
    q, k, v, log_decay = (t.requires_grad_() for t in inputs(n))
    q, k = q.exp(), k.exp()  # positive features
    kv = torch.randn(2, 3, 4, 3, dtype=torch.float64, requires_grad=True)
    normaliser = torch.rand(2, 3, 4, dtype=torch.float64, requires_grad=True)
    out, final = decayed_linear_attention(
        q, k, v, log_decay, chunk_size=chunk_size, initial_state=LinearAttentionState(kv, normaliser),
        return_state=True,
    )
    with_ones = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # (B, H, N, M+1)
    start = torch.cat([kv, normaliser.unsqueeze(-1)], dim=-1)  # (B, H, C, M+1)
    product, want_final = decayed_recurrence_reference(q, k, with_ones, log_decay, start)
    want = product[..., :-1] / (product[..., -1:] + 1e-6)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(final.kv, want_final[..., :-1])
    torch.testing.assert_close(final.normaliser, want_final[..., -1])
    leaves = (q, k, v, log_decay, kv, normaliser)
    upstream = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, leaves, upstream), torch.autograd.grad(want, leaves, upstream)):
        torch.testing.assert_close(a, b)


def test_normalised_form_state_needs_causal_and_matching_shapes():
    q, k, v, log_decay = inputs(5)
    kv, normaliser = torch.zeros(2, 3, 4, 3, dtype=torch.float64), torch.zeros(2, 3, 4, dtype=torch.float64)
    state = LinearAttentionState(kv, normaliser)
    with pytest.raises(ValueError, match="initial_state and return_state need causal=True, got causal=False"):
        decayed_linear_attention(q, k, v, log_decay, causal=False, initial_state=state)
    with pytest.raises(ValueError, match="initial_state and return_state need causal=True, got causal=False"):
        decayed_linear_attention(q, k, v, log_decay, causal=False, return_state=True)
    bad = LinearAttentionState(state.kv, torch.zeros(2, 3, 5, dtype=torch.float64))
    expected = r"initial_state.normaliser must have shape \(2, 3, 4\) \(B, H, C\), got \(2, 3, 5\)"
    with pytest.raises(ValueError, match=expected):
        decayed_linear_attention(q, k, v, log_decay, initial_state=bad)


@pytest.mark.parametrize("batch, n", [(2, 0), (0, 6)])
def test_empty_batches_and_sequences_give_empty_outputs(batch, n):
    q, k, v = torch.randn(batch, 3, n, 4), torch.randn(batch, 3, n, 4), torch.randn(batch, 3, n, 3)
    log_decay = -torch.rand(batch, 3, n)
    start = torch.randn(batch, 3, 4, 3)
    out, final = decayed_dot_product(q, k, v, log_decay, initial_state=start, return_state=True)
    assert out.shape == (batch, 3, n, 3)
    if n == 0:
        torch.testing.assert_close(final, start)  # no position: the state passes through
    assert bidirectional_decayed_dot_product(q, k, v, log_decay).shape == (batch, 3, n, 3)
    for causal in (True, False):
        assert decayed_linear_attention(q, k, v, log_decay, causal=causal).shape == (batch, 3, n, 3)


def test_reduced_precision_accumulates_in_fp32():
    q, k, v, log_decay = inputs(40, dtype=torch.float32)
    out = decayed_dot_product(q.bfloat16(), k.bfloat16(), v.bfloat16(), log_decay, chunk_size=8)
    assert out.dtype == torch.bfloat16
    want = decayed_dot_product_reference(*(t.bfloat16().double() for t in (q, k, v)), log_decay.double())
    torch.testing.assert_close(out.double(), want, atol=3e-2, rtol=3e-2)


def test_bad_inputs_raise_clear_errors():
    q, k, v, log_decay = inputs(6)
    with pytest.raises(ValueError, match=r"log_decay must be <= 0 .*got values from -?[0-9.e-]+ to 0.5 "):
        decayed_dot_product(q, k, v, log_decay.clone().index_fill_(2, torch.tensor([3]), 0.5))
    with pytest.raises(ValueError, match=r"log_decay must be a float tensor \(B, H, N\) = \(2, 3, 6\)"):
        decayed_dot_product(q, k, v, log_decay[..., :5])
    with pytest.raises(ValueError, match=r"expected q, k \(B, H, N, C\) and v"):
        decayed_dot_product(q, k[..., :2], v, log_decay)
    with pytest.raises(ValueError, match="q must be a 4-D float tensor"):
        decayed_dot_product(q[0], k, v, log_decay)
    with pytest.raises(ValueError, match="must share a dtype"):
        decayed_dot_product(q.float(), k, v, log_decay)
    with pytest.raises(ValueError, match=r"initial_state must be \(B, H, C, M\) = \(2, 3, 4, 3\)"):
        decayed_dot_product(q, k, v, log_decay, initial_state=torch.zeros(2, 3, 3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="chunk_size must be a positive int or None, got 0"):
        decayed_dot_product(q, k, v, log_decay, chunk_size=0)
