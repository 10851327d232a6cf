"""Softmax attention of groups of queries over keys chosen by position: the block-sparse building block.

A sparse pattern is one or more *parts*; a part cuts the queries into groups (a block of
consecutive positions, every L-th position, ...) and names, per group, the key positions its
queries may attend. The keys of each group are gathered, (B, H, G, K, D), and scored against the
group's queries only, so memory is O(N K) for K keys per query and no N x S score matrix is
formed. Each part returns its unnormalised softmax sums; ``merge`` combines the parts of a
query exactly (a softmax over the union of their keys), so a pattern may join a banded part and
a strided part whose groups differ. A key must not appear twice among one query's parts.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Grid(NamedTuple):
    """A call's query positions laid out as ``p = (block * size + slot) * stride + residue``.

    Args:
        queries: (G, Lq) long, each slot's index among the call's queries, -1 for a slot outside the call.
        positions: (G, Lq) long, each slot's absolute position (outside the call too).
        residue: (G,) long, the group's ``p mod stride``.
        block: (G,) long, the group's block ``(p // stride) // size`` (0 when the blocks are whole columns).
    """

    queries: Tensor
    positions: Tensor
    residue: Tensor
    block: Tensor


class KeyGroups(NamedTuple):
    """One part of a pattern: groups of queries and the key positions each group attends.

    Args:
        queries: (G, Lq) long, index of each slot's query in the call, -1 for an empty slot; a
            query lies in at most one group of a part.
        keys: (Hg, G, K) long absolute key positions, -1 (or any position outside 0..S-1) for
            none; Hg is 1 (every head alike) or the heads the part covers.
        allowed: bool broadcastable to (Hg, G, Lq, K), the pattern's own condition on a (query,
            key) pair; causality, bounds and padding are added by ``visible_pairs``. None: all.
        heads: the heads the part covers (a part covering other heads completes them).
    """

    queries: Tensor
    keys: Tensor
    allowed: Tensor | None = None
    heads: slice = slice(None)


class PartialSoftmax(NamedTuple):
    """Softmax sums of one part, per query: ``sum_j exp(s_j - shift) v_j`` and ``sum_j exp(s_j - shift)``.

    Args:
        numerator: (B, Hs, N, M).
        denominator: (B, Hs, N), 0 where the part shows the query no key.
        shift: (B, Hs, N), the largest score of the query's keys (a constant for stability).
    """

    numerator: Tensor
    denominator: Tensor
    shift: Tensor


def grid_groups(start: int, n_queries: int, stride: int, size: int | None, device: torch.device) -> Grid:
    """Group the positions start..start+N-1 by residue mod ``stride`` and block of ``size`` rows.

    ``stride = 1`` gives blocks of ``size`` consecutive positions; ``size = None`` gives one group
    per residue (every ``stride``-th position). Slots run over the rows the call touches, so a
    short call (one decoding step) makes one small group.

    Args:
        start: absolute position of the call's first query.
        n_queries: N > 0.
        stride: positions between two rows of a group.
        size: rows per block; None: one block per residue.
        device: where the index tensors live.
    """
    positions = torch.arange(start, start + n_queries, device=device)
    residue, row = positions % stride, positions // stride
    block, slot = (torch.zeros_like(row), row) if size is None else (row // size, row % size)
    groups, group_of = torch.unique(block * stride + residue, return_inverse=True)  # (G,), (N,)
    first, last = int(slot.min()), int(slot.max())
    queries = torch.full((len(groups), last - first + 1), -1, dtype=torch.long, device=device)
    queries[group_of, slot - first] = torch.arange(n_queries, device=device)
    group_residue, group_block = groups % stride, groups // stride
    rows = torch.arange(first, last + 1, device=device) + (0 if size is None else group_block[:, None] * size)
    return Grid(queries, rows * stride + group_residue[:, None], group_residue, group_block)


def visible_pairs(
    groups: KeyGroups, start: int, n_keys: int, causal: bool, padding: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Which (query slot, key) pairs of a part are attended, and the key positions clamped to 0..S-1.

    Args:
        groups: the part.
        start: absolute position of the call's first query.
        n_keys: S, the keys that exist (positions 0..S-1).
        causal: a key after its query is hidden.
        padding: (B, S') bool, True for a padded key (S' >= S); None: none is.

    Returns:
        visible (B|1, Hg, G, Lq, K) bool and the clamped positions (Hg, G, K).
    """
    keys, queries = groups.keys, groups.queries
    visible = ((keys >= 0) & (keys < n_keys))[:, :, None, :] & (queries >= 0)[None, :, :, None]  # (Hg, G, Lq, K)
    clamped = keys.clamp(0, max(n_keys - 1, 0))
    if causal:
        visible = visible & (keys[:, :, None, :] <= start + queries[None, :, :, None])
    if groups.allowed is not None:
        visible = visible & groups.allowed
    if padding is None:
        return visible[None], clamped
    padded = padding.index_select(1, clamped.flatten()).view(len(padding), *clamped.shape)  # (B, Hg, G, K)
    return visible & ~padded[:, :, :, None, :], clamped  # (B, Hg, G, Lq, K)


