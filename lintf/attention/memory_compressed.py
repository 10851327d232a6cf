"""Memory-compressed attention (Liu et al. 2018, "Generating Wikipedia by Summarizing Long Sequences").

Keys and values are cut into blocks of k consecutive positions and a learned strided convolution
(kernel = stride = k) turns each block into one key and one value; queries attend with softmax to
the S/k compressed positions. Time O(N S / k); the block pattern reaches
``scaled_dot_product_attention`` as a boolean mask, so no (N, S/k) weight matrix is stored.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.arguments import positive_int
from lintf.attention.base import Attention, State
from lintf.attention.cache import cache_append, empty_cache, empty_padding_cache, records_graph
from lintf.attention.masked_attention import attend_visible
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


class CompressedCache(NamedTuple):
    """memory_compressed's state: the compressed blocks so far and the last k - 1 positions.

    Args:
        keys: (B, H, capacity, D) compressed keys of the finished blocks.
        values: (B, H, capacity, D) compressed values.
        padding: (B, 1, capacity) bool, True for a block of padded positions only (never attended).
        length: finished blocks cached.
        recent_keys: (B, H, k - 1, D) keys of the last k - 1 positions, oldest first (padded ones zero).
        recent_values: (B, H, k - 1, D).
        recent_padding: (B, 1, k - 1) bool, True for a padded position or one before the sequence's start.
        pending: positions of the unfinished block, 0 .. k - 1 (the last ``pending`` recent ones).
    """

    keys: Tensor
    values: Tensor
    padding: Tensor
    length: int
    recent_keys: Tensor
    recent_values: Tensor
    recent_padding: Tensor
    pending: int


@register_attention("memory_compressed")
class MemoryCompressedAttention(Attention):
    """Softmax attention to keys and values compressed by a strided convolution.

    Block j holds positions j k .. j k + k - 1; ``Conv1d(D, D, k, stride=k)`` (one for keys, one
    for values, shared by the heads) maps it to one key and one value. Padded keys and values are
    zeros inside their block, and a block of padded positions only is never attended. Non-causal:
    every query sees every block, the last one filled up with zeros when k does not divide S.
    Causal: block j is visible from its last position j k + k - 1 on, so the first k - 1 positions
    see nothing and return zeros. The state holds the compressed blocks (O(t / k)) and the last
    k - 1 positions, which the next positions complete into a block; ``step`` equals the forward.
    Values have the head size (M = D), as the value convolution has D channels.

    Args:
        head_dim: D.
        compression: k, the convolution's kernel size and stride (positions per compressed block).
        scale: logit scale; None uses 1/sqrt(D).
    """

    value_dim_is_head_dim = True
    cache_entries = ("keys", "values", "padding")

    def __init__(self, head_dim: int, compression: int = 3, scale: float | None = None) -> None:
        super().__init__(head_dim)
        self.compression = positive_int(self.display_name(), "compression", compression)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.key_compression = nn.Conv1d(head_dim, head_dim, compression, stride=compression)
        self.value_compression = nn.Conv1d(head_dim, head_dim, compression, stride=compression)

    def check_inputs(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> None:
        """The contract's checks, after naming the reason for M = D."""
        if isinstance(v, Tensor) and v.dim() == 4 and v.shape[3] != self.head_dim:
            raise ValueError(f"{type(self).__name__}: values must have the head size M = D = {self.head_dim} (the "
                             f"value convolution has D channels), got v {tuple(v.shape)}")
        super().check_inputs(q, k, v, causal, key_padding_mask)

    def check_step_inputs(self, q_t: Tensor, k_t: Tensor, v_t: Tensor) -> None:
        """The contract's checks, after naming the reason for M = D."""
        if isinstance(v_t, Tensor) and v_t.dim() == 3 and v_t.shape[2] != self.head_dim:
            raise ValueError(f"{type(self).__name__}.step: v_t must have the head size M = D = {self.head_dim} (the "
                             f"value convolution has D channels), got {tuple(v_t.shape)}")
        super().check_step_inputs(q_t, k_t, v_t)

    def compress(self, x: Tensor, convolution: nn.Conv1d) -> Tensor:
        """Whole blocks x (B, H, nb k, D) -> (B, H, nb, D): the convolution with kernel = stride = k."""
        blocks = x.unflatten(2, (x.shape[2] // self.compression, self.compression))  # (B, H, nb, k, D)
        weight, bias = convolution.weight.to(x.dtype), convolution.bias.to(x.dtype)  # (D, D, k), (D,)
        return torch.einsum("bhjti,oit->bhjo", blocks, weight) + bias

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):  # the convolution and softmax as in fp32
            queries, keys, values = q.to(acc), k.to(acc), v.to(acc)
            padding = key_padding_mask
            if padding is None:
                padding = torch.zeros(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device)  # (B, S)
            hidden = padding[:, None, :, None]  # (B, 1, S, 1)
            keys, values = keys.masked_fill(hidden, 0.0), values.masked_fill(hidden, 0.0)
            if not causal:
                return self.attend_all(queries, keys, values, padding).to(v.dtype), None
            if state is None:
                state = self.init_state(q.shape[0], q.shape[1], v.shape[3], device=q.device, dtype=v.dtype)
            out, new_state = self.attend_causal(queries, keys, values, padding, state)
        return out.to(v.dtype), new_state if return_state else None

    def attend_all(self, q: Tensor, k: Tensor, v: Tensor, padding: Tensor) -> Tensor:
        """Non-causal: every query sees every block; the last block is filled up with zeros. (B, H, N, M)."""
        extra = (-k.shape[2]) % self.compression
        k, v = F.pad(k, (0, 0, 0, extra)), F.pad(v, (0, 0, 0, extra))  # (B, H, nb k, D)
        blocks = k.shape[2] // self.compression
        hidden = F.pad(padding, (0, extra), value=True).unflatten(1, (blocks, self.compression)).all(-1)  # (B, nb)
        keys, values = self.compress(k, self.key_compression), self.compress(v, self.value_compression)
        return attend_visible(q, keys, values, ~hidden[:, None, None, :], self.scale)

    def attend_causal(
        self, q: Tensor, k: Tensor, v: Tensor, padding: Tensor, state: CompressedCache
    ) -> tuple[Tensor, CompressedCache]:
        """Causal queries after ``state``: blocks visible from their last position. (B, H, N, M) and the new state."""
        k_size, n, recent = self.compression, q.shape[2], self.compression - 1
        window_keys = torch.cat([state.recent_keys, k], dim=2)  # (B, H, k-1+N, D)
        window_values = torch.cat([state.recent_values, v], dim=2)
        window_padding = torch.cat([state.recent_padding[:, 0], padding], dim=1)  # (B, k-1+N)
        start = recent - state.pending  # the unfinished block's first position
        finished = (state.pending + n) // k_size
        end = start + finished * k_size
        keys = self.compress(window_keys[:, :, start:end], self.key_compression)  # (B, H, nb, D)
        values = self.compress(window_values[:, :, start:end], self.value_compression)
        hidden = window_padding[:, start:end].unflatten(1, (finished, k_size)).all(-1)  # (B, nb)
        length = state.length
        keys = torch.cat([state.keys[:, :, :length], keys], dim=2)  # (B, H, L+nb, D)
        values = torch.cat([state.values[:, :, :length], values], dim=2)
        block_padding = torch.cat([state.padding[:, :, :length], hidden[:, None]], dim=2)  # (B, 1, L+nb)
        query_positions = state.pending + torch.arange(n, device=q.device)  # from the unfinished block's start
        block_ends = torch.arange(finished, device=q.device) * k_size + k_size - 1
        finished_before = torch.ones(n, length, dtype=torch.bool, device=q.device)
        sees = torch.cat([finished_before, block_ends[None, :] <= query_positions[:, None]], dim=1)  # (N, L+nb)
        out = attend_visible(q, keys, values, sees & ~block_padding[:, :, None, :], self.scale)
        last = window_keys.shape[2] - recent  # the new window: the last k - 1 positions
        new_state = CompressedCache(
            keys, values, block_padding, length + finished, window_keys[:, :, last:], window_values[:, :, last:],
            window_padding[:, None, last:], (state.pending + n) % k_size,
        )
        return out, new_state

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> CompressedCache:
        if value_dim != self.head_dim:
            raise ValueError(f"memory_compressed: value_dim must equal head_dim {self.head_dim} (the value "
                             f"convolution has D channels), got {value_dim}")
        acc, recent = accumulation_dtype(dtype), self.compression - 1
        return CompressedCache(
            empty_cache(batch_size, n_heads, self.head_dim, device=device, dtype=acc),
            empty_cache(batch_size, n_heads, value_dim, device=device, dtype=acc),
            empty_padding_cache(batch_size, device), 0,
            torch.zeros(batch_size, n_heads, recent, self.head_dim, device=device, dtype=acc),
            torch.zeros(batch_size, n_heads, recent, value_dim, device=device, dtype=acc),
            torch.ones(batch_size, 1, recent, dtype=torch.bool, device=device), 0,
        )

    def attend_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: CompressedCache
    ) -> tuple[Tensor, CompressedCache]:
        acc = state.keys.dtype
        with torch.autocast(q_t.device.type, enabled=False):
            window_keys = torch.cat([state.recent_keys, k_t.to(acc).unsqueeze(2)], dim=2)  # (B, H, k, D)
            window_values = torch.cat([state.recent_values, v_t.to(acc).unsqueeze(2)], dim=2)
            newest = torch.zeros(k_t.shape[0], 1, 1, dtype=torch.bool, device=k_t.device)
            window_padding = torch.cat([state.recent_padding, newest], dim=2)  # (B, 1, k)
            keys, values, padding, length = state.keys, state.values, state.padding, state.length
            pending = state.pending + 1
            if pending == self.compression:  # this position finishes a block, visible from here on
                functional = records_graph(keys, values, window_keys, window_values)
                keys = cache_append(keys, self.compress(window_keys, self.key_compression)[:, :, 0], length, functional)
                values = cache_append(
                    values, self.compress(window_values, self.value_compression)[:, :, 0], length, functional
                )
                padding = cache_append(padding, window_padding.all(-1), length, functional)
                length, pending = length + 1, 0
            visible = ~padding[:, :, None, :length]  # (B, 1, 1, L)
            out = attend_visible(q_t.to(acc).unsqueeze(2), keys[:, :, :length], values[:, :, :length], visible,
                                 self.scale).squeeze(2)  # (B, H, M)
        new_state = CompressedCache(keys, values, padding, length, window_keys[:, :, 1:], window_values[:, :, 1:],
                                    window_padding[:, :, 1:], pending)
        return out.to(v_t.dtype), new_state
