"""Causal product ops: the one entry point every causal linear attention goes through.

``causal_linear_attention`` and ``causal_dot_product`` validate their inputs, accumulate in
fp32 (fp64 for fp64 inputs) and return the input dtype (under autocast: the autocast dtype).
They run the compiled op ``lintf::causal_product`` (``csrc/``, registered in
``causal_product.py``, built or loaded by ``_ext.py``) when it is available for the inputs'
device, and the pure-PyTorch chunked path (``fallback.py``, ``chunked.py``) otherwise.
``reference.py`` holds the naive O(N^2) forms used by tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lintf.ops import _ext
from lintf.ops.causal_product import causal_product as _compiled_causal_product
from lintf.ops.fallback import accumulation_dtype, causal_dot_product_pytorch, causal_linear_attention_pytorch

__all__ = ["accumulation_dtype", "causal_dot_product", "causal_linear_attention", "compiled_op_available"]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@torch.compiler.assume_constant_result
def compiled_op_available(device_type: str) -> bool:
    """Whether the compiled op serves device_type ("cpu", "cuda"); builds it on first call."""
    return _ext.serves(device_type)


def _autocast_inputs(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Under autocast, run in the autocast dtype (like a matmul); fp64 inputs stay fp64."""
    device_type = q.device.type
    if not (torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)):
        return q, k, v
    if torch.float64 in (q.dtype, k.dtype, v.dtype):
        return q, k, v
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in (q, k, v))


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
        (B, H, N, M) in the dtype of v (the autocast dtype under autocast).
    """
    q, k, v = _autocast_inputs(q, k, v)
    check_causal_product_inputs(q, k, v)
    if compiled_op_available(q.device.type):
        return _compiled_causal_product(q, k, v, 0.0, False)
    return causal_dot_product_pytorch(q, k, v)


def causal_linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float = 1e-6) -> Tensor:
    """Causal linear attention with its normaliser.

    out_i = sum_{j<=i} (q_i . k_j) v_j / (sum_{j<=i} q_i . k_j + eps)

    Args:
        q: (B, H, N, C) feature-mapped (non-negative) queries.
        k: (B, H, N, C) feature-mapped (non-negative) keys.
        v: (B, H, N, M) values.
        eps: added to the denominator.

    Returns:
        (B, H, N, M) in the dtype of v (the autocast dtype under autocast).
    """
    q, k, v = _autocast_inputs(q, k, v)
    check_causal_product_inputs(q, k, v)
    if compiled_op_available(q.device.type):
        return _compiled_causal_product(q, k, v, float(eps), True)
    return causal_linear_attention_pytorch(q, k, v, eps)
