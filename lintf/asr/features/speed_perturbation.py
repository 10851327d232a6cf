"""Speed perturbation (Ko et al., 2015): play a waveform faster or slower, tempo and pitch together.

Reading a 16 kHz recording as if it had been sampled at ``factor * 16`` kHz and resampling it
back to 16 kHz shortens it by ``factor`` and raises every frequency (pitch and formants) by
``factor``: a cheap imitation of another speaker talking at another rate.
"""

from __future__ import annotations

from torch import Tensor

from lintf.asr.features.resample import resample


def change_speed(waveform: Tensor, sample_rate: int, factor: float, step: float = 0.01) -> Tensor:
    """``waveform`` (..., T) at ``sample_rate`` played ``factor`` times faster, at the same rate.

    Args:
        waveform: float samples, time last.
        sample_rate: rate of the input and the output in Hz.
        factor: > 1 faster and higher, < 1 slower and lower; rounded to a multiple of ``step``
            (so the polyphase resampler works with small rate ratios).
        step: resolution of the factor.

    Returns:
        (..., about T / factor) samples.
    """
    if not 0.5 <= factor <= 2.0:
        raise ValueError(f"speed factor must be in [0.5, 2], got {factor}")
    quantised = round(factor / step) * step
    return resample(waveform, round(sample_rate * quantised), sample_rate)
