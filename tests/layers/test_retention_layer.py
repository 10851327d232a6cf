"""The retention layer recipe against its written equations: the O(N^2) decayed, rotated form in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import RetentionLayer
from tests.layers.test_delta_rule_layer import causal_conv

D_MODEL = 16
VARIANTS = {
    "defaults": dict(n_heads=2),
    "grouped heads, conv with bias, relu, no gate": dict(n_heads=4, n_kv_heads=2, short_conv=3, conv_bias=True,
                                                         feature_map="relu", output_gate=False, expand_v=1.0),
    "silu, wide keys": dict(n_heads=2, feature_map="silu", expand_k=2.0),
}


def build(variant: str) -> RetentionLayer:
    torch.manual_seed(0)
    layer = RetentionLayer(D_MODEL, **VARIANTS[variant]).double()
    with torch.no_grad():  # non-trivial norms and conv biases, so a dropped term shows
        for name, parameter in layer.named_parameters():
            if name.endswith(("o_norm.weight", "conv1d.bias")):
                parameter.uniform_(0.5, 1.5)
    return layer


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
    p = dict(layer.named_parameters())
    heads, kv_heads = layer.heads[0], layer.heads[1]
    dk, dv = layer.key_dim, layer.value_dim
    projected = {name: x @ p[f"{name}_proj.weight"].T for name in "qkv"}
    if "q_conv1d.weight" in p:
        projected = {name: F.silu(causal_conv(u, p[f"{name}_conv1d.weight"], p.get(f"{name}_conv1d.bias")))
                     for name, u in projected.items()}
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
    normed = out / torch.sqrt(out.square().mean(-1, keepdim=True) + layer.o_norm.eps) * p["o_norm.weight"]
    if "g_proj.weight" in p:
        normed = normed * F.silu((x @ p["g_proj.weight"].T).view(batch, length, heads, dv))
    return normed.flatten(2) @ p["o_proj.weight"].T


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_and_gradients_equal_the_written_equations(variant):
    layer = build(variant)
    x = torch.randn(2, 7, D_MODEL, dtype=torch.float64, requires_grad=True)
    out, _ = layer(x, causal=True)
    expected = reference(layer, x)
    torch.testing.assert_close(out, expected)
    weights = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad((out * weights).sum(), [x, *layer.parameters()]),
                         torch.autograd.grad((expected * weights).sum(), [x, *layer.parameters()])):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_steps_and_split_prefills_continue_the_rotation_and_memory(variant):
    """The state carries no position: the memory is kept in the next position's frame."""
    layer = build(variant)
    x = torch.randn(2, 9, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        whole, _ = layer(x, causal=True)
        state, steps = layer.init_state(2, dtype=torch.float64), []
        for t in range(x.shape[1]):
            y_t, state = layer.step(x[:, t], state)
            steps.append(y_t)
        torch.testing.assert_close(torch.stack(steps, 1), whole)
        for split in (1, 2, 5):
            first, state = layer(x[:, :split], causal=True, return_state=True)
            second, _ = layer(x[:, split:], causal=True, state=state, return_state=True)
            torch.testing.assert_close(torch.cat([first, second], 1), whole)


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
