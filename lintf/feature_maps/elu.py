"""phi(x) = elu(x) + 1, the paper's default feature map (positive, cheap, C = D)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.registry import register_feature_map


@register_feature_map("elu")
class EluFeatureMap(FeatureMap):
    """elu(x) + 1 (Katharopoulos et al. 2020, eq. 7).

    Args:
        dim: input size D.
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x) + 1.0
