"""phi(x) = relu(x): a non-negative map with exact zeros (sparse similarities)."""

from __future__ import annotations

from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.registry import register_feature_map


@register_feature_map("relu")
class ReluFeatureMap(FeatureMap):
    """max(x, 0). A query or key that is all-negative attends with zero weight; eps keeps it finite.

    Args:
        dim: input size D.
    """

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()
