"""Improved clustered attention (Vyas et al. 2020, section 3.3): clustered attention, then exact top-k.

For each cluster c with centroid attention A_c, the ``topk`` keys T_c with the largest weights
are recomputed with each member query's own dot products:

    out_i = m_c sum_{j in T_c} softmax_{T_c}(q_i . k_j) v_j + sum_{j not in T_c} A_c[j] v_j,

m_c = sum_{j in T_c} A_c[j]: the top keys keep the mass the centroid gave them, shared out by
the query's exact softmax, and the rest of the mass is the centroid's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.attention.arguments import positive_int
from lintf.attention.clustered import ClusteredAttention
from lintf.attention.masking import masked_softmax
from lintf.registry import register_attention


def per_query(x: Tensor, assignment: Tensor) -> Tensor:
    """Row of each query's cluster: x (B, H, C, F), assignment (B, H, N) -> (B, H, N, F)."""
    return x.gather(2, assignment.unsqueeze(-1).expand(-1, -1, -1, x.shape[-1]))


def gather_keys(x: Tensor, index: Tensor) -> Tensor:
    """Rows of x (B, H, S, F) at index (B, H, N, k): (B, H, N, k, F)."""
    expanded = x.unsqueeze(2).expand(-1, -1, index.shape[2], -1, -1)  # (B, H, N, S, F), a view
    return expanded.gather(3, index.unsqueeze(-1).expand(-1, -1, -1, -1, x.shape[-1]))


@register_attention("improved_clustered")
class ImprovedClusteredAttention(ClusteredAttention):
    """Clustered attention with each cluster's top-k keys recomputed exactly per query (non-causal only).

    O(N C + N k) after clustering. With ``topk >= S`` it is exact softmax attention whatever the
    clusters.

    Args:
        head_dim: D.
        n_clusters: C, clusters per sequence and head (at most N are used).
        iterations: Lloyd iterations of the k-means.
        bits: length of the query hash codes.
        topk: keys per cluster recomputed exactly (at most S).
        scale: logit scale; None uses 1/sqrt(D).
    """

    def __init__(
        self,
        head_dim: int,
        n_clusters: int = 32,
        iterations: int = 10,
        bits: int = 32,
        topk: int = 32,
        scale: float | None = None,
    ) -> None:
        super().__init__(head_dim, n_clusters=n_clusters, iterations=iterations, bits=bits, scale=scale)
        self.topk = positive_int(self.display_name(), "topk", topk)

    def combine(
        self, q: Tensor, k: Tensor, v: Tensor, assignment: Tensor, members: Tensor, weights: Tensor,
        visible: Tensor | None,
    ) -> Tensor:
        top_weights, top = weights.topk(min(self.topk, k.shape[2]), dim=-1)  # (B, H, C, k)
        mass = top_weights.sum(-1, keepdim=True)  # (B, H, C, 1): the centroid's mass on its top keys
        rest = weights.scatter(-1, top, 0.0) @ v  # (B, H, C, M): the centroid's other keys
        index = per_query(top, assignment)  # (B, H, N, k)
        logits = (gather_keys(k, index) @ q.unsqueeze(-1)).squeeze(-1) * self.scale  # (B, H, N, k)
        shown = None
        if visible is not None:  # hidden keys are picked (with weight 0) when fewer than k are visible
            per_key = visible[:, :, 0, :, None].expand(-1, q.shape[1], -1, -1)  # (B, H, S, 1)
            shown = gather_keys(per_key, index).squeeze(-1)  # (B, H, N, k)
        exact = (masked_softmax(logits, shown).unsqueeze(-2) @ gather_keys(v, index)).squeeze(-2)  # (B, H, N, M)
        return per_query(mass, assignment) * exact + members @ rest
