"""Speech building blocks: audio I/O, resampling, log-mel features, text, manifests, CTC decoding.

Pure functions and small modules on tensors; ``lintf.data.speech`` and ``lintf.tasks.asr``
assemble them into a data module and a task.
"""

from lintf.speech.audio import AudioError, load_audio, write_wav
from lintf.speech.decoding import greedy_decode, prefix_beam_search
from lintf.speech.features import LogMel, mel_filterbank
from lintf.speech.manifest import ManifestEntry, read_manifest, write_manifest
from lintf.speech.resample import resample
from lintf.speech.text import CharVocabulary, normalize_text

__all__ = [
    "AudioError", "CharVocabulary", "LogMel", "ManifestEntry", "greedy_decode", "load_audio", "mel_filterbank",
    "normalize_text", "prefix_beam_search", "read_manifest", "resample", "write_manifest", "write_wav",
]
