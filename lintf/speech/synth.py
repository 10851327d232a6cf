"""Build an English speech corpus with exact transcripts by synthesising sentences with flite.

Training and validation use the training voices with random speaking rate and pitch; the test
set is spoken by a held-out voice, on sentences that appear in no other split. Every file is
written as 16 kHz mono wav, listed in ``train.jsonl``, ``val.jsonl`` and ``test.jsonl``.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lintf.speech.audio import load_audio, write_wav
from lintf.speech.manifest import write_manifest
from lintf.speech.resample import resample
from lintf.speech.sentences import clauses, split_sentences
from lintf.speech.system_tools import kjv_path, require_program

FLITE_VOICES = ("awb", "kal", "kal16", "rms", "slt")
SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class Utterance:
    """One sentence to synthesise and how."""

    text: str
    voice: str
    stretch: float  # duration_stretch: > 1 speaks slower
    f0: float  # int_f0_target_mean in Hz (some voices ignore it)
    path: Path


def synthesize(utterance: Utterance, flite: str) -> dict:
    """Run flite for one utterance, resample to 16 kHz, write the wav; returns its manifest row."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as raw:
        command = [flite, "-voice", utterance.voice, "-t", utterance.text, "-o", raw.name,
                   "--setf", f"duration_stretch={utterance.stretch:.3f}", "--setf", f"int_f0_target_mean={utterance.f0:.1f}"]
        subprocess.run(command, check=True, capture_output=True)
        waveform, rate = load_audio(raw.name)
    waveform = resample(waveform, rate, SAMPLE_RATE)
    write_wav(utterance.path, waveform, SAMPLE_RATE)
    return {"audio_filepath": f"{utterance.path.parent.name}/{utterance.path.name}",
            "duration": round(waveform.numel() / SAMPLE_RATE, 3), "text": utterance.text,
            "voice": utterance.voice}


def plan(sentences: list[str], voices: list[str], split: str, out: Path, rng: random.Random) -> list[Utterance]:
    """One utterance per sentence, voices in turn, rate and pitch drawn from ``rng``."""
    return [
        Utterance(text, voices[i % len(voices)], rng.uniform(0.85, 1.3), rng.uniform(90.0, 190.0),
                  out / split / f"{split}-{i:06d}.wav")
        for i, text in enumerate(sentences)
    ]


def build_synth_corpus(
    out: str | Path,
    train_size: int = 4000,
    val_size: int = 200,
    test_size: int = 200,
    train_voices: tuple[str, ...] = ("awb", "kal16", "kal", "slt"),
    test_voice: str = "rms",
    min_words: int = 3,
    max_words: int = 14,
    seed: int = 0,
    workers: int = 2,
) -> dict[str, Path]:
    """Synthesise the corpus into ``out``; returns the manifest path of each split.

    Args:
        out: output directory (created; existing files are overwritten).
        train_size: training utterances (training voices).
        val_size: validation utterances (training voices, held-out sentences).
        test_size: test utterances (the held-out voice, held-out sentences).
        train_voices: flite voices of train and val.
        test_voice: flite voice of the test set; must not be a training voice.
        min_words: shortest sentence in words.
        max_words: longest sentence in words.
        seed: seed of the sentence draw, rates and pitches.
        workers: flite processes run in parallel.
    """
    for voice in (*train_voices, test_voice):
        if voice not in FLITE_VOICES:
            raise ValueError(f"unknown flite voice {voice!r}; available: {', '.join(FLITE_VOICES)}")
    if test_voice in train_voices:
        raise ValueError(f"test_voice {test_voice!r} must be held out, but it is among train_voices {list(train_voices)}")
    flite = require_program("flite", "flite")
    out = Path(out)
    sentences = split_sentences(clauses(kjv_path(), min_words, max_words),
                                {"train": train_size, "val": val_size, "test": test_size}, seed)
    rng = random.Random(seed + 1)
    manifests = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for split, texts in sentences.items():
            (out / split).mkdir(parents=True, exist_ok=True)
            voices = [test_voice] if split == "test" else list(train_voices)
            rows = list(pool.map(lambda u: synthesize(u, flite), plan(texts, voices, split, out, rng)))
            manifests[split] = out / f"{split}.jsonl"
            write_manifest(manifests[split], rows)
    return manifests
