"""Gated linear attention one position at a time, written from its definition, for tests only.

    S = diag(exp(log_gate_t)) S + k_t v_t^T,    o_t = scale S^T q_t
"""

from __future__ import annotations

import torch
from torch import Tensor


def gated_linear_attention_reference(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, initial_state: Tensor | None = None, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """The recurrence step by step; returns outputs (B, H, N, M) and the final state (B, H, C, M).

    Args:
        q: (B, H, N, C) queries.
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        log_gate: (B, H, N, C) log-gates of the state's rows.
        initial_state: (B, H, C, M) or None (zeros).
        scale: output scale; None is C ** -0.5.
    """
    batch, heads, length, features = q.shape
    scale = features**-0.5 if scale is None else scale
    state = q.new_zeros(batch, heads, features, v.shape[-1]) if initial_state is None else initial_state
    outputs = []
    for t in range(length):
        gate = torch.exp(log_gate[:, :, t]).unsqueeze(-1)  # (B, H, C, 1)
        state = gate * state + k[:, :, t].unsqueeze(-1) * v[:, :, t].unsqueeze(-2)
        outputs.append(scale * (state * q[:, :, t].unsqueeze(-1)).sum(-2))  # (B, H, M)
    out = torch.stack(outputs, dim=2) if outputs else v.new_zeros(batch, heads, 0, v.shape[-1])
    return out, state
