"""Pure-PyTorch causal products: the always-available path behind ``lintf.ops``, chunked.

``causal_product_pytorch`` runs wherever torch runs (no compiler, unusual devices), is the baseline
the compiled op is benchmarked against and computes the compiled op's double backward. Inputs are
assumed validated; they are cast to the accumulation dtype (fp32, or fp64 for fp64), the chunked
product runs there, and outputs return in v's dtype (states stay in the accumulation dtype). Every
operation is differentiable, twice.

The chunked product cuts the sequence into chunks of L positions. Inside a chunk the product is a
masked (L, L) matmul; across chunks a running state S = sum_j k_j v_j^T carries the prefix. The
per-chunk states are summed with an exclusive cumulative sum, so the whole computation is a
handful of batched matmuls and never builds an (N, C, M) tensor: the largest intermediates
are (N/L, C, M) states and (N/L, L, L) intra-chunk similarities.

The backward pass saves only q, k, v and recomputes what it needs in one chunked sweep
(paper eq. 13-15: prefix sums for dq, suffix sums for dk and dv), so autograd keeps no
intermediate of the forward alive.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from lintf.ops.causal.state import LinearAttentionState
from lintf.ops.common.dtypes import accumulation_dtype, autocast_enabled


def default_chunk_size(feature_dim: int, value_dim: int) -> int:
    """Chunk length balancing intra-chunk work (N*L) against state memory (N*C*M/L)."""
    balanced = math.sqrt(max(1, feature_dim * value_dim))  # an empty C or M: any chunk works
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
        return (*causal_product_backward(q, k, v, grad_out.contiguous(), ctx.chunk_size), None)


def _chunked(tensors: tuple[Tensor, ...], chunk: int) -> tuple[Tensor, ...]:
    """(B, H, N, F) tensors -> (B, H, nc, L, F), zero-padded to a whole number of chunks.

    Zero rows add nothing to any sum and their outputs are cut off by the callers.
    """
    batch, heads, length = tensors[0].shape[:3]
    padding = (-length) % chunk
    n_chunks = (length + padding) // chunk
    if padding:
        tensors = tuple(F.pad(t, (0, 0, 0, padding)) for t in tensors)
    return tuple(t.reshape(batch, heads, n_chunks, chunk, t.shape[-1]) for t in tensors)


def _unchunked(x: Tensor, length: int) -> Tensor:
    """(B, H, nc, L, F) -> (B, H, N, F), dropping the padding rows."""
    batch, heads, n_chunks, chunk, features = x.shape
    return x.reshape(batch, heads, n_chunks * chunk, features)[:, :, :length]


def _chunk_length(q: Tensor, v: Tensor, chunk_size: int | None) -> int:
    return max(1, min(chunk_size or default_chunk_size(q.shape[-1], v.shape[-1]), q.shape[2]))  # N = 0: 1


def causal_product_forward(q: Tensor, k: Tensor, v: Tensor, chunk_size: int | None = None) -> Tensor:
    """out_i = sum_{j<=i} (q_i . k_j) v_j, chunk by chunk, without an autograd graph of its own.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        chunk_size: positions per chunk; None picks one from C and M.

    Returns:
        (B, H, N, M) in the dtype of the inputs (callers cast to the accumulation dtype first).
    """
    chunk = _chunk_length(q, v, chunk_size)
    q_chunks, k_chunks, v_chunks = _chunked((q, k, v), chunk)  # (B, H, nc, L, C|M)
    keep = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    similarities = q_chunks @ k_chunks.transpose(-1, -2)  # (B, H, nc, L, L)
    out = similarities.masked_fill_(~keep, 0.0) @ v_chunks  # (B, H, nc, L, M): within-chunk terms
    del similarities  # free before the state tensors are built: this keeps the peak low
    if q_chunks.shape[2] > 1:
        # state before chunk c = sum of the states k^T v of chunks 0..c-1 (exclusive prefix sum)
        earlier = (k_chunks[:, :, :-1].transpose(-1, -2) @ v_chunks[:, :, :-1]).cumsum_(dim=2)  # (.., nc-1, C, M)
        out[:, :, 1:] += q_chunks[:, :, 1:] @ earlier
    return _unchunked(out, q.shape[2])


def causal_product_backward(
    q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, chunk_size: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of the causal product (paper eq. 13-15) in one chunked sweep.

    dq_i = sum_{j<=i} (dO_i . v_j) k_j,  dk_j = sum_{i>=j} (dO_i . v_j) q_i,
    dv_j = sum_{i>=j} (q_i . k_j) dO_i. Within a chunk the masked (dO v^T) matrix serves dq and
    dk, and (q k^T) serves dv; across chunks a prefix sum of v k^T serves dq, and one suffix sum
    of q dO^T serves both dk and dv.

    Returns:
        dq (B, H, N, C), dk (B, H, N, C), dv (B, H, N, M).
    """
    chunk = _chunk_length(q, v, chunk_size)
    q_c, k_c, v_c, g_c = _chunked((q, k, v, grad_out), chunk)  # (B, H, nc, L, .)
    keep = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    similarities = (g_c @ v_c.transpose(-1, -2)).masked_fill_(~keep, 0.0)  # [i, j] = dO_i . v_j, j <= i
    grad_q = similarities @ k_c
    grad_k = similarities.transpose(-1, -2) @ q_c
    similarities = (q_c @ k_c.transpose(-1, -2)).masked_fill_(~keep, 0.0)  # [i, j] = q_i . k_j, j <= i
    grad_v = similarities.transpose(-1, -2) @ g_c
    del similarities
    if q_c.shape[2] > 1:
        earlier = (v_c[:, :, :-1].transpose(-1, -2) @ k_c[:, :, :-1]).cumsum_(dim=2)  # sum v k^T: (.., M, C)
        grad_q[:, :, 1:] += g_c[:, :, 1:] @ earlier
        del earlier
        later = (q_c[:, :, 1:].transpose(-1, -2) @ g_c[:, :, 1:]).flip(2).cumsum_(dim=2).flip(2)  # sum q dO^T
        grad_k[:, :, :-1] += v_c[:, :, :-1] @ later.transpose(-1, -2)
        grad_v[:, :, :-1] += k_c[:, :, :-1] @ later
    length = q.shape[2]
    return _unchunked(grad_q, length), _unchunked(grad_k, length), _unchunked(grad_v, length)


