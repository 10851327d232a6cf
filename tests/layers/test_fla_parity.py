"""The layer recipes against flash-linear-attention's layers (0.6.0), with FLA's weights copied in.

FLA's Triton kernels cannot run on a CPU, so its recurrences, short convolution and norms are swapped
for FLA's own naive forms (``naive_recurrent_gated_delta_rule``, ``delta_rule_recurrence``,
``naive_recurrent_gla``, ``naive_recurrent_linear_attn``, ``rms_norm_ref``, the gate's
``naive_gdn_gate``) and, for the convolution, which has none, the plain depthwise ``conv1d`` that its
``ShortConvolution`` (an ``nn.Conv1d``) parameterises. Without ``flash-linear-attention`` (it needs
triton) the test skips; test_delta_rule_layer.py, test_gla_layer.py and test_linear_layer.py check
the layers against their written equations either way.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import DeltaNetLayer, GatedDeltaNetLayer, GLALayer, LinearLayer

if os.environ.get("LINTF_REQUIRE_FLA"):  # CI installs FLA for this test: a failed import fails, not skips
    import fla.layers as fla_layers
else:
    fla_layers = pytest.importorskip(
            "fla.layers", reason="flash-linear-attention (pip install flash-linear-attention, with triton) is not "
        "installed; the recipes are checked against their written equations in test_delta_rule_layer.py, "
        "test_gla_layer.py and test_linear_layer.py")


def naive_short_conv(self, x, cache=None, output_final_state=False, cu_seqlens=None, **unused):
    """(B, T, C) -> (B, T, C): the depthwise causal conv1d of the module's weight, then its activation."""
    assert cache is None and cu_seqlens is None  # the comparison runs whole sequences from an empty state
    kernel = self.weight.shape[-1]
    out = F.conv1d(F.pad(x.transpose(1, 2), (kernel - 1, 0)), self.weight, self.bias, groups=self.weight.shape[0])
    out = F.silu(out) if self.activation in ("silu", "swish") else out
    return out.transpose(1, 2), None


def naive_fused_conv(x, weight, bias=None, activation=None, **unused):
    """FLA's fused q/k/v convolution (weight (C, K)) in its naive form."""
    out = F.conv1d(F.pad(x.transpose(1, 2), (weight.shape[-1] - 1, 0)), weight[:, None], bias, groups=weight.shape[0])
    out = F.silu(out) if activation in ("silu", "swish") else out
    return out.transpose(1, 2), None


def naive_gated_delta_rule(q, k, v, g, beta, A_log, dt_bias, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                           allow_neg_eigval=False, **unused):
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    assert use_qk_l2norm_in_kernel and use_gate_in_kernel and use_beta_sigmoid_in_kernel
    group = v.shape[2] // q.shape[2]  # the kernels read q/k head h // group for value head h
    q, k = (F.normalize(t, dim=-1).repeat_interleave(group, dim=2) for t in (q, k))
    beta = beta.sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    return naive_recurrent_gated_delta_rule(q, k, v, beta, naive_gdn_gate(g, A_log, dt_bias),
                                            initial_state=initial_state, output_final_state=output_final_state)


def naive_delta_rule(q, k, v, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False,
                     **unused):
    from fla.ops.delta_rule.naive import delta_rule_recurrence

    if use_qk_l2norm_in_kernel:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    out, state = delta_rule_recurrence(*(t.transpose(1, 2) for t in (q, k, v, beta)), initial_state=initial_state)
    return out.transpose(1, 2), state if output_final_state else None


def naive_linear(q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=False, **unused):
    from fla.ops.linear_attn.naive import naive_recurrent_linear_attn

    return naive_recurrent_linear_attn(q, k, v, scale, initial_state, output_final_state, normalize)


def naive_gla(q, k, v, gk=None, g=None, initial_state=None, output_final_state=False, **unused):
    from fla.ops.gla.naive import naive_recurrent_gla

    return naive_recurrent_gla(q, k, v, gk if gk is not None else g, initial_state, output_final_state)


