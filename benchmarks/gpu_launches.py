"""The units of the GPU performance model (benchmarks/gpu_model.py): a call's shape and one kernel launch."""

from __future__ import annotations

import math
from dataclasses import dataclass

CHUNK = 64  # positions per chunk (tile::kChunk)
F32 = 4


@dataclass(frozen=True)
class Shape:
    """q, k (B*H = heads, n, c) and v (heads, n, m) in a dtype of ``size`` bytes, planned as on an H100 / H200."""

    heads: int
    n: int
    c: int
    m: int
    size: int = 2

    @property
    def chunks(self) -> int:
        return math.ceil(self.n / CHUNK)

    @property
    def value_width(self) -> int:
        """mt: value columns per block, the widest (up to 64) whose tiles fit (all do in a Hopper's 227 KiB)."""
        return 16 * math.ceil(min(self.m, 64) / 16)

    @property
    def value_tiles(self) -> int:
        return math.ceil(self.m / self.value_width)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its name, blocks (0 for an ATen kernel), global bytes read and written, FLOPs, and the
    rate (a key of benchmarks.gpu_model.RATES) its FLOPs run at: bf16 tensor cores, TF32 ones, or fp32 CUDA cores."""

    kernel: str
    blocks: int
    read: int
    written: int
    flops: int = 0
    rate: str = "tensor"
