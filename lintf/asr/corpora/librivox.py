"""Manifest for the five real LibriVox utterances in Debian's ``pocketsphinx-testdata`` (evaluation only)."""

from __future__ import annotations

import re
from pathlib import Path

from lintf.asr.features.audio import load_audio
from lintf.asr.corpora.manifest import write_manifest
from lintf.asr.corpora.system_tools import require_path
from lintf.asr.text import normalize_text

LIBRIVOX_DIR = "/usr/share/pocketsphinx/test/data/librivox"
_LINE = re.compile(r"^<s>(?P<text>.*)</s>\s*\((?P<id>[^)]+)\)\s*$")


def build_librivox_manifest(out: str | Path, source: str | Path = LIBRIVOX_DIR) -> Path:
    """Write ``out`` (a .jsonl) listing ``source``'s wav files with their normalised transcripts.

    Args:
        out: manifest path to write.
        source: directory with ``transcription`` and ``<id>.wav`` (the Debian package's by default).
    """
    source = require_path(source, "pocketsphinx-testdata")
    rows = []
    for number, line in enumerate((source / "transcription").read_text().splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ValueError(f"{source / 'transcription'}:{number}: expected '<s> text </s> (id)', got {line!r}")
        audio = source / f"{match['id']}.wav"
        waveform, rate = load_audio(audio)
        rows.append({"audio_filepath": str(audio), "duration": round(waveform.numel() / rate, 3),
                     "text": normalize_text(match["text"])})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_manifest(out, rows)
    return out
