"""What every layer recipe shares: projections, short convolutions, the op's heads, the output norm, the state.

For each position x_t (d_model), with q, k, v heads of widths Dk, Dk, Dv (fewer q/k heads than value
heads, or fewer k/v heads than query heads, are repeated to the op's heads H: grouped heads):

    q, k, v = act(conv(W_q x)), act(conv(W_k x)), act(conv(W_v x))   (causal depthwise, K positions; optional)
    o       = the subclass's recurrence over (q, k, v) and its gates read from x      (B, H, N, Dv)
    y_t     = W_o [RMSNorm(o_t) * w (* silu(W_g x_t) with an output gate)]

as the layers of flash-linear-attention (``fla/layers``). The layer is causal; its state is the
convolutions' last K - 1 inputs and the op's memory (B, H, Dk, Dv).

Packed documents (``forward(..., cu_seqlens=c)``, x (1, N, d_model)): no convolution or memory reads
across a document start, and states hold one entry per document (batch D). A recipe whose
``recurrence`` takes ``cu_seqlens`` sets ``supports_packed = True``; otherwise each document runs alone.
"""

from __future__ import annotations

import itertools
from typing import ClassVar, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lintf.attention.documents import count_documents, join_documents, select_document
from lintf.attention.state import check_state
from lintf.layers.gated_rms_norm import GatedRMSNorm
from lintf.layers.short_conv import ShortConvolution
from lintf.ops import accumulation_dtype

Activation = Literal["silu"] | None


class RecipeState(NamedTuple):
    """A layer recipe's decoding state.

    Args:
        q_conv: (B, q width, K - 1) the last inputs of the query convolution (K = 1 without one).
        k_conv: (B, k width, K - 1) the same for the keys.
        v_conv: (B, v width, K - 1) the same for the values.
        memory: (B, H, Dk, Dv) the op's state, in the accumulation dtype.
    """

    q_conv: Tensor
    k_conv: Tensor
    v_conv: Tensor
    memory: Tensor


FEATURE_MAPS = {"relu": F.relu, "silu": F.silu}  # of q and k after the convolution, or None


