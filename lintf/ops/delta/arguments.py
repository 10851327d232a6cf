"""Checks and preparation of the arguments the delta rule and gated linear attention share.

q, k (B, H, N, C) and v (B, H, N, M) of one float dtype and device, the scale, and autocast: under
autocast the ops run in the autocast dtype (like a matmul; fp64 inputs stay fp64) and accumulate in
fp32. Every check raises a ValueError naming the tensor, its shape and the one expected. The value
checks (ranges of gates and steps) are ``lintf.ops.common.arguments.check_range``.
"""

from __future__ import annotations

import numbers
import sys

import torch
from torch import Tensor

from lintf.ops.common.dtypes import autocast_enabled

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def autocast_inputs(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Under autocast, the float tensors in the autocast dtype unless one of them is fp64; else unchanged."""
    device_type = tensors[0].device.type
    if not autocast_enabled(device_type) or any(t.dtype == torch.float64 for t in tensors):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in tensors)


def check_qkv(owner: str, q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise ValueError unless q, k (B, H, N, C) and v (B, H, N, M) are float tensors of one dtype and device."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, Tensor) or tensor.dim() != 4 or tensor.dtype not in FLOAT_DTYPES:
            got = f"shape {tuple(tensor.shape)}, dtype {tensor.dtype}" if isinstance(tensor, Tensor) else type(tensor)
            raise ValueError(f"{owner}: {name} must be a 4-D float tensor (B, H, N, features), got {got}")
    if q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"{owner}: expected q, k (B, H, N, C) and v (B, H, N, M) with the same B, H, N; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError(
            f"{owner}: q, k, v must share a dtype and a device, got {q.dtype}/{q.device}, {k.dtype}/{k.device}, "
            f"{v.dtype}/{v.device}"
        )


def check_per_position(owner: str, name: str, tensor: object, q: Tensor, features: bool = False) -> None:
    """Raise ValueError unless ``tensor`` is a float tensor (B, H, N) (with ``features``: (B, H, N, C)) on q's device.

    Args:
        owner: the op, for messages.
        name: the argument's name, for messages.
        tensor: the given value.
        q: (B, H, N, C) validated queries.
        features: whether the tensor has one entry per feature (a per-channel gate) or one per position.
    """
    shape = tuple(q.shape) if features else tuple(q.shape[:3])
    layout = "(B, H, N, C)" if features else "(B, H, N)"
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{owner}: {name} must be a float tensor {layout} = {shape}, got {type(tensor).__name__}")
    if tuple(tensor.shape) != shape or tensor.dtype not in FLOAT_DTYPES or tensor.device != q.device:
        raise ValueError(
            f"{owner}: {name} must be a float tensor {layout} = {shape} on {q.device}, got shape "
            f"{tuple(tensor.shape)}, dtype {tensor.dtype} on {tensor.device}"
        )


def resolve_scale(owner: str, scale: object, features: int) -> float:
    """The output scale: ``features ** -0.5`` for None, else ``scale`` if it is a finite real number."""
    if scale is None:
        return features**-0.5 if features else 1.0
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not abs(float(scale)) <= sys.float_info.max:
        raise ValueError(f"{owner}: scale must be a finite number or None (C ** -0.5), got {scale!r}")
    return float(scale)
