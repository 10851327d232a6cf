"""Gated linear attention in chunks, in PyTorch: exact per-channel decays inside a chunk, a state across chunks.

With b_t (C) the cumulative log-gates inside a chunk of L positions (restarting at every chunk) and
S_in the state entering it, key s reaches query t >= s of the chunk through exp(b_t - b_s) per
channel, so the chunk's scores are A[t, s] = sum_c q_tc k_sc exp(b_tc - b_sc): the exponents, masked to
-inf above the diagonal before exp, are never positive, whatever the gates (the log-space form; a
factorisation q exp(b) . k exp(-b) would overflow for strong gates). Then

    O     = scale ((A V) + (Q o exp(b)) S_in)
    S_out = diag(exp(b_L)) S_in + (K o exp(b_L - b))^T V

The (L, L, C) exponents make the chunk short (16 positions by default). Gradients come from autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.delta.chunked import chunk_view

DEFAULT_CHUNK_SIZE = 16


def gla_chunked(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scale: float, initial_state: Tensor | None,
    chunk: int = DEFAULT_CHUNK_SIZE,
) -> tuple[Tensor, Tensor]:
    """Gated linear attention on validated inputs of one dtype; returns out (B, H, N, M) and S_N (B, H, C, M).

    Args:
        q: (B, H, N, C) queries.
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        log_gate: (B, H, N, C) log-gates, <= 0.
        scale: output scale.
        initial_state: (B, H, C, M) or None (zeros).
        chunk: positions per chunk.
    """
    batch, heads, length, features = q.shape
    state = q.new_zeros(batch, heads, features, v.shape[-1]) if initial_state is None else initial_state
    if length == 0:
        return v.new_zeros(batch, heads, 0, v.shape[-1]), state
    chunk = max(1, min(chunk, length))
    q_c, k_c, v_c = (chunk_view(t, chunk) for t in (q, k, v))  # (B, H, nc, L, C|M)
    within = chunk_view(log_gate, chunk).cumsum(-2)  # b: (B, H, nc, L, C); padded positions gate nothing
    above = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)[..., None]  # (L, L, 1)
    relative = (within.unsqueeze(-2) - within.unsqueeze(-3)).masked_fill(above, float("-inf")).exp()  # [t, s, c]
    scores = ((q_c.unsqueeze(-2) * relative) * k_c.unsqueeze(-3)).sum(-1)  # (B, H, nc, L, L)
    intra = scores @ v_c  # (B, H, nc, L, M)
    q_start = q_c * within.exp()
    whole = within[..., -1, :]  # (B, H, nc, C)
    k_end = k_c * (whole.unsqueeze(-2) - within).exp()
    outputs = []
    # unbind, not indexing in the loop: the backward of x[:, :, c] writes a zero tensor of x's whole size
    per_chunk = (t.unbind(2) for t in (intra, q_start, whole.exp().unsqueeze(-1), k_end.transpose(-1, -2), v_c))
    for intra_, q_start_, decay_, k_end_t, v_ in zip(*per_chunk):
        outputs.append(intra_ + q_start_ @ state)
        state = decay_ * state + k_end_t @ v_
    out = scale * torch.stack(outputs, dim=2)  # (B, H, nc, L, M)
    return out.reshape(batch, heads, out.shape[2] * chunk, v.shape[-1])[:, :, :length], state
