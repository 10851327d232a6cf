"""Log-mel features against an independent numpy implementation (explicit framing + rfft, loop filters)."""

import numpy as np
import pytest
import torch

from lintf.asr.features.log_mel import LogMel, mel_filterbank, normalize_utterance
from lintf.asr.features.frequency_warp import warp_frequencies


def numpy_filterbank(n_fft: int, n_mels: int, rate: int, f_min: float, f_max: float) -> np.ndarray:
    """Triangles built one frequency at a time from the HTK formula (different code path)."""
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    edges = [hz(m) for m in np.linspace(mel(f_min), mel(f_max), n_mels + 2)]
    freqs = np.arange(n_fft // 2 + 1) * rate / n_fft
    bank = np.zeros((len(freqs), n_mels))
    for m in range(n_mels):
        left, centre, right = edges[m], edges[m + 1], edges[m + 2]
        for k, f in enumerate(freqs):
            if left < f <= centre:
                bank[k, m] = (f - left) / (centre - left)
            elif centre < f < right:
                bank[k, m] = (right - f) / (right - centre)
    return bank


def numpy_log_mel(signal: np.ndarray, rate: int, n_mels: int) -> np.ndarray:
    win, hop, n_fft = 400, 160, 512
    padded = np.pad(signal, n_fft // 2, mode="reflect")
    window = np.zeros(n_fft)
    window[(n_fft - win) // 2 : (n_fft - win) // 2 + win] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)
    frames = np.stack([padded[i * hop : i * hop + n_fft] * window for i in range(len(signal) // hop + 1)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return np.log(power @ numpy_filterbank(n_fft, n_mels, rate, 0.0, rate / 2) + 1e-6)


def test_filterbank_matches_numpy():
    ours = mel_filterbank(257, 80, 16_000, 0.0, 8000.0).numpy()
    np.testing.assert_allclose(ours, numpy_filterbank(512, 80, 16_000, 0.0, 8000.0), atol=1e-5)
    assert (ours.max(axis=0) > 0.3).all()  # every filter covers at least one bin


def test_log_mel_matches_numpy():
    rng = np.random.default_rng(0)
    signal = (rng.standard_normal(8000) * 0.1 + np.sin(np.arange(8000) * 0.3)).astype(np.float32)
    ours = LogMel(16_000, 80)(torch.from_numpy(signal)).numpy()
    reference = numpy_log_mel(signal.astype(np.float64), 16_000, 80)
    assert ours.shape == (8000 // 160 + 1, 80)
    np.testing.assert_allclose(ours, reference, atol=2e-3, rtol=1e-3)


def test_log_mel_batches_like_single_utterances():
    extractor = LogMel(16_000, 40)
    batch = torch.randn(3, 4000)
    single = torch.stack([extractor(x) for x in batch])
    torch.testing.assert_close(extractor(batch), single, atol=1e-4, rtol=1e-4)


def test_tone_lands_in_its_mel_band():
    t = torch.arange(16_000) / 16_000
    features = LogMel(16_000, 80)(torch.sin(2 * torch.pi * 1000 * t))
    centre_bins = mel_filterbank(257, 80, 16_000, 0.0, 8000.0)[32]  # the FFT bin nearest 1 kHz (32 * 31.25 Hz)
    assert features[50].argmax() == centre_bins.argmax()


def test_normalize_utterance():
    x = torch.randn(100, 80) * 3 + 5
    y = normalize_utterance(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(80), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(80), atol=1e-3, rtol=0)


def test_vtlp_warp_is_piecewise_linear_and_keeps_the_band():
    hz = torch.linspace(0, 8000, 801, dtype=torch.float64)
    assert torch.equal(warp_frequencies(hz, 1.0, 8000.0), hz)
    for alpha in (0.9, 1.1):
        warped = warp_frequencies(hz, alpha, 8000.0)
        cut = 4800 * min(alpha, 1) / alpha
        assert torch.allclose(warped[hz <= cut], alpha * hz[hz <= cut])
        assert float(warped[0]) == 0.0 and abs(float(warped[-1]) - 8000.0) < 1e-9
        assert bool((warped.diff() > 0).all())  # monotone: no two frequencies swap
    with pytest.raises(ValueError, match="must be > 0"):
        warp_frequencies(hz, 0.0, 8000.0)


def test_vtlp_moves_a_tone_to_the_band_of_the_scaled_frequency():
    rate, f0, alpha = 16_000, 1000.0, 1.1
    t = torch.arange(rate) / rate
    tone = torch.sin(2 * torch.pi * f0 * t)
    features = LogMel()
    peak = lambda x: int(x.mean(0).argmax())  # noqa: E731
    shifted = peak(features(torch.sin(2 * torch.pi * alpha * f0 * t)))
    assert peak(features(tone, warp=alpha)) == shifted != peak(features(tone))
    assert torch.equal(features(tone, warp=1.0), features(tone))
