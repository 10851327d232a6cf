"""Reformer LSH attention (Kitaev et al. 2020), the paper's O(N log N) baseline.

Queries double as keys (shared-QK): the ``k`` given to ``forward`` is **replaced** by the
unit-normalised queries, as LSH attention requires that a query and its key hash alike. Each
of ``n_hashes`` rounds hashes the keys with a random rotation into ``n_buckets`` buckets,
sorts positions by (bucket, position), cuts the sorted order into chunks and lets every chunk
attend to itself and the chunk before it. Keys in another bucket, padded keys and (causal)
later positions are masked; a token attends to itself only when nothing else is visible.
Rounds are combined with weights softmax(logsumexp) of their logits.

The state is a cache of the normalised keys, values and buckets of every past position (padded
ones in bucket ``n_buckets``, which no query hashes to) and the rotations they were hashed with.
``forward`` with a state lays out the cached and its own positions together, exactly as the
forward of the whole sequence would, and returns the outputs of its own.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import cache_append, empty_cache, records_graph
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention

MASKED = -1e9  # finite, so rows with nothing visible stay NaN-free
SELF = -1e5  # self-attention loses to any visible key but beats masked entries


def hash_buckets(keys: Tensor, rotations: Tensor, n_buckets: int) -> Tensor:
    """Angular LSH: argmax over [xR, -xR]. keys (..., D), rotations (D, R, n_buckets/2) -> (..., R)."""
    if n_buckets == 1:
        return torch.zeros(*keys.shape[:-1], rotations.shape[1], dtype=torch.long, device=keys.device)
    rotated = torch.einsum("...d,drk->...rk", keys, rotations.to(keys.dtype))  # (..., R, n_buckets/2)
    return torch.cat([rotated, -rotated], dim=-1).argmax(-1)


def combine_rounds(outputs: Tensor, lse: Tensor, round_dim: int) -> Tensor:
    """Mix per-round outputs with weights softmax(lse) over rounds; lse broadcasts to outputs."""
    weights = torch.softmax(lse, dim=round_dim)
    return (weights * outputs).sum(round_dim)


def look_one_back(x: Tensor) -> Tensor:
    """(..., nc, L, F) -> (..., nc, 2L, F): each chunk followed by its predecessor (wrapping)."""
    return torch.cat([x, x.roll(1, dims=-3)], dim=-2)


class LSHCache(NamedTuple):
    """Reformer's state: every past position's normalised key, value and buckets, and the rotations.

    Args:
        keys: (B, H, capacity, D) unit-normalised queries of past positions (they are the keys).
        values: (B, H, capacity, M).
        buckets: (B, H, capacity, R) long, the bucket of each position in each round.
        rotations: (D, R, n_buckets/2) the random rotations the buckets were hashed with.
        length: the positions cached.
    """

    keys: Tensor
    values: Tensor
    buckets: Tensor
    rotations: Tensor
    length: int


@register_attention("reformer")
class ReformerAttention(Attention):
    """LSH attention with shared queries and keys.

    ``step`` attends to every cached token sharing the query's bucket in each round: O(t (D + M))
    time and O(t) memory at step t. No O(1) recurrence exists for LSH attention. Buckets are not
    cut at chunk borders in ``step``, so it matches ``forward`` only when each bucket fits in two
    chunks. Splits are not exact either (``continues_exactly = False``): the chunks of a causal
    forward depend on later positions (how many share a bucket), which a forward over a prefix
    cannot see. A continuation with the same rotations gives the whole forward's outputs for its
    own positions, and with one chunk (``chunk_size`` >= the whole length) every split is exact.

    Args:
        head_dim: D.
        n_hashes: hashing rounds R (more rounds, fewer missed neighbours, R times the cost).
        n_buckets: buckets per round; 1 or an even number.
        chunk_size: positions per chunk of the sorted sequence.
        scale: logit scale; None uses 1/sqrt(D).
    """

    shares_query_key = True
    step_matches_forward = False
    continues_exactly = False
    cache_entries = ("keys", "values", "buckets")

    def __init__(
        self, head_dim: int, n_hashes: int = 1, n_buckets: int = 16, chunk_size: int = 32, scale: float | None = None
    ) -> None:
        super().__init__(head_dim)
        if n_hashes < 1:
            raise ValueError(f"reformer: n_hashes must be >= 1, got {n_hashes}")
        if n_buckets != 1 and (n_buckets < 2 or n_buckets % 2):
            raise ValueError(f"reformer: n_buckets must be 1 or an even number >= 2, got {n_buckets}")
        if chunk_size < 1:
            raise ValueError(f"reformer: chunk_size must be >= 1, got {chunk_size}")
        self.n_hashes, self.n_buckets, self.chunk_size = n_hashes, n_buckets, chunk_size
        self.scale = head_dim**-0.5 if scale is None else float(scale)

    def draw_rotations(self, device: torch.device) -> Tensor:
        """Random rotations (D, R, n_buckets/2) for one sequence's hashing."""
        return torch.randn(self.head_dim, self.n_hashes, max(self.n_buckets // 2, 1), device=device)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        acc = accumulation_dtype(v.dtype)
        rotations = self.draw_rotations(q.device) if state is None else state.rotations
        queries, values = q.to(acc), v.to(acc)  # (B, H, N, D|M)
        keys = F.normalize(queries, dim=-1)
        buckets = hash_buckets(keys, rotations, self.n_buckets)  # (B, H, N, R)
        if key_padding_mask is not None:  # a bucket of their own, which no query hashes to
            buckets = buckets.masked_fill(key_padding_mask[:, None, :, None], self.n_buckets)
        length = 0
        if state is not None:  # the cached positions come first; their outputs are not needed
            length = state.length
            queries = F.pad(queries, (0, 0, length, 0))  # (B, H, L+N, D)
            keys = torch.cat([state.keys[:, :, :length], keys], dim=2)  # (B, H, L+N, D)
            values = torch.cat([state.values[:, :, :length], values], dim=2)  # (B, H, L+N, M)
            buckets = torch.cat([state.buckets[:, :, :length], buckets], dim=2)  # (B, H, L+N, R)
        out = self._attend_chunked(queries, keys, values, buckets, causal)[:, :, length:]
        cache = LSHCache(keys, values, buckets, rotations, keys.shape[2])
        return out.to(v.dtype), cache if return_state else None

    def _attend_chunked(self, queries: Tensor, keys: Tensor, values: Tensor, buckets: Tensor, causal: bool) -> Tensor:
        """LSH attention of queries (B, H, T, D) to keys and values by buckets (B, H, T, R): (B, H, T, M).

        Bucket ``n_buckets`` marks padding. The sequence is padded to a whole number of chunks.
        """
        total = queries.shape[2]
        chunk = min(self.chunk_size, total)
        padding = (-total) % chunk
        queries, keys, values = (F.pad(t, (0, 0, 0, padding)) for t in (queries, keys, values))  # (B, H, P, F)
        buckets = F.pad(buckets, (0, 0, 0, padding), value=self.n_buckets)  # (B, H, P, R), padding sorts last
        is_padding = buckets[..., 0] == self.n_buckets  # (B, H, P)
        rounds = buckets.transpose(-1, -2)  # (B, H, R, P)
        outputs, lse = self._attend_sorted(queries, keys, values, rounds, is_padding, causal, chunk)
        return combine_rounds(outputs, lse.unsqueeze(-1), round_dim=2)[:, :, :total]  # (B, H, T, M)

    def _attend_sorted(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        buckets: Tensor,
        is_padding: Tensor,
        causal: bool,
        chunk: int,
    ) -> tuple[Tensor, Tensor]:
        """Per-round chunked attention in sorted order; returns outputs (B, H, R, P, M) and lse (B, H, R, P)."""
        batch, heads, rounds, total = buckets.shape
        positions = torch.arange(total, device=queries.device)
        order = (buckets * total + positions).argsort(dim=-1)  # (B, H, R, P), sorted by (bucket, position)

        def gather(x: Tensor) -> Tensor:  # (B, H, P, F) -> (B, H, R, nc, L, F) in sorted order
            index = order.unsqueeze(-1).expand(-1, -1, -1, -1, x.shape[-1])
            picked = x.unsqueeze(2).expand(-1, -1, rounds, -1, -1).gather(3, index)
            return picked.reshape(batch, heads, rounds, total // chunk, chunk, x.shape[-1])

        s_queries, s_keys, s_values = gather(queries), gather(keys), gather(values)
        s_positions = gather(order.new_zeros(batch, heads, total, 1) + positions[:, None])  # (.., nc, L, 1)
        s_buckets = buckets.gather(-1, order).reshape(*s_positions.shape)
        pad_index = is_padding[:, :, None, :].expand(-1, -1, rounds, -1)  # (B, H, R, P)
        s_padding = pad_index.gather(-1, order).reshape(*s_positions.shape)
        if total // chunk > 1:
            s_keys, s_values = look_one_back(s_keys), look_one_back(s_values)
            key_positions, key_buckets, key_padding = map(look_one_back, (s_positions, s_buckets, s_padding))
        else:
            key_positions, key_buckets, key_padding = s_positions, s_buckets, s_padding
        logits = (s_queries @ s_keys.transpose(-1, -2)) * self.scale  # (B, H, R, nc, L, 2L)
        query_positions, key_positions = s_positions, key_positions.transpose(-1, -2)
        hidden = (s_buckets != key_buckets.transpose(-1, -2)) | key_padding.transpose(-1, -2)
        if causal:
            hidden = hidden | (key_positions > query_positions)
        logits = logits.masked_fill(hidden, MASKED)
        logits = torch.where((key_positions == query_positions) & ~hidden, logits * 0 + SELF, logits)  # NaN stays
        lse = logits.logsumexp(-1, keepdim=True)
        s_out = torch.exp(logits - lse) @ s_values  # (B, H, R, nc, L, M)
        s_out = s_out.masked_fill(lse <= MASKED / 2, 0.0)  # nothing visible at all: zeros
        undo = order.argsort(dim=-1)  # sorted slot of each original position
        s_out = s_out.reshape(batch, heads, rounds, total, values.shape[-1])
        outputs = s_out.gather(3, undo.unsqueeze(-1).expand(-1, -1, -1, -1, s_out.shape[-1]))
        lse = lse.reshape(batch, heads, rounds, total).gather(3, undo)
        return outputs, lse

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> LSHCache:
        return LSHCache(
            empty_cache(batch_size, n_heads, self.head_dim, device=device, dtype=accumulation_dtype(dtype)),
            empty_cache(batch_size, n_heads, value_dim, device=device, dtype=accumulation_dtype(dtype)),
            empty_cache(batch_size, n_heads, self.n_hashes, device=device, dtype=torch.long),
            self.draw_rotations(torch.device(device) if device is not None else torch.device("cpu")),
            0,
        )

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: LSHCache) -> tuple[Tensor, LSHCache]:
        length = state.length
        query = q_t.to(state.keys.dtype)
        key = F.normalize(query, dim=-1)  # (B, H, D)
        bucket = hash_buckets(key, state.rotations, self.n_buckets)  # (B, H, R)
        functional = records_graph(state.keys, state.values, key, v_t)
        keys = cache_append(state.keys, key, length, functional)
        values = cache_append(state.values, v_t.to(query.dtype), length, functional)
        buckets = cache_append(state.buckets, bucket, length, functional)
        past_keys, past_values = keys[:, :, : length + 1], values[:, :, : length + 1]  # (B, H, t, D|M)
        logits = (past_keys @ query.unsqueeze(-1)).squeeze(-1) * self.scale  # (B, H, t)
        logits = logits.unsqueeze(2).expand(-1, -1, self.n_hashes, -1)  # (B, H, R, t)
        hidden = buckets[:, :, : length + 1].transpose(-1, -2) != bucket.unsqueeze(-1)  # (B, H, R, t)
        logits = logits.masked_fill(hidden, MASKED)
        is_self = torch.arange(length + 1, device=q_t.device) == length
        logits = torch.where(is_self & ~hidden, logits * 0 + SELF, logits)  # a NaN query stays NaN
        lse = logits.logsumexp(-1, keepdim=True)  # (B, H, R, 1)
        outputs = torch.einsum("bhrt,bhtm->bhrm", torch.exp(logits - lse), past_values)  # (B, H, R, M)
        out = combine_rounds(outputs, lse, round_dim=2)
        return out.to(v_t.dtype), LSHCache(keys, values, buckets, state.rotations, length + 1)
