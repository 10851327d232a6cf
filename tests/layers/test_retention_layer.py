"""The retention layer recipe against its written equations: the O(N^2) decayed, rotated form in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import RetentionLayer
from tests.layers.equations import (
    assert_forward_and_gradients_match,
    assert_steps_and_splits_continue,
    in_float64,
    output_tail,
    projected_inputs,
)

D_MODEL = 16
VARIANTS = {
    "defaults": dict(n_heads=2),
    "grouped heads, conv with bias, relu, no gate": dict(n_heads=4, n_kv_heads=2, short_conv=3, conv_bias=True,
                                                         feature_map="relu", output_gate=False, expand_v=1.0),
    "silu, wide keys": dict(n_heads=2, feature_map="silu", expand_k=2.0),
}


def build(variant: str) -> RetentionLayer:
    torch.manual_seed(0)
    return in_float64(RetentionLayer(D_MODEL, **VARIANTS[variant]))


def rotated(x: torch.Tensor) -> torch.Tensor:
    """x (B, N, H, D): the pair (x_i, x_{i + D/2}) at position t turned by the angle t * 10000^(-2i / D)."""
    length, dim = x.shape[1], x.shape[-1]
    out = torch.empty_like(x)
    for t in range(length):
        for i in range(dim // 2):
            angle = t * 10000.0 ** (-2 * i / dim)
            a, b = x[:, t, :, i], x[:, t, :, i + dim // 2]
            out[:, t, :, i] = a * math.cos(angle) - b * math.sin(angle)
            out[:, t, :, i + dim // 2] = b * math.cos(angle) + a * math.sin(angle)
    return out


def reference(layer: RetentionLayer, x: torch.Tensor) -> torch.Tensor:
    """The module docstring's equations as sums over the past, from the layer's parameters only."""
    heads, kv_heads = layer.heads[0], layer.heads[1]
    dk, dv = layer.key_dim, layer.value_dim
    projected = projected_inputs(layer, x)
    phi = {None: lambda a: a, "relu": F.relu, "silu": F.silu}[layer.feature_map]
    batch, length, _ = x.shape
    q = rotated(phi(projected["q"]).view(batch, length, heads, dk))
    k = rotated(phi(projected["k"]).view(batch, length, kv_heads, dk))
    v = projected["v"].view(batch, length, kv_heads, dv)
    out = torch.zeros(batch, length, heads, dv, dtype=x.dtype)
    for h in range(heads):
        gamma, g = 1.0 - 2.0 ** (-5 - h), h // (heads // kv_heads)  # the decay and key/value head of head h
        for t in range(length):
            for j in range(t + 1):
                score = gamma ** (t - j) * dk**-0.5 * (q[:, t, h] * k[:, j, g]).sum(-1)  # (B,)
                out[:, t, h] += score[:, None] * v[:, j, g]
    return output_tail(layer, x, out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_and_gradients_equal_the_written_equations(variant):
    layer = build(variant)
    assert_forward_and_gradients_match(layer, reference, 7)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_steps_and_split_prefills_continue_the_rotation_and_memory(variant):
    """The state carries no position: the memory is kept in the next position's frame."""
    assert_steps_and_splits_continue(build(variant), 9, [1, 2, 5])


def test_padding_before_or_after_a_sequence_leaves_its_outputs_unchanged():
    layer = build("grouped heads, conv with bias, relu, no gate")
    x = torch.randn(1, 6, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        alone, _ = layer(x, causal=True)
        padded = torch.cat([torch.randn(1, 3, D_MODEL, dtype=torch.float64), x,
                            torch.randn(1, 2, D_MODEL, dtype=torch.float64)], 1)
        out, _ = layer(padded, causal=True, key_padding_mask=torch.tensor([[True] * 3 + [False] * 6 + [True] * 2]))
    torch.testing.assert_close(out[:, 3:9], alone)


def test_the_decays_are_retnets_and_refusals_say_what_is_allowed():
    layer = RetentionLayer(D_MODEL, 4)
    torch.testing.assert_close(layer.log_decays.exp(), 1 - 2.0 ** -torch.arange(5.0, 9.0, dtype=torch.float64))
    assert (layer.key_dim, layer.value_dim) == (4, 8)  # FLA's defaults: expand_k 1, expand_v 2
    with pytest.raises(ValueError, match=r"each key head's width \(3\) must be even for the rotary codes"):
        RetentionLayer(12, 4)
    with pytest.raises(ValueError, match="feature_map must be one of relu, silu or null, got 'elu'"):
        RetentionLayer(D_MODEL, 2, feature_map="elu")
    with pytest.raises(ValueError, match=r"must be multiples of n_heads \(2\), a multiple of n_kv_heads \(3\)"):
        RetentionLayer(12, 2, n_kv_heads=3)
