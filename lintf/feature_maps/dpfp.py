"""DPFP (Schlag et al. 2021): deterministic parameter-free projection to 2 D nu features.

With r = [relu(x), relu(-x)] (2 D entries, non-negative, at most D of them non-zero),
    phi(x) = [r_i r_{i-j} for i in 0..2D-1, for j in 1..nu]      (indices modulo 2D)
products of pairs of entries nu apart at most, so C = 2 D nu grows with nu without randomness.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.registry import register_feature_map


@register_feature_map("dpfp")
class DPFPFeatureMap(FeatureMap):
    """Products of rectified entries at distances 1..nu: non-negative, C = 2 D nu.

    Args:
        dim: input size D.
        nu: the number of distances (the paper's capacity parameter), 1 <= nu <= 2 D - 1.
    """

    def __init__(self, dim: int, nu: int = 1) -> None:
        super().__init__(dim)
        if not isinstance(nu, int) or not 1 <= nu <= 2 * dim - 1:
            raise ValueError(f"dpfp: nu must be an int in 1..{2 * dim - 1} (2 D - 1) for D = {dim}, got {nu!r}")
        self.nu = nu

    @property
    def out_dim(self) -> int:
        return 2 * self.dim * self.nu

    def forward(self, x: Tensor) -> Tensor:
        rectified = torch.cat([F.relu(x), F.relu(-x)], dim=-1)  # (..., 2D)
        shifted = [rectified.roll(shifts=j, dims=-1) for j in range(1, self.nu + 1)]  # entry i holds r_{i-j}
        return torch.cat([rectified * s for s in shifted], dim=-1)  # (..., 2D nu)
