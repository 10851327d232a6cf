"""Sparse Transformer's "fixed" pattern: attend within your block, plus the summary columns of the other blocks."""

from __future__ import annotations

import torch

from lintf.attention.arguments import positive_int
from lintf.attention.indexed_keys import KeyGroups, grid_groups
from lintf.attention.pattern import PatternAttention
from lintf.registry import register_attention


@register_attention("sparse_fixed")
class SparseFixedAttention(PatternAttention):
    """Softmax over the keys of the query's block and the summary columns (Child et al. 2019, "fixed").

    Positions are cut into blocks of ``block`` = L. Query i attends every key of its own block and
    the last ``summary`` = c positions of every other block (causal: of every earlier block, and
    the keys of its own block up to i), the summary columns through which information crosses
    blocks. Keys per query: up to L + c S / L, so the cost is O(N (L + c N / L)): O(N^1.5) with
    L ~ sqrt(N) (the paper's text setting was L = 128, c = 8..32). A length that is not a multiple
    of L ends with a shorter block, which has summary columns only at the positions it has. Forward
    attends by index (``lintf.attention.indexed_keys``): the blocks by gather, the summary columns
    as one shared key set; the state is a ``KVCache`` and ``step`` equals the causal forward.

    Args:
        head_dim: D.
        block: L, positions per block (defaults suit sequences of a few hundred to a few thousand).
        summary: c, summary positions at the end of each block, 1..L.
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(self, head_dim: int, block: int = 32, summary: int = 4, scale: float | None = None) -> None:
        super().__init__(head_dim, scale)
        self.block = positive_int("sparse_fixed", "block", block)
        self.summary = positive_int("sparse_fixed", "summary", summary)
        if summary > block:
            raise ValueError(f"sparse_fixed: summary={summary} exceeds block={block}: a block's summary columns are "
                             f"some of its own positions, so use summary <= {block}")

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        size, c = self.block, self.summary
        blocks = grid_groups(start, n_queries, 1, size, device)
        own = blocks.block[None, :, None] * size + torch.arange(size, device=device)  # (1, G, L)
        everyone = grid_groups(start, n_queries, 1, None, device)  # one group of all the call's queries
        n_blocks = -(-n_keys // size)
        columns = (torch.arange(n_blocks, device=device)[:, None] * size + torch.arange(size - c, size, device=device))
        columns = columns.flatten()  # (K,) the summary positions of every block
        query_block = (everyone.positions // size)[..., None]  # (1, Lq, 1)
        key_block = columns // size
        other = key_block < query_block if causal else key_block != query_block  # (1, Lq, K): own block's are in `own`
        return [KeyGroups(blocks.queries, own), KeyGroups(everyone.queries, columns[None, None], other[None])]
