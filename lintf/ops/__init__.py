"""Causal product ops: the one entry point every causal linear attention goes through.

``causal_linear_attention`` and ``causal_dot_product`` validate their inputs, accumulate in
fp32 (fp64 for fp64 inputs) and return the input dtype. Today they run the pure-PyTorch
chunked path (``chunked.py``); ``reference.py`` holds the naive O(N^2) forms used by tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops.chunked import chunked_causal_product

__all__ = ["accumulation_dtype", "causal_dot_product", "causal_linear_attention"]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp64 stays fp64; every other float type accumulates in fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_causal_product_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise ValueError unless q, k (B, H, N, C) and v (B, H, N, M) agree."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() != 4:
            raise ValueError(
                f"causal product: {name} must be 4-D (B, H, N, features), got shape {tuple(tensor.shape)}"
            )
        if tensor.dtype not in _FLOAT_DTYPES:
            raise ValueError(
                f"causal product: {name} has dtype {tensor.dtype}; allowed: "
                + ", ".join(str(d) for d in _FLOAT_DTYPES)
            )
    if q.shape != k.shape:
        raise ValueError(
            f"causal product: q and k must have the same shape (B, H, N, C), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"causal product: v must be (B, H, N, M) with (B, H, N) = {tuple(q.shape[:3])} as in q, "
            f"got {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"causal product: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"causal product: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")


def causal_dot_product(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Numerator of causal linear attention: out_i = sum_{j<=i} (q_i . k_j) v_j.

    Args:
        q: (B, H, N, C) feature-mapped queries.
        k: (B, H, N, C) feature-mapped keys.
        v: (B, H, N, M) values.

    Returns:
        (B, H, N, M) in the dtype of v.
    """
    check_causal_product_inputs(q, k, v)
    acc = accumulation_dtype(v.dtype)
    return chunked_causal_product(q.to(acc), k.to(acc), v.to(acc)).to(v.dtype)


def causal_linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Causal linear attention with its normaliser.

    out_i = sum_{j<=i} (q_i . k_j) v_j / (sum_{j<=i} q_i . k_j + eps)

    Args:
        q: (B, H, N, C) feature-mapped (non-negative) queries.
        k: (B, H, N, C) feature-mapped (non-negative) keys.
        v: (B, H, N, M) values.
        eps: added to the denominator.

    Returns:
        (B, H, N, M) in the dtype of v.
    """
    check_causal_product_inputs(q, k, v)
    acc = accumulation_dtype(v.dtype)
    values = v.to(acc)
    # the normaliser rides along as a column of ones: one pass gives numerator and denominator
    values_and_ones = torch.cat([values, values.new_ones(*values.shape[:-1], 1)], dim=-1)  # (B, H, N, M+1)
    product = chunked_causal_product(q.to(acc), k.to(acc), values_and_ones)
    numerator, denominator = product[..., :-1], product[..., -1:]
    return (numerator / (denominator + eps)).to(v.dtype)