def positive_int(owner: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {key} must be a positive int, got {value!r}")
    return value


def width(owner: str, key: str, base: int, expand: float) -> int:
    """``base * expand`` if it is a positive whole number; ValueError otherwise."""
    size = base * expand
    if not expand > 0 or size != int(size):
        raise ValueError(f"{owner}: {key}={expand!r} times {base} must give a positive whole width, got {size}")
    return int(size)


def head_widths(owner: str, d_model: int, n_heads: int, expand_k: float, expand_v: float,
                n_kv_heads: int | None) -> tuple[int, int, int]:
    """(key head width, value head width, key/value heads) of ``n_heads`` query heads over d_model * expand_k
    key and d_model * expand_v value features, grouped over ``n_kv_heads`` key/value heads (None: as many);
    ValueError unless the widths split evenly."""
    key_width = width(owner, "expand_k", d_model, expand_k)
    value_width = width(owner, "expand_v", d_model, expand_v)
    kv_heads = n_heads if n_kv_heads is None else positive_int(owner, "n_kv_heads", n_kv_heads)
    if key_width % n_heads or value_width % n_heads or n_heads % kv_heads:
        raise ValueError(f"{owner}: key width {key_width} and value width {value_width} must be multiples of "
                         f"n_heads ({n_heads}), a multiple of n_kv_heads ({kv_heads})")
    return key_width // n_heads, value_width // n_heads, kv_heads


def check_feature_map(owner: str, feature_map: str | None) -> None:
    """ValueError unless ``feature_map`` is one of FEATURE_MAPS or None."""
    if feature_map is not None and feature_map not in FEATURE_MAPS:
        raise ValueError(f"{owner}: feature_map must be one of {', '.join(FEATURE_MAPS)} or null, got {feature_map!r}")


def packed_documents(owner: str, x: Tensor, key_padding_mask: Tensor | None, cu_seqlens: Tensor) -> int:
    """The number of documents D of a layer's packed call (x (1, N, d_model)), or a ValueError saying what was wrong."""
    if x.dim() != 3 or x.shape[0] != 1:
        raise ValueError(f"{owner}: packed documents (cu_seqlens) are one row: x must be (1, N, d_model), got "
                         f"{tuple(x.shape)}")
    return count_documents(owner, key_padding_mask, cu_seqlens, x.shape[1])

class RecipeLayer(nn.Module):
    """The shared frame of the layer recipes; a subclass adds its gates and runs its op in ``recurrence``.

    Args:
        d_model: model width, read and written.
        heads: query, key and value heads; each divides the largest, H, the op's heads.
        key_dim: Dk, each query/key head's width.
        value_dim: Dv, each value head's width.
        short_conv: K, the short convolution's kernel size; None: no convolution.
        conv_bias: a bias in the short convolutions.
        activations: "silu" or None for q, k and v, after their convolutions (or in their place without one).
        output_gate: gate the output RMSNorm by silu of a projection of the input.
        norm_eps: the output RMSNorm's epsilon.
    """

    supports_packed: ClassVar[bool] = False
    """True if ``recurrence`` takes ``cu_seqlens`` (packed documents); otherwise each document runs alone."""

    def __init__(
        self, d_model: int, heads: tuple[int, int, int], key_dim: int, value_dim: int, short_conv: int | None,
        conv_bias: bool, activations: tuple[Activation, Activation, Activation], output_gate: bool, norm_eps: float,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.heads = tuple(positive_int(owner, "heads", count) for count in heads)
        self.op_heads = max(self.heads)
        if any(self.op_heads % count for count in self.heads):
            raise ValueError(f"{owner}: the query, key and value heads {self.heads} must each divide the largest")
        self.key_dim, self.value_dim, self.activations = key_dim, value_dim, activations
        self.widths = (self.heads[0] * key_dim, self.heads[1] * key_dim, self.heads[2] * value_dim)
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, size, bias=False) for size in self.widths)
        self.conv_window = 0 if short_conv is None else positive_int(owner, "short_conv", short_conv) - 1
        if short_conv is not None:
            self.q_conv1d, self.k_conv1d, self.v_conv1d = (
                ShortConvolution(size, short_conv, conv_bias, activation=act) for size, act in zip(self.widths,
                                                                                                 activations))
        self.g_proj = nn.Linear(d_model, self.op_heads * value_dim, bias=False) if output_gate else None
        self.o_norm = GatedRMSNorm(value_dim, eps=norm_eps)
        self.o_proj = nn.Linear(self.op_heads * value_dim, d_model, bias=False)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, memory: Tensor,
                   padding: Tensor | None) -> tuple[Tensor, Tensor]:
        """q, k (B, H, N, Dk), v (B, H, N, Dv), the input x (B, N, d_model), the memory before (B, H, Dk, Dv)
        and the padding (B, N) or None -> (out (B, H, N, Dv), the memory after); padded positions write nothing.

        With ``supports_packed`` it also takes ``cu_seqlens``: documents packed in one row, a memory per document."""
        raise NotImplementedError

    def use_sequence_parallel(self, group: object) -> None:
        """Refuse a split sequence: the layer's convolutions and gates are not split across ranks."""
        if group is not None:
            raise ValueError(f"{type(self).__name__} cannot split a sequence across ranks; use layer: projections "
                             "with an attention that has supports_sequence_parallel (linear and its variants)")

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> RecipeState:
        """Empty state for ``batch_size`` sequences: zero convolution inputs and memory."""
        conv = [torch.zeros(batch_size, size, self.conv_window, device=device, dtype=dtype) for size in self.widths]
        memory = torch.zeros(batch_size, self.op_heads, self.key_dim, self.value_dim, device=device,
                             dtype=accumulation_dtype(dtype))
        return RecipeState(*conv, memory)

    def _mix(self, x: Tensor, name: str, cache: Tensor, cu_seqlens: Tensor | None) -> tuple[Tensor, Tensor]:
        """Projection ``name`` of x (B, N, d_model), convolved from ``cache``: (B, N, C) and the cache after x."""
        projected = getattr(self, f"{name}_proj")(x)
        if hasattr(self, f"{name}_conv1d"):
            return getattr(self, f"{name}_conv1d")(projected, cache, cu_seqlens)
        activation = self.activations["qkv".index(name)]
        return (F.silu(projected) if activation == "silu" else projected), cache

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        grouped = x.view(batch, length, heads, -1).transpose(1, 2)  # (B, heads, N, width)
        return grouped.repeat_interleave(self.op_heads // heads, dim=1)  # (B, H, N, width)

    def forward(
        self, x: Tensor, causal: bool, key_padding_mask: Tensor | None = None, state: RecipeState | None = None,
        return_state: bool = False, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, RecipeState | None]:
        """x (B, N, d_model) -> (out (B, N, d_model), the state after x, or None without ``return_state``).

        ``key_padding_mask`` (B, N), True = padding: padded positions enter the convolutions as zeros and
        write nothing to the memory, so padding before or after a sequence leaves its outputs unchanged.
        ``cu_seqlens`` (D + 1,): D documents packed in x (1, N, d_model), states of batch D (module docstring).
        """
        documents = 1 if cu_seqlens is None else packed_documents(type(self).__name__, x, key_padding_mask, cu_seqlens)
        self._check_call(x, causal, key_padding_mask, state, return_state, documents)
        if cu_seqlens is not None and not self.supports_packed:
            return self._each_document(x, state, return_state, cu_seqlens)
        state = self.init_state(documents if cu_seqlens is not None else x.shape[0], x.device, x.dtype) \
            if state is None else state
        if key_padding_mask is not None:
            x = x.masked_fill(key_padding_mask[..., None], 0.0)
        mixed = [self._mix(x, name, cache, cu_seqlens) for name, cache in zip("qkv", state[:3])]
        q, k, v = (self._heads(t, heads) for (t, _), heads in zip(mixed, self.heads))
        if cu_seqlens is None:
            out, memory = self.recurrence(q, k, v, x, state.memory, key_padding_mask)  # (B, H, N, Dv)
        else:
            out, memory = self.recurrence(q, k, v, x, state.memory, None, cu_seqlens=cu_seqlens)  # (1, H, N, Dv)
        out = out.transpose(1, 2)  # (B, N, H, Dv)
        gate = None if self.g_proj is None else self.g_proj(x).view(out.shape)
        out = self.o_proj(self.o_norm(out, gate).flatten(2))  # (B, N, d_model)
        return out, RecipeState(*(cache for _, cache in mixed), memory) if return_state else None

    def _each_document(
        self, x: Tensor, state: RecipeState | None, return_state: bool, cu_seqlens: Tensor
    ) -> tuple[Tensor, RecipeState | None]:
        """Each packed document alone through ``forward``: (1, N, d_model) and the documents' states (batch D)."""
        bounds, fields = cu_seqlens.tolist(), RecipeState._fields
        runs = [self.forward(x[:, start:stop], True, None, select_document(state, index, fields), return_state)
                for index, (start, stop) in enumerate(itertools.pairwise(bounds))]
        out = torch.cat([part for part, _ in runs], dim=1)  # (1, N, d_model)
        joined = join_documents(type(self).__name__, [s for _, s in runs], (), fields) if return_state else None
        return out, joined

    def step(self, x_t: Tensor, state: RecipeState) -> tuple[Tensor, RecipeState]:
        """x_t (B, d_model) -> (B, d_model): the causal forward of one position from ``state``."""
        out, state = self.forward(x_t[:, None], causal=True, state=state, return_state=True)
        return out[:, 0], state

    def _check_call(self, x: Tensor, causal: bool, key_padding_mask: Tensor | None, state: RecipeState | None,
                    return_state: bool, documents: int = 1) -> None:
        owner = type(self).__name__
        if not causal:
            raise ValueError(f"{owner} is causal (its convolutions and memory read the past only); use causal=True, "
                             "or layer: projections for a non-causal task")
        if key_padding_mask is not None and (state is not None or return_state):
            raise ValueError(f"{owner}: a key_padding_mask with a state is not supported (padding inside a "
                             "continued sequence would shift its convolutions); pass one or the other")
        if state is not None:
            expected = self.init_state(max(x.shape[0], documents), "meta", x.dtype)  # packed: one per document
            check_state(owner, state, expected, x.device, ())
