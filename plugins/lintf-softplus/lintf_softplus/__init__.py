"""Example lintf plugin: importing it registers the ``softplus_beta`` feature map.

Install it beside lintf (``pip install -e plugins/lintf-softplus`` from the lintf checkout); lintf
finds it through the entry-point group ``lintf.plugins``, so the name works in every task and in
Python (``lintf.build_feature_map("softplus_beta", 64, beta=2.0)``) without importing this module::

    lintf fit --config configs/copy.yaml --model.encoder.feature_map softplus_beta \\
      --model.encoder.feature_map_kwargs '{beta: 2.0}'
"""

import torch.nn.functional as F
from torch import Tensor

from lintf import register_feature_map
from lintf.feature_maps import FeatureMap


@register_feature_map("softplus_beta")
class SoftplusBetaFeatureMap(FeatureMap):
    """phi(x) = softplus(beta x) / beta: positive and smooth, C = D.

    Args:
        dim: input size D.
        beta: sharpness; large beta approaches relu.
    """

    def __init__(self, dim: int, beta: float = 1.0) -> None:
        super().__init__(dim)
        if beta <= 0:
            raise ValueError(f"softplus_beta: beta must be > 0, got {beta}")
        self.beta = beta

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, beta=self.beta)
