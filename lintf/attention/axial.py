"""Axial attention over a grid in raster order: half the heads along rows, half along columns."""

from __future__ import annotations

import torch

from lintf.attention.arguments import positive_int
from lintf.attention.indexed_keys import KeyGroups, grid_groups
from lintf.attention.pattern import PatternAttention
from lintf.registry import register_attention


@register_attention("axial")
class AxialAttention(PatternAttention):
    """Softmax along one axis of a grid per head (Ho et al. 2019, "Axial Attention in Multidimensional Transformers").

    Positions are a grid of rows of ``width`` = W in raster order: position i is row i // W,
    column i mod W (an image of W pixels per row; a last row may be shorter). The first
    ceil(H / 2) heads attend along the row (keys of the same row; causal: the row's positions up
    to i), the other H // 2 along the column (keys of the same column; causal: that column in
    the rows up to i's). Two layers connect every position to every earlier one. Keys per query:
    W for a row head, S / W for a column head, so the cost is O(N (W + N / W)), O(N^1.5) for a
    square grid. With one head there is no column head. Forward attends by index
    (``lintf.attention.indexed_keys``); the state is a ``KVCache`` and ``step`` equals the causal forward.

    Args:
        head_dim: D.
        width: W, positions per row (28 for MNIST).
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(self, head_dim: int, width: int = 32, scale: float | None = None) -> None:
        super().__init__(head_dim, scale)
        self.width = positive_int("axial", "width", width)

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        width, row_heads = self.width, -(-n_heads // 2)
        rows = grid_groups(start, n_queries, 1, width, device)
        parts = [KeyGroups(rows.queries, rows.block[None, :, None] * width + torch.arange(width, device=device),
                           heads=slice(0, row_heads))]
        if n_heads > row_heads:
            columns = grid_groups(start, n_queries, width, None, device)
            column_keys = torch.arange(-(-n_keys // width), device=device) * width + columns.residue[:, None]
            parts.append(KeyGroups(columns.queries, column_keys[None], heads=slice(row_heads, n_heads)))
        return parts
