"""BlockBERT's blockwise attention: each head attends from a block to one other block, a shifted permutation."""

from __future__ import annotations

import torch

from lintf.attention.arguments import positive_int
from lintf.attention.indexed_keys import KeyGroups, grid_groups
from lintf.attention.pattern import PatternAttention
from lintf.registry import register_attention


@register_attention("blockwise")
class BlockwiseAttention(PatternAttention):
    """Softmax from each block of ``block`` positions to one block, chosen per head (Qiu et al. 2020, BlockBERT).

    The keys are cut into n = ceil(S / L) blocks of ``block`` = L positions (the last one shorter
    when L does not divide S). Head h shifts by s = ``shifts[h mod len(shifts)]``: the queries of
    block b attend the keys of block pi(b) = (b + s) mod n, a cyclic permutation of the blocks
    (BlockBERT's permutations; ``shifts[0]`` is 0, so the first head is the identity, block-diagonal
    attention). Causal: pi(b) = b - s, an earlier block (block b itself, up to the query, when
    s = 0 or b < s). Keys per query: L, so the cost is O(N L). Forward attends by index
    (``lintf.attention.indexed_keys``); the state is a ``KVCache`` and ``step`` equals the causal forward.

    Args:
        head_dim: D.
        block: L, positions per block.
        shifts: s per head, cycled over the heads; non-negative, the first 0. The default pairs
            each block-diagonal head with one that looks one block back (ahead, mod n, non-causal).
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(
        self, head_dim: int, block: int = 32, shifts: tuple[int, ...] = (0, 1), scale: float | None = None
    ) -> None:
        super().__init__(head_dim, scale)
        self.block = positive_int("blockwise", "block", block)
        shifts = tuple(shifts) if isinstance(shifts, (list, tuple)) else shifts
        valid = isinstance(shifts, tuple) and len(shifts) > 0
        valid = valid and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shifts)
        if not valid or shifts[0] != 0:
            raise ValueError(f"blockwise: shifts must be a non-empty list of ints >= 0 whose first is 0 (the first "
                             f"head's permutation is the identity), e.g. [0, 1]; got {shifts!r}")
        self.shifts = shifts

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        size = self.block
        blocks = grid_groups(start, n_queries, 1, size, device)
        shift = torch.tensor([self.shifts[h % len(self.shifts)] for h in range(n_heads)], device=device)[:, None]
        if causal:
            target = torch.where(blocks.block >= shift, blocks.block - shift, blocks.block)  # (H, G)
        else:
            target = (blocks.block + shift) % max(-(-n_keys // size), 1)
        return [KeyGroups(blocks.queries, target[..., None] * size + torch.arange(size, device=device))]
