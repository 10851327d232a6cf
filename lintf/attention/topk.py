"""Exact top-k attention: each query attends with softmax to its k highest-scoring visible keys."""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import append_position, causal_visibility, empty_kv_cache, extend_cache
from lintf.attention.masking import masked_softmax, visible_keys
from lintf.attention.state import KVCache
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


@register_attention("topk")
class TopKAttention(Attention):
    """softmax over the ``topk`` largest scale * q.k of each query; the other keys get weight 0.

    Exact, so O(N S) like softmax attention (the full score matrix is formed to find the top
    keys); with ``topk >= S`` it is softmax attention. The state is a KV cache in fp32 (fp64 for
    fp64) with the padding flag of each key: a forward call with a state selects among the cached
    keys plus its own, and ``step`` (O(t) at step t) among the cached keys, which reproduces the
    causal forward.

    Args:
        head_dim: D.
        topk: keys kept per query (fewer if fewer are visible).
        scale: logit scale; None uses 1/sqrt(D).
    """

    cache_entries = ("keys", "values", "padding")

    def __init__(self, head_dim: int, topk: int = 32, scale: float | None = None) -> None:
        super().__init__(head_dim)
        if not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk: topk must be a positive int, got {topk!r}")
        self.topk = topk
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def top_weights(self, logits: Tensor) -> Tensor:
        """Dense weights (..., S): softmax over the top-k finite logits of the last dim, 0 elsewhere."""
        top, index = logits.topk(min(self.topk, logits.shape[-1]), dim=-1)  # (..., k)
        # hidden keys (-inf) may be picked when few are visible; a NaN logit stays visible, so NaN propagates
        weights = masked_softmax(top, ~torch.isneginf(top))
        return torch.zeros_like(logits).scatter(-1, index, weights)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        acc = accumulation_dtype(v.dtype)
        cache = None
        with torch.autocast(q.device.type, enabled=False):  # keep the selection in fp32 under autocast
            if causal:  # the cached keys (none without a state), then the call's own
                cache = extend_cache(state, k, v, key_padding_mask, acc)  # (B, H, L+N, D|M)
                keys, values = cache.keys, cache.values
                visible = causal_visibility(cache.padding, q.shape[2])  # (B, 1, N, L+N)
            else:
                keys, values = k.to(acc), v.to(acc)
                visible = visible_keys(key_padding_mask, False, q.shape[2], k.shape[2], q.device)  # (B, 1, 1, S)
            logits = (q.to(acc) @ keys.transpose(-1, -2)) * self.scale  # (B, H, N, L+N)
            if visible is not None:
                logits = logits.masked_fill(~visible, float("-inf"))
            out = self.top_weights(logits) @ values  # (B, H, N, M)
        return out.to(v.dtype), cache if return_state else None

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> KVCache:
        return empty_kv_cache(batch_size, n_heads, self.head_dim, value_dim, device=device,
                              dtype=accumulation_dtype(dtype))

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: KVCache) -> tuple[Tensor, KVCache]:
        acc = state.keys.dtype
        with torch.autocast(q_t.device.type, enabled=False):
            cache = append_position(state, k_t, v_t)  # (B, H|1, capacity, D|M|-)
            t = cache.length
            past_keys, past_values = cache.keys[:, :, :t], cache.values[:, :, :t]  # (B, H, t, D|M)
            logits = (past_keys @ q_t.to(acc).unsqueeze(-1)).squeeze(-1) * self.scale  # (B, H, t)
            logits = logits.masked_fill(cache.padding[:, :, :t], float("-inf"))  # (B, 1, t): padded keys hidden
            out = (self.top_weights(logits).unsqueeze(-2) @ past_values).squeeze(-2)  # (B, H, M)
        return out.to(v_t.dtype), cache
