"""Read and write audio files, all through soundfile (libsndfile): WAV of any sample format
(8/16/24/32-bit PCM, float), FLAC, OGG/Vorbis, MP3 and the rest libsndfile decodes.

``audio_problem`` reads a file's header only (a WAV cut short shows there: fewer frames than its header
declares, or less audio than the manifest's duration), so a whole corpus can be checked before training in
well under a second per thousand files; only files of float samples, the one kind that can hold a
NaN or an infinity (which would make every gradient of its batch NaN), are decoded too. ``load_audio``
decodes the samples and refuses non-finite ones as well.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

READABLE = "audio in a format libsndfile decodes (WAV, FLAC, OGG/Vorbis, MP3, ...) with at least one sample"
"""What every audio file must be; the end of each decoding error."""
DURATION_TOLERANCE_S = 0.1
"""How far a file's length may differ from its manifest duration (or 2% of it, if more): rounding, not a cut."""
FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")
"""libsndfile sample formats that can hold NaN or infinity (integer PCM and codecs cannot)."""


class AudioError(ValueError):
    """An audio file that is missing or cannot be decoded."""


def _soundfile() -> ModuleType:
    try:
        import soundfile
    except ImportError as error:  # the wheel bundles libsndfile, so this is a missing extra
        raise ImportError(f"reading audio needs soundfile ({error}): pip install \"lintf[speech]\"") from None
    return soundfile


def _reason(error: Exception) -> str:
    """libsndfile's own words for a failure ("Format not recognised"), else the exception's.

    Args:
        error: what soundfile raised.
    """
    return str(getattr(error, "error_string", "") or error).strip().rstrip(".")


def nonfinite_samples(samples: np.ndarray, rate: int) -> str | None:
    """Which samples of ``samples`` are NaN or infinite, in words; None if all are finite.

    Args:
        samples: (frames, channels) as soundfile decodes them.
        rate: sample rate in Hz (to say where the first one is).
    """
    finite = np.isfinite(samples).all(axis=1)
    if finite.all():
        return None
    first = int(np.argmin(finite))
    return (f"{int((~finite).sum())} of {len(finite)} samples are not finite (NaN or infinity), the first at sample "
            f"{first} ({first / rate:.3f} s); audio samples must be finite numbers (repair or re-export the file)")


def declared_wav_frames(path: Path) -> int | None:
    """The frames a WAV file's header declares (its ``data`` chunk size over the frame size); None for another
    format or a header that leaves the length open (a stream written before its length was known)."""
    with open(path, "rb") as file:
        head = file.read(1 << 16)
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    offset, block_align = 12, None
    while offset + 8 <= len(head):
        chunk, size = head[offset:offset + 4], struct.unpack("<I", head[offset + 4:offset + 8])[0]
        if chunk == b"fmt " and offset + 22 <= len(head):
            block_align = struct.unpack("<H", head[offset + 20:offset + 22])[0]  # bytes per frame, all channels
        if chunk == b"data":
            unknown = size in (0, 0xFFFFFFFF) or not block_align
            return None if unknown else size // block_align
        offset += 8 + size + (size & 1)  # chunks are padded to an even size
    return None


def length_problem(path: Path, frames: int, rate: int, duration: float | None) -> str | None:
    """Why a file of ``frames`` at ``rate`` Hz is cut short: fewer frames than its header declares, or far less
    (or more) audio than the manifest's ``duration``; None if neither."""
    declared = declared_wav_frames(path)
    if declared is not None and frames < declared:
        return (f"truncated: {frames} of the {declared} frames its header declares ({frames / rate:.2f} of "
                f"{declared / rate:.2f} s); copy the whole file again")
    if duration is not None and abs(frames / rate - duration) > max(DURATION_TOLERANCE_S, 0.02 * duration):
        return (f"holds {frames / rate:.2f} s of audio, but the manifest's duration is {duration:g} s: a file cut "
                "short or the wrong file; fix the file or its duration")
    return None


def audio_problem(path: str | Path, duration: float | None = None) -> str | None:
    """Why ``path`` cannot be used as audio, from its header (and float samples) alone; None if it can.

    Args:
        path: an audio file.
        duration: the seconds of audio the manifest lists for it, compared with the file's (None: not compared).

    Returns:
        a short reason ("not found", "empty file (0 bytes)", libsndfile's complaint, "no samples ...",
        "... samples are not finite ..."), or None for a readable file with at least one sample, all
        finite. Only files of ``FLOAT_SUBTYPES`` are decoded to check their samples.
    """
    soundfile = _soundfile()
    path = Path(path)
    if not path.is_file():
        return "not found"
    size = path.stat().st_size
    if size == 0:
        return "empty file (0 bytes)"
    try:
        info = soundfile.info(str(path))
    except (soundfile.SoundFileError, RuntimeError, OSError) as error:
        return f"not decodable: {_reason(error)} ({size} bytes)"
    if info.frames <= 0:
        return f"no samples (a {info.format} header without audio data)"
    if info.subtype in FLOAT_SUBTYPES:
        try:
            samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        except (soundfile.SoundFileError, RuntimeError, OSError) as error:
            return f"not decodable: {_reason(error)} ({size} bytes)"
        nonfinite = nonfinite_samples(samples, rate)
        if nonfinite is not None:
            return nonfinite
    return length_problem(path, info.frames, info.samplerate, duration)


def load_audio(path: str | Path) -> tuple[Tensor, int]:
    """Decode ``path`` to a mono float32 waveform in [-1, 1] (channels averaged).

    Args:
        path: an audio file in any format libsndfile reads.

    Returns:
        waveform (T,) and its sample rate in Hz.

    Raises:
        AudioError: the file is missing, empty, not decodable or holds a NaN or infinite sample (the
            message names the file).
    """
    soundfile = _soundfile()
    path = Path(path)
    try:
        samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.SoundFileError, RuntimeError, OSError) as error:  # the header check says why, if it can
        why = audio_problem(path) or f"not decodable: {_reason(error)}"
        raise AudioError(f"audio file {path}: {why}; expected {READABLE}") from None
    if samples.shape[0] == 0:
        raise AudioError(f"audio file {path}: {audio_problem(path)}; expected {READABLE}")
    nonfinite = nonfinite_samples(samples, rate)
    if nonfinite:
        raise AudioError(f"audio file {path}: {nonfinite}")
    return torch.from_numpy(np.ascontiguousarray(samples.mean(axis=1))), int(rate)


def write_wav(path: str | Path, waveform: Tensor, sample_rate: int) -> None:
    """Write a mono waveform (T,) in [-1, 1] as 16-bit PCM wav (values outside are clipped).

    Args:
        path: the .wav file to write.
        waveform: samples in [-1, 1].
        sample_rate: in Hz.
    """
    pcm = (waveform.clamp(-1.0, 32767 / 32768) * 32768.0).round().to(torch.int16).numpy()
    _soundfile().write(str(path), pcm, sample_rate, subtype="PCM_16", format="WAV")
