"""Append-only per-sequence caches for attentions whose decoding state grows with time.

A ``KVCache`` holds keys (B, H, capacity, D), values (B, H, capacity, M), padding flags
(B, 1, capacity) and ``length``, the valid positions; ``step`` appends one position, a forward
call with a state appends its own (``extend_cache``) and attends causally to all of them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.state import KVCache


def records_graph(*tensors: Tensor) -> bool:
    """Whether autograd records ops on these tensors; caches are then rebuilt, never written in place."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def cache_append(buffer: Tensor, item: Tensor, length: int, functional: bool) -> Tensor:
    """Write ``item`` at time ``length`` of ``buffer`` (time is dim 2) and return the cache.

    Capacity grows by doubling, so decoding N tokens copies O(N) entries in total rather than
    O(N^2). Written in place (past the caller's ``length``), the previous state stays valid for
    reading but two branches must not both continue from one state (clone it to branch).
    ``functional`` rebuilds the cache instead, so gradients flow through every step and no
    tensor autograd saved is overwritten; pass ``records_graph`` of the state's tensors and the
    new ones, the same for every entry of one state.

    Args:
        buffer: (B, H|1, capacity, ...) cache; entries at and after ``length`` are unused.
        item: (B, H|1, ...) the new entry.
        length: number of valid entries in ``buffer``.
        functional: concatenate instead of writing in place.

    Returns:
        (B, H|1, capacity', ...) cache holding length + 1 valid entries.
    """
    if functional:
        return torch.cat([buffer[:, :, :length], item.unsqueeze(2)], dim=2)
    if length >= buffer.shape[2]:
        extra = buffer.new_zeros(*buffer.shape[:2], max(buffer.shape[2], 1), *buffer.shape[3:])
        buffer = torch.cat([buffer, extra], dim=2)
    buffer[:, :, length] = item
    return buffer


def append_position(state: KVCache, k_t: Tensor, v_t: Tensor) -> KVCache:
    """``state`` with one more (unpadded) position, ``k_t`` (B, H, D) and ``v_t`` (B, H, M), at ``state.length``."""
    length, dtype = state.length, state.keys.dtype
    functional = records_graph(state.keys, state.values, k_t, v_t)
    keys = cache_append(state.keys, k_t.to(dtype), length, functional)  # (B, H, capacity, D)
    values = cache_append(state.values, v_t.to(dtype), length, functional)  # (B, H, capacity, M)
    not_padded = torch.zeros(k_t.shape[0], 1, dtype=torch.bool, device=k_t.device)  # (B, 1)
    return KVCache(keys, values, cache_append(state.padding, not_padded, length, functional), length + 1)


def empty_kv_cache(batch_size: int, n_heads: int, head_dim: int, value_dim: int, device, dtype: torch.dtype) -> KVCache:
    """A ``KVCache`` of no position, with space for a few."""
    return KVCache(empty_cache(batch_size, n_heads, head_dim, device=device, dtype=dtype),
                   empty_cache(batch_size, n_heads, value_dim, device=device, dtype=dtype),
                   empty_padding_cache(batch_size, device), 0)


def empty_cache(batch_size: int, n_heads: int, *entry_shape: int, device, dtype: torch.dtype) -> Tensor:
    """A cache with space for a few entries of shape ``entry_shape``: (B, H, capacity, *entry_shape)."""
    return torch.zeros(batch_size, n_heads, 16, *entry_shape, device=device, dtype=dtype)


def empty_padding_cache(batch_size: int, device) -> Tensor:
    """Padding flags for ``empty_cache``: (B, 1, capacity) bool, True marks a key never to attend."""
    return torch.zeros(batch_size, 1, 16, dtype=torch.bool, device=device)


def extend_cache(
    state: KVCache | None, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, dtype: torch.dtype
) -> KVCache:
    """The cached keys, values and padding flags followed by a forward call's own.

    Args:
        state: a cache, or None for an empty prefix.
        k: (B, H, N, D) the call's keys.
        v: (B, H, N, M) the call's values.
        key_padding_mask: (B, N) bool, True for the call's padded keys; None: none is padded.
        dtype: the cache's dtype (that of ``state``).

    Returns:
        the cache of L+N positions: keys (B, H, L+N, D), values (B, H, L+N, M), padding (B, 1, L+N),
        with L the positions cached before the call. Built by concatenation, so gradients reach the
        cached entries.
    """
    padding = torch.zeros(k.shape[0], 1, k.shape[2], dtype=torch.bool, device=k.device)  # (B, 1, N)
    if key_padding_mask is not None:
        padding = key_padding_mask[:, None, :]
    keys, values = k.to(dtype), v.to(dtype)
    if state is None:
        return KVCache(keys, values, padding, k.shape[2])
    length = state.length
    keys = torch.cat([state.keys[:, :, :length], keys], dim=2)  # (B, H, L+N, D)
    values = torch.cat([state.values[:, :, :length], values], dim=2)  # (B, H, L+N, M)
    padding = torch.cat([state.padding[:, :, :length], padding], dim=2)  # (B, 1, L+N)
    return KVCache(keys, values, padding, length + k.shape[2])


def causal_visibility(padding: Tensor, n_queries: int) -> Tensor:
    """(B, 1, N, L+N) bool: the call's query i (position L+i) sees keys 0..L+i that are not padded.

    Args:
        padding: (B, 1, L+N) padding flags of the cached and the call's keys (``extend_cache``).
        n_queries: N, the call's queries, which are the last N positions.
    """
    total = padding.shape[-1]
    key_positions = torch.arange(total, device=padding.device)
    query_positions = torch.arange(total - n_queries, total, device=padding.device)
    causal = key_positions[None, :] <= query_positions[:, None]  # (N, L+N)
    return causal & ~padding[:, :, None, :]  # (B, 1, N, L+N)
