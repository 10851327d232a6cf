"""Exact softmax attention (Vaswani et al. 2017): the O(N^2) baseline every variant is compared to."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import cache_append, empty_cache
from lintf.attention.masking import visible_keys
from lintf.registry import register_attention


@register_attention("softmax")
class SoftmaxAttention(Attention):
    """softmax(scale * q k^T) v through ``scaled_dot_product_attention``; step is a KV cache.

    Decoding costs O(t) time and memory at step t (the cache holds every past key and value).

    Args:
        head_dim: D.
        scale: logit scale; None uses 1/sqrt(D).
        dropout: attention-probability dropout, applied in training only.
    """

    def __init__(self, head_dim: int, scale: float | None = None, dropout: float = 0.0) -> None:
        super().__init__(head_dim)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.dropout = dropout

    def attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
        dropout = self.dropout if self.training else 0.0
        if key_padding_mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal, scale=self.scale)
        visible = visible_keys(key_padding_mask, causal, q.shape[2], k.shape[2], q.device)  # (B, 1, N, S)
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
    ) -> State:
        return {
            "keys": empty_cache(batch_size, n_heads, self.head_dim, device=device, dtype=dtype),
            "values": empty_cache(batch_size, n_heads, value_dim, device=device, dtype=dtype),
            "length": 0,
        }

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        length = state["length"]
        keys = cache_append(state["keys"], k_t, length)
        values = cache_append(state["values"], v_t, length)
        out = F.scaled_dot_product_attention(
            q_t.unsqueeze(2), keys[:, :, : length + 1], values[:, :, : length + 1], scale=self.scale
        )  # (B, H, 1, M)
        return out.squeeze(2), {"keys": keys, "values": values, "length": length + 1}
