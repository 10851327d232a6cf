"""Second-order Taylor features of exp (the "Based" map, Arora et al. 2024).

    phi(x) = [1, x / a, vec(x x^T) / (sqrt(2) a^2)],   a = D^(1/4)

so phi(x).phi(y) = 1 + s + s^2 / 2 with s = x.y / sqrt(D): the Taylor expansion of exp(s) to
second order, C = 1 + D + D^2. Single features can be negative, but the similarity is
((s + 1)^2 + 1) / 2 >= 1/2, so linear attention's normaliser stays positive.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.registry import register_feature_map


@register_feature_map("taylor")
class TaylorFeatureMap(FeatureMap):
    """phi with phi(x).phi(y) = 1 + s + s^2/2, s = x.y / sqrt(D); similarities >= 1/2.

    Args:
        dim: input size D.
    """

    @property
    def out_dim(self) -> int:
        return 1 + self.dim + self.dim**2

    def forward(self, x: Tensor) -> Tensor:
        scaled = x / self.dim**0.25  # x / a
        outer = (scaled.unsqueeze(-1) * scaled.unsqueeze(-2)).flatten(-2) / math.sqrt(2.0)  # (..., D^2)
        return torch.cat([torch.ones_like(scaled[..., :1]), scaled, outer], dim=-1)  # (..., 1 + D + D^2)
