"""Hedgehog (Zhang et al. 2024): a learned linear map, then softmax over features of it and of its negation.

    phi(x) = [softmax(x W + b), softmax(-(x W + b))]

Trained to mimic softmax attention's spiky, monotone weights; the features are positive and
each half sums to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.feature_maps.head_linear import HeadwiseLinear
from lintf.registry import register_feature_map


@register_feature_map("hedgehog")
class HedgehogFeatureMap(FeatureMap):
    """Learned softmax features, C = 2 * feature_dim.

    The layer starts as the identity (padded with zero columns), as in Hedgehog.

    Args:
        dim: input size D.
        feature_dim: F, outputs of the linear layer; None uses D.
        n_heads: separate layers per attention head (inputs (B, H, ..., D) with H = n_heads);
            1 shares one layer across heads.
    """

    def __init__(self, dim: int, feature_dim: int | None = None, n_heads: int = 1) -> None:
        super().__init__(dim)
        self.feature_dim = dim if feature_dim is None else feature_dim
        self.layer = HeadwiseLinear(dim, self.feature_dim, n_heads, owner="hedgehog")
        with torch.no_grad():
            self.layer.weight.copy_(torch.eye(dim, self.feature_dim).expand(n_heads, -1, -1))

    @property
    def out_dim(self) -> int:
        return 2 * self.feature_dim

    def forward(self, x: Tensor) -> Tensor:
        projected = self.layer(x)  # (..., F)
        return torch.cat([torch.softmax(projected, dim=-1), torch.softmax(-projected, dim=-1)], dim=-1)
