"""Retention and gated linear attention against explicit (N, N) decay matrices built from products of decays."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import lintf
from tests.attention.naive import compacted_outputs
from tests.conftest import random_qkv


def product_decays(decays: torch.Tensor, causal: bool) -> torch.Tensor:
    """W[i, j] = prod of decays[s] for s in (min(i, j), max(i, j)]; 0 above the diagonal if causal.

    decays (B, H, N) -> (B, H, N, N), by explicit products (no cumulative sums)."""
    n = decays.shape[-1]
    rows = []
    for i in range(n):
        row = [decays[..., min(i, j) + 1 : max(i, j) + 1].prod(-1) for j in range(n)]
        rows.append(torch.stack(row, dim=-1))
    weights = torch.stack(rows, dim=-2)
    return weights.tril() if causal else weights


def naive_retention(q, k, v, gammas, causal: bool, phi=None):
    decays = torch.tensor(gammas, dtype=q.dtype)[None, :, None].expand(q.shape[0], -1, q.shape[2])
    weights = product_decays(decays, causal)  # gamma^|i - j|
    similarities = phi(q) @ phi(k).transpose(-1, -2) if phi else (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return ((similarities * weights) @ v) / weights.sum(-1, keepdim=True).sqrt()


def naive_gated(attention, q, k, v, causal: bool):
    gate = attention.gate
    decays = torch.sigmoid(F.linear(k, gate.weight.double(), gate.bias.double())).squeeze(-1) ** (
        1 / attention.temperature
    )
    phi = attention.feature_map
    weights = product_decays(decays, causal) * (phi(q) @ phi(k).transpose(-1, -2))  # (B, H, N, N)
    return (weights @ v) / (weights.sum(-1, keepdim=True) + attention.eps)


def default_gammas(heads: int) -> list[float]:
    return [1 - 2 ** (-5 - h) for h in range(heads)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 9, 70])
def test_retention_matches_gamma_power_matrix(causal, n):
    attention = lintf.build_attention("retention", head_dim=8)
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n))
    out = attention(q, k, v, causal=causal)
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).double()
    gammas = torch.tensor(default_gammas(3), dtype=torch.float64)[:, None, None]
    weights = gammas ** distance.abs()  # (H, N, N): RetNet's decay mask D
    if causal:
        weights = weights * (distance >= 0)
    expected = (((q @ k.transpose(-1, -2)) / math.sqrt(8) * weights) @ v) / weights.sum(-1, keepdim=True).sqrt()
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(expected, (q, k, v), upstream)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("causal", [True, False])
def test_retention_with_gammas_and_a_feature_map(causal):
    gammas = [0.5, 0.9, 0.99]
    attention = lintf.build_attention("retention", head_dim=8, gammas=gammas, feature_map="elu")
    q, k, v = (t.double() for t in random_qkv(n=12))
    expected = naive_retention(q, k, v, gammas, causal, phi=attention.feature_map)
    torch.testing.assert_close(attention(q, k, v, causal=causal), expected)


@pytest.mark.parametrize("name", ["retention", "gated_linear"])
@pytest.mark.parametrize("causal", [True, False])
def test_padded_positions_are_absent(name, causal):
    """Padding anywhere (left, middle, right) gives the outputs of the sequence without those tokens."""
    attention = lintf.build_attention(name, head_dim=8).double()
    q, k, v = (t.double() for t in random_qkv(n=12))
    padding = torch.zeros(2, 12, dtype=torch.bool)
    padding[0, :3] = True
    padding[0, 7] = True
    padding[1, 5:9] = True
    out = attention(q, k, v, causal=causal, key_padding_mask=padding)
    expected = compacted_outputs(lambda *t: attention(*t, causal=causal), q, k, v, padding)
    torch.testing.assert_close(out.masked_fill(padding[:, None, :, None], 0), expected)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 8, 70])
def test_gated_linear_matches_product_of_gates(causal, n):
    attention = lintf.build_attention("gated_linear", head_dim=8, temperature=2.0)
    torch.nn.init.normal_(attention.gate.weight, std=1.0)  # gates that differ from step to step
    q, k, v = (t.double().requires_grad_() for t in random_qkv(n=n))
    out = attention(q, k, v, causal=causal)
    expected = naive_gated(attention, q, k, v, causal)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    inputs = (q, k, v, attention.gate.weight)
    got = torch.autograd.grad(out, inputs, upstream)
    want = torch.autograd.grad(expected, inputs, upstream)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("feature_map", ["relu", "hedgehog", "dpfp"])
def test_gated_linear_step_equals_forward_with_other_feature_maps(feature_map):
    attention = lintf.build_attention("gated_linear", head_dim=8, feature_map=feature_map).double().eval()
    q, k, v = (t.double() for t in random_qkv(n=15))
    state = attention.init_state(2, 3, 5, dtype=torch.float64)
    outputs = []
    for t in range(15):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), attention(q, k, v, causal=True))


def test_retention_default_decays_follow_retnet():
    attention = lintf.build_attention("retention", head_dim=8)
    got = attention.log_gammas(4, torch.device("cpu"), torch.float64).exp()
    torch.testing.assert_close(got, torch.tensor([1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128, 1 - 1 / 256], dtype=torch.float64))


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match=r"gammas must be decays in \(0, 1\), one per head, got \[0.5, 1.0\]"):
        lintf.build_attention("retention", head_dim=8, gammas=[0.5, 1.0])
    with pytest.raises(ValueError, match="scale=0.1 applies only without a feature map"):
        lintf.build_attention("retention", head_dim=8, feature_map="elu", scale=0.1)
    attention = lintf.build_attention("retention", head_dim=8, gammas=[0.5, 0.9])
    q, k, v = random_qkv(n=4)
    with pytest.raises(ValueError, match="2 gammas given for 3 heads; give one per head"):
        attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        lintf.build_attention("gated_linear", head_dim=8, temperature=0)
