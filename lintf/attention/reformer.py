"""Reformer LSH attention (Kitaev et al. 2020), the paper's O(N log N) baseline.

Queries double as keys (shared-QK): the ``k`` given to ``forward`` is **replaced** by the
unit-normalised queries, as LSH attention requires that a query and its key hash alike. Each
of ``n_hashes`` rounds hashes the keys with a random rotation into ``n_buckets`` buckets,
sorts positions by (bucket, position), cuts the sorted order into chunks and lets every chunk
attend to itself and the chunk before it. Keys in another bucket, padded keys and (causal)
later positions are masked; a token attends to itself only when nothing else is visible.
Rounds are combined with weights softmax(logsumexp) of their logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.base import Attention, State
from lintf.attention.cache import cache_append, empty_cache
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


@register_attention("reformer")
class ReformerAttention(Attention):
    """LSH attention with shared queries and keys.

    ``step`` keeps a cache of normalised keys, values and their buckets and attends to every
    past token sharing the query's bucket in each round: O(t (D + M)) time and O(t) memory at
    step t. No O(1) recurrence exists for LSH attention. Buckets are not cut at chunk borders
    in ``step``, so it matches ``forward`` only when each bucket fits in two chunks.

    Args:
        head_dim: D.
        n_hashes: hashing rounds R (more rounds, fewer missed neighbours, R times the cost).
        n_buckets: buckets per round; 1 or an even number.
        chunk_size: positions per chunk of the sorted sequence.
        scale: logit scale; None uses 1/sqrt(D).
    """

    shares_query_key = True
    step_matches_forward = False

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
        return torch.randn(self.head_dim, self.n_hashes, max(self.n_buckets // 2, 1), device=device)


    def attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
        batch, heads, length, _ = q.shape
        chunk = min(self.chunk_size, length)
        padding = (-length) % chunk
        acc = accumulation_dtype(v.dtype)
        queries = F.pad(q.to(acc), (0, 0, 0, padding))  # (B, H, P, D), P = N + padding
        values = F.pad(v.to(acc), (0, 0, 0, padding))  # (B, H, P, M)
        is_padding = torch.arange(length + padding, device=q.device) >= length  # (P,)
        is_padding = is_padding.expand(batch, -1)
        if key_padding_mask is not None:
            is_padding = is_padding | F.pad(key_padding_mask, (0, padding))  # (B, P)
        keys = F.normalize(queries, dim=-1)
        buckets = hash_buckets(keys, self.draw_rotations(q.device), self.n_buckets)  # (B, H, P, R)
        buckets = buckets.masked_fill(is_padding[:, None, :, None], self.n_buckets)  # padding sorts last
        outputs, lse = self._attend_sorted(queries, keys, values, buckets.transpose(-1, -2), is_padding, causal, chunk)
        out = combine_rounds(outputs, lse.unsqueeze(-1), round_dim=2)  # (B, H, P, M)
        return out[:, :, :length].to(v.dtype)

    def _attend_sorted(
        self, queries: Tensor, keys: Tensor, values: Tensor, buckets: Tensor, is_padding: Tensor, causal: bool, chunk: int
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
        pad_index = is_padding[:, None, None, :].expand(-1, heads, rounds, -1)
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
        logits = logits.masked_fill((key_positions == query_positions) & ~hidden, SELF)
        lse = logits.logsumexp(-1, keepdim=True)
        s_out = torch.exp(logits - lse) @ s_values  # (B, H, R, nc, L, M)
        s_out = s_out.masked_fill(lse <= MASKED / 2, 0.0)  # nothing visible at all: zeros
        undo = order.argsort(dim=-1)  # sorted slot of each original position
        s_out = s_out.reshape(batch, heads, rounds, total, -1)
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
    ) -> State:
        return {
            "keys": empty_cache(batch_size, n_heads, self.head_dim, device=device, dtype=accumulation_dtype(dtype)),
            "values": empty_cache(batch_size, n_heads, value_dim, device=device, dtype=accumulation_dtype(dtype)),
            "buckets": empty_cache(batch_size, n_heads, self.n_hashes, device=device, dtype=torch.long),
            "rotations": self.draw_rotations(torch.device(device) if device is not None else torch.device("cpu")),
            "length": 0,
        }

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        length = state["length"]
        query = q_t.to(state["keys"].dtype)
        key = F.normalize(query, dim=-1)  # (B, H, D)
        bucket = hash_buckets(key, state["rotations"], self.n_buckets)  # (B, H, R)
        keys = cache_append(state["keys"], key, length)
        values = cache_append(state["values"], v_t.to(query.dtype), length)
        buckets = cache_append(state["buckets"], bucket, length)
        past_keys, past_values = keys[:, :, : length + 1], values[:, :, : length + 1]  # (B, H, t, D|M)
        logits = (past_keys @ query.unsqueeze(-1)).squeeze(-1) * self.scale  # (B, H, t)
        logits = logits.unsqueeze(2).expand(-1, -1, self.n_hashes, -1)  # (B, H, R, t)
        hidden = buckets[:, :, : length + 1].transpose(-1, -2) != bucket.unsqueeze(-1)  # (B, H, R, t)
        logits = logits.masked_fill(hidden, MASKED)
        is_self = torch.arange(length + 1, device=q_t.device) == length
        logits = logits.masked_fill(is_self & ~hidden, SELF)
        lse = logits.logsumexp(-1, keepdim=True)  # (B, H, R, 1)
        outputs = torch.einsum("bhrt,bhtm->bhrm", torch.exp(logits - lse), past_values)  # (B, H, R, M)
        out = combine_rounds(outputs, lse, round_dim=2)
        new_state = {"keys": keys, "values": values, "buckets": buckets, "rotations": state["rotations"]}
        return out.to(v_t.dtype), {**new_state, "length": length + 1}
