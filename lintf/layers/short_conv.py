"""A short causal depthwise convolution over time, with the state that continues it."""

from __future__ import annotations

import itertools
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ShortConvolution(nn.Conv1d):
    """Each channel mixes its last ``kernel_size`` positions (causal, depthwise), then an activation.

    The state is the last ``kernel_size - 1`` inputs (B, C, K - 1), zeros before a sequence starts, so a
    sequence split anywhere and continued from the state gives the unsplit outputs. Packed documents
    (``cu_seqlens``): each document reads its own state (batch D) before its start, never the previous
    document, and leaves its own.

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

    def forward(  # type: ignore[override]
        self, x: Tensor, cache: Tensor, cu_seqlens: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """x (B, N, C) and the state before it (B, C, K - 1) -> (out (B, N, C), the state after x).

        Args:
            x: (B, N, C) inputs; (1, N, C) with ``cu_seqlens``.
            cache: (B, C, K - 1) the inputs before x; (D, C, K - 1), one per document, with ``cu_seqlens``.
            cu_seqlens: (D + 1,) int boundaries of D documents packed in x, or None.
        """
        window = self.kernel_size[0] - 1
        if cu_seqlens is not None:
            return self._packed(x, cache, cu_seqlens)
        full = torch.cat([cache.to(x.dtype), x.transpose(1, 2)], dim=-1)  # (B, C, K - 1 + N)
        out = self._convolve(full)  # (B, C, N)
        return out.transpose(1, 2), full[..., full.shape[-1] - window:]

    def _convolve(self, full: Tensor) -> Tensor:
        """(B, C, K - 1 + L) -> (B, C, L): the convolution (and activation) of each position after the first K - 1."""
        out = F.conv1d(full, self.weight.to(full.dtype), None if self.bias is None else self.bias.to(full.dtype),
                       groups=self.groups)
        return F.silu(out) if self.activation == "silu" else out

    def _packed(self, x: Tensor, cache: Tensor, cu_seqlens: Tensor) -> tuple[Tensor, Tensor]:
        """Each document behind its own state: one convolution over [state_0, doc_0, state_1, doc_1, ...]."""
        window = self.kernel_size[0] - 1
        bounds = cu_seqlens.tolist()
        inputs, cache = x[0].transpose(0, 1), cache.to(x.dtype)  # (C, N), (D, C, K - 1)
        pieces = [part for d, (start, stop) in enumerate(itertools.pairwise(bounds))
                  for part in (cache[d], inputs[:, start:stop])]
        full = torch.cat(pieces, dim=-1)[None]  # (1, C, N + D (K - 1))
        out = self._convolve(full)[0]  # (C, N + (D - 1)(K - 1)): outputs at each position after K - 1
        # document d's positions sit d (K - 1) outputs further on, its last K - 1 inputs end there + K - 1
        lengths = torch.tensor([stop - start for start, stop in itertools.pairwise(bounds)], device=x.device)
        shift = (torch.arange(len(lengths), device=x.device) * window).repeat_interleave(lengths)  # (N,)
        positions = torch.arange(x.shape[1], device=x.device) + shift  # (N,)
        ends = [stop + (d + 1) * window for d, stop in enumerate(bounds[1:])]
        states = torch.stack([full[0, :, end - window:end] for end in ends])  # (D, C, K - 1)
        return out[:, positions].transpose(0, 1)[None], states

