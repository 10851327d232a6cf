"""Every registered feature map: shapes, non-negative similarities, determinism in eval."""

from __future__ import annotations

import pytest
import torch

import lintf
from tests.conftest import feature_map_names


@pytest.mark.parametrize("name", feature_map_names())
def test_output_shape_and_out_dim(name):
    phi = lintf.build_feature_map(name, 6)
    x = torch.randn(2, 3, 5, 6)
    assert phi(x).shape == (2, 3, 5, phi.out_dim)
    assert phi.forward_queries(x).shape == phi.forward_keys(x).shape == (2, 3, 5, phi.out_dim)


@pytest.mark.parametrize("name", feature_map_names())
def test_similarities_are_non_negative(name):
    phi = lintf.build_feature_map(name, 6).eval()
    x, y = torch.randn(40, 6), torch.randn(50, 6)
    similarities = phi.forward_queries(x) @ phi.forward_keys(y).T
    assert (similarities >= -1e-6).all()


@pytest.mark.parametrize("name", feature_map_names())
def test_eval_mode_is_deterministic(name):
    phi = lintf.build_feature_map(name, 6).eval()
    x = torch.randn(4, 6)
    phi.maybe_redraw()
    first = phi(x)
    phi.maybe_redraw()
    assert torch.equal(first, phi(x))


def test_bad_dim_is_rejected():
    with pytest.raises(ValueError, match="dim must be a positive int, got 0"):
        lintf.build_feature_map("elu", 0)


def test_elu_is_elu_plus_one():
    x = torch.linspace(-3, 3, 13)
    expected = torch.where(x > 0, x + 1, torch.exp(x))
    torch.testing.assert_close(lintf.build_feature_map("elu", 13)(x), expected)


def test_polynomial_features_give_the_exact_kernel():
    phi = lintf.build_feature_map("polynomial", 5, constant=0.7, scale=0.3)
    x, y = torch.randn(7, 5, dtype=torch.float64), torch.randn(9, 5, dtype=torch.float64)
    expected = (0.7 + 0.3 * x @ y.T) ** 2
    torch.testing.assert_close(phi(x) @ phi(y).T, expected)
    assert phi.out_dim == 1 + 5 + 15


def test_polynomial_rejects_negative_constant():
    with pytest.raises(ValueError, match="constant must be >= 0"):
        lintf.build_feature_map("polynomial", 4, constant=-1.0)


def test_favor_estimate_converges_to_softmax_kernel():
    torch.manual_seed(0)
    dim = 16
    x, y = 0.25 * torch.randn(32, dim), 0.25 * torch.randn(32, dim)
    exact = torch.exp(x @ y.T)
    errors = []
    for n_features in (16, 256, 8192):
        phi = lintf.build_feature_map("favor", dim, n_features=n_features, scale=1.0)
        estimate = phi(x) @ phi(y).T
        errors.append(((estimate - exact).abs() / exact).mean().item())
    assert errors[2] < errors[1] < errors[0]
    assert errors[2] < 0.05


def test_favor_query_stabiliser_only_rescales_rows():
    phi = lintf.build_feature_map("favor", 8, n_features=64)
    x = 3 * torch.randn(10, 8, dtype=torch.float64)
    ratio = phi.forward_queries(x) / phi(x)
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))


def test_favor_redraw_policy():
    phi = lintf.build_feature_map("favor", 4, n_features=8, redraw_every=2).train()
    before = phi.projection.clone()
    phi.maybe_redraw()
    assert torch.equal(phi.projection, before)
    phi.maybe_redraw()
    assert not torch.equal(phi.projection, before)
    fixed = lintf.build_feature_map("favor", 4, n_features=8).train()
    kept = fixed.projection.clone()
    for _ in range(3):
        fixed.maybe_redraw()
    assert torch.equal(fixed.projection, kept)
    with pytest.raises(ValueError, match="redraw_every must be >= 0"):
        lintf.build_feature_map("favor", 4, redraw_every=-1)


def test_favor_features_travel_in_the_state_dict():
    first = lintf.build_feature_map("favor", 4, n_features=8)
    second = lintf.build_feature_map("favor", 4, n_features=8)
    second.load_state_dict(first.state_dict())
    x = torch.randn(3, 4)
    assert torch.equal(first(x), second(x))
