"""The delta-rule layer recipes against their written equations, run position by position in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import DeltaNetLayer, GatedDeltaNetLayer
from lintf.models import EncoderConfig, TransformerEncoder
from tests.layers.equations import (
    assert_forward_and_gradients_match,
    assert_steps_and_splits_continue,
    in_float64,
    output_tail,
    projected_inputs,
)

D_MODEL = 12
VARIANTS = {
    "gated_delta_net": (GatedDeltaNetLayer, {}),
    "gated_delta_net grouped, reflecting, no conv or gate": (
        GatedDeltaNetLayer, dict(n_value_heads=4, negative_eigenvalues=True, short_conv=None, output_gate=False,
                                 expand_v=1.5)),
    "gated_delta_net conv 2 with bias": (GatedDeltaNetLayer, dict(short_conv=2, conv_bias=True, head_dim=4)),
    "delta_net": (DeltaNetLayer, {}),
    "delta_net elu, sum norm, gate, fixed beta": (
        DeltaNetLayer, dict(qk_activation="elu", qk_norm="sum", output_gate=True, learned_beta=False, expand_v=2.0)),
    "delta_net identity, no conv": (DeltaNetLayer, dict(qk_activation="identity", short_conv=None, expand_k=0.5)),
}


def build(variant: str) -> torch.nn.Module:
    torch.manual_seed(0)
    cls, options = VARIANTS[variant]
    return in_float64(cls(D_MODEL, 2, **options))


def activation(name: str, u: torch.Tensor) -> torch.Tensor:
    return {"silu": F.silu, "relu": F.relu, "elu": lambda a: F.elu(a) + 1, "identity": lambda a: a}[name](u)


def reference(layer, x: torch.Tensor) -> torch.Tensor:
    """The layer's module docstring equations, from its parameters only."""
    p = dict(layer.named_parameters())
    hk, hv, dk, dv = layer.n_heads, layer.n_value_heads, layer.key_dim, layer.value_dim
    projected = projected_inputs(layer, x, activation=lambda u: u)
    batch, length, _ = x.shape
    q, k = (activation(layer.qk_activation, projected[n]).view(batch, length, hk, dk) for n in "qk")
    if layer.qk_norm == "l2":
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    else:
        q, k = q / q.sum(-1, keepdim=True), k / k.sum(-1, keepdim=True)
    v = F.silu(projected["v"]).view(batch, length, hv, dv)
    beta = torch.sigmoid(x @ p["b_proj.weight"].T) if "b_proj.weight" in p else torch.ones(batch, length, hv,
                                                                                             dtype=x.dtype)
    beta = 2 * beta if layer.negative_eigenvalues else beta
    if "A_log" in p:
        alpha = torch.exp(-p["A_log"].exp() * F.softplus(x @ p["a_proj.weight"].T + p["dt_bias"]))
    else:
        alpha = torch.ones(batch, length, hv, dtype=x.dtype)
    out = torch.zeros(batch, length, hv, dv, dtype=x.dtype)
    for b in range(batch):
        for h in range(hv):
            g = h // (hv // hk)  # the query/key head of value head h
            memory = torch.zeros(dk, dv, dtype=x.dtype)
            for t in range(length):
                kt, qt = k[b, t, g], q[b, t, g]
                memory = alpha[b, t, h] * (memory - beta[b, t, h] * torch.outer(kt, kt @ memory))
                memory = memory + beta[b, t, h] * torch.outer(kt, v[b, t, h])
                out[b, t, h] = dk**-0.5 * memory.T @ qt
    return output_tail(layer, x, out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parallel_forward_and_gradients_equal_the_written_equations(variant):
    layer = build(variant)
    assert_forward_and_gradients_match(layer, reference, 7)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_steps_and_a_split_prefill_continue_the_convolutions_and_memory(variant):
    assert_steps_and_splits_continue(build(variant), 9, [2])


def test_padding_before_or_after_a_sequence_leaves_its_outputs_unchanged():
    layer = build("gated_delta_net")
    x = torch.randn(1, 6, D_MODEL, dtype=torch.float64)
    alone, _ = layer(x, causal=True)
    padded = torch.cat([torch.randn(1, 3, D_MODEL, dtype=torch.float64), x, torch.randn(1, 2, D_MODEL,
                                                                                      dtype=torch.float64)], 1)
    mask = torch.tensor([[True] * 3 + [False] * 6 + [True] * 2])
    out, _ = layer(padded, causal=True, key_padding_mask=mask)
    torch.testing.assert_close(out[:, 3:9], alone)


def test_refusals_say_what_is_allowed():
    layer = build("delta_net")
    x = torch.randn(1, 3, D_MODEL, dtype=torch.float64)
    with pytest.raises(ValueError, match="DeltaNetLayer is causal"):
        layer(x, causal=False)
    with pytest.raises(ValueError, match="n_value_heads \\(3\\) must be a multiple of n_heads \\(2\\)"):
        GatedDeltaNetLayer(D_MODEL, 2, n_value_heads=3)
    with pytest.raises(ValueError, match="expand_v=0.3 times 6 must give a positive whole width"):
        GatedDeltaNetLayer(D_MODEL, 2, expand_v=0.3)
    with pytest.raises(ValueError, match="qk_activation must be one of silu, relu, elu, identity"):
        DeltaNetLayer(D_MODEL, 2, qk_activation="tanh")
    with pytest.raises(ValueError, match=r"state.q_conv must be a torch.float64 tensor of shape \(1, 12, 3\)"):
        layer(x, causal=True, state=layer.init_state(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="layer 'recipe' for attention local, which has none; attentions with a "
                                         "layer recipe: delta_net, gated_delta_net, gated_linear, gla, linear, "
                                         "retention, softmax"):
        EncoderConfig(d_model=8, n_heads=2, n_layers=2, attention=["gated_delta_net", "local"], layer="recipe")
    with pytest.raises(ValueError, match="every layer is a layer recipe; give a recipe's own feature map"):
        TransformerEncoder(EncoderConfig(d_model=8, n_heads=2, attention="gla", layer="recipe", feature_map="relu"))
    with pytest.raises(TypeError, match="layer recipe 'gla'.*got unknown argument.*gate_low_rank_dim.*gate_rank"):
        TransformerEncoder(EncoderConfig(d_model=8, n_heads=2, attention="gla", layer="recipe",
                                         attention_kwargs={"gate_low_rank_dim": 4}))
    with pytest.raises(ValueError, match="unknown layer 'fla'; choose projections or recipe"):
        EncoderConfig(d_model=8, n_heads=2, layer="fla")


def test_the_encoder_mixes_recipe_and_projection_layers():
    config = EncoderConfig(d_model=D_MODEL, n_heads=2, n_layers=4, dropout=0.0, attention=["gated_delta_net", "local"],
                           layer=["recipe", "projections"], attention_kwargs={"gated_delta_net": {"expand_v": 1.0}})
    model = TransformerEncoder(config).double().eval()
    kinds = [type(layer.attention).__name__ for layer in model.layers]
    assert kinds == ["GatedDeltaNetLayer", "MultiHeadAttention"] * 2
    assert model.layers[0].attention.value_dim == D_MODEL // 2
    default = TransformerEncoder(EncoderConfig(d_model=D_MODEL, n_heads=2, n_layers=1))
    assert {key for key in default.state_dict() if ".attention." in key} == {
        f"layers.0.attention.{name}.{kind}" for name in ("query", "key", "value", "out") for kind in ("weight", "bias")}


def test_a_recipe_layer_refuses_to_split_a_sequence_across_ranks():
    model = TransformerEncoder(EncoderConfig(d_model=D_MODEL, n_heads=2, n_layers=1, attention="gated_delta_net",
                                             layer="recipe"))
    model.use_sequence_parallel(None)
    with pytest.raises(ValueError, match="GatedDeltaNetLayer cannot split a sequence across ranks"):
        model.use_sequence_parallel(object())


def test_the_registry_lists_the_recipes():
    import lintf

    assert lintf.list_layers() == ["delta_net", "gated_delta_net", "gated_linear", "gla", "linear", "retention",
                                   "softmax"]
