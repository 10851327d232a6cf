"""Exact finite features of the degree-2 polynomial kernel (c + scale * x.y)^2.

(c + s x.y)^2 = c^2 + 2 c s x.y + s^2 (x.y)^2, and (x.y)^2 = sum_{i<=j} w_ij^2 x_i x_j y_i y_j
with w_ii = 1 and w_ij = sqrt(2) off the diagonal. Keeping only i <= j gives
C = 1 + D + D (D + 1) / 2 features (paper section 3.2.1: cost O(N D^2 M)). The similarity is a
square, hence never negative, so the attention normaliser is well defined.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.registry import register_feature_map


@register_feature_map("polynomial")
class PolynomialFeatureMap(FeatureMap):
    """phi with phi(x).phi(y) = (c + scale * x.y)^2 exactly.

    Args:
        dim: input size D.
        constant: the kernel's offset c (>= 0).
        scale: multiplies x.y; None uses 1/sqrt(D) as softmax attention does.
    """

    def __init__(self, dim: int, constant: float = 1.0, scale: float | None = None) -> None:
        super().__init__(dim)
        if constant < 0:
            raise ValueError(f"polynomial: constant must be >= 0 for real features, got {constant}")
        self.constant = float(constant)
        self.scale = dim**-0.5 if scale is None else float(scale)
        rows, cols = torch.triu_indices(dim, dim)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)
        weights = torch.where(rows == cols, 1.0, math.sqrt(2.0))
        self.register_buffer("pair_weights", weights, persistent=False)

    @property
    def out_dim(self) -> int:
        return 1 + self.dim + self.dim * (self.dim + 1) // 2

    def forward(self, x: Tensor) -> Tensor:
        scaled = x * math.sqrt(self.scale)
        quadratic = scaled[..., self.pair_rows] * scaled[..., self.pair_cols] * self.pair_weights.to(x.dtype)
        constant = torch.full_like(scaled[..., :1], self.constant)
        linear = math.sqrt(2.0 * self.constant) * scaled
        return torch.cat([constant, linear, quadratic], dim=-1)  # (..., 1 + D + D(D+1)/2)