def gather_positions(x: Tensor, positions: Tensor) -> Tensor:
    """x (B, H, S, F) at positions (Hg, G, K) -> (B, H, G, K, F); Hg is 1 or H.

    ``index_select`` on one flattened dimension: advanced indexing with several index tensors is
    far slower on the CPU, forward and backward.
    """
    batch, heads, n_keys, features = x.shape
    if positions.shape[0] == 1:
        return x.index_select(2, positions.flatten()).view(batch, heads, *positions.shape[1:], features)
    per_head = positions + torch.arange(heads, device=x.device)[:, None, None] * n_keys  # (H, G, K) into H * S rows
    rows = x.reshape(batch, heads * n_keys, features).index_select(1, per_head.flatten())
    return rows.view(batch, *positions.shape, features)


def attend_key_groups(
    q: Tensor, k: Tensor, v: Tensor, groups: KeyGroups, *, start: int, n_keys: int, causal: bool,
    padding: Tensor | None, scale: float,
) -> PartialSoftmax:
    """The softmax sums of one part for every query of the call (zeros for a query outside it).

    Args:
        q: (B, Hs, N, D) the call's queries, of the part's heads.
        k: (B, Hs, S', D) keys by absolute position (a cache may hold S' > S rows).
        v: (B, Hs, S', M) values.
        groups: the part.
        start: absolute position of the call's first query.
        n_keys: S, the keys that exist.
        causal: hide keys after their query.
        padding: (B, S') bool, True for a padded key; None: none is.
        scale: logit scale.
    """
    batch, heads, n_queries, _ = q.shape
    if n_keys == 0 or groups.keys.shape[-1] == 0:  # no key exists, or the part names none: it shows nothing
        return PartialSoftmax(v.new_zeros(batch, heads, n_queries, v.shape[3]), q.new_zeros(batch, heads, n_queries),
                              q.new_full((batch, heads, n_queries), torch.finfo(q.dtype).min))
    visible, positions = visible_pairs(groups, start, n_keys, causal, padding)
    slots = groups.queries.clamp(min=0)
    queries = q.index_select(2, slots.flatten()).view(batch, heads, *slots.shape, q.shape[3])  # (B, Hs, G, Lq, D)
    logits = queries @ gather_positions(k, positions).transpose(-1, -2) * scale  # (B, Hs, G, Lq, K)
    filled = logits.masked_fill(~visible, torch.finfo(logits.dtype).min)
    shift = filled.detach().amax(-1, keepdim=True)  # the result does not depend on it: no gradient needed
    weights = torch.exp(filled - shift) * visible  # (B, Hs, G, Lq, K)
    numerator = weights @ gather_positions(v, positions)  # (B, Hs, G, Lq, M)
    # every slot writes to its query; empty slots write to a spare row N, dropped after
    target = torch.where(groups.queries >= 0, groups.queries, n_queries).flatten()  # (G * Lq,)
    sums = []
    for value, fill in ((numerator, 0.0), (weights.sum(-1), 0.0), (shift.squeeze(-1), torch.finfo(q.dtype).min)):
        full = value.new_full((batch, heads, n_queries + 1, *value.shape[4:]), fill)
        sums.append(full.index_copy(2, target, value.flatten(2, 3))[:, :, :n_queries])
    return PartialSoftmax(*sums)


def merge(parts: list[PartialSoftmax]) -> Tensor:
    """Outputs (B, Hs, N, M) of a softmax over the union of the parts' keys; zeros where none is visible."""
    shift = torch.stack([part.shift for part in parts]).amax(0)  # (B, Hs, N)
    numerator = sum(torch.exp(p.shift - shift)[..., None] * p.numerator for p in parts)
    denominator = sum(torch.exp(p.shift - shift) * p.denominator for p in parts)
    return numerator / torch.where(denominator > 0, denominator, 1.0)[..., None]
