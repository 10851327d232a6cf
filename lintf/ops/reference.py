"""Naive O(N^2) references for the causal product ops.

These materialise the full (N, N) masked similarity matrix. They exist only to test the
fast paths against an independent, obviously-correct formula.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _causal_similarities(q: Tensor, k: Tensor) -> Tensor:
    """Masked similarities A[i, j] = q_i . k_j for j <= i, else 0: (B, H, N, N)."""
    n = q.shape[-2]
    similarities = q @ k.transpose(-1, -2)  # (B, H, N, N)
    keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    return similarities.masked_fill(~keep, 0.0)


def causal_dot_product_reference(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """out_i = sum_{j<=i} (q_i . k_j) v_j, computed via the full (N, N) matrix.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.

    Returns:
        (B, H, N, M) numerator of causal linear attention.
    """
    return _causal_similarities(q, k) @ v


def causal_linear_attention_reference(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Normalised causal linear attention via the full (N, N) matrix.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        eps: added to the denominator.

    Returns:
        (B, H, N, M): sum_{j<=i} (q_i.k_j) v_j / (sum_{j<=i} q_i.k_j + eps).
    """
    similarities = _causal_similarities(q, k)  # (B, H, N, N)
    return (similarities @ v) / (similarities.sum(-1, keepdim=True) + eps)
