"""Pure-PyTorch chunked causal product: the always-available path.

The sequence is cut into chunks of L positions. Inside a chunk the product is a masked
(L, L) matmul; across chunks a running state S = sum_j k_j v_j^T carries the prefix. The
per-chunk states are summed with an exclusive cumulative sum, so the whole computation is a
handful of batched matmuls and never builds an (N, C, M) tensor: the largest intermediates
are (N/L, C, M) states and (N/L, L, L) intra-chunk similarities.

The backward pass saves only q, k, v and is itself three chunked products (paper eq. 13-15):
dq = causal(dO, v, k), and dk, dv are anti-causal products (sums over i >= j, the same
algorithm with the mask and the prefix sum reversed). Autograd keeps no intermediate alive.
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
    """out_i = sum_{j<=i} (q_i . k_j) v_j, differentiable with a memory-lean backward.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        chunk_size: positions per chunk; None picks one from C and M.

    Returns:
        (B, H, N, M) in the dtype of the inputs (callers cast to the accumulation dtype first).
    """
    return _ChunkedCausalProduct.apply(q, k, v, chunk_size)


class _ChunkedCausalProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, chunk_size: int | None) -> Tensor:
        ctx.save_for_backward(q, k, v)
        ctx.chunk_size = chunk_size
        return causal_product_forward(q, k, v, chunk_size)

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v = ctx.saved_tensors
        chunk = ctx.chunk_size
        grad_q = grad_k = grad_v = None
        if ctx.needs_input_grad[0]:  # dq_i = sum_{j<=i} (dO_i . v_j) k_j
            grad_q = causal_product_forward(grad_out, v, k, chunk)
        if ctx.needs_input_grad[1]:  # dk_j = sum_{i>=j} (v_j . dO_i) q_i
            grad_k = causal_product_forward(v, grad_out, q, chunk, anti_causal=True)
        if ctx.needs_input_grad[2]:  # dv_j = sum_{i>=j} (k_j . q_i) dO_i
            grad_v = causal_product_forward(k, q, grad_out, chunk, anti_causal=True)
        return grad_q, grad_k, grad_v, None


def causal_product_forward(
    q: Tensor, k: Tensor, v: Tensor, chunk_size: int | None = None, anti_causal: bool = False
) -> Tensor:
    """out_i = sum_{j<=i} (q_i . k_j) v_j (or j >= i if anti_causal), chunk by chunk, no autograd graph.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        chunk_size: positions per chunk; None picks one from C and M.
        anti_causal: sum over later positions instead (the backward pass needs both).

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

    keep = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device)
    keep = keep.triu() if anti_causal else keep.tril()
    similarities = q_chunks @ k_chunks.transpose(-1, -2)  # (B, H, nc, L, L)
    out = similarities.masked_fill_(~keep, 0.0) @ v_chunks  # (B, H, nc, L, M): within-chunk terms
    del similarities  # free before the state tensors are built: this keeps the peak low
    if n_chunks > 1:
        sources, targets = (slice(1, None), slice(None, -1)) if anti_causal else (slice(None, -1), slice(1, None))
        states = k_chunks[:, :, sources].transpose(-1, -2) @ v_chunks[:, :, sources]  # (B, H, nc-1, C, M)
        # the state seen by a chunk sums every earlier (anti-causal: later) chunk's state
        states = states.flip(2).cumsum_(dim=2).flip(2) if anti_causal else states.cumsum_(dim=2)
        out[:, :, targets] += q_chunks[:, :, targets] @ states  # (B, H, nc-1, L, M)
    return out.reshape(batch, heads, n_chunks * chunk, value_dim)[:, :, :length]
