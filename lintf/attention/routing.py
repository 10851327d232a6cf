"""Routing Transformer attention (Roy et al. 2021): k-means routes each query to the keys of its cluster.

Queries and keys, unit-normalised, are assigned to the nearest of C centroids (cosine similarity;
one set of centroids shared by queries and keys and by the heads). Query i attends with softmax
to the keys j of its own cluster (causal: j <= i). The centroids are a buffer moved by online
k-means (an exponential moving average) in training, never by gradients.

The attention is exact, computed per cluster: positions are sorted by cluster (stably, so by
position inside a cluster), each cluster's queries and keys are laid out in groups padded to the
largest cluster, and every group attends to itself with a boolean mask (equal-size windows, one
per cluster). That costs O(C L_q L_k) for clusters of at most L_q queries and L_k keys:
O(N^2 / C) when they are balanced, the paper's O(N^1.5) for C = sqrt(N). When the largest
clusters make the groups cost more than the whole (N, S) pattern, the whole pattern is used.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.attention.arguments import positive_int
from lintf.attention.base import Attention, State
from lintf.attention.cache import cache_append, empty_cache, records_graph
from lintf.attention.masked_attention import attend_visible
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


class RoutingCache(NamedTuple):
    """routing's state: every past key and value with its cluster, and the centroids that routed them.

    Args:
        keys: (B, H, capacity, D).
        values: (B, H, capacity, M).
        clusters: (B, H, capacity) long, each key's cluster; C marks a padded key (no query's cluster).
        centroids: (C, D) the unit centroids the sequence is routed with.
        length: the positions cached.
    """

    keys: Tensor
    values: Tensor
    clusters: Tensor
    centroids: Tensor
    length: int


def group_slots(clusters: Tensor, n_clusters: int) -> tuple[Tensor, Tensor, int]:
    """Slots that lay positions out by cluster, C groups of L slots (L the largest cluster's size).

    Args:
        clusters: (B, H, N) long in 0..C; C means "in no group".

    Returns:
        (B, H, C L) long, the position held by each slot (N for an empty slot); (B, H, N) long, the
        slot of each position (C L for one in no group); and L. A cluster's positions fill its
        group's first slots in increasing order.
    """
    batch, heads, length = clusters.shape
    counts = clusters.new_zeros(batch, heads, n_clusters + 1).scatter_add_(-1, clusters, torch.ones_like(clusters))
    size = int(counts[..., :n_clusters].max()) if counts.numel() else 0
    order = torch.sort(clusters, dim=-1, stable=True).indices  # (B, H, N): positions by (cluster, position)
    ordered = clusters.gather(-1, order)
    rank = torch.arange(length, device=clusters.device) - (counts.cumsum(-1) - counts).gather(-1, ordered)
    slots = torch.where(ordered < n_clusters, ordered * size + rank, n_clusters * size)  # the last: a spare slot
    held = clusters.new_full((batch, heads, n_clusters * size + 1), length).scatter_(-1, slots, order)
    return held[..., :-1], torch.empty_like(clusters).scatter_(-1, order, slots), size


def take_slots(x: Tensor, held: Tensor) -> Tensor:
    """x (B, H, N, F) at the positions ``held`` (B, H, C L) names, zeros for empty slots: (B, H, C L, F)."""
    padded = F.pad(x, (0, 0, 0, 1))  # position N: zeros
    return padded.gather(2, held.unsqueeze(-1).expand(-1, -1, -1, x.shape[-1]))


@register_attention("routing")
class RoutingAttention(Attention):
    """Softmax attention inside k-means clusters of queries and keys.

    Padded keys join no cluster. A query whose cluster holds no visible key returns zeros. In
    training (with gradients enabled), every forward ends with one online k-means step: each
    centroid moves toward the mean direction of the unit queries and keys routed to it,
    ``mu <- normalise(decay mu + (1 - decay) normalise(sum x))``; it does so after routing, so
    the call's own outputs use the centroids it started with. The state is a KV cache with each
    key's cluster and a copy of the centroids the sequence started with, so a continuation (by
    ``forward`` or ``step``, O(t) at step t) routes exactly like the whole forward even after
    the buffer has moved.

    Args:
        head_dim: D.
        n_clusters: C, the centroids (clusters per head and sequence).
        decay: the moving average's weight on the old centroid, in [0, 1).
        scale: logit scale; None uses 1/sqrt(D).
    """

    cache_entries = ("keys", "values", "clusters")

    def __init__(self, head_dim: int, n_clusters: int = 4, decay: float = 0.99, scale: float | None = None) -> None:
        super().__init__(head_dim)
        name = self.display_name()
        self.n_clusters = positive_int(name, "n_clusters", n_clusters)
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay < 1.0:
            raise ValueError(f"{name}: decay must be a number in [0, 1), got {decay!r}")
        self.decay = float(decay)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.register_buffer("centroids", F.normalize(torch.randn(n_clusters, head_dim), dim=-1))

    def route(self, x: Tensor, centroids: Tensor) -> Tensor:
        """(..., D) -> (...) long: the cluster of each vector, its most cosine-similar centroid."""
        return (F.normalize(x, dim=-1) @ centroids.T).argmax(-1)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, State | None]:
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):  # routing and softmax as in fp32
            q, keys, values = q.to(acc), k.to(acc), v.to(acc)
            centroids = self.centroids.to(acc, copy=True) if state is None else state.centroids  # (C, D)
            query_clusters, key_clusters = self.route(q, centroids), self.route(keys, centroids)  # (B, H, N|S)
            if key_padding_mask is not None:
                key_clusters = key_clusters.masked_fill(key_padding_mask[:, None, :], self.n_clusters)
            if self.training and torch.is_grad_enabled():
                self.update_centroids(q, keys, query_clusters, key_clusters)
            offset = None
            if causal:  # the cached positions come first
                offset = 0 if state is None else state.length
                if state is not None:
                    keys = torch.cat([state.keys[:, :, :offset], keys], dim=2)  # (B, H, L+N, D)
                    values = torch.cat([state.values[:, :, :offset], values], dim=2)  # (B, H, L+N, M)
                    key_clusters = torch.cat([state.clusters[:, :, :offset], key_clusters], dim=2)  # (B, H, L+N)
            out = self.attend_routed(q, keys, values, query_clusters, key_clusters, offset)
        new_state = RoutingCache(keys, values, key_clusters, centroids, keys.shape[2]) if return_state else None
        return out.to(v.dtype), new_state

    def attend_routed(
        self, q: Tensor, k: Tensor, v: Tensor, query_clusters: Tensor, key_clusters: Tensor, offset: int | None
    ) -> Tensor:
        """Query i sees key j of its cluster (causal, ``offset`` not None: also j <= offset + i). (B, H, N, M)."""
        n_queries, n_keys = q.shape[2], k.shape[2]
        held_queries, query_slots, query_size = group_slots(query_clusters, self.n_clusters)  # (B, H, C Lq)
        held_keys, _, key_size = group_slots(key_clusters, self.n_clusters)  # (B, H, C Lk)
        if self.n_clusters * query_size * key_size >= n_queries * n_keys:  # unbalanced: the whole pattern is cheaper
            visible = query_clusters.unsqueeze(-1) == key_clusters.unsqueeze(-2)  # (B, H, N, S)
            if offset is not None:
                visible = visible & torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(offset)
            return attend_visible(q, k, v, visible, self.scale)
        batch, heads, groups = *q.shape[:2], self.n_clusters
        grouped = [take_slots(x, held).view(batch, heads * groups, size, x.shape[-1]) for x, held, size in
                   ((q, held_queries, query_size), (k, held_keys, key_size), (v, held_keys, key_size))]
        query_positions = held_queries.reshape(batch, heads * groups, query_size, 1)
        key_positions = held_keys.reshape(batch, heads * groups, 1, key_size)
        visible = key_positions < n_keys  # (B, H C, Lq, Lk): a slot holding a key of the group
        if offset is not None:
            visible = visible & (key_positions <= query_positions + offset)
        out = attend_visible(*grouped, visible, self.scale).view(batch, heads, groups * query_size, v.shape[-1])
        return out.gather(2, query_slots.unsqueeze(-1).expand(-1, -1, -1, v.shape[-1]))  # a query's cluster is < C

    @torch.no_grad()
    def update_centroids(self, q: Tensor, k: Tensor, query_clusters: Tensor, key_clusters: Tensor) -> None:
        """One online k-means step on the unit queries and keys (padded keys, cluster C, and non-finite ones out)."""
        points = torch.cat([F.normalize(q, dim=-1).flatten(0, 2), F.normalize(k, dim=-1).flatten(0, 2)])  # (P, D)
        clusters = torch.cat([query_clusters.flatten(), key_clusters.flatten()])  # (P,)
        points = points.masked_fill(~points.isfinite().all(-1, keepdim=True), 0.0)
        sums = points.new_zeros(self.n_clusters + 1, self.head_dim).index_add_(0, clusters, points)[:-1]  # (C, D)
        moved = F.normalize(self.decay * self.centroids + (1 - self.decay) * F.normalize(sums, dim=-1), dim=-1)
        self.centroids.copy_(torch.where(sums.norm(dim=-1, keepdim=True) > 0, moved, self.centroids))

    def init_state(
        self,
        batch_size: int,
        n_heads: int,
        value_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> RoutingCache:
        acc = accumulation_dtype(dtype)
        keys = empty_cache(batch_size, n_heads, self.head_dim, device=device, dtype=acc)
        return RoutingCache(
            keys, empty_cache(batch_size, n_heads, value_dim, device=device, dtype=acc),
            empty_cache(batch_size, n_heads, device=device, dtype=torch.long),
            self.centroids.to(keys.device, acc, copy=True), 0,
        )

    def attend_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: RoutingCache) -> tuple[Tensor, RoutingCache]:
        acc, length = state.keys.dtype, state.length
        with torch.autocast(q_t.device.type, enabled=False):
            query, key, value = q_t.to(acc), k_t.to(acc), v_t.to(acc)
            query_cluster, key_cluster = self.route(query, state.centroids), self.route(key, state.centroids)  # (B, H)
            functional = records_graph(state.keys, state.values, key, value)
            keys = cache_append(state.keys, key, length, functional)  # (B, H, capacity, D)
            values = cache_append(state.values, value, length, functional)
            clusters = cache_append(state.clusters, key_cluster, length, functional)  # (B, H, capacity)
            visible = (clusters[:, :, : length + 1] == query_cluster.unsqueeze(-1)).unsqueeze(2)  # (B, H, 1, t)
            out = attend_visible(query.unsqueeze(2), keys[:, :, : length + 1], values[:, :, : length + 1], visible,
                                 self.scale).squeeze(2)  # (B, H, M)
        return out.to(v_t.dtype), RoutingCache(keys, values, clusters, state.centroids, length + 1)
