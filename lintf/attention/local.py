"""Local (sliding-window) attention: softmax over the keys within ``window`` positions of each query."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.documents import document_ids
from lintf.attention.masking import masked_softmax
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


def band(window: int, causal: bool, device: torch.device) -> Tensor:
    """Bool (w, 3w): query r of a block may see key t of the (previous, own, next) blocks around it."""
    offset = torch.arange(3 * window, device=device)[None, :] - window - torch.arange(window, device=device)[:, None]
    if causal:
        return (offset <= 0) & (offset > -window)  # keys i - w + 1 .. i
    return offset.abs() < window  # keys i - w + 1 .. i + w - 1


class LocalWindow(NamedTuple):
    """The last ``window`` keys and values of a sequence, oldest first.

    Args:
        keys: (B, H, w, D).
        values: (B, H, w, M).
        padding: (B, 1, w) bool, True for a padded key or a slot before the sequence's start.
    """

    keys: Tensor
    values: Tensor
    padding: Tensor


@register_attention("local")
class LocalAttention(Attention):
    """Softmax attention restricted to a window: query i sees keys j with |i - j| < window.

    Causal: keys i - window + 1 .. i (``window`` keys including itself). Positions index q and k
    separately, so cross-attention with N != S compares query i with key j by index. ``forward``
    costs O(N w): queries in blocks of w attend to the keys of the previous, own and next block.
    The state is the last ``window`` keys and values, oldest first, with a padding flag per slot
    (slots before the sequence's start count as padding), so it is O(w) memory. A padded key still
    takes its position in the window. ``step`` equals the causal forward. Packed documents
    (``cu_seqlens``) hide the keys of other documents inside each block's band; with a state, one
    document at a time.

    Args:
        head_dim: D.
        window: w, the window size in positions.
        scale: logit scale; None uses 1/sqrt(D).
    """

    supports_packed = True

    def __init__(self, head_dim: int, window: int = 32, scale: float | None = None) -> None:
        super().__init__(head_dim)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"local: window must be a positive int, got {window!r}")
        self.window = window
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool, cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, State | None]:
        if cu_seqlens is not None and (state is not None or return_state):  # each document's window is its own
            return self.attend_documents(q, k, v, causal, state, return_state, cu_seqlens)
        batch, heads, _, _ = q.shape
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):
            q, k, values = q.to(acc), k.to(acc), v.to(acc)
            padding = key_padding_mask
            if padding is None:
                padding = torch.zeros(batch, k.shape[2], dtype=torch.bool, device=k.device)  # (B, S)
            if state is None and not return_state:
                documents = None  # (1, N) each position's document when packed
                if cu_seqlens is not None:
                    documents = document_ids(cu_seqlens.to(q.device), q.shape[2])[None]
                return self.banded(q, k, values, padding, causal, documents).to(v.dtype), None
            w = self.window
            window = state if state is not None else self.init_state(batch, heads, v.shape[3], q.device, v.dtype)
            keys = torch.cat([window.keys, k], dim=2)  # (B, H, w+N, D)
            values = torch.cat([window.values, values], dim=2)  # (B, H, w+N, M)
            padding = torch.cat([window.padding[:, 0], padding], dim=1)  # (B, w+N)
            # w placeholder queries in front put query i at position w + i, after the w window slots
            out = self.banded(F.pad(q, (0, 0, w, 0)), keys, values, padding, causal=True)[:, :, w:]
        new_state = LocalWindow(keys[:, :, -w:], values[:, :, -w:], padding[:, None, -w:])
        return out.to(v.dtype), new_state if return_state else None

    def banded(
        self, q: Tensor, k: Tensor, v: Tensor, padding: Tensor, causal: bool, documents: Tensor | None = None
    ) -> Tensor:
        """Windowed softmax attention in blocks of w queries.

        Args:
            q: (B, H, N, D) queries, in the accumulation dtype.
            k: (B, H, S, D) keys.
            v: (B, H, S, M) values.
            padding: (B, S) bool, True for padded keys.
            causal: keys i - w + 1 .. i, or i - w + 1 .. i + w - 1.
            documents: (B, N) int, the document of each position (N == S), or None: one sequence per row.

        Returns:
            (B, H, N, M).
        """
        batch, heads, n_queries, dim = q.shape
        n_keys, value_dim, w = k.shape[2], v.shape[3], self.window
        n_blocks = math.ceil(n_queries / w)
        behind = n_blocks * w + w - n_keys  # block b sees padded keys [b w, b w + 3 w); negative crops
        queries = F.pad(q, (0, 0, 0, n_blocks * w - n_queries)).reshape(batch, heads, n_blocks, w, dim)
        keys = F.pad(k, (0, 0, w, behind)).unfold(2, 3 * w, w)  # (B, H, nb, D, 3w)
        values = F.pad(v, (0, 0, w, behind)).unfold(2, 3 * w, w)  # (B, H, nb, M, 3w)
        # positions outside 0..S-1 count as padding
        hidden = F.pad(padding.to(q.dtype), (w, behind), value=1.0).unfold(1, 3 * w, w) > 0  # (B, nb, 3w)
        visible = band(w, causal, q.device) & ~hidden[:, None, :, None, :]  # (B, 1, nb, w, 3w)
        if documents is not None:  # a key of another document is hidden
            query_docs = F.pad(documents, (0, n_blocks * w - n_queries), value=-1).view(batch, n_blocks, w)
            key_docs = F.pad(documents, (w, behind), value=-1).unfold(1, 3 * w, w)  # (B, nb, 3w)
            visible = visible & (query_docs[..., None] == key_docs[:, :, None, :])[:, None]  # (B, 1, nb, w, 3w)
        logits = (queries @ keys) * self.scale  # (B, H, nb, w, 3w)
        out = masked_softmax(logits, visible) @ values.transpose(-1, -2)  # (B, H, nb, w, M)
        return out.reshape(batch, heads, n_blocks * w, value_dim)[:, :, :n_queries]

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> LocalWindow:
        acc = accumulation_dtype(dtype)
        return LocalWindow(
            torch.zeros(batch_size, n_heads, self.window, self.head_dim, device=device, dtype=acc),
            torch.zeros(batch_size, n_heads, self.window, value_dim, device=device, dtype=acc),
            torch.ones(batch_size, 1, self.window, dtype=torch.bool, device=device),  # no key yet
        )

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: LocalWindow) -> tuple[Tensor, LocalWindow]:
        acc = state.keys.dtype
        with torch.autocast(q_t.device.type, enabled=False):
            # oldest first: drop the oldest slot, append the newest
            keys = torch.cat([state.keys[:, :, 1:], k_t.to(acc).unsqueeze(2)], dim=2)  # (B, H, w, D)
            values = torch.cat([state.values[:, :, 1:], v_t.to(acc).unsqueeze(2)], dim=2)  # (B, H, w, M)
            newest = torch.zeros(k_t.shape[0], 1, 1, dtype=torch.bool, device=k_t.device)
            padding = torch.cat([state.padding[:, :, 1:], newest], dim=2)  # (B, 1, w)
            logits = (keys @ q_t.to(acc).unsqueeze(-1)).squeeze(-1) * self.scale  # (B, H, w)
            out = (masked_softmax(logits, ~padding).unsqueeze(-2) @ values).squeeze(-2)  # (B, H, M)
        return out.to(v_t.dtype), LocalWindow(keys, values, padding)
