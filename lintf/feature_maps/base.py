"""The feature-map contract: phi maps (..., D) inputs to non-negative (..., C) features.

Linear attention replaces exp(q.k) by phi(q).phi(k). One feature map instance serves both
queries and keys of an attention (random features must be shared between them), so a map that
treats them differently overrides ``forward_queries`` / ``forward_keys``. A map with random
parameters redraws them only in ``maybe_redraw``, which an attention calls once per forward that
starts a sequence (never in a forward continuing from a state, nor in ``step``).
"""

from __future__ import annotations

from torch import Tensor, nn


class FeatureMap(nn.Module):
    """Base class of every phi.

    Args:
        dim: size D of the inputs' last dimension (the attention head size).
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"{type(self).__name__}: dim must be a positive int, got {dim!r}")
        self.dim = dim

    @property
    def out_dim(self) -> int:
        """Size C of the features; D unless the map says otherwise."""
        return self.dim

    def forward(self, x: Tensor) -> Tensor:
        """phi(x): (..., D) -> (..., C)."""
        raise NotImplementedError

    def forward_queries(self, x: Tensor) -> Tensor:
        """Features of queries (B, H, N, D) -> (B, H, N, C)."""
        return self(x)

    def forward_keys(self, x: Tensor) -> Tensor:
        """Features of keys (B, H, S, D) -> (B, H, S, C)."""
        return self(x)

    def maybe_redraw(self) -> None:
        """Hook for maps with random parameters; called once per attention forward that starts a sequence."""
