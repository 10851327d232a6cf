"""The output norm of the recurrent layers: RMSNorm per head, gated by silu of a projection of the input."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GatedRMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, times silu(gate) when a gate is given.

    Args:
        dim: size of the normalised last dimension (a head's value width).
        eps: added to the mean square.
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = float(eps)

    def forward(self, x: Tensor, gate: Tensor | None = None) -> Tensor:
        """x (..., dim), gate (..., dim) or None -> (..., dim)."""
        normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight.to(x.dtype)
        return normed if gate is None else normed * F.silu(gate.to(x.dtype))
