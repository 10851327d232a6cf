"""BigBird: a window of blocks, global tokens, and random keys per query block, seeded and fixed per layer."""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.arguments import positive_int
from lintf.attention.indexed_keys import KeyGroups, grid_groups
from lintf.attention.longformer import check_global_tokens, global_rows
from lintf.attention.pattern import PatternAttention
from lintf.registry import register_attention

PRIME = 2_147_483_647  # 2^31 - 1: products with the multiplier below stay far inside int64


def hashed(seed: int, *coordinates: Tensor) -> Tensor:
    """A fixed pseudo-random int in 0..2^31-2 for each broadcast combination of ``coordinates`` (ints >= 0)."""
    value = torch.tensor(seed % PRIME, device=coordinates[0].device)
    for coordinate in (*coordinates, 0, 0):  # two more rounds to mix the last coordinate
        value = (value + coordinate + 1) * 48271 % PRIME
        value = value ^ (value >> 11)
    return value


@register_attention("bigbird")
class BigBirdAttention(PatternAttention):
    """Softmax over a window of blocks, global tokens and random keys (Zaheer et al. 2020, BigBird).

    Positions are cut into blocks of ``block`` = L. The queries of block b attend every key of
    blocks b - 1, b, b + 1 (causal: b - 1 and b, up to the query), the g = ``n_global`` global
    tokens (the first g positions, which attend every key themselves; causal: every key up to
    them), and r = ``n_random`` random keys drawn per block and head among the other positions
    (causal: among the positions before block b - 1; fewer when fewer exist). The draw is a fixed
    hash of (``seed``, head, block, slot), one key from each of r equal strata of the candidates,
    so the keys are distinct and a block's keys do not depend on the sequence's length: forward,
    step and a split sequence see the same ones. The seed is drawn once per layer when None and
    kept in the state dict. Keys per query: about 3L + g + r, so the cost is O(N (L + g + r)) plus
    O(g N) for the global rows. A non-causal call needs S >= g (a ValueError says so). Forward
    attends by index (``lintf.attention.indexed_keys``); the state is a ``KVCache`` and ``step``
    equals the causal forward.

    Args:
        head_dim: D.
        block: L, positions per block.
        n_global: g, global tokens at the start of the sequence (0: none).
        n_random: r, random keys per query block and head (0: none).
        seed: the random keys' seed; None draws one from torch's generator.
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(
        self, head_dim: int, block: int = 32, n_global: int = 1, n_random: int = 16, seed: int | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__(head_dim, scale)
        self.block = positive_int("bigbird", "block", block)
        for name, value in (("n_global", n_global), ("n_random", n_random)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"bigbird: {name} must be an int >= 0 (0: none), got {value!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"bigbird: seed must be an int >= 0 or None (drawn), got {seed!r}")
        self.n_global, self.n_random = n_global, n_random
        drawn = int(torch.randint(0, PRIME, ())) if seed is None else seed
        self.register_buffer("seed", torch.tensor(drawn, dtype=torch.long))

    def random_keys(self, blocks: Tensor, n_heads: int, n_keys: int, causal: bool) -> Tensor:
        """The random key positions of query blocks ``blocks`` (G,): (H, G, r) long, -1 where there are fewer.

        Args:
            blocks: block indices b.
            n_heads: H.
            n_keys: S.
            causal: draw among the positions before block b - 1 instead of outside blocks b-1..b+1.
        """
        size, g, r = self.block, self.n_global, self.n_random
        window_start = ((blocks - 1) * size).clamp(min=g)  # the candidates are g..S-1 without the window
        if causal:
            hole = torch.zeros_like(blocks)
            count = window_start - g
        else:
            hole = (((blocks + 2) * size).clamp(max=n_keys) - window_start).clamp(min=0)
            count = max(n_keys - g, 0) - hole
        slot = torch.arange(r, device=blocks.device)
        low, high = slot * count[:, None] // r, (slot + 1) * count[:, None] // r  # (G, r) strata of the candidates
        draw = hashed(int(self.seed), torch.arange(n_heads, device=blocks.device)[:, None, None], blocks[:, None], slot)
        offset = torch.where(count[:, None] <= r, slot, low + draw % (high - low).clamp(min=1))  # (H, G, r)
        position = g + offset
        position = position + torch.where(position >= window_start[:, None], hole[:, None], 0)
        return torch.where(slot < count[:, None], position, -1)

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        check_global_tokens("bigbird", self.n_global, n_keys, causal)
        size, g = self.block, self.n_global
        blocks = grid_groups(start, n_queries, 1, size, device)
        near = blocks.block[:, None] * size + torch.arange(-size, size if causal else 2 * size, device=device)
        chosen = [near.expand(n_heads, -1, -1), torch.arange(g, device=device).expand(n_heads, len(near), g),
                  self.random_keys(blocks.block, n_heads, n_keys, causal)]
        others = torch.ones(len(near), g + self.n_random, dtype=torch.bool, device=device)  # global and random keys
        not_global = torch.cat([near >= g, others], dim=1)  # a global key is attended once, as a global key
        allowed = not_global[:, None, :] & (blocks.positions >= g)[:, :, None]  # global queries: their own rows below
        return [KeyGroups(blocks.queries, torch.cat(chosen, dim=2), allowed[None]),
                *global_rows(start, n_queries, n_keys, g, device)]
