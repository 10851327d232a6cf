"""The delta rule one position at a time, written from its definition, for tests only.

    S = exp(log_decay_t) S              (when log_decay is given)
    u_t = beta_t (v_t - S^T k_t)
    S = S + k_t u_t^T
    o_t = scale S^T q_t
"""

from __future__ import annotations

import torch
from torch import Tensor


def delta_rule_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None = None,
    initial_state: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The recurrence step by step; returns outputs (B, H, N, M) and the final state (B, H, C, M).

    Args:
        q: (B, H, N, C) queries.
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        beta: (B, H, N) writing strengths.
        log_decay: (B, H, N) log-decays or None.
        initial_state: (B, H, C, M) or None (zeros).
        scale: output scale; None is C ** -0.5.
    """
    batch, heads, length, features = q.shape
    scale = features**-0.5 if scale is None else scale
    state = q.new_zeros(batch, heads, features, v.shape[-1]) if initial_state is None else initial_state
    outputs = []
    for t in range(length):
        if log_decay is not None:
            state = torch.exp(log_decay[:, :, t, None, None]) * state
        key = k[:, :, t]  # (B, H, C)
        read = (state * key.unsqueeze(-1)).sum(-2)  # S^T k_t: (B, H, M)
        update = beta[:, :, t, None] * (v[:, :, t] - read)  # u_t: (B, H, M)
        state = state + key.unsqueeze(-1) * update.unsqueeze(-2)
        outputs.append(scale * (state * q[:, :, t].unsqueeze(-1)).sum(-2))  # (B, H, M)
    out = torch.stack(outputs, dim=2) if outputs else v.new_zeros(batch, heads, 0, v.shape[-1])
    return out, state
