"""Exact top-k attention: each query attends with softmax to its k highest-scoring visible keys."""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import cache_append, empty_cache
from lintf.attention.masking import masked_softmax, visible_keys
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


@register_attention("topk")
class TopKAttention(Attention):
    """softmax over the ``topk`` largest scale * q.k of each query; the other keys get weight 0.

    Exact, so O(N S) like softmax attention (the full score matrix is formed to find the top
    keys); with ``topk >= S`` it is softmax attention. ``step`` keeps a KV cache (O(t) at step
    t) and selects among the cached keys, which reproduces the causal forward.

    Args:
        head_dim: D.
        topk: keys kept per query (fewer if fewer are visible).
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(self, head_dim: int, topk: int = 32, scale: float | None = None) -> None:
        super().__init__(head_dim)
        if not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk: topk must be a positive int, got {topk!r}")
        self.topk = topk
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def top_weights(self, logits: Tensor) -> Tensor:
        """Dense weights (..., S): softmax over the top-k finite logits of the last dim, 0 elsewhere."""
        top, index = logits.topk(min(self.topk, logits.shape[-1]), dim=-1)  # (..., k)
        weights = masked_softmax(top, torch.isfinite(top))  # hidden keys (-inf) may be picked when few are visible
        return torch.zeros_like(logits).scatter(-1, index, weights)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):  # keep the selection in fp32 under autocast
            logits = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * self.scale  # (B, H, N, S)
            visible = visible_keys(key_padding_mask, causal, q.shape[2], k.shape[2], q.device)  # (B|1, 1, N, S)
            if visible is not None:
                logits = logits.masked_fill(~visible, float("-inf"))
            out = self.top_weights(logits) @ v.to(acc)  # (B, H, N, M)
        return out.to(v.dtype)

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> State:
        acc = accumulation_dtype(dtype)
        return {
            "keys": empty_cache(batch_size, n_heads, self.head_dim, device=device, dtype=acc),
            "values": empty_cache(batch_size, n_heads, value_dim, device=device, dtype=acc),
            "length": 0,
        }

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        length, acc = state["length"], state["keys"].dtype
        with torch.autocast(q_t.device.type, enabled=False):
            keys = cache_append(state["keys"], k_t.to(acc), length)
            values = cache_append(state["values"], v_t.to(acc), length)
            past_keys, past_values = keys[:, :, : length + 1], values[:, :, : length + 1]  # (B, H, t, D|M)
            logits = (past_keys @ q_t.to(acc).unsqueeze(-1)).squeeze(-1) * self.scale  # (B, H, t)
            out = (self.top_weights(logits).unsqueeze(-2) @ past_values).squeeze(-2)  # (B, H, M)
        return out.to(v_t.dtype), {"keys": keys, "values": values, "length": length + 1}
