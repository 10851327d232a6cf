"""Clustered and improved clustered attention against plain per-cluster loops over known groups."""

from __future__ import annotations

import math

import pytest
import torch

import lintf
from tests.attention.naive import key_mask, softmax_over
from tests.conftest import random_qkv

GROUPS = [5, 4, 7]  # contiguous groups of queries around well separated centres


def grouped_queries(noise: float, dim: int = 8) -> tuple[torch.Tensor, list[slice]]:
    """Queries (2, 3, 16, dim) in three contiguous groups; the slices of positions of each group."""
    centres = 3 * torch.randn(2, 3, len(GROUPS), dim, dtype=torch.float64)
    sizes = torch.tensor(GROUPS)
    q = centres.repeat_interleave(sizes, dim=2) + noise * torch.randn(2, 3, sum(GROUPS), dim, dtype=torch.float64)
    bounds = [0, *torch.tensor(GROUPS).cumsum(0).tolist()]
    return q, [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def padding_mask(n: int) -> torch.Tensor:
    padding = torch.zeros(2, n, dtype=torch.bool)
    padding[1, n - 5 :] = True
    return padding


def naive_clustered(q, k, v, groups, padding, topk: int | None = None):
    """Per group: the mean query's softmax row; with topk, each member's exact softmax on the top keys."""
    visible = key_mask(padding, q.shape[0], 1, k.shape[2], causal=False)[:, :, 0]  # (B, 1, S)
    scale = 1 / math.sqrt(q.shape[-1])
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype)
    for group in groups:
        centroid = q[:, :, group].mean(2, keepdim=True)  # (B, H, 1, D)
        row = softmax_over(centroid @ k.transpose(-1, -2) * scale, visible[:, :, None])  # (B, H, 1, S)
        if topk is None:
            out[:, :, group] = row @ v
            continue
        top = row.argsort(dim=-1, descending=True)[..., :topk]  # (B, H, 1, k)
        in_top = torch.zeros_like(row, dtype=torch.bool).scatter(-1, top, True)  # (B, H, 1, S)
        mass = (row * in_top).sum(-1, keepdim=True)
        exact = softmax_over(q[:, :, group] @ k.transpose(-1, -2) * scale, in_top & visible[:, :, None])
        out[:, :, group] = mass * (exact @ v) + (row * ~in_top) @ v
    return out


def test_clustered_finds_separated_groups_and_attends_with_their_means():
    q, groups = grouped_queries(noise=0.01)
    _, k, v = (t.double() for t in random_qkv(n=16))
    attention = lintf.build_attention("clustered", head_dim=8, n_clusters=3).double()
    padding = padding_mask(16)
    expected = naive_clustered(q, k, v, groups, padding)
    torch.testing.assert_close(attention(q, k, v, causal=False, key_padding_mask=padding), expected)


def test_clustered_with_a_cluster_per_query_is_softmax():
    q, k, v = (t.double() for t in random_qkv(n=12))
    attention = lintf.build_attention("clustered", head_dim=8, n_clusters=12, bits=64).double()
    softmax = lintf.build_attention("softmax", head_dim=8)
    padding = padding_mask(12)
    expected = softmax(q, k, v, causal=False, key_padding_mask=padding)
    torch.testing.assert_close(attention(q, k, v, causal=False, key_padding_mask=padding), expected)


def test_improved_clustered_matches_per_query_top_keys():
    q, groups = grouped_queries(noise=0.3)
    _, k, v = (t.double() for t in random_qkv(n=16))
    attention = lintf.build_attention("improved_clustered", head_dim=8, n_clusters=3, topk=4).double()
    padding = padding_mask(16)
    expected = naive_clustered(q, k, v, groups, padding, topk=4)
    torch.testing.assert_close(attention(q, k, v, causal=False, key_padding_mask=padding), expected)


def test_improved_clustered_with_every_key_is_softmax_whatever_the_clusters():
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=14))
    attention = lintf.build_attention("improved_clustered", head_dim=8, n_clusters=2, topk=14).double()
    padding = padding_mask(14)
    out = attention(q, k, v, causal=False, key_padding_mask=padding)
    expected = lintf.build_attention("softmax", head_dim=8)(q, k, v, causal=False, key_padding_mask=padding)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(expected, (q, k, v), upstream)):
        torch.testing.assert_close(got, want)


def test_improved_clustered_is_closer_to_softmax_than_clustered():
    q, groups = grouped_queries(noise=1.0)
    _, k, v = (t.double() for t in random_qkv(n=16))
    exact = lintf.build_attention("softmax", head_dim=8)(q, k, v, causal=False)
    torch.manual_seed(3)
    clustered = lintf.build_attention("clustered", head_dim=8, n_clusters=3).double()
    torch.manual_seed(3)
    improved = lintf.build_attention("improved_clustered", head_dim=8, n_clusters=3, topk=4).double()
    error = (clustered(q, k, v, causal=False) - exact).norm()
    improved_error = (improved(q, k, v, causal=False) - exact).norm()
    assert improved_error < 0.7 * error, (improved_error, error)


def test_clustered_gradients_reach_every_member_query():
    q, groups = grouped_queries(noise=0.01)
    q.requires_grad_()
    _, k, v = (t.double() for t in random_qkv(n=16))
    attention = lintf.build_attention("clustered", head_dim=8, n_clusters=3).double()
    attention(q, k, v, causal=False).square().sum().backward()
    # every query moves its cluster's mean by 1/size, so members share one gradient
    for group in groups:
        torch.testing.assert_close(q.grad[:, :, group], q.grad[:, :, group][:, :, :1].expand_as(q.grad[:, :, group]))


def test_clustered_hyperplanes_travel_in_the_state_dict():
    first = lintf.build_attention("clustered", head_dim=8)
    second = lintf.build_attention("clustered", head_dim=8)
    second.load_state_dict(first.state_dict())
    q, k, v = random_qkv(n=40)
    torch.testing.assert_close(first(q, k, v, causal=False), second(q, k, v, causal=False))


@pytest.mark.parametrize("name", ["clustered", "improved_clustered"])
@pytest.mark.parametrize("argument", ["n_clusters", "iterations", "bits"])
def test_clustered_rejects_bad_arguments(name, argument):
    with pytest.raises(ValueError, match=rf"{name}: {argument} must be a positive int, got 0"):
        lintf.build_attention(name, head_dim=8, **{argument: 0})


def test_improved_clustered_rejects_bad_topk():
    with pytest.raises(ValueError, match="improved_clustered: topk must be a positive int, got -1"):
        lintf.build_attention("improved_clustered", head_dim=8, topk=-1)
