"""A linear layer with one weight matrix per attention head, for learned feature maps."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class HeadwiseLinear(nn.Module):
    """x W_h + b_h for the head h of each row; one shared (W, b) when ``n_heads`` is 1.

    Args:
        in_features: D.
        out_features: F.
        n_heads: number of weight matrices; above 1, inputs are (B, H, ..., D) with H == n_heads.
        owner: feature-map name used in error messages.
    """

    def __init__(self, in_features: int, out_features: int, n_heads: int, owner: str) -> None:
        super().__init__()
        for label, value in (("out_features", out_features), ("n_heads", n_heads)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{owner}: {label} must be a positive int, got {value!r}")
        self.n_heads, self.owner = n_heads, owner
        self.weight = nn.Parameter(torch.empty(n_heads, in_features, out_features))  # (H, D, F)
        self.bias = nn.Parameter(torch.zeros(n_heads, out_features))  # (H, F)

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., F); with n_heads > 1, (B, H, ..., D) -> (B, H, ..., F)."""
        weight, bias = self.weight.to(x.dtype), self.bias.to(x.dtype)
        if self.n_heads == 1:
            return x @ weight[0] + bias[0]
        if x.dim() < 3 or x.shape[1] != self.n_heads:
            raise ValueError(
                f"{self.owner}: built with n_heads={self.n_heads}, so inputs must be (B, {self.n_heads}, ..., D); "
                f"got shape {tuple(x.shape)}"
            )
        rows = x.movedim(1, 0).reshape(self.n_heads, -1, x.shape[-1])  # (H, B*..., D)
        out = torch.baddbmm(bias.unsqueeze(1), rows, weight)  # (H, B*..., F)
        return out.reshape(self.n_heads, x.shape[0], *x.shape[2:-1], -1).movedim(0, 1)  # (B, H, ..., F)
