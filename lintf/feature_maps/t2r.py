"""T2R (Kasai et al. 2021, "Finetuning pretrained transformers into RNNs"): phi(x) = relu(x W + b), learned."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.feature_maps.head_linear import HeadwiseLinear
from lintf.registry import register_feature_map


@register_feature_map("t2r")
class T2RFeatureMap(FeatureMap):
    """A learned projection followed by ReLU: non-negative, C = feature_dim.

    An input whose features are all zero gets zero attention weights (the attention's eps keeps
    the output finite, at 0).

    Args:
        dim: input size D.
        feature_dim: C, outputs of the projection; None uses D.
        n_heads: separate projections per attention head (inputs (B, H, ..., D) with H = n_heads);
            1 shares one projection across heads.
    """

    def __init__(self, dim: int, feature_dim: int | None = None, n_heads: int = 1) -> None:
        super().__init__(dim)
        self.feature_dim = dim if feature_dim is None else feature_dim
        self.layer = HeadwiseLinear(dim, self.feature_dim, n_heads, owner="t2r")
        bound = 1 / math.sqrt(dim)  # nn.Linear's default initialisation
        with torch.no_grad():
            self.layer.weight.uniform_(-bound, bound)
            self.layer.bias.uniform_(-bound, bound)

    @property
    def out_dim(self) -> int:
        return self.feature_dim

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x).relu()
