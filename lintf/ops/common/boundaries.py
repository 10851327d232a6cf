"""Checks of packed documents' boundaries (``cu_seqlens``) and per-document states, and a rank's own boundaries.

``cu_seqlens`` as in flash-attn and FLA: a 1-D int32 or int64 tensor (D + 1,) on the CPU or the inputs'
device, starting at 0, never decreasing (an empty document is two equal boundaries) and ending at N; the
inputs then hold one row (B = 1). Every check raises a ValueError saying what is wrong and what is allowed.
The values are read on the host (``tolist``): free for a CPU tensor, one synchronisation for a GPU one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

_INDEX_DTYPES = (torch.int32, torch.int64)


def check_cu_seqlens(owner: str, cu_seqlens: object, q: Tensor, length: int | None = None) -> list[int]:
    """The document boundaries as host ints, or a ValueError saying what is wrong and what is allowed.

    Args:
        owner: the op, for messages.
        cu_seqlens: the given boundaries.
        q: (1, H, N, C) the packed queries.
        length: the row's length if not N (a sequence split across ranks: the whole sequence's).
    """
    allowed = "a 1-D int32 or int64 tensor (D + 1,) of boundaries from 0 to N, never decreasing"
    if not isinstance(cu_seqlens, Tensor):
        raise ValueError(f"{owner}: cu_seqlens must be {allowed}, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in _INDEX_DTYPES or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(
            f"{owner}: cu_seqlens must be {allowed}, got dtype {cu_seqlens.dtype}, shape {tuple(cu_seqlens.shape)}"
        )
    if cu_seqlens.device.type != "cpu" and cu_seqlens.device != q.device:
        raise ValueError(
            f"{owner}: cu_seqlens must be on the CPU or on the inputs' device {q.device}, got {cu_seqlens.device}"
        )
    if q.dim() != 4 or q.shape[0] != 1:
        raise ValueError(
            f"{owner}: with cu_seqlens the documents are packed in one row: q must be (1, H, N, C), got "
            f"{tuple(q.shape)}"
        )
    bounds = [int(b) for b in cu_seqlens.tolist()]
    length = q.shape[2] if length is None else length
    if bounds[0] != 0 or bounds[-1] != length:
        raise ValueError(
            f"{owner}: cu_seqlens must start at 0 and end at N = {length}, got {bounds[0]} ... {bounds[-1]}"
        )
    drops = [i for i in range(1, len(bounds)) if bounds[i] < bounds[i - 1]]
    if drops:
        i = drops[0]
        raise ValueError(
            f"{owner}: cu_seqlens must never decrease (empty documents, equal boundaries, are allowed), got "
            f"{bounds[i - 1]} then {bounds[i]} at index {i}"
        )
    return bounds


def local_boundaries(bounds: Sequence[int], start: int, length: int) -> tuple[list[int], bool]:
    """The boundaries inside positions [start, start + length) of a packed row, counted from ``start``.

    Args:
        bounds: the row's boundaries (``check_cu_seqlens``).
        start: the first position of the part (a rank's part of a split row).
        length: the part's length.

    Returns:
        The part's boundaries from 0 to ``length`` (its first document continues one begun before ``start``
        unless the flag says otherwise) and whether a document starts at ``start``.
    """
    inside = sorted({b - start for b in bounds if start < b < start + length})
    return [0, *inside, length], start in bounds[:-1]


def check_document_states(owner: str, initial_state: object, documents: int) -> None:
    """Raise ValueError unless ``initial_state`` holds one state per document (batch D) in each of its tensors.

    The rest (heads, widths, dtype, device) the op checks on each batch of documents.
    """
    parts = [initial_state] if isinstance(initial_state, Tensor) else initial_state
    if not isinstance(parts, tuple | list) or not all(isinstance(part, Tensor) for part in parts):
        raise ValueError(
            f"{owner}: with cu_seqlens, initial_state must be the op's state with one row per document (batch D = "
            f"{documents}), got {type(initial_state).__name__}"
        )
    for part in parts:
        if part.dim() == 0 or part.shape[0] != documents:
            raise ValueError(
                f"{owner}: with cu_seqlens, initial_state holds one state per document: its batch must be D = "
                f"{documents} (cu_seqlens has D + 1 = {documents + 1} entries), got shape {tuple(part.shape)}"
            )
