"""The retention and gated-linear recipes against FLA 0.6.0's ``MultiScaleRetention`` and
``SimpleGatedLinearAttention``, with FLA's weights copied in.

As in test_fla_parity.py, FLA's Triton kernels are swapped for its naive forms on a CPU:
``naive_retention`` and ``naive_recurrent_simple_gla`` for the recurrences, ``rotary_embedding_ref``
(with cos/sin of positions 0..N-1 from the module's own ``inv_freq``) for the rotary codes, and the
norms and convolutions of test_fla_parity.py. Without ``flash-linear-attention`` the test skips;
test_retention_layer.py and test_gated_linear_layer.py check the layers against their written
equations either way.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch
import torch.nn.functional as F

from lintf.layers import GatedLinearLayer, RetentionLayer

if os.environ.get("LINTF_REQUIRE_FLA"):  # CI installs FLA for this test: a failed import fails, not skips
    import fla.layers as fla_layers
else:
    fla_layers = pytest.importorskip(
        "fla.layers", reason="flash-linear-attention (pip install flash-linear-attention, with triton) is not "
        "installed; the recipes are checked against their written equations in test_retention_layer.py and "
        "test_gated_linear_layer.py")

from tests.layers.test_fla_parity import naive_short_conv, rename  # noqa: E402  (needs FLA, like this test)


def naive_retention(q, k, v, initial_state=None, output_final_state=False, cu_seqlens=None, **unused):
    """FLA's retention kernels ([B, T, H, D] in and out) in FLA's naive form, from an empty state."""
    from fla.ops.retention.naive import naive_retention as naive

    assert initial_state is None and cu_seqlens is None
    return naive(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2), None


def naive_simple_gla(q, k, v, g, initial_state=None, output_final_state=False, cu_seqlens=None, **unused):
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

    assert initial_state is None and cu_seqlens is None
    out, _ = naive_recurrent_simple_gla(q, k, v, g)
    return out, None


def naive_rotary(self, q, k, seqlen_offset=0, cu_seqlens=None, max_seqlen=None, **unused):
    """FLA's ``RotaryEmbedding.forward`` by its reference form: positions 0..T-1 of [B, T, H, D] inputs."""
    from fla.modules.rotary import rotary_embedding_ref

    assert seqlen_offset == 0 and cu_seqlens is None
    angles = torch.outer(torch.arange(q.shape[1], dtype=torch.float32), self.inv_freq.float())  # (T, D/2)
    cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
    return (rotary_embedding_ref(q, cos, sin, self.interleaved), rotary_embedding_ref(k, cos, sin, self.interleaved))


@pytest.fixture
def naive_fla(monkeypatch):
    """FLA's retention and simple-GLA layers with every Triton kernel replaced by its naive form."""
    import fla.layers.multiscale_retention as retention
    import fla.layers.simple_gla as simple_gla
    from fla.modules import FusedRMSNormGated, RMSNorm, ShortConvolution
    from fla.modules.norm.layernorm import rms_norm_ref
    from fla.modules.norm.layernorm_gated import rms_norm_ref as gated_rms_norm_ref

    monkeypatch.setattr(ShortConvolution, "forward", naive_short_conv)
    monkeypatch.setattr(FusedRMSNormGated, "forward", lambda self, x, g, **unused: gated_rms_norm_ref(
        x, self.weight, getattr(self, "bias", None), z=g, eps=self.eps, norm_before_gate=True))
    monkeypatch.setattr(RMSNorm, "forward", lambda self, x, **unused: rms_norm_ref(
        x, self.weight, getattr(self, "bias", None), eps=self.eps))
    monkeypatch.setattr(retention.RotaryEmbedding, "forward", naive_rotary)
    for name in ("chunk_retention", "fused_chunk_retention", "fused_recurrent_retention", "parallel_retention"):
        monkeypatch.setattr(retention, name, naive_retention)
    monkeypatch.setattr(simple_gla, "ACT2FN", {"relu": F.relu, "silu": F.silu, "swish": F.silu})  # FLA's are Triton
    for name in ("chunk_simple_gla", "fused_recurrent_simple_gla"):
        monkeypatch.setattr(simple_gla, name, naive_simple_gla)
    return fla_layers


CASES = {
    "retention": ("multiscale_retention.MultiScaleRetention", dict(num_heads=2), RetentionLayer, {}),
    "retention grouped, conv, relu, no gate": (
        "multiscale_retention.MultiScaleRetention",
        dict(num_heads=4, num_kv_heads=2, use_short_conv=True, feature_map="relu", use_output_gate=False, expand_v=1.0),
        RetentionLayer, dict(n_kv_heads=2, short_conv=4, feature_map="relu", output_gate=False, expand_v=1.0)),
    "gated_linear": ("simple_gla.SimpleGatedLinearAttention", dict(num_heads=2), GatedLinearLayer, {}),
    "gated_linear grouped, no conv, silu": (
        "simple_gla.SimpleGatedLinearAttention",
        dict(num_heads=4, num_kv_heads=2, use_short_conv=False, feature_map="silu", expand_v=2.0,
             gate_logit_normalizer=4),
        GatedLinearLayer, dict(n_kv_heads=2, short_conv=None, feature_map="silu", expand_v=2.0, gate_normalizer=4.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recipe_with_fla_weights_gives_fla_outputs(case, naive_fla):
    fla_name, fla_options, cls, options = CASES[case]
    torch.manual_seed(0)
    module, name = fla_name.split(".")  # FLA's module under fla.layers and its class (not all are exported)
    reference = getattr(importlib.import_module(f"fla.layers.{module}"), name)(hidden_size=32, **fla_options).eval()
    with torch.no_grad():  # non-trivial norms and gate biases, so a dropped weight shows
        for name, parameter in reference.named_parameters():
            if "norm" in name or name == "gk_proj.bias":
                parameter.uniform_(0.5, 1.5)
    layer = cls(32, fla_options["num_heads"], **options)
    layer.load_state_dict({rename(key): value for key, value in reference.state_dict().items()})
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        expected = reference(x)[0]
        out, _ = layer(x, causal=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
