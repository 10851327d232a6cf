"""Example lintf plugin: importing it registers the ``softplus`` feature map.

Installed (``pip install -e plugins/lintf-softplus``), lintf finds it through the entry-point
group ``lintf.plugins``; ``--model.feature_map softplus`` then works in every task.
"""

import torch.nn.functional as F
from torch import Tensor

from lintf import register_feature_map
from lintf.feature_maps import FeatureMap


@register_feature_map("softplus")
class SoftplusFeatureMap(FeatureMap):
    """phi(x) = softplus(beta x) / beta: positive and smooth, C = D.

    Args:
        dim: input size D.
        beta: sharpness; large beta approaches relu.
    """

    def __init__(self, dim: int, beta: float = 1.0) -> None:
        super().__init__(dim)
        if beta <= 0:
            raise ValueError(f"softplus: beta must be > 0, got {beta}")
        self.beta = beta

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, beta=self.beta)
