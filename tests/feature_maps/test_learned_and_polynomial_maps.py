"""hedgehog, t2r, dpfp and taylor against their formulas written out element by element."""

from __future__ import annotations

import math

import pytest
import torch

import lintf


def plain_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)


def test_hedgehog_starts_as_softmax_of_x_and_of_minus_x():
    phi = lintf.build_feature_map("hedgehog", 6).double()
    x = torch.randn(4, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(phi(x), torch.cat([plain_softmax(x), plain_softmax(-x)], dim=-1))
    assert phi.out_dim == 12


def test_hedgehog_per_head_layers():
    phi = lintf.build_feature_map("hedgehog", 4, feature_dim=3, n_heads=2).double()
    with torch.no_grad():
        phi.layer.weight.normal_()
        phi.layer.bias.normal_()
    x = torch.randn(5, 2, 7, 4, dtype=torch.float64)  # (B, H, N, D)
    out = phi(x)
    assert out.shape == (5, 2, 7, 6)
    for h in range(2):
        projected = x[:, h] @ phi.layer.weight[h] + phi.layer.bias[h]
        torch.testing.assert_close(out[:, h], torch.cat([plain_softmax(projected), plain_softmax(-projected)], -1))
    with pytest.raises(ValueError, match=r"hedgehog: built with n_heads=2, so inputs must be \(B, 2, \.\.\., D\); got shape \(5, 3, 7, 4\)"):
        phi(torch.randn(5, 3, 7, 4, dtype=torch.float64))


def test_t2r_is_relu_of_a_learned_projection():
    phi = lintf.build_feature_map("t2r", 6, feature_dim=10).double()
    x = torch.randn(3, 2, 6, dtype=torch.float64)
    expected = (x @ phi.layer.weight[0] + phi.layer.bias[0]).clamp_min(0)
    torch.testing.assert_close(phi(x), expected)
    assert phi.out_dim == 10
    phi(x).sum().backward()
    assert phi.layer.weight.grad.abs().sum() > 0


def test_learned_maps_reject_bad_sizes():
    with pytest.raises(ValueError, match="t2r: out_features must be a positive int, got 0"):
        lintf.build_feature_map("t2r", 4, feature_dim=0)
    with pytest.raises(ValueError, match="hedgehog: n_heads must be a positive int, got 0"):
        lintf.build_feature_map("hedgehog", 4, n_heads=0)


@pytest.mark.parametrize("nu", [1, 2, 5])
def test_dpfp_products_of_rectified_entries(nu):
    dim = 3
    phi = lintf.build_feature_map("dpfp", dim, nu=nu)
    x = torch.randn(4, dim, dtype=torch.float64)
    rectified = torch.cat([x.clamp_min(0), (-x).clamp_min(0)], dim=-1)  # (4, 2D)
    expected = torch.zeros(4, 2 * dim * nu, dtype=torch.float64)
    for j in range(1, nu + 1):
        for i in range(2 * dim):
            expected[:, (j - 1) * 2 * dim + i] = rectified[:, i] * rectified[:, (i - j) % (2 * dim)]
    torch.testing.assert_close(phi(x), expected)
    assert phi.out_dim == 2 * dim * nu


def test_dpfp_rejects_nu_out_of_range():
    with pytest.raises(ValueError, match=r"dpfp: nu must be an int in 1\.\.7 \(2 D - 1\) for D = 4, got 8"):
        lintf.build_feature_map("dpfp", 4, nu=8)


def test_taylor_kernel_is_second_order_exp():
    dim = 5
    phi = lintf.build_feature_map("taylor", dim)
    x, y = torch.randn(7, dim, dtype=torch.float64), torch.randn(9, dim, dtype=torch.float64)
    s = x @ y.T / math.sqrt(dim)
    torch.testing.assert_close(phi(x) @ phi(y).T, 1 + s + s**2 / 2)
    assert phi.out_dim == 1 + 5 + 25
    large = 10 * torch.randn(50, dim, dtype=torch.float64)
    assert (phi(large) @ phi(-large).T).min() >= 0.5 - 1e-9  # ((s + 1)^2 + 1) / 2 >= 1/2
