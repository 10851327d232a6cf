"""Naive O(N^2) references for the causal product ops.

These materialise the full (N, N) masked similarity matrix. They exist only to test the
fast paths against an independent, obviously-correct formula. An initial state (S0, z0)
enters as written in the definition: out_i = (q_i S0 + sum_{j<=i} (q_i.k_j) v_j) /
(q_i.z0 + sum_{j<=i} q_i.k_j + eps).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.causal.state import LinearAttentionState


def _causal_similarities(q: Tensor, k: Tensor) -> Tensor:
    """Masked similarities A[i, j] = q_i . k_j for j <= i, else 0: (B, H, N, N)."""
    n = q.shape[-2]
    similarities = q @ k.transpose(-1, -2)  # (B, H, N, N)
    keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    return similarities.masked_fill(~keep, 0.0)


def causal_dot_product_reference(
    q: Tensor, k: Tensor, v: Tensor, initial_state: LinearAttentionState | None = None
) -> Tensor:
    """out_i = q_i S0 + sum_{j<=i} (q_i . k_j) v_j, computed via the full (N, N) matrix.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        initial_state: (S0 (B, H, C, M), z0 (B, H, C)); None means zeros. z0 is not used here.

    Returns:
        (B, H, N, M) numerator of causal linear attention.
    """
    numerator = _causal_similarities(q, k) @ v  # (B, H, N, M)
    if initial_state is not None:
        numerator = numerator + q @ initial_state.kv
    return numerator


def causal_linear_attention_reference(
    q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6, initial_state: LinearAttentionState | None = None
) -> Tensor:
    """Normalised causal linear attention via the full (N, N) matrix.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        eps: added to the denominator.
        initial_state: (S0 (B, H, C, M), z0 (B, H, C)); None means zeros.

    Returns:
        (B, H, N, M): (q_i S0 + sum_{j<=i} (q_i.k_j) v_j) / (q_i.z0 + sum_{j<=i} q_i.k_j + eps).
    """
    similarities = _causal_similarities(q, k)  # (B, H, N, N)
    numerator = similarities @ v  # (B, H, N, M)
    denominator = similarities.sum(-1)  # (B, H, N)
    if initial_state is not None:
        numerator = numerator + q @ initial_state.kv
        denominator = denominator + (q * initial_state.normaliser.unsqueeze(2)).sum(-1)
    return numerator / (denominator + eps).unsqueeze(-1)


def final_state_reference(
    k: Tensor, v: Tensor, initial_state: LinearAttentionState | None = None
) -> LinearAttentionState:
    """State after the last position: (S0 + sum_j k_j v_j^T, z0 + sum_j k_j), one outer product per position.

    Args:
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        initial_state: (S0 (B, H, C, M), z0 (B, H, C)); None means zeros.
    """
    kv = (k.unsqueeze(-1) * v.unsqueeze(-2)).sum(2)  # (B, H, N, C, M) summed over N
    normaliser = k.sum(2)  # (B, H, C)
    if initial_state is not None:
        kv, normaliser = kv + initial_state.kv, normaliser + initial_state.normaliser
    return LinearAttentionState(kv, normaliser)
