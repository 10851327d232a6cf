"""Base of the fixed sparse patterns: a pattern of key positions per query, attended by index, and a KV cache.

A subclass states its pattern once, in ``key_groups``: for the queries at positions
start..start+N-1 and S existing keys, the parts (``lintf.attention.indexed_keys.KeyGroups``)
naming the keys each query may attend. ``forward``, a forward continuing from a state and
``step`` all run that one pattern on absolute positions, so they agree exactly. The state is a
``KVCache`` of every past key (the patterns reach arbitrarily far back: summary columns, strides,
random or global keys), so ``step`` costs O(keys in the pattern) time and O(t) memory at step t.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import append_position, empty_kv_cache, extend_cache
from lintf.attention.indexed_keys import KeyGroups, attend_key_groups, merge, visible_pairs
from lintf.attention.state import KVCache
from lintf.ops import accumulation_dtype


class PatternAttention(Attention):
    """Softmax attention over a fixed sparse pattern of key positions (see the module docstring).

    Positions index queries and keys separately, so cross-attention (N != S, ``causal=False``)
    compares query i with key j by index.

    Args:
        head_dim: D.
        scale: logit scale; None uses 1/sqrt(D).
    """

    cache_entries = ("keys", "values", "padding")

    def __init__(self, head_dim: int, scale: float | None = None) -> None:
        super().__init__(head_dim)
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def key_groups(
        self, start: int, n_queries: int, n_keys: int, n_heads: int, causal: bool, device: torch.device
    ) -> list[KeyGroups]:
        """The parts of the pattern for queries start..start+N-1 (N > 0) over keys 0..S-1.

        Args:
            start: absolute position of the first query.
            n_queries: N.
            n_keys: S (causal: start + N).
            n_heads: H.
            causal: whether keys after a query are hidden (added by the caller; a pattern may differ by mode).
            device: where the index tensors live.
        """
        raise NotImplementedError

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        acc = accumulation_dtype(v.dtype)
        cache = None
        with torch.autocast(q.device.type, enabled=False):
            if state is None and not return_state:
                keys, values, padding, start = k.to(acc), v.to(acc), key_padding_mask, 0
            else:  # the cached keys, then the call's own: the call's queries sit after the cached positions
                cache = extend_cache(state, k, v, key_padding_mask, acc)  # (B, H, L+N, D|M)
                keys, values, padding, start = cache.keys, cache.values, cache.padding[:, 0], cache.length - q.shape[2]
            out = self.attend_positions(q.to(acc), keys, values, padding, start, keys.shape[2], causal)
        return out.to(v.dtype), cache

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: KVCache) -> tuple[Tensor, KVCache]:
        with torch.autocast(q_t.device.type, enabled=False):
            cache = append_position(state, k_t, v_t)  # (B, H, capacity, D|M): positions 0..length-1 are valid
            out = self.attend_positions(
                q_t.to(cache.keys.dtype).unsqueeze(2), cache.keys, cache.values, cache.padding[:, 0], cache.length - 1,
                cache.length, causal=True,
            )  # (B, H, 1, M)
        return out.squeeze(2).to(v_t.dtype), cache

    def attend_positions(
        self, q: Tensor, k: Tensor, v: Tensor, padding: Tensor | None, start: int, n_keys: int, causal: bool
    ) -> Tensor:
        """q (B, H, N, D) at positions start.. over keys k (B, H, S', D), v (B, H, S', M) -> (B, H, N, M).

        Keys at positions n_keys and after are unused space of a cache; ``padding`` is (B, S') or None.
        """
        batch, heads, n_queries, _ = q.shape
        by_heads: dict[tuple[int, int, int], list] = {}
        for part in self.key_groups(start, n_queries, n_keys, heads, causal, q.device):
            span = part.heads.indices(heads)
            by_heads.setdefault(span, []).append(attend_key_groups(
                q[:, part.heads], k[:, part.heads], v[:, part.heads], part, start=start, n_keys=n_keys, causal=causal,
                padding=padding, scale=self.scale,
            ))
        return torch.cat([merge(by_heads[span]) for span in sorted(by_heads)], dim=1)  # spans cover 0..H-1 in order

    def attended_keys(self, n_queries: int, n_heads: int, causal: bool, n_keys: int | None = None) -> Tensor:
        """How many keys each query attends without padding: (H, N) long (a measure of the pattern's cost).

        Args:
            n_queries: N.
            n_heads: H.
            causal: count only keys up to the query.
            n_keys: S; None: N.
        """
        n_keys = n_queries if n_keys is None else n_keys
        counts = torch.zeros(n_heads, n_queries + 1, dtype=torch.long)
        for part in self.key_groups(0, n_queries, n_keys, n_heads, causal, torch.device("cpu")):
            visible, _ = visible_pairs(part, 0, n_keys, causal, None)  # (1, Hg, G, Lq, K)
            per_slot = visible[0].sum(-1).flatten(1)  # (Hg, G * Lq)
            target = torch.where(part.queries >= 0, part.queries, n_queries).flatten()
            part_counts = counts[part.heads]  # a view: adding to it counts for those heads
            part_counts.index_add_(1, target, per_slot.expand(len(part_counts), -1))
        return counts[:, :n_queries]

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> KVCache:
        acc = accumulation_dtype(dtype)
        return empty_kv_cache(batch_size, n_heads, self.head_dim, value_dim, device=device, dtype=acc)
