"""The softmax attention layer of today's hybrid models (``encoder.layer: recipe`` with ``softmax``).

For each position x_t (d_model), with H heads of width D:

    q, k, v = conv(W_q x), conv(W_k x), conv(W_v x)   (causal depthwise, K = 4 positions by default; optional)
    q, k    = R_t RMSNorm(q), R_t RMSNorm(k)          (per head; R_t: rotary codes of position t)
    o_t     = sum_{j <= t} softmax_j(D^-1/2 q_t . k_j) v_j
    y_t     = W_o [o_t * sigmoid(W_g x_t)]            (output gate; optional, on by default)

as the gated attention layers of Qwen3-Next (q/k RMSNorm, rotary codes, a sigmoid output gate), with
the short convolution the other layer recipes have by default (FLA's DeltaNet and Gated DeltaNet) and
Zoology's attention baseline puts before attention: it hands each position its predecessors, which
attention otherwise has to learn to look up (``short_conv: null`` gives Qwen3-Next's layer). The
rotary codes pair the halves of each head (RoFormer's layout, base 10000, as
``lintf.layers.retention``), so q_t . k_j depends on t - j only.

Position t counts the real tokens before it in its sequence: padded positions take none, and packed
documents (``cu_seqlens``) start again at 0. The state is the convolutions' last K - 1 inputs and a
cache of every past (rotated) key and value with its padding flag; a continued sequence takes its
positions from the cached real keys, so a sequence split anywhere gives the outputs of the whole.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
from torch import Tensor, nn

from lintf.attention.cache import empty_kv_cache
from lintf.attention.documents import (
    join_documents,
    positions_in_documents,
    select_document,
)
from lintf.attention.softmax import SoftmaxAttention
from lintf.attention.state import KVCache, check_state
from lintf.layers.recipe import packed_documents, positive_int
from lintf.layers.retention import ROTARY_BASE, rotate
from lintf.layers.short_conv import ShortConvolution
from lintf.registry import register_layer

CACHE_ENTRIES = ("keys", "values", "padding")


class SoftmaxLayerState(NamedTuple):
    """The softmax layer's decoding state.

    Args:
        q_conv: (B, H D, K - 1) the last inputs of the query convolution (K = 1 without one).
        k_conv: (B, H D, K - 1) the same for the keys.
        v_conv: (B, H D, K - 1) the same for the values.
        keys: (B, H, capacity, D) every past key, rotated by its position.
        values: (B, H, capacity, D) every past value.
        padding: (B, 1, capacity) bool, True marks a key never to attend.
        length: the positions cached.
    """

    q_conv: Tensor
    k_conv: Tensor
    v_conv: Tensor
    keys: Tensor
    values: Tensor
    padding: Tensor
    length: int


@register_layer("softmax")
class SoftmaxLayer(nn.Module):
    """Softmax attention with a short convolution, q/k RMSNorm, rotary q/k and a sigmoid output gate (module docstring).

    Args:
        d_model: model width.
        n_heads: heads H; each is d_model // n_heads wide (even, for the rotary codes).
        short_conv: kernel size K of a causal depthwise convolution on q, k and v; None: none.
        rotary_base: base of the rotary codes' wavelengths.
        qk_norm: RMSNorm each query and key head (with a learned weight) before the rotary codes.
        output_gate: multiply the attended values by sigmoid of a projection of the input.
        dropout: attention-probability dropout, in training only.
    """

    cache_entries = CACHE_ENTRIES

    def __init__(
        self, d_model: int, n_heads: int, short_conv: int | None = 4, rotary_base: float = ROTARY_BASE,
        qk_norm: bool = True, output_gate: bool = True, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.n_heads = positive_int(owner, "n_heads", n_heads)
        if d_model % n_heads or (d_model // n_heads) % 2:
            raise ValueError(f"{owner}: d_model ({d_model}) must be n_heads ({n_heads}) times an even head width "
                             "(the rotary codes pair its halves)")
        if not rotary_base > 1:
            raise ValueError(f"{owner}: rotary_base must be > 1, got {rotary_base!r}")
        self.head_dim = d_model // n_heads
        self.conv_window = 0 if short_conv is None else positive_int(owner, "short_conv", short_conv) - 1
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        if short_conv is not None:
            self.q_conv1d, self.k_conv1d, self.v_conv1d = (
                ShortConvolution(d_model, short_conv, activation=None) for _ in range(3))
        self.q_norm = nn.RMSNorm(self.head_dim, eps=1e-6) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=1e-6) if qk_norm else None
        self.g_proj = nn.Linear(d_model, d_model, bias=False) if output_gate else None
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.attention = SoftmaxAttention(self.head_dim, dropout=dropout)
        inv_freq = rotary_base ** -(torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (D/2,)

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> SoftmaxLayerState:
        """Empty state for ``batch_size`` sequences: zero convolution inputs and an empty cache."""
        width = self.n_heads * self.head_dim
        conv = [torch.zeros(batch_size, width, self.conv_window, device=device, dtype=dtype) for _ in range(3)]
        cache = empty_kv_cache(batch_size, self.n_heads, self.head_dim, self.head_dim, device=device, dtype=dtype)
        return SoftmaxLayerState(*conv, *cache)

    def use_sequence_parallel(self, group: object) -> None:
        """Refuse a split sequence: the layer's cache and convolutions are not split across ranks."""
        if group is not None:
            raise ValueError(f"{type(self).__name__} cannot split a sequence across ranks; use layer: projections "
                             "with an attention that has supports_sequence_parallel (linear and its variants)")

    def _heads(self, x: Tensor, name: str, cache: Tensor, cu_seqlens: Tensor | None) -> tuple[Tensor, Tensor]:
        """Projection ``name`` of x (B, N, d_model), convolved from ``cache``: (B, H, N, D) and the cache after x."""
        projected = getattr(self, f"{name}_proj")(x)
        if hasattr(self, f"{name}_conv1d"):
            projected, cache = getattr(self, f"{name}_conv1d")(projected, cache, cu_seqlens)
        batch, length, _ = projected.shape
        heads = projected.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, N, D)
        norm = getattr(self, f"{name}_norm", None)
        return (heads if norm is None else norm(heads)), cache

    def _output(self, attended: Tensor, x: Tensor) -> Tensor:
        """attended (B, H, N, D) and the input x (B, N, d_model) -> (B, N, d_model)."""
        out = attended.transpose(1, 2).flatten(2)  # (B, N, H D)
        if self.g_proj is not None:
            out = out * torch.sigmoid(self.g_proj(x))
        return self.o_proj(out)

    def forward(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, state: SoftmaxLayerState | None = None,
        return_state: bool = False, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, SoftmaxLayerState | None]:
        """x (B, N, d_model) -> (out (B, N, d_model), the state after x, or None without ``return_state``).

        ``key_padding_mask`` (B, N), True = padding: padded positions enter the convolutions as zeros, take no
        position and are never attended. ``cu_seqlens`` (D + 1,): D documents packed in x (1, N, d_model), states
        of batch D.
        """
        self._check_call(x, causal, key_padding_mask, state, return_state, cu_seqlens)
        if cu_seqlens is not None:
            if state is not None or return_state:
                return self._each_document(x, state, return_state, cu_seqlens)
            return self._packed(x, cu_seqlens), None
        continued = state is not None or return_state
        state = self.init_state(x.shape[0], x.device, x.dtype) if state is None else state
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask[..., None], 0.0)
        mixed = [self._heads(x, name, cache, None) for name, cache in zip("qkv", state[:3])]
        (q, _), (k, _), (v, _) = mixed
        present = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if key_padding_mask is None \
            else ~key_padding_mask  # (B, N)
        seen = (~state.padding[:, 0, : state.length]).sum(-1, keepdim=True)  # (B, 1): real tokens cached
        positions = (seen + present.cumsum(-1) - 1)[:, None]  # (B, 1, N)
        q, k = (rotate(t, positions, self.inv_freq) for t in (q, k))  # (B, H, N, D)
        if not continued:
            attended = self.attention(q, k, v, causal=True, key_padding_mask=key_padding_mask)  # (B, H, N, D)
            return self._output(attended, x), None
        cache = KVCache(*state[3:])
        attended, cache = self.attention(q, k, v, causal=True, key_padding_mask=key_padding_mask, state=cache,
                                         return_state=True)  # (B, H, N, D)
        after = SoftmaxLayerState(*(conv for _, conv in mixed), *cache)
        return self._output(attended, x), after if return_state else None

    def _packed(self, x: Tensor, cu_seqlens: Tensor) -> Tensor:
        """Documents packed in x (1, N, d_model), none reading another, positions from 0 in each: (1, N, d_model)."""
        documents = len(cu_seqlens) - 1
        empty = self.init_state(documents, x.device, x.dtype)
        (q, _), (k, _), (v, _) = (self._heads(x, name, cache, cu_seqlens) for name, cache in zip("qkv", empty[:3]))
        positions = positions_in_documents(cu_seqlens.to(x.device), x.shape[1])  # (N,)
        q, k = (rotate(t, positions, self.inv_freq) for t in (q, k))  # (1, H, N, D)
        return self._output(self.attention(q, k, v, causal=True, cu_seqlens=cu_seqlens), x)

    def _each_document(
        self, x: Tensor, state: SoftmaxLayerState | None, return_state: bool, cu_seqlens: Tensor
    ) -> tuple[Tensor, SoftmaxLayerState | None]:
        """Each packed document alone through ``forward``: (1, N, d_model) and the documents' states (batch D)."""
        fields = tuple(name for name in SoftmaxLayerState._fields if name != "length")
        runs = [self.forward(x[:, start:stop], True, None, select_document(state, index, fields), return_state)
                for index, (start, stop) in enumerate(itertools.pairwise(cu_seqlens.tolist()))]
        out = torch.cat([part for part, _ in runs], dim=1)  # (1, N, d_model)
        joined = join_documents(type(self).__name__, [s for _, s in runs], CACHE_ENTRIES, fields) \
            if return_state else None
        return out, joined

    def step(self, x_t: Tensor, state: SoftmaxLayerState) -> tuple[Tensor, SoftmaxLayerState]:
        """x_t (B, d_model) -> (B, d_model): the causal forward of one position from ``state``."""
        out, state = self.forward(x_t[:, None], causal=True, state=state, return_state=True)
        return out[:, 0], state

    def _check_call(self, x: Tensor, causal: bool, key_padding_mask: Tensor | None, state: SoftmaxLayerState | None,
                    return_state: bool, cu_seqlens: Tensor | None) -> None:
        owner = type(self).__name__
        if not causal:
            raise ValueError(f"{owner} is causal (its positions and cache read the past only); use causal=True, or "
                             "layer: projections for a non-causal task")
        documents = x.shape[0]
        if cu_seqlens is not None:
            documents = packed_documents(owner, x, key_padding_mask, cu_seqlens)
        if state is not None:
            check_state(owner, state, self.init_state(documents, "meta", x.dtype), x.device, CACHE_ENTRIES)
