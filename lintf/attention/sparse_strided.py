"""Sparse Transformer's "strided" pattern: the previous L positions, plus every L-th position before them."""

from __future__ import annotations

import torch

from lintf.attention.arguments import positive_int
from lintf.attention.indexed_keys import KeyGroups, grid_groups
from lintf.attention.pattern import PatternAttention
from lintf.registry import register_attention


@register_attention("sparse_strided")
class SparseStridedAttention(PatternAttention):
    """Softmax over a window of ``stride`` keys and every ``stride``-th key (Child et al. 2019, "strided").

    With ``stride`` = L, query i attends keys j with |i - j| < L (causal: the L positions
    i - L + 1 .. i) and every j with i - j a multiple of L (causal: i - L, i - 2L, ...). For data
    with rows of L positions (an image in raster order, L = its row length) that is the recent
    part of the row and the same column of every earlier row. Keys per query: about L + S / L,
    so the cost is O(N (L + N / L)), O(N^1.5) with L ~ sqrt(N). Forward attends by index
    (``lintf.attention.indexed_keys``): the window in blocks of L queries over 2L (3L) gathered
    keys, the columns as L groups of every L-th position, merged into one softmax; the state is a
    ``KVCache`` and ``step`` equals the causal forward. Any length works (no block needs to be full).

    Args:
        head_dim: D.
        stride: L, the window and the stride (28 for MNIST rows).
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(self, head_dim: int, stride: int = 32, scale: float | None = None) -> None:
        super().__init__(head_dim, scale)
        self.stride = positive_int("sparse_strided", "stride", stride)

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        size = self.stride
        blocks = grid_groups(start, n_queries, 1, size, device)
        offsets = torch.arange(-size, size if causal else 2 * size, device=device)  # previous, own (and next) block
        near = blocks.block[:, None] * size + offsets  # (G, 2L|3L)
        in_window = (blocks.positions[:, :, None] - near[:, None, :]).abs() < size  # (G, Lq, K)
        columns = grid_groups(start, n_queries, size, None, device)
        rows = torch.arange(-(-n_keys // size), device=device)
        column_keys = rows * size + columns.residue[:, None]  # (G', rows): the query's column, every row
        not_itself = column_keys[:, None, :] != columns.positions[:, :, None]  # the query itself is in the window
        return [KeyGroups(blocks.queries, near[None], in_window[None]),
                KeyGroups(columns.queries, column_keys[None], not_itself[None])]
