"""Running a piece of a sequence through ``step``, one position at a time."""

from __future__ import annotations

import torch


def step_through(attention, q, k, v, state):
    """Step positions 0..N-1 of q, k (B, H, N, D), v (B, H, N, M) from ``state``.

    Returns:
        outputs (B, H, N, M) and the state after the last position.
    """
    outputs = []
    for t in range(q.shape[2]):
        out_t, state = attention.step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outputs.append(out_t)
    if not outputs:
        return v.new_zeros(*q.shape[:3], v.shape[-1]), state
    return torch.stack(outputs, dim=2), state
