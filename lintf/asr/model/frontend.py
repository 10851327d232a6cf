"""Convolutional front end of speech encoders: two stride-2 convolutions, 4x fewer frames."""

from __future__ import annotations

from torch import Tensor, nn


def subsampled_lengths(lengths: Tensor) -> Tensor:
    """Frames after two (kernel 3, stride 2, no padding) convolutions: ((n - 1) // 2 - 1) // 2."""
    return ((lengths - 1) // 2 - 1) // 2


class Conv2dSubsampling(nn.Module):
    """Log-mel frames (B, T, n_mels) -> (B, T', d_model) with T' = subsampled_lengths(T).

    Args:
        n_mels: input feature bins.
        d_model: output width.
        channels: convolution channels.
    """

    def __init__(self, n_mels: int, d_model: int, channels: int = 64) -> None:
        super().__init__()
        self.convolutions = nn.Sequential(
            nn.Conv2d(1, channels, 3, stride=2), nn.ReLU(), nn.Conv2d(channels, channels, 3, stride=2), nn.ReLU()
        )
        frequencies = ((n_mels - 1) // 2 - 1) // 2
        self.projection = nn.Linear(channels * frequencies, d_model)

    def forward(self, features: Tensor) -> Tensor:
        x = self.convolutions(features.unsqueeze(1))  # (B, C, T', F')
        batch, channels, frames, frequencies = x.shape
        return self.projection(x.transpose(1, 2).reshape(batch, frames, channels * frequencies))
