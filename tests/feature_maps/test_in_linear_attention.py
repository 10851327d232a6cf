"""Every registered feature map inside ``linear`` attention: naive weights phi(q).phi(k), and step == forward."""

from __future__ import annotations

import pytest
import torch

import lintf
from tests.attention.naive import key_mask
from tests.conftest import feature_map_names, random_qkv


@pytest.mark.parametrize("feature_map", feature_map_names())
@pytest.mark.parametrize("causal", [True, False])
def test_linear_attention_with_each_feature_map_matches_naive_weights(feature_map, causal):
    attention = lintf.build_attention("linear", head_dim=8, feature_map=feature_map).double().eval()
    q, k, v = (t.double() for t in random_qkv(n=13))
    padding = torch.zeros(2, 13, dtype=torch.bool)
    padding[1, 9:] = True
    phi = attention.feature_map
    weights = (phi.forward_queries(q) @ phi.forward_keys(k).transpose(-1, -2)) * key_mask(padding, 2, 13, 13, causal)
    expected = (weights @ v) / (weights.sum(-1, keepdim=True) + attention.eps)
    torch.testing.assert_close(attention(q, k, v, causal=causal, key_padding_mask=padding), expected)


@pytest.mark.parametrize("feature_map", feature_map_names())
def test_linear_attention_step_equals_forward_with_each_feature_map(feature_map):
    attention = lintf.build_attention("linear", head_dim=8, feature_map=feature_map).double().eval()
    q, k, v = (t.double() for t in random_qkv(n=11))
    state = attention.init_state(2, 3, 5, dtype=torch.float64)
    outputs = []
    for t in range(11):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), attention(q, k, v, causal=True))


@pytest.mark.parametrize("feature_map", ["hedgehog", "t2r"])
def test_per_head_learned_maps_run_in_forward_and_step(feature_map):
    attention = lintf.build_attention(
        "linear", head_dim=8, feature_map=feature_map, feature_map_kwargs={"n_heads": 3}
    ).double()
    with torch.no_grad():
        attention.feature_map.layer.weight.normal_()
    q, k, v = (t.double() for t in random_qkv(n=6))
    state = attention.init_state(2, 3, 5, dtype=torch.float64)
    outputs = []
    for t in range(6):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    torch.testing.assert_close(torch.stack(outputs, dim=2), attention(q, k, v, causal=True))
