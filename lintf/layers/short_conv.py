"""A short causal depthwise convolution over time, with the state that continues it."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ShortConvolution(nn.Conv1d):
    """Each channel mixes its last ``kernel_size`` positions (causal, depthwise), then an activation.

    The state is the last ``kernel_size - 1`` inputs (B, C, K - 1), zeros before a sequence starts, so a
    sequence split anywhere and continued from the state gives the unsplit outputs.

    Args:
        channels: C, the channels convolved (each with its own kernel).
        kernel_size: K, positions each output reads (the current one and K - 1 before it).
        bias: add a learned bias per channel.
        activation: "silu" after the convolution, or None.
    """

    def __init__(self, channels: int, kernel_size: int, bias: bool = False,
                 activation: Literal["silu"] | None = "silu") -> None:
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1:
            raise ValueError(f"short_conv: the kernel size must be a positive int, got {kernel_size!r}")
        if activation not in ("silu", None):
            raise ValueError(f"short_conv: activation must be 'silu' or None, got {activation!r}")
        super().__init__(channels, channels, kernel_size, groups=channels, bias=bias)
        self.activation = activation

    def forward(self, x: Tensor, cache: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        """x (B, N, C) and the state before it (B, C, K - 1) -> (out (B, N, C), the state after x)."""
        window = self.kernel_size[0] - 1
        full = torch.cat([cache.to(x.dtype), x.transpose(1, 2)], dim=-1)  # (B, C, K - 1 + N)
        out = F.conv1d(full, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype),
                       groups=self.groups)  # (B, C, N)
        out = F.silu(out) if self.activation == "silu" else out
        return out.transpose(1, 2), full[..., full.shape[-1] - window:]

