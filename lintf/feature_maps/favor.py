"""FAVOR+ (Choromanski et al. 2021): positive orthogonal random features for the softmax kernel.

With x' = sqrt(scale) x and rows w_i of W (m, D),
    phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m),
an unbiased estimate E[phi(x).phi(y)] = exp(scale * x.y) whose features are always positive.
Orthogonal rows (blocks of a QR factor, rescaled to Gaussian norms) lower the variance.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lintf.feature_maps.base import FeatureMap
from lintf.ops import accumulation_dtype
from lintf.registry import register_feature_map


def orthogonal_gaussian_rows(n_rows: int, dim: int, device: torch.device | None = None) -> Tensor:
    """(n_rows, dim) matrix whose rows are orthogonal within blocks of ``dim`` rows.

    Each row has the norm of a standard Gaussian vector, so the marginal of every row is
    N(0, I) as the unbiasedness of FAVOR+ requires.
    """
    blocks = []
    for _ in range(math.ceil(n_rows / dim)):
        gaussian = torch.randn(dim, dim, device=device)
        orthonormal_columns, triangular = torch.linalg.qr(gaussian)
        # fixing the signs of R's diagonal makes Q Haar-distributed (uniform random directions)
        orthonormal_columns = orthonormal_columns * torch.sign(torch.diagonal(triangular)).unsqueeze(0)
        blocks.append(orthonormal_columns.T)
    rows = torch.cat(blocks)[:n_rows]  # (m, D), unit rows
    norms = torch.randn(n_rows, dim, device=device).norm(dim=1, keepdim=True)  # chi(D) lengths
    return rows * norms


@register_feature_map("favor")
class FavorFeatureMap(FeatureMap):
    """Positive orthogonal random features approximating exp(scale * q.k).

    The random matrix is a buffer: it is saved in the state_dict (a checkpoint samples with the
    features it was trained with) and never changes in eval mode.

    Args:
        dim: input size D.
        n_features: number of random features m; None uses round(D * ln D) (at least D).
        scale: kernel temperature; None uses 1/sqrt(D), the softmax attention scale.
        redraw_every: in training, draw new features every this many forward passes of the
            attention; 0 keeps the features drawn at construction for the whole run.
    """

    def __init__(
        self, dim: int, n_features: int | None = None, scale: float | None = None, redraw_every: int = 0
    ) -> None:
        super().__init__(dim)
        if n_features is None:
            n_features = max(dim, round(dim * math.log(dim))) if dim > 1 else 1
        if n_features <= 0:
            raise ValueError(f"favor: n_features must be positive, got {n_features}")
        if redraw_every < 0:
            raise ValueError(f"favor: redraw_every must be >= 0 (0 = never redraw), got {redraw_every}")
        self.n_features = n_features
        self.scale = dim**-0.5 if scale is None else float(scale)
        self.redraw_every = redraw_every
        self.forwards_since_redraw = 0
        self.register_buffer("projection", orthogonal_gaussian_rows(n_features, dim))

    @property
    def out_dim(self) -> int:
        return self.n_features

    def maybe_redraw(self) -> None:
        if not self.training or self.redraw_every == 0:
            return
        self.forwards_since_redraw += 1
        if self.forwards_since_redraw >= self.redraw_every:
            self.forwards_since_redraw = 0
            self.projection.copy_(orthogonal_gaussian_rows(self.n_features, self.dim, self.projection.device))

    def _exponent(self, x: Tensor) -> Tensor:
        # exp() is evaluated in fp32 (fp64 for fp64) whatever the input precision
        scaled = x.to(accumulation_dtype(x.dtype)) * math.sqrt(self.scale)
        projected = scaled @ self.projection.T.to(scaled.dtype)  # (..., m)
        return projected - 0.5 * scaled.square().sum(-1, keepdim=True)

    def forward(self, x: Tensor) -> Tensor:
        return torch.exp(self._exponent(x)) / math.sqrt(self.n_features)

    def forward_queries(self, x: Tensor) -> Tensor:
        # a per-query constant factor cancels between numerator and denominator, so the
        # largest exponent of each query is subtracted to keep exp() in range
        exponent = self._exponent(x)
        stabilised = exponent - exponent.amax(-1, keepdim=True).detach()
        return torch.exp(stabilised) / math.sqrt(self.n_features)
