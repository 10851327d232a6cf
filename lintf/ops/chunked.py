"""Pure-PyTorch chunked causal product: the always-available path.

The sequence is cut into chunks of L positions. Inside a chunk the product is a masked
(L, L) matmul; across chunks a running state S = sum_j k_j v_j^T carries the prefix. The
per-chunk states are summed with an exclusive cumulative sum, so the whole computation is a
handful of batched matmuls and never builds an (N, C, M) tensor: the largest intermediates
are (N/L, C, M) states and (N/L, L, L) intra-chunk similarities.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def default_chunk_size(feature_dim: int, value_dim: int) -> int:
    """Chunk length balancing intra-chunk work (N*L) against state memory (N*C*M/L)."""
    balanced = math.sqrt(feature_dim * value_dim)
    return int(min(512, max(64, 2 ** round(math.log2(balanced)))))


def chunked_causal_product(q: Tensor, k: Tensor, v: Tensor, chunk_size: int | None = None) -> Tensor:
    """out_i = sum_{j<=i} (q_i . k_j) v_j, computed chunk by chunk in the inputs' dtype.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        chunk_size: positions per chunk; None picks one from C and M.

    Returns:
        (B, H, N, M) in the dtype of the inputs (callers cast to the accumulation dtype first).
    """
    batch, heads, length, feature_dim = q.shape
    value_dim = v.shape[-1]
    chunk = min(chunk_size or default_chunk_size(feature_dim, value_dim), length)
    padding = (-length) % chunk
    if padding:
        # zero rows add nothing to any state and their outputs are cut off below
        q, k, v = (F.pad(t, (0, 0, 0, padding)) for t in (q, k, v))
    n_chunks = (length + padding) // chunk
    q_chunks = q.reshape(batch, heads, n_chunks, chunk, feature_dim)  # (B, H, nc, L, C)
    k_chunks = k.reshape(batch, heads, n_chunks, chunk, feature_dim)  # (B, H, nc, L, C)
    v_chunks = v.reshape(batch, heads, n_chunks, chunk, value_dim)  # (B, H, nc, L, M)

    keep = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    similarities = (q_chunks @ k_chunks.transpose(-1, -2)).masked_fill(~keep, 0.0)  # (B, H, nc, L, L)
    intra_chunk = similarities @ v_chunks  # (B, H, nc, L, M)

    chunk_states = k_chunks.transpose(-1, -2) @ v_chunks  # (B, H, nc, C, M)
    inclusive = chunk_states.cumsum(dim=2)
    preceding_states = torch.cat(  # state before each chunk: exclusive prefix sum
        [torch.zeros_like(inclusive[:, :, :1]), inclusive[:, :, :-1]], dim=2
    )  # (B, H, nc, C, M)
    inter_chunk = q_chunks @ preceding_states  # (B, H, nc, L, M)

    out = (intra_chunk + inter_chunk).reshape(batch, heads, n_chunks * chunk, value_dim)
    return out[:, :, :length]