@pytest.fixture
def naive_fla(monkeypatch):
    """FLA's layers with every Triton kernel replaced by its naive form."""
    import fla.layers.delta_net as delta_net
    import fla.layers.gated_deltanet as gated_deltanet
    import fla.layers.gla as gla
    import fla.layers.linear_attn as linear_attn
    from fla.modules import FusedRMSNormGated, RMSNorm, ShortConvolution
    from fla.modules.norm.layernorm import rms_norm_ref
    from fla.modules.norm.layernorm_gated import rms_norm_ref as gated_rms_norm_ref

    monkeypatch.setattr(ShortConvolution, "forward", naive_short_conv)
    monkeypatch.setattr(gated_deltanet, "causal_conv1d", naive_fused_conv, raising=False)
    monkeypatch.setattr(FusedRMSNormGated, "forward", lambda self, x, g, **unused: gated_rms_norm_ref(
        x, self.weight, getattr(self, "bias", None), z=g, eps=self.eps, norm_before_gate=True))
    monkeypatch.setattr(RMSNorm, "forward", lambda self, x, **unused: rms_norm_ref(
        x, self.weight, getattr(self, "bias", None), eps=self.eps))
    for name in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
        monkeypatch.setattr(gated_deltanet, name, naive_gated_delta_rule)
    for name in ("chunk_delta_rule", "fused_recurrent_delta_rule"):
        monkeypatch.setattr(delta_net, name, naive_delta_rule)
    for name in ("chunk_gla", "fused_chunk_gla", "fused_recurrent_gla"):
        monkeypatch.setattr(gla, name, naive_gla)
    for name in ("chunk_linear_attn", "fused_chunk_linear_attn", "fused_recurrent_linear_attn"):
        monkeypatch.setattr(linear_attn, name, naive_linear, raising=False)
    return fla_layers


def rename(key: str) -> str:
    """FLA's parameter name -> the recipe's: the same but for GLA's and LinearAttention's output norm."""
    for fla_norm in ("g_norm_swish_gate.", "g_norm.", "norm."):
        if key.startswith(fla_norm):
            return "o_norm." + key.removeprefix(fla_norm)
    return key


CASES = {
    "gated_delta_net": ("GatedDeltaNet", dict(head_dim=8, num_heads=2), GatedDeltaNetLayer, dict(head_dim=8)),
    "gated_delta_net grouped, reflecting": (
        "GatedDeltaNet", dict(head_dim=8, num_heads=2, num_v_heads=4, allow_neg_eigval=True, expand_v=1.5),
        GatedDeltaNetLayer, dict(head_dim=8, n_value_heads=4, negative_eigenvalues=True, expand_v=1.5)),
    "gated_delta_net without gate": ("GatedDeltaNet", dict(head_dim=8, num_heads=2, use_gate=False),
                                     GatedDeltaNetLayer, dict(head_dim=8, output_gate=False)),
    "delta_net": ("DeltaNet", dict(num_heads=2), DeltaNetLayer, {}),
    "gla": ("GatedLinearAttention", dict(num_heads=2), GLALayer, {}),
    "linear": ("LinearAttention", dict(num_heads=2), LinearLayer, {}),
    "linear tied, sum norms, grouped, elu": (
        "LinearAttention", dict(num_heads=2, num_kv_heads=1, feature_map="elu", norm_q=True, norm_k=True),
        LinearLayer, dict(n_kv_heads=1, feature_map="elu", norm_q=True, norm_k=True)),
    "linear tied maps": ("LinearAttention", dict(num_heads=2, tie_feature_map_qk=True), LinearLayer,
                         dict(tie_feature_map_qk=True)),
    "gla grouped, conv, relu, clamp, no gate": (
        "GatedLinearAttention", dict(num_heads=2, num_kv_heads=1, use_short_conv=True, feature_map="relu",
                                     clamp_min=-0.05, use_output_gate=False, expand_k=1.0),
        GLALayer, dict(n_kv_heads=1, short_conv=4, feature_map="relu", clamp_min=-0.05, output_gate=False,
                       expand_k=1.0)),
    "delta_net gated, elu, sum": ("DeltaNet", dict(num_heads=2, use_gate=True, qk_activation="elu", qk_norm="sum"),
                                  DeltaNetLayer, dict(output_gate=True, qk_activation="elu", qk_norm="sum")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recipe_with_fla_weights_gives_fla_outputs(case, naive_fla):
    fla_name, fla_options, cls, options = CASES[case]
    torch.manual_seed(0)
    reference = getattr(naive_fla, fla_name)(hidden_size=32, **fla_options).eval()
    with torch.no_grad():  # non-trivial norms, so a dropped weight shows
        for name, parameter in reference.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    layer = cls(32, 2, **options)
    layer.load_state_dict({rename(key): value for key, value in reference.state_dict().items()})
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        expected = reference(x)[0]
        out, _ = layer(x, causal=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
