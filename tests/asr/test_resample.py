"""The sinc resampler and speed perturbation against analytic tones and scipy's polyphase resampler."""

import math

import numpy as np
import pytest
import torch

from lintf.asr.features.resample import resample
from lintf.asr.features.speed_perturbation import change_speed


@pytest.mark.parametrize("orig,new", [(22_050, 16_000), (8_000, 16_000), (44_100, 16_000), (16_000, 8_000)])
def test_tone_is_preserved(orig, new):
    frequency = 440.0
    n = orig  # one second
    x = torch.sin(2 * math.pi * frequency * torch.arange(n, dtype=torch.float64) / orig)
    y = resample(x, orig, new)
    assert y.shape == (math.ceil(n * new / orig),)
    expected = torch.sin(2 * math.pi * frequency * torch.arange(y.numel(), dtype=torch.float64) / new)
    inner = slice(new // 20, -new // 20)  # away from the zero-padded edges
    assert (y[inner] - expected[inner]).abs().max() < 2e-3


def test_downsampling_removes_frequencies_above_new_nyquist():
    x = torch.sin(2 * math.pi * 6000.0 * torch.arange(16_000, dtype=torch.float64) / 16_000)  # above 4 kHz
    y = resample(x, 16_000, 8_000)
    assert y[400:-400].abs().max() < 0.01  # would alias to 2 kHz without the low-pass


def test_matches_scipy_resample_poly():
    signal = pytest.importorskip("scipy.signal")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4410)
    b, a = signal.butter(8, 0.5)  # band-limit to 5.5 kHz so both resamplers are near-exact
    x = signal.filtfilt(b, a, x).copy()
    ours = resample(torch.from_numpy(x), 22_050, 16_000).numpy()
    theirs = signal.resample_poly(x, 320, 441)
    inner = slice(200, -200)
    assert np.abs(ours[inner] - theirs[inner]).max() < 0.02 * np.abs(theirs).max()


def test_batched_and_identity():
    x = torch.randn(2, 3, 1000)
    y = resample(x, 8000, 16_000)
    torch.testing.assert_close(y[1, 2], resample(x[1, 2], 8000, 16_000))
    assert resample(x, 16_000, 16_000) is x
    with pytest.raises(ValueError, match="sample rates"):
        resample(x, 0, 16_000)


@pytest.mark.parametrize("factor", [0.9, 1.13])
def test_speed_change_scales_duration_and_frequency(factor):
    rate, frequency = 16_000, 500.0
    x = torch.sin(2 * math.pi * frequency * torch.arange(rate, dtype=torch.float64) / rate)
    y = change_speed(x, rate, factor)
    assert abs(y.numel() - rate / factor) <= 1
    expected = torch.sin(2 * math.pi * frequency * factor * torch.arange(y.numel(), dtype=torch.float64) / rate)
    inner = slice(800, -800)
    assert (y[inner] - expected[inner]).abs().max() < 2e-3
    with pytest.raises(ValueError, match=r"speed factor must be in \[0.5, 2\]"):
        change_speed(x, rate, 3.0)
