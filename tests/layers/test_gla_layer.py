"""The GLA layer recipe against its written equations, run position by position in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import GLALayer
from tests.layers.equations import (
    assert_forward_and_gradients_match,
    assert_steps_and_splits_continue,
    output_tail,
    projected_inputs,
)

D_MODEL = 16
VARIANTS = {
    "defaults": {},
    "grouped heads, conv, relu, clamp, no gate": dict(n_kv_heads=1, short_conv=3, conv_bias=True, feature_map="relu",
                                                     clamp_min=-0.05, output_gate=False, expand_k=1.0),
    "silu, wide values": dict(feature_map="silu", expand_v=2.0, gate_rank=4, gate_normalizer=4.0),
}


def build(variant: str) -> GLALayer:
    torch.manual_seed(0)
    layer = GLALayer(D_MODEL, 2, **VARIANTS[variant]).double()
    with torch.no_grad():
        layer.o_norm.weight.uniform_(0.5, 1.5)
    return layer


def reference(layer: GLALayer, x: torch.Tensor) -> torch.Tensor:
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
    logits = (x @ p["gk_proj.0.weight"].T) @ p["gk_proj.1.weight"].T + p["gk_proj.1.bias"]
    log_gate = F.logsigmoid(logits).view(batch, length, kv_heads, dk) / layer.gate_normalizer
    if layer.clamp_min is not None:
        log_gate = log_gate.clamp_min(layer.clamp_min)
    out = torch.zeros(batch, length, heads, dv, dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)  # the key/value head of query head h
            memory = torch.zeros(dk, dv, dtype=x.dtype)
            for t in range(length):
                memory = log_gate[b, t, g].exp()[:, None] * memory + torch.outer(k[b, t, g], v[b, t, g])
                out[b, t, h] = dk**-0.5 * memory.T @ q[b, t, h]
    return output_tail(layer, x, out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_steps_and_a_split_prefill_equal_the_written_equations(variant):
    layer = build(variant)
    assert_forward_and_gradients_match(layer, reference, 8)
    assert_steps_and_splits_continue(layer, 8, [1])


def test_refusals_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"must be multiples of n_heads \(2\), a multiple of n_kv_heads \(3\)"):
        GLALayer(12, 2, n_kv_heads=3)
    with pytest.raises(ValueError, match="feature_map must be one of relu, silu or null, got 'elu'"):
        GLALayer(D_MODEL, 2, feature_map="elu")
