"""Top-k attention against a softmax over the keys scoring at least the k-th highest visible score."""

from __future__ import annotations

import math

import pytest
import torch

import lintf
from tests.attention.naive import key_mask, softmax_over
from tests.conftest import random_qkv


def naive_topk(q, k, v, topk: int, causal: bool, padding=None):
    visible = key_mask(padding, q.shape[0], q.shape[2], k.shape[2], causal)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, N, S)
    ranked = scores.masked_fill(~visible, float("-inf")).sort(dim=-1, descending=True).values
    kth = ranked[..., min(topk, scores.shape[-1]) - 1 : min(topk, scores.shape[-1])]  # (B, H, N, 1)
    return softmax_over(scores, visible & (scores >= kth)) @ v


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("topk", [1, 3, 50])
def test_topk_matches_naive_forward_and_gradients(causal, topk):
    attention = lintf.build_attention("topk", head_dim=8, topk=topk)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=11))
    padding = torch.zeros(2, 11, dtype=torch.bool)
    padding[1, 6:] = True
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = naive_topk(q, k, v, topk, causal, padding)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(expected, (q, k, v), upstream)):
        torch.testing.assert_close(got, want)


def test_topk_with_every_key_is_softmax():
    q, k, v = (t.double() for t in random_qkv(n=9))
    topk = lintf.build_attention("topk", head_dim=8, topk=9)
    softmax = lintf.build_attention("softmax", head_dim=8)
    for causal in (True, False):
        torch.testing.assert_close(topk(q, k, v, causal=causal), softmax(q, k, v, causal=causal))


def test_topk_step_selects_among_cached_keys():
    attention = lintf.build_attention("topk", head_dim=8, topk=3)
    q, k, v = (t.double() for t in random_qkv(n=20))
    state = attention.init_state(2, 3, 5, dtype=torch.float64)
    outputs = []
    for t in range(20):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), naive_topk(q, k, v, 3, causal=True))


def test_topk_rejects_bad_k():
    with pytest.raises(ValueError, match="topk must be a positive int, got 0"):
        lintf.build_attention("topk", head_dim=8, topk=0)
