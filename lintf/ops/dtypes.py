"""Accumulation dtype of the causal-product ops: the one rule every path follows."""

from __future__ import annotations

import torch


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp64 stays fp64; every other float type accumulates in fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32
