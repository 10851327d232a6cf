"""Local temporal context for speech encoders: residual depthwise-separable 1-D convolution blocks.

Linear attention mixes frames through one global summary per head, so it is poor at the sharp,
local focus that telling phones apart needs. A few convolution blocks between the subsampling
front end and the encoder give every frame its neighbours (as Conformer's convolution module
does, here once before the encoder rather than inside every layer).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class DepthwiseConvBlock(nn.Module):
    """x + Dropout(Linear(GELU(DepthwiseConv(LayerNorm(x))))), padded frames kept at zero.

    Args:
        d_model: width of the frames.
        kernel_size: frames seen by the depthwise convolution; odd, so the output stays aligned.
        dropout: dropout probability of the block's output.
    """

    def __init__(self, d_model: int, kernel_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd number, got {kernel_size}")
        self.norm = nn.LayerNorm(d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2, groups=d_model)
        self.pointwise = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        """x (B, T, d_model), padding (B, T) True at padded frames -> (B, T, d_model)."""
        h = self.norm(x)
        if padding is not None:
            h = h.masked_fill(padding[..., None], 0.0)  # padded frames must not leak into valid ones
        h = self.depthwise(h.transpose(1, 2)).transpose(1, 2)  # (B, d_model, T) conv -> (B, T, d_model)
        out = x + self.dropout(self.pointwise(F.gelu(h)))
        return out if padding is None else out.masked_fill(padding[..., None], 0.0)


class DepthwiseConvBlocks(nn.Module):
    """``n_blocks`` residual depthwise-convolution blocks in a row; 0 blocks is the identity.

    Args:
        d_model: width of the frames.
        n_blocks: residual convolution blocks.
        kernel_size: frames seen by each block's depthwise convolution (odd).
        dropout: dropout probability of each block's output.
    """

    def __init__(self, d_model: int, n_blocks: int, kernel_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        if n_blocks < 0:
            raise ValueError(f"n_blocks must be >= 0, got {n_blocks}")
        self.blocks = nn.ModuleList(DepthwiseConvBlock(d_model, kernel_size, dropout) for _ in range(n_blocks))

    def forward(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        """x (B, T, d_model), padding (B, T) True at padded frames -> (B, T, d_model)."""
        for block in self.blocks:
            x = block(x, padding)
        return x
