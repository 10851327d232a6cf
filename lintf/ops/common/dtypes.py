"""Accumulation dtype of the causal-product ops: the one rule every path follows."""

from __future__ import annotations

import torch


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp64 stays fp64; every other float type accumulates in fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# Device types with an autocast mode. Checked by name: torch.compile in torch 2.11 cannot trace
# torch.amp.is_autocast_available (a C++ builtin), while torch.is_autocast_enabled folds to a constant.
_AUTOCAST_DEVICE_TYPES = frozenset({"cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu"})


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for device_type (False for device types without an autocast mode)."""
    return device_type in _AUTOCAST_DEVICE_TYPES and torch.is_autocast_enabled(device_type)
