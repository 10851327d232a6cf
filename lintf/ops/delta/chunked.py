"""The delta rule in chunks, in PyTorch: the WY (UT) form of each chunk and a recurrence over chunks.

With S_in the state entering a chunk of L positions, b_t the cumulative log-decay inside the chunk
(restarting at every chunk; zeros without decay) and G[t, s] = exp(b_t - b_s) for s <= t (0 above),
the updates u_t = beta_t (v_t - (exp(log_decay_t) S_{t-1})^T k_t) of the chunk solve one unit lower
triangular system (the product of the chunk's (I - beta k k^T) factors in its UT representation):

    (I + A) U = diag(beta) (V - diag(exp(b)) K S_in),    A = strictly lower part of diag(beta) (K K^T o G)

so with T = (I + A)^{-1} diag(beta), U = T V - (T diag(exp(b)) K) S_in: the chunk's own parts T V
and W = T diag(exp(b)) K come from one triangular solve per chunk, for all chunks at once. Then

    O     = scale (diag(exp(b)) Q S_in + ((Q K^T) o G) U)
    S_out = exp(b_L) S_in + (diag(exp(b_L - b)) K)^T U

carry the state from chunk to chunk. Every exponent is <= 0. Gradients come from autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

DEFAULT_CHUNK_SIZE = 64


def chunk_view(x: Tensor, chunk: int) -> Tensor:
    """(B, H, N, ...) -> (B, H, nc, L, ...), zero-padded to whole chunks."""
    padding = (-x.shape[2]) % chunk
    widths = [0, 0] * (x.dim() - 3) + [0, padding]
    padded = F.pad(x, widths)
    return padded.reshape(*x.shape[:2], padded.shape[2] // chunk, chunk, *x.shape[3:])


def chunk_decays(log_decay: Tensor | None, like: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """b (B, H, nc, L) the cumulative log-decays inside each chunk and G (B, H, nc, L, L) = exp(b_t - b_s), s <= t.

    Without decay, b is zeros and G the lower triangle of ones. Padded positions decay nothing.
    """
    batch, heads, n_chunks = like.shape[:3]
    below = torch.ones(chunk, chunk, dtype=torch.bool, device=like.device).tril()
    if log_decay is None:
        ones = below.to(like.dtype).expand(batch, heads, n_chunks, -1, -1)
        return like.new_zeros(batch, heads, n_chunks, chunk), ones
    within = chunk_view(log_decay, chunk).cumsum(-1)  # (B, H, nc, L)
    relative = (within.unsqueeze(-1) - within.unsqueeze(-2)).masked_fill(~below, float("-inf")).exp()
    return within, relative


def delta_rule_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None,
    scale: float,
    initial_state: Tensor | None,
    chunk: int = DEFAULT_CHUNK_SIZE,
) -> tuple[Tensor, Tensor]:
    """The delta rule on validated inputs of one dtype; returns out (B, H, N, M) and S_N (B, H, C, M).

    Args:
        q: (B, H, N, C) queries.
        k: (B, H, N, C) keys.
        v: (B, H, N, M) values.
        beta: (B, H, N) writing strengths.
        log_decay: (B, H, N) log-decays (<= 0) or None.
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
    beta_c = chunk_view(beta, chunk).unsqueeze(-1)  # (B, H, nc, L, 1); padded positions write nothing
    within, relative = chunk_decays(log_decay, q_c, chunk)  # (B, H, nc, L), (B, H, nc, L, L)
    lower = (beta_c * (k_c @ k_c.transpose(-1, -2)) * relative).tril(-1)  # A
    to_start = within.exp().unsqueeze(-1)  # exp(b): (B, H, nc, L, 1)
    solved = torch.linalg.solve_triangular(
        lower, beta_c * torch.cat([to_start * k_c, v_c], dim=-1), upper=False, unitriangular=True
    )  # (I + A)^{-1} diag(beta) [diag(exp(b)) K | V]
    w, u = solved.split([features, v.shape[-1]], dim=-1)  # (.., L, C), (.., L, M)
    scores = (q_c @ k_c.transpose(-1, -2)) * relative  # (B, H, nc, L, L)
    q_start = q_c * to_start
    k_end = k_c * (within[..., -1:] - within).exp().unsqueeze(-1)  # diag(exp(b_L - b)) K
    whole = within[..., -1].exp()[..., None, None]  # (B, H, nc, 1, 1)
    outputs = []
    # unbind, not indexing in the loop: the backward of x[:, :, c] writes a zero tensor of x's whole size
    per_chunk = (t.unbind(2) for t in (u, w, q_start, scores, whole, k_end))
    for u_, w_, q_start_, scores_, whole_, k_end_ in zip(*per_chunk):
        updates = u_ - w_ @ state  # U: (B, H, L, M)
        outputs.append(q_start_ @ state + scores_ @ updates)
        state = whole_ * state + k_end_.transpose(-1, -2) @ updates
    out = scale * torch.stack(outputs, dim=2)  # (B, H, nc, L, M)
    return out.reshape(batch, heads, out.shape[2] * chunk, v.shape[-1])[:, :, :length], state
