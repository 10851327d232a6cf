"""Naive references for the decayed causal product (``product.py``) and ``cumsum.py``, for tests only.

Two independent forms of S_i = exp(log_decay_i) S_{i-1} + k_i v_i^T, out_i = q_i S_i:

* the O(N^2) matrix form: out = ((q k^T) * W) v with W[i, j] = exp(sum_{j<s<=i} log_decay_s)
  for j <= i and 0 above the diagonal;
* the recurrence itself, one position at a time.
"""

from __future__ import annotations

import torch
from torch import Tensor


def decay_matrix(log_decay: Tensor) -> Tensor:
    """W[i, j] = prod_{j<s<=i} exp(log_decay_s) for j <= i, else 0: (B, H, N) -> (B, H, N, N)."""
    n = log_decay.shape[-1]
    cumulative = log_decay.cumsum(-1)  # (B, H, N)
    differences = cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)  # [i, j] = cum_i - cum_j
    below = torch.ones(n, n, dtype=torch.bool, device=log_decay.device).tril()
    return torch.exp(differences.masked_fill(~below, float("-inf")))


def decayed_dot_product_reference(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor) -> Tensor:
    """out_i = sum_{j<=i} W[i, j] (q_i . k_j) v_j through the full (N, N) matrix.

    Args:
        q: (B, H, N, C) queries (feature-mapped or not).
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        log_decay: (B, H, N) log-decays, <= 0.

    Returns:
        (B, H, N, M).
    """
    return ((q @ k.transpose(-1, -2)) * decay_matrix(log_decay)) @ v


def bidirectional_decay_matrix(log_decay: Tensor) -> Tensor:
    """W[i, j] = exp(-|cum_i - cum_j|) for every i, j: the decays between the two positions."""
    cumulative = log_decay.cumsum(-1)  # (B, H, N)
    return torch.exp(-(cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).abs())


def bidirectional_decayed_dot_product_reference(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor) -> Tensor:
    """out_i = sum_j exp(-|cum_i - cum_j|) (q_i . k_j) v_j through the full (N, N) matrix."""
    return ((q @ k.transpose(-1, -2)) * bidirectional_decay_matrix(log_decay)) @ v


def decayed_recurrence_reference(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, initial_state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The recurrence step by step; returns outputs (B, H, N, M) and the final state (B, H, C, M)."""
    batch, heads, length, features = q.shape
    state = q.new_zeros(batch, heads, features, v.shape[-1]) if initial_state is None else initial_state
    outputs = []
    for i in range(length):
        state = torch.exp(log_decay[:, :, i, None, None]) * state + k[:, :, i, :, None] * v[:, :, i, None, :]
        outputs.append((q[:, :, i, :, None] * state).sum(-2))  # (B, H, M)
    return torch.stack(outputs, dim=2), state


def decayed_cumsum_reference(x: Tensor, log_decay: Tensor) -> Tensor:
    """h_i = exp(log_decay_i) h_{i-1} + x_i along dim 2, one position at a time."""
    decay = torch.exp(log_decay).expand_as(x)
    state, outputs = torch.zeros_like(x[:, :, 0]), []
    for i in range(x.shape[2]):
        state = decay[:, :, i] * state + x[:, :, i]
        outputs.append(state)
    return torch.stack(outputs, dim=2)
