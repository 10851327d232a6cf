"""Append-only per-sequence caches for attentions whose decoding state grows with time."""

from __future__ import annotations

import torch
from torch import Tensor


def cache_append(buffer: Tensor, item: Tensor, length: int) -> Tensor:
    """Write ``item`` at time ``length`` of ``buffer`` (time is dim 2) and return the cache.

    Capacity grows by doubling, so decoding N tokens copies O(N) entries in total rather than
    O(N^2). Without autograd the write is in place past the caller's ``length``, which leaves
    the previous state valid for reading but means two branches must not both continue from
    one state (clone it to branch). With autograd recording, the cache is rebuilt functionally
    so gradients flow through every step.

    Args:
        buffer: (B, H, capacity, ...) cache; entries at and after ``length`` are unused.
        item: (B, H, ...) the new entry.
        length: number of valid entries in ``buffer``.

    Returns:
        (B, H, capacity', ...) cache holding length + 1 valid entries.
    """
    if torch.is_grad_enabled() and (item.requires_grad or buffer.requires_grad):
        return torch.cat([buffer[:, :, :length], item.unsqueeze(2)], dim=2)
    if length >= buffer.shape[2]:
        extra = buffer.new_zeros(*buffer.shape[:2], max(buffer.shape[2], 1), *buffer.shape[3:])
        buffer = torch.cat([buffer, extra], dim=2)
    buffer[:, :, length] = item
    return buffer


def empty_cache(batch_size: int, n_heads: int, *entry_shape: int, device, dtype: torch.dtype) -> Tensor:
    """A cache with room for a few entries of shape ``entry_shape``: (B, H, capacity, *entry_shape)."""
    return torch.zeros(batch_size, n_heads, 16, *entry_shape, device=device, dtype=dtype)
