"""Query clustering for clustered attention (Vyas et al. 2020): LSH bit codes, then k-means on them.

Queries are hashed to ``bits`` bits by the signs of random affine projections, so nearby
queries share most bits; Lloyd's k-means then groups the codes under the Hamming distance
(centroids are per-bit majority votes, the Hamming median).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def hash_codes(x: Tensor, planes: Tensor) -> Tensor:
    """Bit codes {0, 1} of x (..., D) against planes (bits, D + 1) (last column a bias): (..., bits)."""
    projected = x @ planes[:, :-1].T.to(x.dtype) + planes[:, -1].to(x.dtype)  # (..., bits)
    return (projected > 0).to(x.dtype)


def hamming_distances(codes: Tensor, centroids: Tensor) -> Tensor:
    """Bits in which codes (B, H, N, bits) and centroids (B, H, C, bits) differ: (B, H, N, C)."""
    return codes @ (1 - centroids).transpose(-1, -2) + (1 - codes) @ centroids.transpose(-1, -2)


def kmeans_hamming(codes: Tensor, n_clusters: int, iterations: int) -> Tensor:
    """Lloyd's k-means of bit codes under the Hamming distance.

    Starts from the codes at evenly spaced positions (deterministic); an empty cluster keeps its
    centroid.

    Args:
        codes: (B, H, N, bits) codes in {0, 1}.
        n_clusters: C; at most N clusters are used.
        iterations: Lloyd iterations (assign, then re-centre).

    Returns:
        (B, H, N) long cluster index of each code, in 0..min(C, N)-1.
    """
    length = codes.shape[2]
    clusters = min(n_clusters, length)
    start = torch.arange(clusters, device=codes.device) * length // clusters
    centroids = codes[:, :, start]  # (B, H, C, bits)
    for _ in range(iterations):
        members = F.one_hot(hamming_distances(codes, centroids).argmin(-1), clusters).to(codes.dtype)  # (B, H, N, C)
        counts = members.sum(2).unsqueeze(-1)  # (B, H, C, 1)
        ones = members.transpose(-1, -2) @ codes  # (B, H, C, bits): members with each bit set
        centroids = torch.where(counts > 0, (2 * ones > counts).to(codes.dtype), centroids)
    return hamming_distances(codes, centroids).argmin(-1)


def cluster_means(x: Tensor, assignment: Tensor, n_clusters: int) -> tuple[Tensor, Tensor]:
    """Mean of x (B, H, N, D) per cluster and the membership matrix.

    Returns:
        means (B, H, C, D) (zeros for an empty cluster) and members (B, H, N, C) one-hot rows.
    """
    members = F.one_hot(assignment, n_clusters).to(x.dtype)  # (B, H, N, C)
    counts = members.sum(2).clamp_min(1).unsqueeze(-1)  # (B, H, C, 1)
    return (members.transpose(-1, -2) @ x) / counts, members
