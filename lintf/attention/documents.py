"""Packed documents: sequences laid end to end in one row, their boundaries given as ``cu_seqlens``.

``cu_seqlens`` follows flash-attn and flash-linear-attention: a 1-D integer tensor (D + 1,) of the
document boundaries of a row of N positions, rising strictly from 0 to N; document d holds positions
``cu_seqlens[d] .. cu_seqlens[d + 1] - 1``. A state of packed documents has one batch entry per
document (batch D), in the order of the documents.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lintf.attention.state import State

INTEGER_DTYPES = (torch.int32, torch.int64)


def check_cu_seqlens(owner: str, cu_seqlens: object, length: int) -> list[int]:
    """The boundaries as a list, or a ValueError saying what ``cu_seqlens`` must be.

    Args:
        owner: name used in messages.
        cu_seqlens: the boundaries given.
        length: N, the positions of the packed row.
    """
    if (not isinstance(cu_seqlens, Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.dtype not in INTEGER_DTYPES
            or cu_seqlens.numel() < 2):
        got = (f"shape {tuple(cu_seqlens.shape)}, dtype {cu_seqlens.dtype}" if isinstance(cu_seqlens, Tensor)
               else type(cu_seqlens).__name__)
        raise ValueError(f"{owner}: cu_seqlens must be a 1-D int32/int64 tensor (D + 1,) of document boundaries "
                         f"from 0 to N, got {got}")
    bounds = [int(b) for b in cu_seqlens.tolist()]
    if bounds[0] != 0 or bounds[-1] != length or any(stop <= start for start, stop in itertools.pairwise(bounds)):
        raise ValueError(f"{owner}: cu_seqlens must rise strictly from 0 to N = {length} (each document holds at "
                         f"least one position), got {bounds}")
    return bounds


def count_documents(owner: str, key_padding_mask: Tensor | None, cu_seqlens: object, length: int) -> int:
    """The number of documents D of a packed row of ``length`` positions, or a ValueError: a packed row has no
    padding, and ``cu_seqlens`` must pass ``check_cu_seqlens``."""
    if key_padding_mask is not None:
        raise ValueError(f"{owner}: a packed row (cu_seqlens) has no padding; pass key_padding_mask=None or no "
                         "cu_seqlens")
    return len(check_cu_seqlens(owner, cu_seqlens, length)) - 1


def check_packed_call(owner: str, q: Tensor, k: Tensor, key_padding_mask: Tensor | None, cu_seqlens: object) -> int:
    """The number of documents D of a packed attention call, or a ValueError saying what was wrong.

    Args:
        owner: name used in messages.
        q: (1, H, N, D) queries.
        k: (1, H, N, D) keys.
        key_padding_mask: must be None: a packed row has no padding.
        cu_seqlens: the boundaries given.
    """
    if q.shape[0] != 1 or q.shape[2] != k.shape[2]:
        raise ValueError(f"{owner}: packed documents (cu_seqlens) are one row of N positions: q, k, v must be "
                         f"(1, H, N, D|M), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    return count_documents(owner, key_padding_mask, cu_seqlens, q.shape[2])


def per_sequence_fields(init_state: Callable[..., State], heads: int, value_dim: int, dtype: torch.dtype
                        ) -> tuple[str, ...]:
    """The fields of ``init_state``'s state with one entry per sequence along dim 0 (others, e.g. centroids, shared).

    Args:
        init_state: an attention's ``init_state``.
        heads: H.
        value_dim: M.
        dtype: the inputs' dtype.
    """
    one, two = (init_state(size, heads, value_dim, device="meta", dtype=dtype) for size in (1, 2))
    return tuple(key for key, a, b in zip(one._fields, one, two)
                 if isinstance(a, Tensor) and a.dim() > 0 and (a.shape[0], b.shape[0]) == (1, 2))


def document_ids(cu_seqlens: Tensor, length: int) -> Tensor:
    """(N,) int64: the document of each position of the packed row."""
    positions = torch.arange(length, device=cu_seqlens.device)
    return torch.searchsorted(cu_seqlens.to(torch.int64), positions, right=True) - 1


def positions_in_documents(cu_seqlens: Tensor, length: int) -> Tensor:
    """(N,) int64: each position's offset from the start of its document (0 at every document start)."""
    positions = torch.arange(length, device=cu_seqlens.device)
    return positions - cu_seqlens.to(torch.int64)[document_ids(cu_seqlens, length)]


def document_starts(cu_seqlens: Tensor, length: int) -> Tensor:
    """(N,) bool: True at the first position of each document."""
    return positions_in_documents(cu_seqlens, length) == 0


def same_document(cu_seqlens: Tensor, length: int, causal: bool) -> Tensor:
    """(N, N) bool: True where query i and key j are of one document (and j <= i if ``causal``)."""
    ids = document_ids(cu_seqlens, length)
    visible = ids[:, None] == ids[None, :]
    return visible.tril() if causal else visible


def document_chunks(bounds: list[int], size: int) -> list[tuple[int, int]]:
    """Consecutive documents grouped into chunks of at most ``size`` positions (or one longer document each).

    Args:
        bounds: the D + 1 document boundaries, from 0 to N.
        size: the most positions a chunk of several documents holds.

    Returns:
        (start, stop) of each chunk, in order, covering 0..N.
    """
    chunks, start = [], 0
    for stop, after in zip(bounds[1:], bounds[2:] + [None]):
        if after is None or after - start > size:
            chunks.append((start, stop))
            start = stop
    return chunks


def select_document(state: State | None, index: int, per_sequence: tuple[str, ...]) -> State | None:
    """Document ``index``'s entry of a packed state; None stays None.

    Args:
        state: the packed state (batch D).
        index: the document.
        per_sequence: the fields with one entry per sequence along dim 0; the others are shared.
    """
    if state is None:
        return None
    return type(state)(*(value[index : index + 1] if key in per_sequence else value
                         for key, value in zip(state._fields, state)))


def join_documents(
    owner: str, states: Sequence[State], cache_entries: tuple[str, ...], per_sequence: tuple[str, ...]
) -> State:
    """The packed state (batch D) of the documents' states (batch 1 each), in order.

    Args:
        owner: name used in messages.
        states: each document's state.
        cache_entries: fields growing along dim 2 (caches), cut to the shortest capacity.
        per_sequence: fields with one entry per sequence along dim 0, concatenated; the others are shared.

    Raises:
        ValueError: for cache states that hold different numbers of positions, which one state of one
            ``length`` cannot hold.
    """
    first = states[0]
    fields: list[object] = []
    for key, value in zip(first._fields, first):
        values = [getattr(state, key) for state in states]
        if key not in per_sequence and (isinstance(value, Tensor) or len(set(values)) == 1):
            fields.append(value)
        elif isinstance(value, Tensor):
            if key in cache_entries:
                length = min(v.shape[2] for v in values)
                values = [v[:, :, :length] for v in values]
            fields.append(torch.cat(values, dim=0))
        else:
            raise ValueError(f"{owner}: the documents' states differ in {key} ({values}); a packed state of this "
                             "attention (a cache of past keys) needs documents of equal length. Run the documents "
                             "as a batch, or use an attention with a fixed-size state")
    return type(first)(*fields)