def causal_product_pytorch(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    eps: float,
    normalize: bool,
    initial_state: LinearAttentionState | None = None,
    final_state: bool = False,
) -> tuple[Tensor, LinearAttentionState | None]:
    """Causal linear attention (normalize) or its numerator, continuing from initial_state.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.
        eps: added to the denominator (normalize only).
        normalize: divide by q_i.z0 + sum_{j<=i} q_i.k_j + eps.
        initial_state: state of the preceding positions (accumulation dtype); None means zeros.
        final_state: also return the state after the last position (else None, at no cost).

    Returns:
        (B, H, N, M) output in v's dtype, and the final state or None.
    """
    device_type = q.device.type
    if autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):  # autocast would round the fp32 sums to its dtype
            return causal_product_pytorch(q, k, v, eps, normalize, initial_state, final_state)
    acc = accumulation_dtype(v.dtype)
    q, k, values = q.to(acc), k.to(acc), v.to(acc)
    value_dim = values.shape[-1]
    start = None if initial_state is None else initial_state.kv  # (B, H, C, M)
    if normalize:
        # the normaliser rides along as a column of ones: one pass gives numerator and denominator
        values = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)  # (B, H, N, M+1)
        if start is not None:
            start = torch.cat([start, initial_state.normaliser.unsqueeze(-1)], dim=-1)  # (B, H, C, M+1)
    product = chunked_causal_product(q, k, values)  # (B, H, N, M[+1])
    if start is not None:
        product = product + q @ start
    out = product[..., :value_dim] / (product[..., value_dim:] + eps) if normalize else product
    state = None
    if final_state:
        kv, normaliser = k.transpose(-1, -2) @ values[..., :value_dim], k.sum(dim=2)  # (B, H, C, M), (B, H, C)
        if initial_state is not None:
            kv, normaliser = kv + initial_state.kv, normaliser + initial_state.normaliser
        state = LinearAttentionState(kv, normaliser)
    return out.to(v.dtype), state


def causal_linear_attention_pytorch(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Normalised causal linear attention with q, k (B, H, N, C), v (B, H, N, M) -> (B, H, N, M)."""
    return causal_product_pytorch(q, k, v, eps, normalize=True)[0]
