"""Local attention against softmax attention with an explicit (N, S) band mask."""

from __future__ import annotations

import math

import pytest
import torch

import lintf
from tests.attention.naive import key_mask, softmax_over
from tests.conftest import random_qkv


def naive_local(q, k, v, window: int, causal: bool, padding=None):
    n, s = q.shape[2], k.shape[2]
    distance = torch.arange(n)[:, None] - torch.arange(s)[None, :]  # i - j
    visible = key_mask(padding, q.shape[0], n, s, causal) & (distance.abs() < window)
    return softmax_over((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]), visible) @ v


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n, window", [(1, 1), (7, 1), (7, 3), (13, 4), (13, 20), (16, 4)])
def test_local_matches_banded_softmax_forward_and_gradients(causal, n, window):
    attention = lintf.build_attention("local", head_dim=8, window=window)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n))
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[1, n // 2 + 1 :] = True
    padding[0, 0] = n > 2
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = naive_local(q, k, v, window, causal, padding)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(expected, (q, k, v), upstream)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("n, s", [(5, 11), (11, 5), (3, 30)])
def test_local_cross_attention_compares_positions_by_index(n, s):
    attention = lintf.build_attention("local", head_dim=8, window=3)
    q, k, v = (t.double() for t in random_qkv(n=n, s=s))
    torch.testing.assert_close(attention(q, k, v, causal=False), naive_local(q, k, v, 3, causal=False))


@pytest.mark.parametrize("window", [1, 3, 8])
def test_local_step_keeps_only_the_window(window):
    attention = lintf.build_attention("local", head_dim=8, window=window)
    q, k, v = (t.double() for t in random_qkv(n=17))
    state = attention.init_state(2, 3, 5, dtype=torch.float64)
    outputs = []
    for t in range(17):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    assert state.keys.shape[2] == window  # the decoding state does not grow
    torch.testing.assert_close(torch.stack(outputs, dim=2), naive_local(q, k, v, window, causal=True))


def test_local_rejects_bad_window():
    with pytest.raises(ValueError, match="window must be a positive int, got 0"):
        lintf.build_attention("local", head_dim=8, window=0)
