"""Polynomial attention: linear attention with the exact degree-2 polynomial kernel features."""

from __future__ import annotations

from lintf.attention.linear import LinearAttention
from lintf.registry import register_attention


@register_attention("polynomial")
class PolynomialAttention(LinearAttention):
    """Attention weights (c + scale * q.k)^2, normalised; exact, O(N D^2 M) (paper 3.2.1).

    Args:
        head_dim: D.
        constant: the kernel's offset c (>= 0).
        scale: multiplies q.k; None uses 1/sqrt(D).
        eps: added to the denominator; >= 0.
    """

    def __init__(self, head_dim: int, constant: float = 1.0, scale: float | None = None, eps: float = 1e-6) -> None:
        super().__init__(
            head_dim, feature_map="polynomial", feature_map_kwargs={"constant": constant, "scale": scale}, eps=eps
        )
