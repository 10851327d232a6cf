"""Attention Free Transformer, AFT-simple (Zhai et al. 2021): a per-channel softmax over keys.

    out_i = sigmoid(q_i) * sum_j softmax_j(k)_j * v_j        (element-wise in the D channels)

Causal: the softmax runs over keys 0..i, an RNN with a running maximum m_i per channel (as in
online softmax): num_i = exp(m_{i-1} - m_i) num_{i-1} + exp(k_i - m_i) v_i, den likewise with 1.
That is the decayed causal product with log-decay m_{i-1} - m_i <= 0, so ``forward`` runs it
through ``lintf.ops.decayed`` (each channel a head of size 1) and every exponent stays <= 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.ops import accumulation_dtype
from lintf.ops.decayed import decayed_dot_product
from lintf.registry import register_attention


def per_channel(x: Tensor) -> Tensor:
    """(B, H, N, D) -> (B, H*D, N): each channel becomes a head."""
    batch, heads, length, dim = x.shape
    return x.permute(0, 1, 3, 2).reshape(batch, heads * dim, length)


def from_channels(x: Tensor, heads: int) -> Tensor:
    """(B, H*D, N) -> (B, H, N, D)."""
    batch, channels, length = x.shape
    return x.reshape(batch, heads, channels // heads, length).permute(0, 1, 3, 2)


@register_attention("aft")
class AFTSimpleAttention(Attention):
    """AFT-simple: sigmoid(q) gates a key-softmax-weighted average of v, channel by channel.

    O(N D) time and memory, no q.k products; values must have the head size (M == D). Padded
    keys get weight 0; a query that sees no key returns 0. ``step`` is the running-maximum RNN
    and equals the causal forward.

    Args:
        head_dim: D (= M).
    """

    value_dim_is_head_dim = True

    def attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):
            q, k, values = q.to(acc), k.to(acc), v.to(acc)
            visible = torch.ones_like(k[..., :1], dtype=torch.bool)  # (B, H, S, 1)
            if key_padding_mask is not None:
                visible = visible & ~key_padding_mask[:, None, :, None]
            # hidden keys take the smallest visible logit of their channel: finite, never a new maximum
            smallest = k.masked_fill(~visible, float("inf")).amin(2, keepdim=True)  # (B, H, 1, D)
            logits = torch.where(visible, k, torch.where(torch.isfinite(smallest), smallest, 0.0))
            summed = self._causal_sums(logits, values, visible) if causal else self._sums(logits, values, visible)
            numerator, denominator = summed
            # den >= 1 once a key is visible (the largest contributes exp(0)); 0 only with num = 0
            out = torch.sigmoid(q) * numerator / torch.where(denominator > 0, denominator, 1.0)
        return out.to(v.dtype)

    @staticmethod
    def _sums(logits: Tensor, values: Tensor, visible: Tensor) -> tuple[Tensor, Tensor]:
        """Non-causal sum_j exp(k_j - m) v_j and sum_j exp(k_j - m): (B, H, 1, D) each."""
        weights = torch.exp(logits - logits.amax(2, keepdim=True).detach()) * visible  # (B, H, S, D)
        return (weights * values).sum(2, keepdim=True), weights.sum(2, keepdim=True)

    @staticmethod
    def _causal_sums(logits: Tensor, values: Tensor, visible: Tensor) -> tuple[Tensor, Tensor]:
        """Prefix sums over j <= i against the running maximum m_i: (B, H, N, D) each."""
        heads = logits.shape[1]
        running = logits.cummax(2).values.detach()  # m_i: (B, H, N, D); the output does not depend on it
        previous = torch.cat([running[:, :, :1], running[:, :, :-1]], dim=2)  # m_{i-1}, m_{-1} = m_0
        weights = torch.exp(logits - running) * visible  # (B, H, N, D), <= 1
        keys = per_channel(weights).unsqueeze(-1)  # (B, H*D, N, 1)
        ones = torch.ones_like(keys)
        values_and_ones = torch.cat([per_channel(values).unsqueeze(-1), ones], dim=-1)  # (B, H*D, N, 2)
        summed = decayed_dot_product(ones, keys, values_and_ones, per_channel(previous - running))  # (B, H*D, N, 2)
        return from_channels(summed[..., 0], heads), from_channels(summed[..., 1], heads)

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> State:
        if value_dim != self.head_dim:
            raise ValueError(f"aft: value_dim must equal head_dim {self.head_dim}, got {value_dim}")
        acc = accumulation_dtype(dtype)
        zeros = torch.zeros(batch_size, n_heads, self.head_dim, device=device, dtype=acc)
        # -inf: the first key becomes the maximum and exp(-inf - m) = 0 discards the empty sums
        return {"numerator": zeros, "denominator": zeros, "maximum": torch.full_like(zeros, float("-inf"))}

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        acc = state["numerator"].dtype
        with torch.autocast(q_t.device.type, enabled=False):
            key = k_t.to(acc)  # (B, H, D)
            maximum = torch.maximum(state["maximum"], key).detach()
            kept, weight = torch.exp(state["maximum"] - maximum), torch.exp(key - maximum)
            numerator = kept * state["numerator"] + weight * v_t.to(acc)
            denominator = kept * state["denominator"] + weight
            out = torch.sigmoid(q_t.to(acc)) * numerator / denominator
        return out.to(v_t.dtype), {"numerator": numerator, "denominator": denominator, "maximum": maximum}
