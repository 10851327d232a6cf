"""Read and write audio files: wav with Python's ``wave``; flac, ogg and others with soundfile."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch
from torch import Tensor


class AudioError(ValueError):
    """An audio file that is missing or cannot be decoded."""


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as file:
        width, channels, rate = file.getsampwidth(), file.getnchannels(), file.getframerate()
        raw = file.readframes(file.getnframes())
    if width == 1:
        samples = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        samples = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 4:
        samples = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    else:
        raise AudioError(f"{path}: unsupported {8 * width}-bit wav; supported: 8, 16 and 32-bit PCM")
    return samples.reshape(-1, channels), rate


def _read_soundfile(path: Path) -> tuple[np.ndarray, int]:
    import soundfile

    samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return samples, rate


def load_audio(path: str | Path) -> tuple[Tensor, int]:
    """Decode ``path`` to a mono float32 waveform in [-1, 1] (channels averaged).

    Returns:
        waveform (T,) and its sample rate in Hz.

    Raises:
        AudioError: the file is missing, empty or not decodable (the message names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"audio file not found: {path}")
    try:
        samples, rate = _read_wav(path) if path.suffix.lower() == ".wav" else _read_soundfile(path)
    except AudioError:
        raise
    except Exception as error:  # wave.Error, EOFError, soundfile.LibsndfileError, ...
        raise AudioError(f"cannot decode {path}: {type(error).__name__}: {error}") from None
    if samples.shape[0] == 0:
        raise AudioError(f"{path} contains no samples")
    return torch.from_numpy(np.ascontiguousarray(samples.mean(axis=1))), int(rate)


def write_wav(path: str | Path, waveform: Tensor, sample_rate: int) -> None:
    """Write a mono waveform (T,) in [-1, 1] as 16-bit PCM wav (values outside are clipped)."""
    pcm = (waveform.clamp(-1.0, 32767 / 32768) * 32768.0).round().to(torch.int16).numpy()
    with wave.open(str(path), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(sample_rate)
        file.writeframes(pcm.astype("<i2").tobytes())
