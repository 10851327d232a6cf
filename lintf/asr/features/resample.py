"""Band-limited resampling by a windowed-sinc polyphase filter (the Julius / Kaldi method).

For rates reduced to ``orig`` -> ``new`` (divided by their gcd), output phase j of every block of
``new`` outputs reads input times ``(k*orig + j*orig/new)``: one FIR kernel per phase, all applied
by a single strided ``conv1d``. The kernel is a Hann-windowed sinc low-passed at
``rolloff * min(orig, new) / 2``, so downsampling does not alias.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def sinc_kernels(orig: int, new: int, zeros: int, rolloff: float, dtype: torch.dtype) -> tuple[Tensor, int]:
    """Polyphase kernels (new, 1, 2*width + orig) and ``width``, the padding on each side."""
    cutoff = min(orig, new) * rolloff  # in units where the input rate is ``orig``
    width = math.ceil(zeros * orig / cutoff)
    taps = torch.arange(-width, width + orig, dtype=torch.float64) / orig  # input offsets, in input periods / orig
    phases = -torch.arange(new, dtype=torch.float64)[:, None] / new
    t = (phases + taps) * cutoff  # (new, 2*width + orig), in units of zero crossings
    t = t.clamp(-zeros, zeros)
    window = torch.cos(t * math.pi / zeros / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / torch.where(t == 0, torch.ones_like(t), t))
    kernels = sinc * window * (cutoff / orig)
    return kernels.to(dtype)[:, None, :], width


def resample(waveform: Tensor, orig_rate: int, new_rate: int, zeros: int = 16, rolloff: float = 0.945) -> Tensor:
    """Resample ``waveform`` (..., T) from ``orig_rate`` to ``new_rate`` Hz.

    Args:
        waveform: float samples, time last.
        orig_rate: input sample rate in Hz.
        new_rate: output sample rate in Hz.
        zeros: sinc zero crossings on each side of the kernel centre (quality vs. cost).
        rolloff: cutoff as a fraction of the lower Nyquist frequency (below 1 to limit aliasing).

    Returns:
        (..., ceil(T * new_rate / orig_rate)) samples.
    """
    if orig_rate <= 0 or new_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_rate} -> {new_rate}")
    if not 0 < rolloff <= 1:
        raise ValueError(f"rolloff must be in (0, 1], got {rolloff}")
    if orig_rate == new_rate:
        return waveform
    divisor = math.gcd(orig_rate, new_rate)
    orig, new = orig_rate // divisor, new_rate // divisor
    kernels, width = sinc_kernels(orig, new, zeros, rolloff, waveform.dtype)
    shape, length = waveform.shape[:-1], waveform.shape[-1]
    x = F.pad(waveform.reshape(-1, 1, length), (width, width + orig))  # (B, 1, T + pad)
    y = F.conv1d(x, kernels.to(waveform.device), stride=orig)  # (B, new, blocks)
    y = y.transpose(1, 2).reshape(x.shape[0], -1)  # (B, blocks * new), phases interleaved
    out_length = math.ceil(new * length / orig)
    return y[:, :out_length].reshape(*shape, out_length)
