"""Routing attention against a plain masked O(N^2) reference; its online k-means and its state."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lintf
from lintf.attention.routing import group_slots
from tests.attention.naive import key_mask, softmax_over
from tests.conftest import random_qkv

TIGHT = {"atol": 1e-9, "rtol": 1e-9}


def naive_routing(q, k, v, centroids, causal, padding):
    """Query i attends with softmax to the keys j with the same nearest centroid (causal: j <= i)."""
    query_clusters = (q / q.norm(dim=-1, keepdim=True) @ centroids.T).argmax(-1)  # (B, H, N)
    key_clusters = (k / k.norm(dim=-1, keepdim=True) @ centroids.T).argmax(-1)  # (B, H, S)
    same = query_clusters[..., :, None] == key_clusters[..., None, :]  # (B, H, N, S)
    visible = same & key_mask(padding, q.shape[0], q.shape[2], k.shape[2], causal)
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return softmax_over(logits, visible) @ v


def routing(n_clusters: int = 4):
    return lintf.build_attention("routing", head_dim=8, n_clusters=n_clusters).double().eval()


def clustered_inputs(n: int, spread: float):
    """Inputs whose queries and keys lie near the centroids (spread small: one cluster; large: several)."""
    attention = routing()
    q, k, v = (t.double() for t in random_qkv(n=n, m=6))
    base = attention.centroids[0].double()
    return attention, base + spread * q, base + spread * k, v


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spread", [0.05, 10.0], ids=["one_cluster", "balanced"])
def test_routing_matches_the_masked_reference_forward_and_gradients(causal, spread):
    attention, q, k, v = clustered_inputs(23, spread)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    padding = torch.zeros(2, 23, dtype=torch.bool)
    padding[0, :2] = True
    padding[1, 15:] = True
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = naive_routing(q, k, v, attention.centroids, causal, padding)
    torch.testing.assert_close(out, expected, **TIGHT)
    upstream = torch.randn_like(out)
    grads, expected_grads = (torch.autograd.grad(y, (q, k, v), upstream) for y in (out, expected))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, **TIGHT)


@pytest.mark.parametrize("spread, grouped", [(0.05, False), (10.0, True)])
def test_the_cluster_groups_are_used_unless_one_cluster_holds_most_positions(spread, grouped):
    attention, q, k, _ = clustered_inputs(40, spread)
    _, _, query_size = group_slots(attention.route(q, attention.centroids), 4)
    _, _, key_size = group_slots(attention.route(k, attention.centroids), 4)
    assert (4 * query_size * key_size < 40 * 40) == grouped


def test_group_slots_lay_out_each_cluster_in_position_order():
    clusters = torch.tensor([[[2, 0, 2, 4, 0, 2]]])  # 4: in no group (a padded key)
    held, slots, size = group_slots(clusters, 4)
    assert size == 3
    # groups of 3 slots: cluster 0 holds positions 1, 4; cluster 2 holds 0, 2, 5; empty slots hold 6
    assert held.tolist() == [[[1, 4, 6, 6, 6, 6, 0, 2, 5, 6, 6, 6]]]
    assert slots.tolist() == [[[6, 0, 7, 12, 1, 8]]]


def test_training_moves_the_centroids_by_one_online_kmeans_step():
    attention = lintf.build_attention("routing", head_dim=8, n_clusters=3, decay=0.9).double().train()
    q, k, v = (t.double() for t in random_qkv(n=10))
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, 7:] = True
    before = attention.centroids.clone()
    expected = before.clone()
    unpadded_keys = F.normalize(k, dim=-1)[~padding[:, None].expand(-1, 3, -1)]  # (P_k, D)
    points = torch.cat([F.normalize(q, dim=-1).reshape(-1, 8), unpadded_keys])
    nearest = (points @ before.T).argmax(-1)
    for c in range(3):
        if (nearest == c).any():
            mean = F.normalize(points[nearest == c].sum(0), dim=0)
            expected[c] = F.normalize(0.9 * before[c] + 0.1 * mean, dim=0)
    out = attention(q, k, v, causal=True, key_padding_mask=padding)
    torch.testing.assert_close(out, naive_routing(q, k, v, before, True, padding), **TIGHT)  # routed before moving
    torch.testing.assert_close(attention.centroids, expected, **TIGHT)
    assert not torch.allclose(attention.centroids, before)


def test_centroids_stay_in_eval_and_without_gradients():
    attention = routing()
    q, k, v = (t.double() for t in random_qkv(n=10))
    before = attention.centroids.clone()
    attention(q, k, v, causal=True)
    attention.train()
    with torch.no_grad():
        attention(q, k, v, causal=True)
    torch.testing.assert_close(attention.centroids, before, atol=0, rtol=0)


def test_a_continuation_routes_with_the_centroids_its_sequence_started_with():
    attention = routing().train()
    q, k, v = (t.double() for t in random_qkv(n=20))
    start = attention.centroids.clone()
    first, state = attention(q[:, :, :12], k[:, :, :12], v[:, :, :12], causal=True, return_state=True)
    assert not torch.allclose(attention.centroids, start)  # the buffer moved after the first piece
    rest = attention(q[:, :, 12:], k[:, :, 12:], v[:, :, 12:], causal=True, state=state)
    expected = naive_routing(q, k, v, start, True, None)
    torch.testing.assert_close(torch.cat([first, rest], dim=2), expected, **TIGHT)


@pytest.mark.parametrize("kwargs, message", [
    ({"n_clusters": 0}, "routing: n_clusters must be a positive int, got 0"),
    ({"decay": 1.0}, r"routing: decay must be a number in \[0, 1\), got 1.0"),
    ({"decay": -0.1}, r"routing: decay must be a number in \[0, 1\), got -0.1"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lintf.build_attention("routing", head_dim=8, **kwargs)
