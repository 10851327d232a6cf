"""Attention Free Transformer, AFT-simple (Zhai et al. 2021): a per-channel softmax over keys.

    out_i = sigmoid(q_i) * sum_j softmax_j(k)_j * v_j        (element-wise in the D channels)

Causal: the softmax runs over keys 0..i, an RNN with a running maximum m_i per channel (as in
online softmax): num_i = exp(m_{i-1} - m_i) num_{i-1} + exp(k_i - m_i) v_i, den likewise with 1,
so every exponent is <= 0 whatever the logits. ``forward`` runs it as a decayed prefix sum
(``lintf.ops.decayed_cumsum``, O(N D log N)); ``step`` runs it one position at a time.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.ops import accumulation_dtype, decayed_cumsum
from lintf.registry import register_attention


class AFTState(NamedTuple):
    """AFT's running sums after a prefix, per channel, relative to the running maximum.

    Args:
        numerator: (B, H, D) sum of exp(k_j - m) v_j.
        denominator: (B, H, D) sum of exp(k_j - m).
        maximum: (B, H, D) the running maximum m of the keys (-inf before any key).
    """

    numerator: Tensor
    denominator: Tensor
    maximum: Tensor


@register_attention("aft")
class AFTSimpleAttention(Attention):
    """AFT-simple: sigmoid(q) gates a key-softmax-weighted average of v, channel by channel.

    O(N D) non-causal, O(N D log N) causal, no q.k products; values must have the head size
    (M == D). Padded keys get weight 0; a query that sees no key returns 0. The state is the
    running maximum m and the sums of exp(k_j - m) v_j and exp(k_j - m) over past keys, per
    channel (B, H, D); ``step`` is the running-maximum RNN and equals the causal forward.

    Args:
        head_dim: D (= M).
    """

    value_dim_is_head_dim = True

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        acc = accumulation_dtype(v.dtype)
        new_state = None
        with torch.autocast(q.device.type, enabled=False):
            q, k, values = q.to(acc), k.to(acc), v.to(acc)
            visible = torch.ones_like(k[..., :1], dtype=torch.bool)  # (B, H, S, 1)
            if key_padding_mask is not None:
                visible = visible & ~key_padding_mask[:, None, :, None]
            if causal:
                means, new_state = self._causal_means(k, values, visible, state)
            else:
                means = self._means(k, values, visible)
            out = torch.sigmoid(q) * means
        return out.to(v.dtype), new_state if return_state else None

    @staticmethod
    def _means(logits: Tensor, values: Tensor, visible: Tensor) -> Tensor:
        """Non-causal sum_j exp(k_j) v_j / sum_j exp(k_j) over visible keys: (B, H, 1, D)."""
        if logits.shape[2] == 0:  # no key at all: every query sees nothing
            return values.new_zeros(*values.shape[:2], 1, values.shape[3])
        largest = logits.masked_fill(~visible, torch.finfo(logits.dtype).min).amax(2, keepdim=True).detach()
        largest = torch.where(visible.any(2, keepdim=True), largest, 0.0)  # no visible key: weights all 0
        weights = torch.exp(logits - largest) * visible  # (B, H, S, D), the largest visible one is 1
        total = weights.sum(2, keepdim=True)  # >= 1 once a key is visible
        return (weights * values).sum(2, keepdim=True) / torch.where(total > 0, total, 1.0)

    @staticmethod
    def _causal_means(
        logits: Tensor, values: Tensor, visible: Tensor, state: AFTState | None
    ) -> tuple[Tensor, AFTState]:
        """sum_{j<=i} exp(k_j) v_j / sum_{j<=i} exp(k_j) over visible keys (B, H, N, D), and the final state.

        The running-maximum recurrence, as a decayed prefix sum with log-decay m_{i-1} - m_i <= 0.
        A state (sums relative to its maximum m_{-1}) enters position 0 rescaled to m_0.
        """
        logits = logits.masked_fill(~visible, torch.finfo(logits.dtype).min / 4)  # below any real logit
        running = logits.cummax(2).values  # m_i: (B, H, N, D); the output does not depend on it
        if state is not None:
            running = torch.maximum(running, state.maximum.unsqueeze(2))
        running = running.detach()
        first = running[:, :, :1] if state is None else state.maximum.unsqueeze(2)  # m_{-1}; m_0 without a state
        previous = torch.cat([first, running[:, :, :-1]], dim=2)  # m_{i-1}
        weights = torch.exp(logits - running) * visible  # (B, H, N, D), <= 1
        terms = torch.stack([weights * values, weights], dim=-1)  # (B, H, N, D, 2): numerator, denominator
        if state is not None:  # exp(m_{-1} - m_0) <= 1 (0 for an empty state's m_{-1} = -inf)
            carried = torch.stack([state.numerator, state.denominator], dim=-1)  # (B, H, D, 2)
            carried = carried * torch.exp(previous[:, :, 0] - running[:, :, 0]).unsqueeze(-1)
            terms = torch.cat([terms[:, :, :1] + carried.unsqueeze(2), terms[:, :, 1:]], dim=2)
        # m_{i-1} - m_i <= 0 exactly: a running maximum never decreases
        sums = decayed_cumsum(terms, (previous - running).unsqueeze(-1), check_ranges=False)  # (B, H, N, D, 2)
        numerator, denominator = sums.unbind(-1)
        final = AFTState(numerator[:, :, -1], denominator[:, :, -1], running[:, :, -1])
        # the denominator is >= 1 once a key is visible (the running maximum contributes exp(0))
        return numerator / torch.where(denominator > 0, denominator, 1.0), final

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> AFTState:
        if value_dim != self.head_dim:
            raise ValueError(f"aft: value_dim must equal head_dim {self.head_dim}, got {value_dim}")
        acc = accumulation_dtype(dtype)
        zeros = torch.zeros(batch_size, n_heads, self.head_dim, device=device, dtype=acc)
        # -inf: the first key becomes the maximum and exp(-inf - m) = 0 discards the empty sums
        return AFTState(zeros, zeros, torch.full_like(zeros, float("-inf")))

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: AFTState) -> tuple[Tensor, AFTState]:
        acc = state.numerator.dtype
        with torch.autocast(q_t.device.type, enabled=False):
            key = k_t.to(acc)  # (B, H, D)
            maximum = torch.maximum(state.maximum, key).detach()
            kept, weight = torch.exp(state.maximum - maximum), torch.exp(key - maximum)
            numerator = kept * state.numerator + weight * v_t.to(acc)
            denominator = kept * state.denominator + weight
            out = torch.sigmoid(q_t.to(acc)) * numerator / denominator
        return out.to(v_t.dtype), AFTState(numerator, denominator, maximum)
