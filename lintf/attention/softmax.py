"""Exact softmax attention (Vaswani et al. 2017): the O(N^2) baseline every variant is compared to."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import append_position, causal_visibility, empty_kv_cache, extend_cache
from lintf.attention.documents import same_document
from lintf.attention.masking import visible_keys
from lintf.attention.state import KVCache
from lintf.registry import register_attention


@register_attention("softmax")
class SoftmaxAttention(Attention):
    """softmax(scale * q k^T) v through ``scaled_dot_product_attention``; the state is a KV cache.

    The state caches every past key and value in the inputs' dtype, with the padding flag of each
    key: a forward call with a state attends to the cached keys plus its own, causally, and
    ``step`` costs O(t) time and memory at step t. Packed documents (``cu_seqlens``) go through one
    SDPA call with a block-diagonal mask; with a state, one document at a time.

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
            visible = same_document(cu_seqlens, q.shape[2], causal)[None, None]  # (1, 1, N, N)
            return self._attend_visible(q, k, v, visible), None
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
