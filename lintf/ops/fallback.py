"""Pure-PyTorch causal products: the always-available path behind ``lintf.ops``.

Runs wherever torch runs (no compiler, unusual devices) and is the baseline the compiled op is
benchmarked against. Inputs are assumed validated; they are cast to the accumulation dtype
(fp32, or fp64 for fp64), the chunked product runs there, and results return in v's dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.chunked import chunked_causal_product


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp64 stays fp64; every other float type accumulates in fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def causal_dot_product_pytorch(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Numerator sum_{j<=i} (q_i . k_j) v_j with q, k (B, H, N, C), v (B, H, N, M) -> (B, H, N, M)."""
    acc = accumulation_dtype(v.dtype)
    return chunked_causal_product(q.to(acc), k.to(acc), v.to(acc)).to(v.dtype)


def causal_linear_attention_pytorch(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Normalised causal linear attention with q, k (B, H, N, C), v (B, H, N, M) -> (B, H, N, M)."""
    acc = accumulation_dtype(v.dtype)
    values = v.to(acc)
    # the normaliser rides along as a column of ones: one pass gives numerator and denominator
    values_and_ones = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)  # (B, H, N, M+1)
    product = chunked_causal_product(q.to(acc), k.to(acc), values_and_ones)
    numerator, denominator = product[..., :-1], product[..., -1:]
    return (numerator / (denominator + eps)).to(v.dtype)
