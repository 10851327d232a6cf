"""A tiny manifest corpus of synthetic tones (no flite needed) for data, task and CLI tests."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lintf.asr.features.audio import write_wav

TEXTS = ["a cab", "bad abc", "cab dab", "ab", "dad cab ba", "bead"]


def tone_corpus(directory: Path, n: int = 6, rate: int = 16_000) -> dict[str, Path]:
    """train/val/test manifests of short waveforms whose pitch depends on the text."""
    directory.mkdir(parents=True, exist_ok=True)
    manifests = {}
    for split in ("train", "val", "test"):
        rows = []
        for i in range(n):
            text = TEXTS[i % len(TEXTS)]
            seconds = 0.3 + 0.1 * len(text)
            t = torch.arange(int(seconds * rate)) / rate
            waveform = 0.3 * torch.sin(2 * math.pi * (200 + 40 * len(text)) * t)
            name = f"{split}-{i}.wav"
            write_wav(directory / name, waveform, rate)
            rows.append({"audio_filepath": name, "duration": seconds, "text": text})
        manifests[split] = directory / f"{split}.jsonl"
        manifests[split].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return manifests


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    return tone_corpus(tmp_path / "corpus")
