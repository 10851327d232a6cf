"""Exact softmax attention (Vaswani et al. 2017): the O(N^2) baseline every variant is compared to."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import (
    append_position,
    causal_visibility,
    empty_kv_cache,
    extend_cache,
)
from lintf.attention.documents import check_cu_seqlens, document_chunks, document_ids
from lintf.attention.masking import visible_keys
from lintf.attention.state import KVCache
from lintf.registry import register_attention

PACKED_CHUNK = 512
"""The most positions of a chunk of packed documents attended with one block-diagonal mask."""


@register_attention("softmax")
class SoftmaxAttention(Attention):
    """softmax(scale * q k^T) v through ``scaled_dot_product_attention``; the state is a KV cache.

    The state caches every past key and value in the inputs' dtype, with the padding flag of each
    key: a forward call with a state attends to the cached keys plus its own, causally, and
    ``step`` costs O(t) time and memory at step t. Packed documents (``cu_seqlens``) go through one
    SDPA call with a block-diagonal mask over chunks of consecutive documents (of at most
    ``PACKED_CHUNK`` positions, or one longer document), batched, so a row of N positions costs
    O(N C) rather than O(N^2); with a state, one document at a time.

    Args:
        head_dim: D.
        scale: logit scale; None uses 1/sqrt(D).
        dropout: attention-probability dropout, applied in training only.
    """

    cache_entries = ("keys", "values", "padding")
    supports_packed = True

    def __init__(self, head_dim: int, scale: float | None = None, dropout: float = 0.0) -> None:
        super().__init__(head_dim)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.dropout = dropout

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None:
            if state is not None or return_state:  # each document's cache is its own
                return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
            return self._attend_packed(q, k, v, causal, cu_seqlens), None
        if state is None and not return_state:
            if key_padding_mask is None:
                dropout = self.dropout if self.training else 0.0
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal, scale=self.scale)
                return out, None
            visible = visible_keys(key_padding_mask, causal, q.shape[2], k.shape[2], q.device)  # (B, 1, N, S)
            return self._attend_visible(q, k, v, visible), None
        dtype = q.dtype if state is None else state.keys.dtype
        cache = extend_cache(state, k, v, key_padding_mask, dtype)  # (B, H, L+N, D|M)
        out = self._attend_visible(q, cache.keys, cache.values, causal_visibility(cache.padding, q.shape[2]))
        return out, cache if return_state else None

    def _attend_packed(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, cu_seqlens: Tensor) -> Tensor:
        """Packed documents (1, H, N, .) in chunks of consecutive documents, batched: (1, H, N, M)."""
        length = q.shape[2]
        bounds = check_cu_seqlens(type(self).__name__, cu_seqlens, length)
        chunks = document_chunks(bounds, max(PACKED_CHUNK, max(b - a for a, b in itertools.pairwise(bounds))))
        size = max(stop - start for start, stop in chunks)
        slots = torch.full((len(chunks), size), length, dtype=torch.long)  # position of each slot; N: empty
        for index, (start, stop) in enumerate(chunks):
            slots[index, : stop - start] = torch.arange(start, stop)
        slots = slots.to(q.device).flatten()  # (n * C,)
        ids = F.pad(document_ids(cu_seqlens.to(q.device), length), (0, 1), value=-1)  # (N + 1,): -1 for empty
        ids = ids[slots].view(len(chunks), size)  # (n, C)
        visible = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] >= 0)  # (n, C, C)
        if causal:
            visible = visible.tril()
        gathered = [F.pad(t[0], (0, 0, 0, 1))[:, slots].unflatten(1, (len(chunks), size)).transpose(0, 1)
                    for t in (q, k, v)]  # (n, H, C, D|M)
        out = self._attend_visible(*gathered, visible[:, None])  # (n, H, C, M)
        return out.transpose(0, 1).flatten(1, 2)[:, slots < length][None]  # (1, H, N, M)

    def _attend_visible(self, q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
        """Softmax over the visible keys (bool, broadcastable to (B, H, N, S)); zeros where none is."""
        dropout = self.dropout if self.training else 0.0
        sees_nothing = ~visible.any(-1, keepdim=True)  # (B, 1, N, 1)
        # a row with no visible key would give NaN; let it see everything, then zero its output
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=visible | sees_nothing, dropout_p=dropout, scale=self.scale
        )
        return out.masked_fill(sees_nothing, 0.0)

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> KVCache:
        return empty_kv_cache(batch_size, n_heads, self.head_dim, value_dim, device=device, dtype=dtype)

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: KVCache) -> tuple[Tensor, KVCache]:
        cache = append_position(state, k_t, v_t)  # (B, H|1, capacity, D|M|-)
        t = cache.length
        visible = ~cache.padding[:, :, None, :t]  # (B, 1, 1, t): padded keys of earlier forward calls stay hidden
        out = F.scaled_dot_product_attention(
            q_t.unsqueeze(2), cache.keys[:, :, :t], cache.values[:, :, :t], attn_mask=visible, scale=self.scale
        )  # (B, H, 1, M)
        return out.squeeze(2), cache
