"""Clustered attention (Vyas et al. 2020): queries grouped into C clusters share one attention row.

Each cluster's centroid (the mean of its queries) attends with softmax to all keys, and every
query takes its cluster's output: O(N C) instead of O(N S) once C << N. Clustering needs the
whole sequence of queries, so the attention is non-causal only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.arguments import positive_int
from lintf.attention.base import Attention, State
from lintf.attention.clustering import cluster_means, hash_codes, kmeans_hamming
from lintf.attention.masking import masked_softmax
from lintf.ops import accumulation_dtype
from lintf.registry import register_attention


@register_attention("clustered")
class ClusteredAttention(Attention):
    """Softmax attention computed for cluster centroids of the queries (non-causal only).

    Queries are hashed to ``bits`` bits with random hyperplanes (a buffer drawn once, saved in
    the state_dict, so eval is deterministic) and grouped by ``iterations`` rounds of Hamming
    k-means. With at least as many clusters as distinct query codes it equals softmax attention
    of the cluster means (exact softmax when every query is alone). Padded keys are never
    attended; queries are clustered whatever the key padding.

    Args:
        head_dim: D.
        n_clusters: C, clusters per sequence and head (at most N are used).
        iterations: Lloyd iterations of the k-means.
        bits: length of the query hash codes.
        scale: logit scale; None uses 1/sqrt(D).
    """

    supports_causal = False
    step_matches_forward = False

    def __init__(
        self, head_dim: int, n_clusters: int = 32, iterations: int = 10, bits: int = 32, scale: float | None = None
    ) -> None:
        super().__init__(head_dim)
        name = self.display_name()
        self.n_clusters = positive_int(name, "n_clusters", n_clusters)
        self.iterations = positive_int(name, "iterations", iterations)
        self.bits = positive_int(name, "bits", bits)
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.register_buffer("planes", torch.randn(bits, head_dim + 1))  # hyperplanes and their offsets

    def cluster(self, q: Tensor) -> Tensor:
        """(B, H, N) cluster index of every query."""
        return kmeans_hamming(hash_codes(q, self.planes), self.n_clusters, self.iterations)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None, state: State | None,
        return_state: bool,
    ) -> tuple[Tensor, None]:
        acc = accumulation_dtype(v.dtype)
        with torch.autocast(q.device.type, enabled=False):  # codes and clusters as in fp32
            q, k, values = q.to(acc), k.to(acc), v.to(acc)
            assignment = self.cluster(q)  # (B, H, N)
            centroids, members = cluster_means(q, assignment, min(self.n_clusters, q.shape[2]))  # (B,H,C,D), (B,H,N,C)
            visible = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
            weights = masked_softmax((centroids @ k.transpose(-1, -2)) * self.scale, visible)  # (B, H, C, S)
            out = self.combine(q, k, values, assignment, members, weights, visible)
        return out.to(v.dtype), None

    def combine(
        self, q: Tensor, k: Tensor, v: Tensor, assignment: Tensor, members: Tensor, weights: Tensor,
        visible: Tensor | None,
    ) -> Tensor:
        """Every query takes its cluster's output: (B, H, N, M)."""
        return members @ (weights @ v)  # (B, H, N, C) @ (B, H, C, M)
