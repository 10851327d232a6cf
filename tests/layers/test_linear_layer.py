"""The linear-attention layer recipe against its written equations, run position by position in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import LinearLayer
from tests.layers.equations import assert_forward_and_gradients_match, assert_steps_and_splits_continue, output_tail

D_MODEL = 16
VARIANTS = {
    "defaults": {},
    "tied maps, sum norms, grouped heads": dict(tie_feature_map_qk=True, norm_q=True, norm_k=True, n_kv_heads=1),
    "elu, wide values": dict(feature_map="elu", expand_v=2.0, expand_k=0.5),
}


def build(variant: str) -> LinearLayer:
    torch.manual_seed(0)
    layer = LinearLayer(D_MODEL, 2, **VARIANTS[variant]).double()
    with torch.no_grad():
        layer.o_norm.weight.uniform_(0.5, 1.5)
    return layer


def reference(layer: LinearLayer, x: torch.Tensor) -> torch.Tensor:
    """The module docstring's equations, from the layer's parameters only."""
    p = dict(layer.named_parameters())
    heads, kv_heads, dk, dv = layer.heads[0], layer.heads[1], layer.key_dim, layer.value_dim
    batch, length, _ = x.shape

    def phi(u: torch.Tensor, which: str) -> torch.Tensor:
        if layer.feature_map == "elu":
            return F.elu(u) + 1
        name = f"feature_map_{which}" if f"feature_map_{which}.layer1.weight" in p else "feature_map_q"
        first = u @ p[f"{name}.layer1.weight"].T + p[f"{name}.layer1.bias"]
        return first * (u @ p[f"{name}.layer2.weight"].T + p[f"{name}.layer2.bias"])

    q = phi((x @ p["q_proj.weight"].T).view(batch, length, heads, dk), "q")
    k = phi((x @ p["k_proj.weight"].T).view(batch, length, kv_heads, dk), "k")
    q = q / (q.sum(-1, keepdim=True) + 1e-4) if layer.norm_q else q
    k = k / (k.sum(-1, keepdim=True) + 1e-4) if layer.norm_k else k
    v = (x @ p["v_proj.weight"].T).view(batch, length, kv_heads, dv)
    out = torch.zeros(batch, length, heads, dv, dtype=x.dtype)
    for h in range(heads):
        g = h // (heads // kv_heads)  # the key/value head of query head h
        for t in range(length):
            scores = torch.einsum("bd,bsd->bs", q[:, t, h], k[:, : t + 1, g])  # (B, t + 1)
            out[:, t, h] = dk**-0.5 * torch.einsum("bs,bsm->bm", scores, v[:, : t + 1, g])
    return output_tail(layer, x, out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_steps_and_a_split_prefill_equal_the_written_equations(variant):
    layer = build(variant)
    assert_forward_and_gradients_match(layer, reference, 7)
    assert_steps_and_splits_continue(layer, 7, [3])


def test_refusals_say_what_is_allowed():
    with pytest.raises(ValueError, match="feature_map must be one of elementwise_product, elu, relu, identity; got "
                                         "'favor'"):
        LinearLayer(D_MODEL, 2, feature_map="favor")
