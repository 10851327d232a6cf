"""The plugin's own tests: the feature map is registered, positive, and trains in lintf."""

import pytest
import torch

import lintf
import lintf_softplus  # noqa: F401  (registers "softplus_beta")


def test_registered():
    assert "softplus_beta" in lintf.list_feature_maps()


def test_positive_and_shape():
    phi = lintf.build_feature_map("softplus_beta", 8, beta=2.0)
    out = phi(torch.randn(2, 3, 5, 8) * 10)
    assert out.shape == (2, 3, 5, 8) and bool((out >= 0).all())


def test_bad_beta():
    with pytest.raises(ValueError, match="beta"):
        lintf.build_feature_map("softplus_beta", 8, beta=0.0)


def test_linear_attention_step_matches_forward():
    attention = lintf.build_attention("linear", head_dim=8, feature_map="softplus_beta").eval()
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    full = attention(q, k, v, causal=True)
    state = attention.init_state(1, 2, 8)
    for t in range(6):
        out, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        torch.testing.assert_close(out, full[:, :, t], rtol=1e-4, atol=1e-5)
