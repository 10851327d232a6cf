"""Log-mel filterbank features in torch: STFT power spectrum -> triangular mel filters -> log."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lintf.asr.features.frequency_warp import warp_frequencies


def hz_to_mel(hz: Tensor) -> Tensor:
    """HTK mel scale: 2595 * log10(1 + f / 700)."""
    return 2595.0 * torch.log10(1.0 + hz / 700.0)


def mel_to_hz(mel: Tensor) -> Tensor:
    """Inverse of ``hz_to_mel``."""
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_filterbank(
    n_freqs: int, n_mels: int, sample_rate: int, f_min: float, f_max: float, warp: float = 1.0
) -> Tensor:
    """Triangular filters (n_freqs, n_mels) on the HTK mel scale, peak 1, no area normalisation.

    Filter m rises linearly from mel point m to m+1 and falls to m+2, where the n_mels + 2 points
    are equally spaced in mel between f_min and f_max; n_freqs STFT bins span 0 .. sample_rate/2.
    ``warp`` != 1 moves each bin to its VTLP-warped frequency first (``lintf.asr.features.frequency_warp``).
    """
    if not 0 <= f_min < f_max <= sample_rate / 2:
        raise ValueError(f"need 0 <= f_min ({f_min}) < f_max ({f_max}) <= sample_rate / 2 ({sample_rate / 2})")
    bins = torch.linspace(0, sample_rate / 2, n_freqs, dtype=torch.float64)  # (F,)
    if warp != 1.0:
        bins = warp_frequencies(bins, warp, sample_rate / 2)
    points = mel_to_hz(torch.linspace(float(hz_to_mel(torch.tensor(f_min))), float(hz_to_mel(torch.tensor(f_max))),
                                      n_mels + 2, dtype=torch.float64))  # (M+2,)
    lower, centre, upper = points[:-2], points[1:-1], points[2:]  # (M,) each
    rising = (bins[:, None] - lower) / (centre - lower)  # (F, M)
    falling = (upper - bins[:, None]) / (upper - centre)
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()


class LogMel(nn.Module):
    """Waveform (T,) or (B, T) at ``sample_rate`` -> log-mel features (..., frames, n_mels).

    Frames are ``win_ms`` long (Hann window), every ``hop_ms``; frame i is centred on sample
    i * hop (the signal is reflect-padded), so there are T // hop + 1 frames.

    Args:
        sample_rate: input rate in Hz.
        n_mels: mel filters.
        win_ms: window length in milliseconds.
        hop_ms: frame shift in milliseconds.
        f_min: lowest filter edge in Hz.
        f_max: highest filter edge in Hz; None uses sample_rate / 2.
        floor: added to the mel energies before the log (avoids log 0).
    """

    def __init__(
        self,
        sample_rate: int = 16_000,
        n_mels: int = 80,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        f_min: float = 0.0,
        f_max: float | None = None,
        floor: float = 1e-6,
    ) -> None:
        super().__init__()
        self.win_length = round(sample_rate * win_ms / 1000)
        self.hop_length = round(sample_rate * hop_ms / 1000)
        self.n_fft = 2 ** math.ceil(math.log2(self.win_length))
        self.floor = floor
        self.filterbank_arguments = (self.n_fft // 2 + 1, n_mels, sample_rate, f_min, f_max or sample_rate / 2)
        self.register_buffer("window", torch.hann_window(self.win_length), persistent=False)
        self.register_buffer(
            "filters", mel_filterbank(*self.filterbank_arguments),
            persistent=False,
        )

    def frames(self, n_samples: int) -> int:
        """Number of feature frames for a waveform of ``n_samples``."""
        return n_samples // self.hop_length + 1

    def forward(self, waveform: Tensor, warp: float = 1.0) -> Tensor:
        """Log-mel features; ``warp`` != 1 uses a VTLP-warped filterbank (training augmentation)."""
        if warp == 1.0:
            filters = self.filters
        else:
            filters = mel_filterbank(*self.filterbank_arguments, warp=warp).to(self.filters)
        spectrum = torch.stft(
            waveform, self.n_fft, self.hop_length, self.win_length, self.window,
            center=True, pad_mode="reflect", return_complex=True,
        )  # (..., F, frames)
        power = spectrum.real**2 + spectrum.imag**2
        mel = power.transpose(-1, -2) @ filters  # (..., frames, n_mels)
        return torch.log(mel + self.floor)


def normalize_utterance(features: Tensor, eps: float = 1e-5) -> Tensor:
    """Zero mean, unit variance per mel bin over the frames of one utterance (frames, n_mels)."""
    mean = features.mean(dim=0, keepdim=True)
    std = features.std(dim=0, keepdim=True, unbiased=False)
    return (features - mean) / (std + eps)
