"""The gated-linear layer recipe against its written equations, run position by position in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import GatedLinearLayer
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
    "grouped heads, no conv, relu": dict(n_heads=4, n_kv_heads=2, short_conv=None, feature_map="relu"),
    "conv 2 with bias, silu, wide values": dict(n_heads=2, short_conv=2, conv_bias=True, feature_map="silu",
                                                expand_v=2.0, gate_normalizer=4.0),
}


def build(variant: str) -> GatedLinearLayer:
    torch.manual_seed(0)
    return in_float64(GatedLinearLayer(D_MODEL, **VARIANTS[variant]))


def reference(layer: GatedLinearLayer, x: torch.Tensor) -> torch.Tensor:
    """The module docstring's equations, from the layer's parameters only."""
    p = dict(layer.named_parameters())
    heads, kv_heads = layer.heads[0], layer.heads[1]
    dk, dv = layer.key_dim, layer.value_dim
    projected = projected_inputs(layer, x)
    phi = {None: lambda a: a, "relu": F.relu, "silu": F.silu}[layer.feature_map]
    batch, length, _ = x.shape
    q = phi(projected["q"]).view(batch, length, heads, dk)
    k = phi(projected["k"]).view(batch, length, kv_heads, dk)
    v = projected["v"].view(batch, length, kv_heads, dv)
    gate = torch.sigmoid(x @ p["gk_proj.weight"].T + p["gk_proj.bias"]) ** (1 / layer.gate_normalizer)  # (B, N, H)
    out = torch.zeros(batch, length, heads, dv, dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)  # the key/value head of query head h
            memory = torch.zeros(dk, dv, dtype=x.dtype)
            for t in range(length):
                memory = gate[b, t, h] * memory + torch.outer(k[b, t, g], v[b, t, g])
                out[b, t, h] = dk**-0.5 * memory.T @ q[b, t, h]
    return output_tail(layer, x, out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_steps_and_a_split_prefill_equal_the_written_equations(variant):
    layer = build(variant)
    assert_forward_and_gradients_match(layer, reference, 8)
    assert_steps_and_splits_continue(layer, 8, [3])


def test_padding_before_or_after_a_sequence_leaves_its_outputs_unchanged():
    layer = build("defaults")
    x = torch.randn(1, 6, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        alone, _ = layer(x, causal=True)
        padded = torch.cat([torch.randn(1, 3, D_MODEL, dtype=torch.float64), x,
                            torch.randn(1, 2, D_MODEL, dtype=torch.float64)], 1)
        out, _ = layer(padded, causal=True, key_padding_mask=torch.tensor([[True] * 3 + [False] * 6 + [True] * 2]))
    torch.testing.assert_close(out[:, 3:9], alone)


def test_refusals_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"must be multiples of n_heads \(2\), a multiple of n_kv_heads \(3\)"):
        GatedLinearLayer(12, 2, n_kv_heads=3)
    with pytest.raises(ValueError, match="feature_map must be one of relu, silu or null, got 'elu'"):
        GatedLinearLayer(D_MODEL, 2, feature_map="elu")
    with pytest.raises(ValueError, match="gate_normalizer must be > 0, got 0"):
        GatedLinearLayer(D_MODEL, 2, gate_normalizer=0)
