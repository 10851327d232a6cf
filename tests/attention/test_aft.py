"""AFT-simple against its explicit per-channel weights exp(k_j) over keys j (B, H, N, S, D)."""

from __future__ import annotations

import pytest
import torch

import lintf
from tests.attention.naive import key_mask
from tests.conftest import random_qkv


def naive_aft(q, k, v, causal: bool, padding=None):
    visible = key_mask(padding, q.shape[0], q.shape[2], k.shape[2], causal)[..., None]  # (B, 1, N, S, 1)
    weights = torch.exp(k).unsqueeze(2) * visible  # (B, H, N, S, D)
    total = weights.sum(3)
    mean = (weights * v.unsqueeze(2)).sum(3) / torch.where(total > 0, total, torch.ones_like(total))
    return torch.sigmoid(q) * mean  # (B, H, N, D)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 9, 70])
def test_aft_matches_naive_forward_and_gradients(causal, n):
    attention = lintf.build_attention("aft", head_dim=8)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n, m=8))
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[0, : n // 3] = True  # left padding: early causal queries see nothing
    padding[1, n // 2 + 1 :] = True
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = naive_aft(q, k, v, causal, padding)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(expected, (q, k, v), upstream)):
        torch.testing.assert_close(got, want)


def test_aft_cross_attention_averages_the_keys():
    attention = lintf.build_attention("aft", head_dim=8)
    q, k, v = (t.double() for t in random_qkv(n=4, s=10, m=8))
    torch.testing.assert_close(attention(q, k, v, causal=False), naive_aft(q, k, v, causal=False))


def test_aft_is_stable_for_logits_far_beyond_exp_range():
    """Key logits spread over +-300: exp overflows fp32 (and fp64 at 710); the running maximum keeps it exact."""
    attention = lintf.build_attention("aft", head_dim=8)
    q, k, v = random_qkv(n=40, m=8)
    k = 300 * k.tanh()
    expected = naive_aft(q.double(), k.double() - 300, v.double(), causal=True)  # shifting k changes nothing
    out = attention(q, k, v, causal=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-4)
    state = attention.init_state(2, 3, 8)
    steps = []
    for t in range(40):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        steps.append(out_t)
    torch.testing.assert_close(torch.stack(steps, dim=2).double(), expected, atol=1e-5, rtol=1e-4)


def test_aft_rejects_values_of_another_size():
    attention = lintf.build_attention("aft", head_dim=8)
    with pytest.raises(ValueError, match="value_dim must equal head_dim 8, got 5"):
        attention.init_state(2, 3, 5)
