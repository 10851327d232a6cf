"""Each attention against an independent naive formula (explicit (N, S) weight matrices)."""

from __future__ import annotations

import math

import pytest
import torch

import lintf
from tests.conftest import random_qkv


def weighted_average(weights: torch.Tensor, v: torch.Tensor, causal: bool, padding: torch.Tensor | None, eps: float):
    """Normalise explicit non-negative weights (B, H, N, S) over visible keys and average v."""
    n, s = weights.shape[-2:]
    if causal:
        weights = weights.masked_fill(~torch.ones(n, s, dtype=torch.bool).tril(), 0.0)
    if padding is not None:
        weights = weights.masked_fill(padding[:, None, None, :], 0.0)
    return (weights @ v) / (weights.sum(-1, keepdim=True) + eps)


def elu_plus_one(x):
    return torch.where(x > 0, x + 1, torch.exp(x))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 7, 64, 130])
def test_linear_matches_naive_reference_forward_and_gradients(causal, n):
    attention = lintf.build_attention("linear", head_dim=8)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n, m=6))
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[1, n // 2 + 1 :] = True
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    weights = elu_plus_one(q) @ elu_plus_one(k).transpose(-1, -2)  # (B, H, N, N)
    expected = weighted_average(weights, v, causal, padding, eps=1e-6)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), upstream)
    expected_grads = torch.autograd.grad(expected, (q, k, v), upstream)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("feature_map", ["relu", "favor"])
def test_linear_with_other_feature_maps_matches_reference(feature_map):
    attention = lintf.build_attention("linear", head_dim=8, feature_map=feature_map).double().eval()
    q, k, v = (t.double() for t in random_qkv(n=20))
    phi = attention.feature_map
    weights = phi.forward_queries(q) @ phi.forward_keys(k).transpose(-1, -2)
    for causal in (True, False):
        expected = weighted_average(weights, v, causal, None, eps=1e-6)
        torch.testing.assert_close(attention(q, k, v, causal=causal), expected)


@pytest.mark.parametrize("causal", [True, False])
def test_polynomial_attention_uses_explicit_polynomial_weights(causal):
    attention = lintf.build_attention("polynomial", head_dim=8, constant=0.5)
    q, k, v = (t.double() for t in random_qkv(n=17, m=4))
    weights = (0.5 + (q @ k.transpose(-1, -2)) / math.sqrt(8)) ** 2
    expected = weighted_average(weights, v, causal, None, eps=1e-6)
    torch.testing.assert_close(attention(q, k, v, causal=causal), expected)


@pytest.mark.parametrize("causal", [True, False])
def test_softmax_matches_naive_reference(causal):
    attention = lintf.build_attention("softmax", head_dim=8)
    q, k, v = (t.double() for t in random_qkv(n=11))
    padding = torch.zeros(2, 11, dtype=torch.bool)
    padding[0, 6:] = True
    weights = torch.exp((q @ k.transpose(-1, -2)) / math.sqrt(8))
    expected = weighted_average(weights, v, causal, padding, eps=0.0)
    torch.testing.assert_close(attention(q, k, v, causal=causal, key_padding_mask=padding), expected)


def naive_shared_qk_attention(q, v, causal: bool, padding: torch.Tensor | None = None):
    """Softmax over keys = normalised queries; self only when nothing else is visible."""
    n = q.shape[2]
    keys = q / q.norm(dim=-1, keepdim=True)
    logits = (q @ keys.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, N, N)
    visible = torch.ones(n, n, dtype=torch.bool)
    if causal:
        visible = visible.tril()
    visible = visible.expand(*logits.shape).clone()
    if padding is not None:
        visible &= ~padding[:, None, None, :]
    eye = torch.eye(n, dtype=torch.bool)
    others = visible & ~eye
    use_self = ~others.any(-1, keepdim=True) & eye & visible
    allowed = others | use_self
    weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights @ v


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_hashes", [1, 3])
def test_reformer_with_one_bucket_and_one_chunk_is_shared_qk_softmax(causal, n_hashes):
    n = 13
    attention = lintf.build_attention("reformer", head_dim=8, n_buckets=1, chunk_size=n, n_hashes=n_hashes)
    q, _, v = (t.double() for t in random_qkv(n=n))
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[1, 9:] = True
    out = attention(q, torch.zeros_like(q), v, causal=causal, key_padding_mask=padding)
    expected = naive_shared_qk_attention(q, v, causal, padding)
    valid = ~padding[:, None, :, None]
    torch.testing.assert_close(out.masked_fill(~valid, 0), expected.masked_fill(~valid, 0))


def test_reformer_first_token_attends_to_itself():
    attention = lintf.build_attention("reformer", head_dim=8, n_buckets=4, chunk_size=4)
    q, _, v = random_qkv(n=12)
    out = attention(q, q, v, causal=True)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])


def test_reformer_lsh_keeps_most_attention_mass():
    """With many buckets and rounds, LSH output stays close to full shared-QK attention for
    clustered inputs (neighbours hash together), and far from a uniform average."""
    torch.manual_seed(1)
    centres = 4 * torch.randn(1, 1, 4, 16)
    q = (centres.repeat_interleave(16, dim=2) + 0.1 * torch.randn(1, 1, 64, 16)).double()
    v = torch.randn(1, 1, 64, 8, dtype=torch.float64)
    attention = lintf.build_attention("reformer", head_dim=16, n_buckets=4, chunk_size=16, n_hashes=4)
    expected = naive_shared_qk_attention(q, v, causal=False)
    out = attention(q, q, v, causal=False)
    error = (out - expected).norm() / expected.norm()
    assert error < 0.3, error


def test_reformer_step_matches_forward_with_one_bucket():
    attention = lintf.build_attention("reformer", head_dim=8, n_buckets=1, chunk_size=64, n_hashes=2)
    q, _, v = random_qkv(n=10)
    parallel = attention(q, q, v, causal=True)
    state = attention.init_state(2, 3, 5)
    outputs = []
    for t in range(10):
        out_t, state = attention.step(q[:, :, t], q[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), parallel, atol=1e-5, rtol=1e-5)


def test_reformer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_buckets must be 1 or an even number"):
        lintf.build_attention("reformer", head_dim=8, n_buckets=3)
    with pytest.raises(ValueError, match="n_hashes must be >= 1"):
        lintf.build_attention("reformer", head_dim=8, n_hashes=0)
    attention = lintf.build_attention("reformer", head_dim=8)
    q, k, v = random_qkv(n=4, s=6)
    with pytest.raises(ValueError, match="shared query-key attention needs as many queries as keys"):
        attention(q, k, v, causal=False)
